"""Late interaction: what is done with token embeddings after the engine delivers them.

    token_pooling.py  hierarchical token pooling (PyLate / Sentence-Transformers, colpali-engine)
    index_size.py     bytes of a multi-vector index: raw, colbert-ai's and fast-plaid's residuals
"""

from .index_size import (
    DEFAULT_NBITS,
    INDEX_LAYOUTS,
    IndexBytes,
    multivector_index_bytes,
    plaid_partitions,
)
from .token_pooling import POOL_METHODS, pool_tokens, pooled_length, token_clusters

__all__ = [
    "DEFAULT_NBITS",
    "INDEX_LAYOUTS",
    "POOL_METHODS",
    "IndexBytes",
    "multivector_index_bytes",
    "plaid_partitions",
    "pool_tokens",
    "pooled_length",
    "token_clusters",
]
