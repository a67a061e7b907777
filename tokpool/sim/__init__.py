"""The step simulator: an engine's prefill loop around token-level pooling, byte by byte.

``simulate`` replays the steps an inference engine runs (a vLLM-shaped scheduler, ONE persistent
hidden-state buffer reused by every step, async or sync host copies), pools with the core's
``AllPool``/``StepPool``/``LastPool`` and heads, checks every delivered output against the exact
reference, and keeps a per-step memory ledger of the bytes pooling owns. ``mode="analytic"``
gives the same ledger without allocating; ``sweep`` runs it across prompt lengths and policies.

Modules: ``config`` (SimConfig), ``source`` (HiddenStateSource protocol, SyntheticSource),
``scheduler``, ``tensor`` and ``analytic`` (the two engines), ``ledger`` (columns),
``closed_form`` (one request, vectorised), ``hardware`` (presets, time ESTIMATES), ``result``,
``trace`` (Chrome trace), ``simulation`` (simulate), ``sweeps`` (sweep).
"""

from .config import SIM_TASKS, SimConfig
from .hardware import (
    HARDWARE_PRESETS,
    MODEL_PRESETS,
    Hardware,
    ModelPreset,
    estimate_step_times,
)
from .ledger import REQUEST_COLUMNS, STEP_COLUMNS
from .result import SimResult
from .scheduler import ScheduledStep, schedule
from .simulation import simulate
from .source import SYNTHETIC_STEP_TAG_ID, HiddenStateSource, SyntheticSource
from .sweeps import SWEEP_COLUMNS, sweep

__all__ = [
    "HARDWARE_PRESETS",
    "MODEL_PRESETS",
    "REQUEST_COLUMNS",
    "SIM_TASKS",
    "STEP_COLUMNS",
    "SWEEP_COLUMNS",
    "SYNTHETIC_STEP_TAG_ID",
    "Hardware",
    "HiddenStateSource",
    "ModelPreset",
    "ScheduledStep",
    "SimConfig",
    "SimResult",
    "SyntheticSource",
    "estimate_step_times",
    "schedule",
    "simulate",
    "sweep",
]
