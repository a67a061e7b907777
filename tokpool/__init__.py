"""tokpool: token-level pooling in LLM inference engines, in code you can read and pictures you
can play with.

``import tokpool as tp`` gives the names most work needs (about forty, listed in ``__all__``) and
namespaces for the rest::

    tp.tasks      the gate, task selection, the model-kind catalogue
    tp.metadata   PoolingCursor, PoolingStates, PoolingMetadata
    tp.pooling    AllPool and friends, get_pooling_method
    tp.heads      embedding / classifier heads, SPLADE, BGE-M3, dtype helpers
    tp.poolers    method + head, dispatch by task
    tp.ownership  storage identity, owned / view / stranded bytes
    tp.sim        the step simulator (configs, presets, sources, sweeps)
    tp.models     the offline model zoo, chunked prefill, ModelSource
    tp.prm        process reward models: steps, rewards, metrics, dataset, probe
    tp.viz        every plot_* and explorer, render_* functions, token text helpers
    tp.late_interaction  MaxSim as vLLM computes it, late chunking, per-request PoolingParams

``import tokpool`` loads torch and pandas only: models, PRM and plotting code (transformers,
matplotlib, ipywidgets) load on first use of one of their names. Names that used to live at the
top level still work as ``tp.<name>`` with a ``DeprecationWarning`` that names their new place.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from ._deprecation import TokpoolDeprecationWarning
from .late_interaction import maxsim, maxsim_batched, maxsim_plan
from .metadata import PoolingCursor, PoolingMetadata, PoolingStates, build_metadata
from .ownership import owned_bytes, shares_storage
from .pooling import RETENTION_POLICIES, AllPool, CLSPool, LastPool, MeanPool, StepPool
from .pooling_params import PoolingParams
from .sim import HARDWARE_PRESETS, MODEL_PRESETS, SimConfig, SimResult, simulate, sweep
from .tasks import (
    POOLING_TASKS,
    SUPPORTED_TASKS,
    UnsupportedTaskError,
    gate,
    select_task,
    task_table,
)

__version__ = "0.1.0"

# Top-level names whose module needs transformers, matplotlib or ipywidgets somewhere: each maps
# to the module that defines it and loads on first use (``tp.load_model`` imports tokpool.models).
_LAZY: dict[str, str] = {
    "ModelSource": "tokpool.models",
    "compare_chunked": "tokpool.models",
    "load_model": "tokpool.models",
    "load_prm": "tokpool.prm",
    "load_prm_dataset": "tokpool.prm",
    "prm_memory_table": "tokpool.prm",
    "corruption_table": "tokpool.sim",
    "simulate_score": "tokpool.late_interaction.simulate_score",
    "listwise_prompts": "tokpool.late_interaction.listwise",  # JinaForRanking's prompts
    "plot_memory_timeline": "tokpool.viz",
    "plot_memory_vs_prompt_length": "tokpool.viz",
    "plot_ownership_schedule": "tokpool.viz",
    "plot_similarity": "tokpool.viz",
    "plot_step_rewards": "tokpool.viz",
    "buffer_reuse_explorer": "tokpool.viz",
    "memory_explorer": "tokpool.viz",
    "ownership_explorer": "tokpool.viz",
    "step_reward_explorer": "tokpool.viz",
    "token_explorer": "tokpool.viz",
    # late interaction (issue 39): token pooling (scipy on first use), index size, the MaxSim plot
    "pool_tokens": "tokpool.late_interaction",
    "multivector_index_bytes": "tokpool.late_interaction",
    "plot_maxsim_alignment": "tokpool.viz",
    "rerank_explorer": "tokpool.viz",
}

# Namespaces reachable as ``tp.<name>`` (imported on first use).
_NAMESPACES: tuple[str, ...] = (
    "tasks", "metadata", "pooling", "heads", "poolers", "ownership", "sim", "models", "prm",
    "viz", "late_interaction",
)

# Names that left the top level: old ``tp.<name>`` → the namespace that has it now. They keep
# working through ``__getattr__`` with a DeprecationWarning; they are not in ``__all__``.
_MOVED: dict[str, str] = {
    **dict.fromkeys(("MODEL_KINDS", "TOKEN_TASKS", "ModelKind", "check_request_task",
                     "model_kind", "runner_tasks"), "tokpool.tasks"),
    **dict.fromkeys(("get_pooling_method",), "tokpool.pooling"),
    **dict.fromkeys(("BgeM3Pooler", "SpladeSparsePooler", "TokenClassifierHead",
                     "TokenEmbeddingHead", "apply_classifier_activation", "dtype_size",
                     "resolve_dtype"), "tokpool.heads"),
    **dict.fromkeys(("DispatchPooler", "Pooler"), "tokpool.poolers"),
    **dict.fromkeys(("OwnershipReport", "ownership_report", "storage_nbytes", "stranded_bytes",
                     "tensor_nbytes"), "tokpool.ownership"),
    **dict.fromkeys(("Hardware", "HiddenStateSource", "ModelPreset", "SyntheticSource",
                     "schedule_frame"), "tokpool.sim"),
    **dict.fromkeys(("ModelNotFoundError", "PoolingModel", "StepTimes", "list_models",
                     "model_cache_dir", "summarize_chunked"), "tokpool.models"),
    **dict.fromkeys(("CONVENTIONS", "FormattedSteps", "ProcessBenchScores",
                     "ProcessRewardModel", "StepScores", "first_error_from_rewards",
                     "format_steps", "generate_prm_dataset", "processbench_f1",
                     "processbench_scores", "step_auroc", "step_logits", "step_rewards"),
                    "tokpool.prm"),
    **dict.fromkeys(("cosine_similarity_matrix", "figure_png", "pca_2d", "plot_buffer_rows",
                     "plot_chunked_error", "plot_task_gate", "plot_time_vs_prompt_length",
                     "plot_token_pca", "plot_token_values", "render_memory",
                     "render_ownership", "render_step_rewards", "render_tokens",
                     "token_html", "token_strings", "visible_whitespace"),
                    "tokpool.viz"),
}

__all__ = [
    "HARDWARE_PRESETS",
    "MODEL_PRESETS",
    "POOLING_TASKS",
    "RETENTION_POLICIES",
    "SUPPORTED_TASKS",
    "AllPool",
    "CLSPool",
    "LastPool",
    "MeanPool",
    "PoolingCursor",
    "PoolingMetadata",
    "PoolingParams",
    "PoolingStates",
    "SimConfig",
    "SimResult",
    "StepPool",
    "UnsupportedTaskError",
    "__version__",
    "build_metadata",
    "gate",
    "maxsim",
    "maxsim_batched",
    "maxsim_plan",
    "owned_bytes",
    "select_task",
    "shares_storage",
    "simulate",
    "sweep",
    "task_table",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _NAMESPACES:
        value = importlib.import_module(f"{__name__}.{name}")
    elif name in _MOVED:
        short = _MOVED[name].removeprefix(f"{__name__}.")
        warnings.warn(
            f"tp.{name} moved to tp.{short}.{name} (tokpool.{short}); the top-level name will "
            "be removed in a future release",
            TokpoolDeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # cache: later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted((set(globals()) - set(_MOVED)) | set(__all__) | set(_NAMESPACES))
