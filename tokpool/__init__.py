"""tokpool: token-level pooling in LLM inference engines, in code you can read and pictures you
can play with. ``import tokpool as tp`` is the whole public API."""

from .heads import (
    BgeM3Pooler,
    SpladeSparsePooler,
    TokenClassifierHead,
    TokenEmbeddingHead,
    apply_classifier_activation,
    dtype_size,
    resolve_dtype,
)
from .metadata import PoolingCursor, PoolingMetadata, PoolingStates, build_metadata
from .models import (
    ModelNotFoundError,
    ModelSource,
    PoolingModel,
    StepTimes,
    compare_chunked,
    list_models,
    load_model,
    model_cache_dir,
    summarize_chunked,
)
from .ownership import (
    OwnershipReport,
    owned_bytes,
    ownership_report,
    shares_storage,
    storage_nbytes,
    stranded_bytes,
    tensor_nbytes,
)
from .poolers import DispatchPooler, Pooler
from .pooling import (
    RETENTION_POLICIES,
    AllPool,
    CLSPool,
    LastPool,
    MeanPool,
    StepPool,
    get_pooling_method,
)
from .prm import (
    CONVENTIONS,
    FormattedSteps,
    ProcessBenchScores,
    ProcessRewardModel,
    StepScores,
    first_error_from_rewards,
    format_steps,
    generate_prm_dataset,
    load_prm,
    load_prm_dataset,
    prm_memory_table,
    processbench_f1,
    processbench_scores,
    step_auroc,
    step_logits,
    step_rewards,
)
from .sim import (
    HARDWARE_PRESETS,
    MODEL_PRESETS,
    Hardware,
    HiddenStateSource,
    ModelPreset,
    SimConfig,
    SimResult,
    SyntheticSource,
    simulate,
    sweep,
)
from .tasks import (
    MODEL_KINDS,
    POOLING_TASKS,
    SUPPORTED_TASKS,
    TOKEN_TASKS,
    ModelKind,
    UnsupportedTaskError,
    check_request_task,
    gate,
    model_kind,
    runner_tasks,
    select_task,
    task_table,
)

__version__ = "0.1.0"

__all__ = [
    "CONVENTIONS",
    "MODEL_KINDS",
    "POOLING_TASKS",
    "RETENTION_POLICIES",
    "SUPPORTED_TASKS",
    "TOKEN_TASKS",
    "AllPool",
    "BgeM3Pooler",
    "CLSPool",
    "DispatchPooler",
    "FormattedSteps",
    "LastPool",
    "MeanPool",
    "ModelKind",
    "ModelNotFoundError",
    "ModelSource",
    "OwnershipReport",
    "Pooler",
    "PoolingCursor",
    "PoolingMetadata",
    "PoolingModel",
    "PoolingStates",
    "ProcessBenchScores",
    "ProcessRewardModel",
    "SpladeSparsePooler",
    "StepPool",
    "StepScores",
    "StepTimes",
    "TokenClassifierHead",
    "TokenEmbeddingHead",
    "UnsupportedTaskError",
    "__version__",
    "apply_classifier_activation",
    "build_metadata",
    "check_request_task",
    "compare_chunked",
    "dtype_size",
    "first_error_from_rewards",
    "format_steps",
    "gate",
    "generate_prm_dataset",
    "get_pooling_method",
    "list_models",
    "load_model",
    "load_prm",
    "load_prm_dataset",
    "model_cache_dir",
    "model_kind",
    "owned_bytes",
    "ownership_report",
    "prm_memory_table",
    "processbench_f1",
    "processbench_scores",
    "resolve_dtype",
    "runner_tasks",
    "select_task",
    "shares_storage",
    "step_auroc",
    "step_logits",
    "step_rewards",
    "storage_nbytes",
    "stranded_bytes",
    "summarize_chunked",
    "task_table",
    "tensor_nbytes",
]

# The step simulator (tokpool.sim).
__all__ += [
    "HARDWARE_PRESETS",
    "MODEL_PRESETS",
    "Hardware",
    "HiddenStateSource",
    "ModelPreset",
    "SimConfig",
    "SimResult",
    "SyntheticSource",
    "simulate",
    "sweep",
]

# Plots and explorers need matplotlib / ipywidgets: they load on first use (``tp.plot_similarity``),
# so ``import tokpool`` stays light. Map each lazy public name to the module that defines it.
_LAZY_NAMES: dict[str, str] = dict.fromkeys(
    (
        "cosine_similarity_matrix",
        "figure_png",
        "pca_2d",
        "plot_buffer_rows",
        "plot_chunked_error",
        "plot_memory_timeline",
        "plot_memory_vs_prompt_length",
        "plot_ownership_schedule",
        "plot_similarity",
        "plot_step_rewards",
        "plot_task_gate",
        "plot_time_vs_prompt_length",
        "plot_token_pca",
        "plot_token_values",
        "schedule_frame",
        "token_html",
        "token_strings",
        "visible_whitespace",
    ),
    "tokpool.plots",
) | dict.fromkeys(
    (
        "corruption_table",
        "memory_explorer",
        "ownership_explorer",
        "render_memory",
        "render_ownership",
        "render_step_rewards",
        "render_tokens",
        "step_reward_explorer",
        "token_explorer",
    ),
    "tokpool.widgets",
)


def __getattr__(name: str):
    module = _LAZY_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'tokpool' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_NAMES))


__all__ += list(_LAZY_NAMES)
