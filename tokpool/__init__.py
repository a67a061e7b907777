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
    "MODEL_KINDS",
    "POOLING_TASKS",
    "RETENTION_POLICIES",
    "SUPPORTED_TASKS",
    "TOKEN_TASKS",
    "AllPool",
    "BgeM3Pooler",
    "CLSPool",
    "DispatchPooler",
    "LastPool",
    "MeanPool",
    "ModelKind",
    "OwnershipReport",
    "Pooler",
    "PoolingCursor",
    "PoolingMetadata",
    "PoolingStates",
    "SpladeSparsePooler",
    "StepPool",
    "TokenClassifierHead",
    "TokenEmbeddingHead",
    "UnsupportedTaskError",
    "__version__",
    "apply_classifier_activation",
    "build_metadata",
    "check_request_task",
    "dtype_size",
    "gate",
    "get_pooling_method",
    "model_kind",
    "owned_bytes",
    "ownership_report",
    "resolve_dtype",
    "runner_tasks",
    "select_task",
    "shares_storage",
    "storage_nbytes",
    "stranded_bytes",
    "task_table",
    "tensor_nbytes",
]
