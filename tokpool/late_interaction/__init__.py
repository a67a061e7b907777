"""Late interaction as vLLM keeps it, beside pooling (``vllm/v1/pool/late_interaction.py``).

    maxsim.py   MaxSim as the API server (``compute_maxsim_score``) and the worker
                (``compute_maxsim_score_batched``) compute it; the mini-batches, decided once;
                ``maxsim_plan``: what a rerank costs the worker before it runs
    late_chunking.py  one row per chunk of tokens, as vLLM's token-embedding head pools them
                (``late_chunk_pool`` = ``_mean_pool_chunks``; the row rule; the tensors made)

The per-request options that ask for late chunking are ``tp.PoolingParams``
(``tokpool/pooling_params.py``, as vLLM keeps them in ``vllm/pooling_params.py``).
"""

from __future__ import annotations

from .late_chunking import (
    LATE_CHUNK_DTYPE,
    late_chunk_pool,
    late_chunk_rows,
    late_chunk_stages,
    late_chunk_tensors,
)
from .maxsim import (
    MAX_BATCH_SIZE,
    MAX_SCORE_MATRIX_ELEMENTS,
    MaxSimBatch,
    maxsim,
    maxsim_batched,
    maxsim_batches,
    maxsim_plan,
)

__all__ = [
    "LATE_CHUNK_DTYPE",
    "MAX_BATCH_SIZE",
    "MAX_SCORE_MATRIX_ELEMENTS",
    "MaxSimBatch",
    "late_chunk_pool",
    "late_chunk_rows",
    "late_chunk_stages",
    "late_chunk_tensors",
    "maxsim",
    "maxsim_batched",
    "maxsim_batches",
    "maxsim_plan",
]
