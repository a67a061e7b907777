"""Late interaction as vLLM keeps it, beside pooling (``vllm/v1/pool/late_interaction.py``).

    maxsim.py   MaxSim as the API server (``compute_maxsim_score``) and the worker
                (``compute_maxsim_score_batched``) compute it; the mini-batches, decided once;
                ``maxsim_plan``: what a rerank costs the worker before it runs
"""

from __future__ import annotations

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
    "MAX_BATCH_SIZE",
    "MAX_SCORE_MATRIX_ELEMENTS",
    "MaxSimBatch",
    "maxsim",
    "maxsim_batched",
    "maxsim_batches",
    "maxsim_plan",
]
