"""tokpool: token-level pooling in LLM inference engines, in code you can read and pictures you
can play with.

``import tokpool as tp`` gives the names a notebook user types in the first hour (at most 45,
listed in ``__all__``) and one namespace per wing of the house for the rest, bottom to top::

    tp.pooler            what pooling does to a step's rows: the data model, AllPool and friends,
                         heads, poolers, the task gate, ownership, PoolingParams
    tp.sim               the step simulator (configs, presets, vLLM's rules, sources, sweeps)
    tp.late_interaction  MaxSim as vLLM computes it, the scoring flow, token pooling, index size
    tp.deploy            what to run for a model by its Hub id: recipe (serve line, call, body)
    tp.plots             every plot_* function
    tp.models            the offline model zoo, chunked prefill, ModelSource
    tp.prm               process reward models: steps, rewards, metrics, dataset, probe
    tp.widgets           the explorers and their render_* functions
    tp.viz               tp.plots and tp.widgets in one namespace
    tp.engine            real vLLM engines against tokpool (``tokpool engine-check``)

``import tokpool`` loads torch and pandas only: models, PRM and plotting code (transformers,
matplotlib, ipywidgets) load on first use of one of their names. Names and module paths that
moved (``tp.heads``, ``tokpool.metadata``, ``tp.maxsim``, ...) keep working with a
``DeprecationWarning`` that names their new place.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from . import _moved_modules
from ._deprecation import TokpoolDeprecationWarning
from ._package import __version__
from .pooler import (
    POOLING_TASKS,
    RETENTION_POLICIES,
    SUPPORTED_TASKS,
    AllPool,
    CLSPool,
    LastPool,
    MeanPool,
    PoolingCursor,
    PoolingMetadata,
    PoolingParams,
    PoolingStates,
    StepPool,
    UnsupportedTaskError,
    build_metadata,
    gate,
    owned_bytes,
    select_task,
    shares_storage,
    task_table,
)
from .sim import HARDWARE_PRESETS, MODEL_PRESETS, SimConfig, SimResult, simulate, sweep
from .sim.vllm_rules.response import response_bytes

_moved_modules.install()  # old module paths (tokpool.metadata, ...) warn and still import

# Top-level names whose module needs transformers, matplotlib or ipywidgets somewhere: each maps
# to the module that defines it and loads on first use (``tp.load_model`` imports tokpool.models).
_LAZY: dict[str, str] = {
    "ModelSource": "tokpool.models",
    "load_model": "tokpool.models",
    "load_prm": "tokpool.prm",
    "load_prm_dataset": "tokpool.prm",
    "simulate_score": "tokpool.late_interaction.simulate_score",
    "recipe": "tokpool.deploy",
    "plan": "tokpool.deploy",
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
    "rerank_explorer": "tokpool.viz",
}

# Namespaces reachable as ``tp.<name>`` (imported on first use): the wings, bottom to top.
_NAMESPACES: tuple[str, ...] = (
    "pooler", "sim", "late_interaction", "deploy", "plots", "models", "prm", "widgets", "viz",
    "engine",
)

# Namespaces that moved into a wing (issue 44): ``tp.heads`` is ``tp.pooler.heads`` now. They
# keep working, with a DeprecationWarning.
_MOVED_NAMESPACES: dict[str, str] = {
    name: f"tokpool.pooler.{name}"
    for name in ("tasks", "metadata", "pooling", "heads", "poolers", "ownership")
}

# Names that left the top level: old ``tp.<name>`` → the namespace that has it now. They keep
# working through ``__getattr__`` with a DeprecationWarning; they are not in ``__all__``.
_MOVED: dict[str, str] = {
    **dict.fromkeys(("MODEL_KINDS", "TOKEN_TASKS", "ModelKind", "check_request_task",
                     "model_kind", "runner_tasks"), "tokpool.pooler.tasks"),
    **dict.fromkeys(("get_pooling_method",), "tokpool.pooler.pooling"),
    **dict.fromkeys(("BgeM3Pooler", "SpladeSparsePooler", "TokenClassifierHead",
                     "TokenEmbeddingHead", "apply_classifier_activation", "dtype_size",
                     "resolve_dtype"), "tokpool.pooler.heads"),
    **dict.fromkeys(("DispatchPooler", "Pooler"), "tokpool.pooler.poolers"),
    **dict.fromkeys(("OwnershipReport", "ownership_report", "storage_nbytes", "stranded_bytes",
                     "tensor_nbytes"), "tokpool.pooler.ownership"),
    **dict.fromkeys(("Hardware", "HiddenStateSource", "ModelPreset", "SyntheticSource",
                     "schedule_frame"), "tokpool.sim"),
    **dict.fromkeys(("ModelNotFoundError", "PoolingModel", "StepTimes", "list_models",
                     "model_cache_dir", "summarize_chunked"), "tokpool.models"),
    **dict.fromkeys(("CONVENTIONS", "FormattedSteps", "ProcessBenchScores",
                     "ProcessRewardModel", "StepScores", "first_error_from_rewards",
                     "format_steps", "generate_prm_dataset", "processbench_f1",
                     "processbench_scores", "step_auroc", "step_logits", "step_rewards"),
                    "tokpool.prm"),
    # issue 44: the top level holds what a notebook user types in the first hour
    **dict.fromkeys(("maxsim", "maxsim_batched", "maxsim_plan", "pool_tokens",
                     "multivector_index_bytes", "listwise_prompts"), "tokpool.late_interaction"),
    **dict.fromkeys(("compare_chunked",), "tokpool.models"),
    **dict.fromkeys(("prm_memory_table",), "tokpool.prm"),
    **dict.fromkeys(("corruption_table",), "tokpool.sim"),
    **dict.fromkeys(("plot_maxsim_alignment",), "tokpool.viz"),
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
    "owned_bytes",
    "response_bytes",
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
    elif name in _MOVED_NAMESPACES:
        warnings.warn(
            f"tp.{name} moved to tp.{_MOVED_NAMESPACES[name].removeprefix('tokpool.')} "
            f"({_MOVED_NAMESPACES[name]}); the old namespace will be removed in a future release",
            TokpoolDeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(_MOVED_NAMESPACES[name])
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
