"""Late interaction: what is done with token embeddings after the engine delivers them.

    token_pooling.py  hierarchical token pooling (PyLate / Sentence-Transformers, colpali-engine)
"""

from .token_pooling import POOL_METHODS, pool_tokens, pooled_length, token_clusters

__all__ = ["POOL_METHODS", "pool_tokens", "pooled_length", "token_clusters"]
