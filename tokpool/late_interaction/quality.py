"""What token pooling costs in retrieval quality, measured: dense vs MaxSim vs pooled MaxSim.

On a :class:`~tokpool.late_interaction.retrieval.RetrievalSet`, one forward of a model per text
gives both representations a bi-encoder and a late-interaction index would store:

- **dense**: the mean of the text's final hidden rows, L2-normalised (MiniLM's own
  Sentence-Transformers pooling), scored by the dot product: one vector per document;
- **MaxSim**: every row L2-normalised (``token_embed``), scored by MaxSim
(``tp.late_interaction.maxsim``'s
  sum, all documents at once): one vector per document token;
- **MaxSim, pool k**: the document rows after ``tp.late_interaction.pool_tokens(pool_factor=k)``
(queries are
  not pooled, as in PyLate).

Each method's table row: the vectors it stores, their bytes (fp16 raw and PLAID 2-bit), MRR@10
and recall@k with bootstrap 95 % intervals over queries. The model need not be trained for late
interaction (MiniLM is not: it was trained as a mean-pooled bi-encoder), so the table shows the
trade-off curve of pooling for *that* model, not a leaderboard.

Example:
    >>> s = tp.late_interaction.load_retrieval_set().subset(2, 4)
    >>> enc = tp.late_interaction.encode_retrieval_set(tp.load_model("minilm-l6"), s)
    >>> table = tp.late_interaction.retrieval_quality(s, enc, pool_factors=(2,), n_boot=50)
    >>> list(table["method"])
    ['dense (mean-pooled)', 'MaxSim', 'MaxSim, pool 2']
    >>> int(table["vectors"][0]), int(table["vectors"][2]) < int(table["vectors"][1])  # 4 docs
    (4, True)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from .._args import each, items, whole
from .index_size import multivector_index_bytes
from .retrieval import (
    RetrievalSet,
    bootstrap_ci,
    mrr_at_k,
    ranks_of_relevant,
    recall_at_k,
)
from .token_pooling import pool_tokens

__all__ = ["EncodedSet", "encode_retrieval_set", "method_scores", "retrieval_quality"]

#: The dtype an index stores vectors in (raw) and the dense comparison's.
INDEX_DTYPE = "float16"


@dataclass(frozen=True)
class EncodedSet:
    """A retrieval set through one model: dense vectors and token vectors of every text.

    Attributes:
        q_dense, d_dense: ``[n_queries, D]`` / ``[n_docs, D]`` unit mean-pooled vectors.
        q_tokens, d_tokens: ``[L_i, D]`` unit token vectors per query / document.
        model: the model's name; seconds: the encoding wall time.
    """

    q_dense: Tensor
    d_dense: Tensor
    q_tokens: list[Tensor]
    d_tokens: list[Tensor]
    model: str
    seconds: float


def _encode(model: Any, texts: list[str]) -> tuple[Tensor, list[Tensor]]:
    raw = model.encode(texts, task="token_embed", use_activation=False)  # [L_i, D] each
    dense = torch.stack([torch.nn.functional.normalize(r.float().mean(dim=0), dim=-1)
                         for r in raw])  # [n, D]: mean of the rows, then unit length
    tokens = [torch.nn.functional.normalize(r.float(), dim=-1) for r in raw]  # [L_i, D]
    return dense, tokens


def encode_retrieval_set(model: Any, rset: RetrievalSet) -> EncodedSet:
    """Run every query and document through ``model`` once (``task="token_embed"``).

    Args:
        model: a ``tp.load_model(...)`` model that serves ``token_embed`` (an encoder such as
            MiniLM, or a decoder such as SmolLM2).
        rset: the set (``load_retrieval_set()`` or a ``subset``).

    Returns:
        An :class:`EncodedSet`. The dense vectors are the mean of the same forward's rows, as
        MiniLM's Sentence-Transformers pooling (mean, then normalise) computes them.
    """
    start = time.perf_counter()
    q_dense, q_tokens = _encode(model, [q["text"] for q in rset.queries])
    d_dense, d_tokens = _encode(model, [d["text"] for d in rset.docs])
    return EncodedSet(q_dense=q_dense, d_dense=d_dense, q_tokens=q_tokens, d_tokens=d_tokens,
                      model=getattr(model, "name", type(model).__name__),
                      seconds=time.perf_counter() - start)


def method_scores(encoded: EncodedSet, docs: Sequence[Tensor] | None = None) -> np.ndarray:
    """``[n_queries, n_docs]`` scores: dense dot products (``docs=None``), or MaxSim of every
    query against every document of ``docs`` (each ``[n_i, D]``).

    MaxSim here is ``tp.late_interaction.maxsim``'s sum (float32 ``q @ d.T``, max over the
    document's rows, sum
    over the query's), taken for all documents at once: one matmul per query against every
    document row, then a max per document (``segment_reduce``). The products may round in
    another order than one pair at a time, so scores equal ``tp.late_interaction.maxsim_batched``'s
    to float32
    rounding (a test holds them to 1e-5), and a rerank of 600 documents takes one matmul.
    """
    if docs is None:
        return (encoded.q_dense @ encoded.d_dense.T).numpy()  # [n_q, n_d]
    docs = list(docs)
    lengths = torch.tensor([d.shape[0] for d in docs])  # [n_d]
    rows = torch.cat([d.float() for d in docs])  # [sum n_i, D]
    out = []
    for q in encoded.q_tokens:
        sim = q.float() @ rows.T  # [L_q, sum n_i]
        best = torch.segment_reduce(sim.T, "max", lengths=lengths)  # [n_d, L_q]
        out.append(best.sum(dim=-1))  # [n_d]
    return torch.stack(out).numpy()  # [n_q, n_d]


def retrieval_quality(rset: RetrievalSet, encoded: EncodedSet, *,
                      pool_factors: Sequence[int] = (2, 3, 4), ks: Sequence[int] = (1, 5, 10),
                      n_boot: int = 1000, seed: int = 0, nbits: int = 2,
                      method: str = "pylate") -> pd.DataFrame:
    """The quality table: one row per method, its storage and its retrieval metrics.

    Args:
        rset: the set ``encoded`` was made from.
        encoded: :func:`encode_retrieval_set`'s result.
        pool_factors: ``tp.late_interaction.pool_tokens`` factors to add after plain MaxSim.
        ks: recall cut-offs.
        n_boot, seed: bootstrap resamples of the queries, and their seed.
        nbits: residual bits for the PLAID column (colbert-ai's layout).
        method: ``tp.late_interaction.pool_tokens``'s ``method``.

    Returns:
        A DataFrame with ``method``, ``vectors``, ``bytes_fp16`` (raw fp16 storage; the dense
        row: one vector per document), ``bytes_plaid`` (colbert-ai layout at ``nbits``; none for
        dense), ``mrr@10`` and ``mrr@10_low`` / ``_high``, ``recall@k`` with ``_low`` /
        ``_high``, and ``ranks`` (each query's rank of its relevant document).

    Raises:
        ValueError, TypeError: ``encoded`` does not match ``rset``; a bad factor or cut-off.
    """
    if len(encoded.q_tokens) != len(rset.queries) or len(encoded.d_tokens) != len(rset.docs):
        raise ValueError(
            f"encoded holds {len(encoded.q_tokens)} queries and {len(encoded.d_tokens)} "
            f"documents but the set has {len(rset.queries)} and {len(rset.docs)}; encode this "
            "set with encode_retrieval_set(model, rset)")
    factors = each("pool_factors", items("pool_factors", pool_factors, empty=True),
                   lambda n, v: whole(n, v, minimum=2))
    cutoffs = each("ks", items("ks", ks), lambda n, v: whole(n, v, minimum=1))
    index = rset.doc_index
    relevant = [[index[r] for r in q["relevant"]] for q in rset.queries]
    dim = int(encoded.d_dense.shape[1])
    runs: list[tuple[str, np.ndarray, list[int] | None]] = [
        ("dense (mean-pooled)", method_scores(encoded), None),
        ("MaxSim", method_scores(encoded, encoded.d_tokens),
         [t.shape[0] for t in encoded.d_tokens])]
    for k in factors:
        pooled = pool_tokens(encoded.d_tokens, pool_factor=k, method=method)
        runs.append((f"MaxSim, pool {k}", method_scores(encoded, pooled),
                     [t.shape[0] for t in pooled]))
    rows = []
    for name, scores, lens in runs:
        ranks = [ranks_of_relevant(scores[i], rel) for i, rel in enumerate(relevant)]
        if lens is None:
            vectors = len(rset.docs)
            fp16 = multivector_index_bytes([1] * vectors, dim, INDEX_DTYPE).total_bytes
            plaid = None
        else:
            vectors = sum(lens)
            fp16 = multivector_index_bytes(lens, dim, INDEX_DTYPE).total_bytes
            plaid = multivector_index_bytes(lens, dim, INDEX_DTYPE, nbits=nbits,
                                            layout="colbert").total_bytes
        row: dict[str, Any] = {"method": name, "vectors": vectors, "bytes_fp16": fp16,
                               "bytes_plaid": plaid, "mrr@10": mrr_at_k(ranks, 10)}
        row["mrr@10_low"], row["mrr@10_high"] = bootstrap_ci(ranks, mrr_at_k, n_boot=n_boot,
                                                             seed=seed)
        for k in cutoffs:
            row[f"recall@{k}"] = recall_at_k(ranks, k)
            row[f"recall@{k}_low"], row[f"recall@{k}_high"] = bootstrap_ci(
                ranks, lambda r, k=k: recall_at_k(r, k), n_boot=n_boot, seed=seed)
        row["ranks"] = ranks
        rows.append(row)
    return pd.DataFrame(rows)
