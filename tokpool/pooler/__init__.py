"""The pooler's room: what pooling does to one step's rows, as vLLM's
``model_executor/layers/pooler/`` does it. It imports nothing above it (only the small helpers
at ``tokpool/``'s top); the simulator, late interaction, the models and the pictures stand on it.

    metadata.py       PoolingCursor, PoolingStates, PoolingMetadata, build_metadata
    pooling.py        AllPool (four retention policies), StepPool, CLS/LAST/MEAN
    keep_rule.py      what AllPool keeps of a chunk between steps (DESIGN.md's table), once
    heads.py          embedding / classifier heads, SPLADE, BGE-M3, dtype helpers
    poolers.py        method + head, dispatch by task
    ownership.py      storage identity, owned / view / stranded bytes
    pooling_params.py tp.PoolingParams: a request's options that change bytes
    tasks.py          the runner's task gate, task_table, the model-kind catalogue
    task_names.py     the task names, vLLM's task selection and per-request check
    late_chunking.py  one row per chunk of tokens (vLLM's token-embedding head)
    jina_ranking.py   JinaForRanking's pool: marker rows, the projector
    vllm_bridge.py    the installed vLLM's own AllPool/StepPool on tokpool's metadata
    _checks.py        the pooling methods' input checks
"""

from .heads import TokenClassifierHead, TokenEmbeddingHead, dtype_size, resolve_dtype
from .keep_rule import KeepRule, keep_rule, ownership_table
from .metadata import PoolingCursor, PoolingMetadata, PoolingStates, build_metadata
from .ownership import owned_bytes, shares_storage
from .pooling import (
    RETENTION_POLICIES,
    AllPool,
    CLSPool,
    LastPool,
    MeanPool,
    StepPool,
    get_pooling_method,
)
from .pooling_params import PoolingParams
from .tasks import (
    POOLING_TASKS,
    SUPPORTED_TASKS,
    UnsupportedTaskError,
    gate,
    select_task,
    task_table,
)

__all__ = [
    "POOLING_TASKS",
    "RETENTION_POLICIES",
    "SUPPORTED_TASKS",
    "AllPool",
    "CLSPool",
    "KeepRule",
    "LastPool",
    "MeanPool",
    "PoolingCursor",
    "PoolingMetadata",
    "PoolingParams",
    "PoolingStates",
    "StepPool",
    "TokenClassifierHead",
    "TokenEmbeddingHead",
    "UnsupportedTaskError",
    "build_metadata",
    "dtype_size",
    "gate",
    "get_pooling_method",
    "keep_rule",
    "owned_bytes",
    "ownership_table",
    "resolve_dtype",
    "select_task",
    "shares_storage",
    "task_table",
]
