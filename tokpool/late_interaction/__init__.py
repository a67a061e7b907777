"""Late interaction, one floor above the simulator: what is done with token embeddings once the
engine has pooled them, and vLLM's scoring flow driven on the simulator.

    maxsim.py         MaxSim as the API server (``compute_maxsim_score``) and the worker
                      (``compute_maxsim_score_batched``) compute it; the mini-batches, decided
                      once; ``maxsim_plan``: what a rerank costs the worker before it runs
    simulate_score.py tp.simulate_score: vLLM's /score flow on the simulator (imported on use);
                      scoring.py (pairing, request order), query_cache.py (the worker's query
                      cache), listwise.py (JinaForRanking's prompts)
    alignment.py      one MaxSim score taken apart per query token
                      (``tp.viz.plot_maxsim_alignment``)
    token_pooling.py  hierarchical token pooling (PyLate / Sentence-Transformers, colpali-engine)
    index_size.py     bytes of a multi-vector index: raw, or an indexer's whole folder
    index_files.py    the files each indexer writes (version by version) and their bytes
    retrieval.py      the shipped retrieval set (data/retrieval), MRR@k, recall@k, bootstrap CIs
    quality.py        dense vs MaxSim vs pooled MaxSim on it: vectors, bytes, MRR@10 with CIs
    rerank_cost.py    tp.simulate_score over documents x length, both paths (imported on use)

The pieces that are pooling rules live below, with the pooler (as vLLM keeps them with the
pooler and the model): late chunking's rows (``tokpool.pooler.late_chunking``, re-exported
here) and the JinaForRanking pool (``tokpool.pooler.jina_ranking``); which scoring path vLLM
takes is an engine rule (``tokpool.sim.vllm_rules.scoring_path``). The per-request options are
``tp.PoolingParams`` (``tokpool.pooler.pooling_params``, as vLLM keeps them in
``vllm/pooling_params.py``).
"""

from __future__ import annotations

from ..pooler.late_chunking import (
    LATE_CHUNK_DTYPE,
    late_chunk_pool,
    late_chunk_rows,
    late_chunk_stages,
    late_chunk_tensors,
)
from .alignment import MaxSimAlignment, maxsim_alignment
from .index_size import (
    DEFAULT_NBITS,
    INDEX_LAYOUTS,
    INDEX_OPTIONS,
    IndexBytes,
    index_bytes_table,
    multivector_index_bytes,
    plaid_partitions,
)
from .listwise import listwise_prompts
from .maxsim import (
    MAX_BATCH_SIZE,
    MAX_SCORE_MATRIX_ELEMENTS,
    MaxSimBatch,
    maxsim,
    maxsim_batched,
    maxsim_batches,
    maxsim_plan,
)
from .quality import EncodedSet, encode_retrieval_set, method_scores, retrieval_quality
from .retrieval import (
    RetrievalSet,
    bootstrap_ci,
    build_retrieval_set,
    load_retrieval_set,
    mrr_at_k,
    ranks_of_relevant,
    recall_at_k,
    write_retrieval_set,
)
from .token_pooling import POOL_METHODS, pool_tokens, pooled_length, token_clusters

__all__ = [
    "DEFAULT_NBITS",
    "INDEX_LAYOUTS",
    "INDEX_OPTIONS",
    "LATE_CHUNK_DTYPE",
    "MAX_BATCH_SIZE",
    "MAX_SCORE_MATRIX_ELEMENTS",
    "POOL_METHODS",
    "EncodedSet",
    "IndexBytes",
    "MaxSimAlignment",
    "MaxSimBatch",
    "RetrievalSet",
    "bootstrap_ci",
    "build_retrieval_set",
    "encode_retrieval_set",
    "index_bytes_table",
    "late_chunk_pool",
    "late_chunk_rows",
    "late_chunk_stages",
    "late_chunk_tensors",
    "listwise_prompts",
    "load_retrieval_set",
    "maxsim",
    "maxsim_alignment",
    "maxsim_batched",
    "maxsim_batches",
    "maxsim_plan",
    "method_scores",
    "mrr_at_k",
    "multivector_index_bytes",
    "plaid_partitions",
    "pool_tokens",
    "pooled_length",
    "ranks_of_relevant",
    "recall_at_k",
    "retrieval_quality",
    "token_clusters",
    "write_retrieval_set",
]
