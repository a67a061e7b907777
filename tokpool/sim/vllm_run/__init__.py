"""vLLM as run: the installed vLLM's own code driven on the CPU (not tokpool's reading of it).

``vllm_schedule``: the prefill schedule vLLM's V1 ``Scheduler`` + ``KVCacheManager`` compute,
as tokpool ``ScheduledStep``s. Needs vLLM (``make vllm``); imported lazily.
"""

from .scheduler import vllm_schedule, vllm_scheduler_available, vllm_scheduler_unavailable_reason

__all__ = ["vllm_schedule", "vllm_scheduler_available", "vllm_scheduler_unavailable_reason"]
