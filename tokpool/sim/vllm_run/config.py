"""The engine configuration as the installed vLLM resolves it: ``EngineArgs(...)
.create_engine_config()`` on a model folder (a ``config.json``, no weights), on the CPU.

``vllm_engine_facts(folder, usage=..., **engine_args)`` returns the fields tokpool's resolution
step (``tokpool.sim.vllm_rules.resolve``) also derives, so the two can be compared
(``tests/test_parity_config.py``):

- ``max_model_len`` (``ModelConfig.max_model_len``: config keys, RoPE scaling, a
  sentence-transformers ``max_seq_length``, the flag);
- ``max_num_batched_tokens``, ``max_num_seqs`` (``SchedulerConfig``, by usage context on
  vLLM's CPU platform: device-dependent tiers are checked with vLLM's platform patched, in
  ``tests/test_parity_vllm.py``);
- ``enable_chunked_prefill`` (``ModelConfig.is_chunked_prefill_supported`` and the flag);
- ``head_dtype`` (``ModelConfig.head_dtype``);
- ``selected_task``: ``ModelConfig.get_pooling_task`` over the tasks the model declares
  (passed in: loading the model class would need weights).

Not compared here: CUDA-graph capture sizes (vLLM's CPU platform captures none; checked with a
patched platform in ``tests/test_parity_vllm.py``), async scheduling (the CPU platform forces it
off), device memory.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from typing import Any

from ...vllm_bridge import VllmUnavailableError
from .scheduler import _vllm

_USAGE = {"llm": "LLM_CLASS", "server": "OPENAI_API_SERVER"}


def vllm_engine_facts(folder: str | os.PathLike, *, usage: str = "llm",
                      declared_tasks: tuple[str, ...] = (), **engine_args: Any) -> dict[str, Any]:
    """Resolve vLLM's engine config for a model folder and return the compared fields.

    Args:
        folder: a directory with a ``config.json`` (and, for sentence-transformers models,
            ``modules.json`` / ``sentence_bert_config.json``); no weights are read.
        usage: ``"llm"`` (the ``LLM`` class) or ``"server"`` (``vllm serve``).
        declared_tasks: the tasks the model's pooler declares, for ``selected_task``.
        **engine_args: ``EngineArgs`` fields (``max_num_batched_tokens=512``,
            ``pooler_config=PoolerConfig(task=...)`` as a dict ``{"task": ...}``, ...).

    Raises:
        VllmUnavailableError: vLLM is not installed (``make vllm``).
        ValueError: vLLM refuses the configuration (its message).
    """
    m = _vllm()
    from vllm.config import PoolerConfig
    from vllm.usage.usage_lib import UsageContext

    if usage not in _USAGE:
        raise ValueError(f"unknown usage {usage!r}; use 'llm' or 'server'")
    pooler = engine_args.pop("pooler_config", None)
    if isinstance(pooler, dict):
        pooler = PoolerConfig(**pooler)
    args = m["EngineArgs"](model=str(folder), tokenizer=str(folder), runner="pooling",
                           skip_tokenizer_init=True, pooler_config=pooler, **engine_args)
    quiet = logging.getLogger("vllm")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            config = args.create_engine_config(usage_context=getattr(UsageContext,
                                                                     _USAGE[usage]))
    except (ValueError, TypeError) as err:
        raise ValueError(str(err)) from err
    finally:
        quiet.setLevel(level)
    model, scheduler = config.model_config, config.scheduler_config
    selected = model.get_pooling_task(tuple(declared_tasks)) if declared_tasks else None
    return {
        "max_model_len": int(model.max_model_len),
        "max_num_batched_tokens": int(scheduler.max_num_batched_tokens),
        "max_num_seqs": int(scheduler.max_num_seqs),
        "enable_chunked_prefill": bool(scheduler.enable_chunked_prefill),
        "head_dtype": str(model.head_dtype).removeprefix("torch."),
        "selected_task": selected,
    }


__all__ = ["VllmUnavailableError", "vllm_engine_facts"]
