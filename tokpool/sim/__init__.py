"""The step simulator: an engine's prefill loop around token-level pooling, byte by byte.

``simulate`` replays the steps vLLM's engine runs — a vLLM-shaped scheduler; each step's hidden
states in CUDA-graph output memory that later replays rewrite, or in a fresh eager tensor;
async or sync host copies — pools with the core's ``AllPool``/``StepPool``/``LastPool`` and
heads, checks every delivered output against the exact reference, and keeps a per-step memory
ledger of the bytes pooling owns. Each engine rule is decided in ONE place and every backend
asks it: what pooling keeps of a chunk (``tokpool.pooler.keep_rule``), the pooling kind
(``vllm_rules.pooling_kind``), where a step's rows live (``vllm_rules.step_memory``), what vLLM
refuses (``vllm_rules.engine_checks``), the schedule (``schedule``), what the head allocates
(``vllm_rules.classifier``), whether a preempted request keeps its pooling state
(``vllm_rules.runner``), whether the host copy copies (``vllm_rules.cpu_platform``).

Modes: ``"tensor"`` (real tensors, measured storages, an oracle), ``"analytic"`` (the same loop
counting bytes: million-token prompts in milliseconds), ``"closed_form"`` (one request, by
formula; ``sweep``'s default). All three agree to the byte.

Rooms, bottom to top (a module imports only from its own room or below):

- ``vllm_rules/``: what vLLM 0.33.0 does (defaults, refusals, pooling kinds, step memory,
  devices and model presets, the CPU platform, ``vllm serve`` lines, ``config.json``, KV-cache
  sizing, where the score head runs, the model runner's lifecycle);
- ``config``: ``SimConfig``, plain fields resolved once by ``vllm_rules.resolve``;
- ``schedule/``: ``ScheduledStep``, tokpool's scheduler, given schedules;
- ``vllm_run/``: vLLM's own scheduler and config code, run (the oracle);
- ``memory/``: kept views and the per-step ledger's columns;
- ``backends/``: the one step loop (``backends.loop``) on tensors (``backends.tensor``) or
  integers (``backends.counting``), the closed forms, hidden-state sources, time ESTIMATES;
- ``results/``: ``SimResult``, analysis, the Chrome trace, pooling's share of the KV cache;
- ``simulation`` (``simulate``) and ``sweeps`` (``sweep``);
- ``startup``: per prompt length of a sweep, whether vLLM would start to serve it
  (``startup_refusals``, ``mark_startup_refusals``: the same start-up checks), so plots mark
  the points vLLM refuses; ``startup_limits``: where vLLM stops starting, found exactly
  (``startup_limits``, ``limit_summary``).
"""

from ..pooler.keep_rule import KeepRule, keep_rule, ownership_table
from .backends.loop import CHUNK_COLUMNS
from .backends.source import HiddenStateSource, SyntheticSource
from .backends.timing import estimate_step_times
from .config import SIM_TASKS, SYNTHETIC_STEP_TAG_ID, SimConfig
from .memory.ledger import REQUEST_COLUMNS, STEP_COLUMNS
from .results.analysis import (
    corruption_table,
    explain,
    lucky_requests,
    overwritten_requests,
    prompt_grid,
    schedule_frame,
)
from .results.kv_share import pooling_share_of_kv, pooling_takes_kv_from
from .results.peak_parts import peak_parts, what_sets_the_peak
from .results.responses import response_sweep
from .results.result import SimResult
from .schedule.scheduler import ScheduledStep, schedule
from .simulation import simulate
from .startup import mark_startup_refusals, refusal_summary, startup_refusal, startup_refusals
from .startup_limits import StartupLimits, limit_summary, startup_limits
from .sweeps import SWEEP_COLUMNS, sweep
from .vllm_rules.devices import DEVICES, HARDWARE_PRESETS, Hardware
from .vllm_rules.engine_checks import EngineRefusal
from .vllm_rules.models import MODEL_PRESETS, ModelPreset

__all__ = [
    "CHUNK_COLUMNS",
    "DEVICES",
    "HARDWARE_PRESETS",
    "MODEL_PRESETS",
    "REQUEST_COLUMNS",
    "SIM_TASKS",
    "STEP_COLUMNS",
    "SWEEP_COLUMNS",
    "SYNTHETIC_STEP_TAG_ID",
    "EngineRefusal",
    "Hardware",
    "HiddenStateSource",
    "KeepRule",
    "ModelPreset",
    "ScheduledStep",
    "SimConfig",
    "SimResult",
    "StartupLimits",
    "SyntheticSource",
    "corruption_table",
    "estimate_step_times",
    "explain",
    "keep_rule",
    "limit_summary",
    "lucky_requests",
    "mark_startup_refusals",
    "overwritten_requests",
    "ownership_table",
    "peak_parts",
    "pooling_share_of_kv",
    "pooling_takes_kv_from",
    "prompt_grid",
    "refusal_summary",
    "response_sweep",
    "schedule",
    "schedule_frame",
    "simulate",
    "startup_limits",
    "startup_refusal",
    "startup_refusals",
    "sweep",
    "what_sets_the_peak",
]
