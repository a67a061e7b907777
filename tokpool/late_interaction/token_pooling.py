"""Token pooling: fewer document vectors for late interaction, as PyLate and colpali-engine do it.

A late-interaction index stores one vector per document token. *Hierarchical token pooling*
(Clavié et al., "Reducing the Footprint of Multi-Vector Retrieval with Minimal Performance
Impact via Token Pooling", 2024) clusters a document's token vectors and keeps one mean per
cluster, so the index holds about ``1 / pool_factor`` of the vectors. Two implementations are
in use, and this module reproduces each:

``method="pylate"`` — PyLate 1.6.0 ``ColBERT.pool_embeddings_hierarchical``
(``pylate/models/colbert.py``), which Sentence-Transformers v6's ``HierarchicalTokenPooling``
(``normalize_embeddings=False``) matches:

1. the first ``protected_tokens`` rows (the ``[CLS]``/``[D]`` marker) are kept as they are;
2. the other ``n - p`` rows get ``k = max((n - p) // pool_factor, 1)`` clusters; if ``k`` is
   not smaller than ``n - p`` nothing is reduced and the rows come back unchanged;
3. distances are ``1 - x_i · x_j`` (cosine distance for L2-normalised rows), the condensed upper
   triangle goes to ``scipy.cluster.hierarchy.linkage(method="ward")`` and
   ``fcluster(criterion="maxclust", t=k)`` cuts the tree;
4. each cluster becomes the mean of its rows (a ``scatter_add`` sum divided by the count),
   clusters in label order, after the protected rows; a cluster ``fcluster`` left empty
   (distance ties) is dropped.

``method="colpali"`` — colpali-engine's ``HierarchicalTokenPooler``
(``colpali_engine/compression/token_pooling/hierarchical_token_pooling.py``): no protected rows,
``k = max(n // pool_factor, 1)``, Ward linkage over the *rows of the square distance matrix*
treated as observations (euclidean between rows: a different tree from PyLate's), and every
cluster mean re-normalised to unit length.

Differences from the originals, all on inputs they do not handle: half-precision rows are
clustered and averaged in float32 and returned in their own dtype (PyLate cannot turn bf16 into
NumPy; Sentence-Transformers does the same as here); colpali-engine refuses a one-row input,
here it comes back unchanged. For float32 rows ``method="pylate"`` does PyLate's arithmetic
step for step, so its output is PyLate's bit for bit.

Example:
    >>> x = torch.nn.functional.normalize(torch.tensor(
    ...     [[1., 0.], [1., .1], [1., .2], [0., 1.], [.1, 1.]]), dim=-1)
    >>> pool_tokens(x, pool_factor=2).shape          # 1 protected + (5 - 1) // 2 clusters
    torch.Size([3, 2])
    >>> pool_tokens(x, pool_factor=2, method="colpali").norm(dim=-1)   # 5 // 2, unit rows
    tensor([1.0000, 1.0000])
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Literal, overload

import numpy as np
import torch
from torch import Tensor

from .._args import _show, choice, whole
from ..pooler._checks import first_nonfinite

__all__ = ["POOL_METHODS", "pool_tokens", "pooled_length", "token_clusters"]

#: The two implementations ``pool_tokens`` follows.
POOL_METHODS: tuple[str, ...] = ("pylate", "colpali")

PoolMethod = Literal["pylate", "colpali"]


def _options(pool_factor: object, protected_tokens: object, method: object) -> tuple[int, int]:
    choice("method", method, POOL_METHODS)
    factor = whole("pool_factor", pool_factor, minimum=1,
                   why=" (1 keeps every row; 2 keeps about half)")
    if protected_tokens is None:
        return factor, (1 if method == "pylate" else 0)
    protected = whole("protected_tokens", protected_tokens, minimum=0,
                      why=" (the leading rows kept out of the clusters)")
    if method == "colpali" and protected:
        raise ValueError(
            f"method='colpali' has no protected rows (colpali-engine clusters every row), got "
            f"protected_tokens={protected}; pass protected_tokens=0 or None, or use "
            "method='pylate'")
    return factor, protected


def _check_rows(embs: object, name: str) -> Tensor:
    if not isinstance(embs, Tensor):
        raise TypeError(f"{name} must be a Tensor [n_tokens, dim], got {_show(embs)}")
    if embs.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D [n_tokens, dim], got shape {tuple(embs.shape)}; pass a padded "
            "batch as a list of its unpadded [n_i, dim] documents")
    if not embs.is_floating_point():
        raise TypeError(f"{name} must hold floating-point vectors, got dtype {embs.dtype}")
    bad = first_nonfinite(embs)
    if bad:
        raise ValueError(f"{name} has non-finite values: {bad}; clustering needs finite "
                         "distances")
    return embs


def pooled_length(n_tokens: int, pool_factor: int = 2, protected_tokens: int | None = None, *,
                  method: PoolMethod = "pylate") -> int:
    """The most rows ``pool_tokens`` returns for a document of ``n_tokens`` rows.

    ``p + max((n - p) // pool_factor, 1)`` when that is a reduction, else ``n`` (with ``p`` the
    protected rows, at most ``n``). Distance ties can leave ``fcluster`` with fewer clusters, so
    a real output may be shorter; never longer.

    Args:
        n_tokens: rows of the document (its token vectors).
        pool_factor, protected_tokens, method: as for :func:`pool_tokens`.

    Returns:
        The row count of an index entry after pooling (the number to size an index with).

    Example:
        >>> [tp.late_interaction.pooled_length(n, 2) for n in (1, 2, 3, 4, 512)]
        [1, 2, 2, 2, 256]
    """
    factor, protected = _options(pool_factor, protected_tokens, method)
    n = whole("n_tokens", n_tokens, minimum=0)
    p = min(protected, n)
    k = max((n - p) // factor, 1)
    return p + k if k < n - p else n


def token_clusters(embs: Tensor, pool_factor: int = 2, protected_tokens: int | None = None, *,
                   method: PoolMethod = "pylate") -> Tensor | None:
    """Which cluster each unprotected row joins (``None`` when nothing is reduced).

    Args:
        embs: ``[n_tokens, dim]`` one document's token vectors (L2-normalised, as the models
            deliver them).
        pool_factor, protected_tokens, method: as for :func:`pool_tokens`.

    Returns:
        ``[n_tokens - protected]`` int64 labels from 0, in ``fcluster``'s order (PyLate's order
        of the pooled rows), or ``None`` when the rows come back unchanged.

    Example:
        >>> x = torch.tensor([[1., 0.], [1., 0.], [0., 1.], [1., 0.], [0., 1.]])
        >>> tp.late_interaction.token_clusters(x, 2)   # row 0 protected; 2 clusters of 4 rows
        tensor([0, 1, 0, 1])
    """
    factor, protected = _options(pool_factor, protected_tokens, method)
    embs = _check_rows(embs, "embs")
    return _labels(embs, factor, protected, method)


def _labels(embs: Tensor, factor: int, protected: int, method: str) -> Tensor | None:
    from scipy.cluster import hierarchy  # scipy loads on first use, not with tokpool

    rows = embs[protected:].detach().cpu()  # [n - p, dim]
    if rows.dtype != torch.float32 and (method == "colpali" or rows.dtype in (
            torch.float16, torch.bfloat16)):
        rows = rows.float()
    n = rows.shape[0]
    k = max(n // factor, 1)
    if factor == 1 or k >= n:
        return None
    if k == 1:
        return torch.zeros(n, dtype=torch.int64)  # one cluster: fcluster(t=1) labels all 1
    distances = (1 - torch.mm(rows, rows.t())).numpy()  # [n - p, n - p]
    if method == "pylate":
        condensed = distances[np.triu_indices(n, k=1)]  # [(n - p)(n - p - 1) / 2]
        tree = hierarchy.linkage(condensed, method="ward")
    else:  # colpali-engine: the square matrix's rows as observations (on purpose, so scipy's
        # "looks like an uncondensed distance matrix" warning is silenced)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", hierarchy.ClusterWarning)
            tree = hierarchy.linkage(distances, metric="euclidean", method="ward")
    labels = hierarchy.fcluster(tree, t=k, criterion="maxclust")
    return torch.from_numpy(labels.astype(np.int64)) - 1


def _pool_one(embs: Tensor, factor: int, protected: int, method: str) -> Tensor:
    labels = _labels(embs, factor, protected, method)
    if labels is None:
        return embs  # nothing to reduce: the rows themselves, not a copy
    device, dtype = embs.device, embs.dtype
    kept = embs[:protected].detach().cpu()  # [p, dim]
    rows = embs[protected:].detach().cpu()  # [n - p, dim]
    if method == "colpali" or dtype in (torch.float16, torch.bfloat16):
        rows = rows.float()
    k = int(labels.max()) + 1
    if method == "pylate":
        sums = torch.zeros(k, rows.shape[1], dtype=rows.dtype)  # [k, dim]
        counts = torch.zeros(k, dtype=torch.long)  # [k]
        sums.scatter_add_(0, labels.unsqueeze(1).expand_as(rows), rows)
        counts.scatter_add_(0, labels, torch.ones_like(labels))
        used = counts > 0  # fcluster may leave a label empty on ties
        means = sums[used] / counts[used].unsqueeze(1)  # [k', dim]
    else:
        means = torch.stack([
            torch.nn.functional.normalize(rows[labels == c].mean(dim=0), p=2, dim=-1)
            for c in range(k) if bool((labels == c).any())])  # [k', dim]
    return torch.cat([kept, means.to(dtype)], dim=0).to(device)  # [p + k', dim]


@overload
def pool_tokens(embs: Tensor, pool_factor: int = ..., protected_tokens: int | None = ..., *,
                method: PoolMethod = ...) -> Tensor: ...


@overload
def pool_tokens(embs: Sequence[Tensor], pool_factor: int = ...,
                protected_tokens: int | None = ..., *,
                method: PoolMethod = ...) -> list[Tensor]: ...


def pool_tokens(embs: Tensor | Sequence[Tensor], pool_factor: int = 2,
                protected_tokens: int | None = None, *,
                method: PoolMethod = "pylate") -> Tensor | list[Tensor]:
    """Hierarchical token pooling of document token vectors (PyLate's, or colpali-engine's).

    Args:
        embs: ``[n_tokens, dim]`` one document's token vectors, or a list of them (each its own
            length). Rows should be L2-normalised (``1 - x·y`` is then the cosine distance),
            as late-interaction models and ``tp.load_model(...).embed`` deliver them.
        pool_factor: keep about ``1 / pool_factor`` of the unprotected rows; ``1`` keeps all.
        protected_tokens: leading rows kept unpooled, in front (PyLate's default 1: the
            ``[CLS]`` / ``[D]`` row). ``None`` means 1 for ``"pylate"`` and 0 for
            ``"colpali"``, which has none (a non-zero value is refused there).
        method: ``"pylate"`` (PyLate 1.6.0 = Sentence-Transformers v6) or ``"colpali"``
            (colpali-engine: no protected rows, means re-normalised).

    Returns:
        ``[p + k', dim]`` per document, in the input's dtype and device: the protected rows,
        then one mean per cluster in cluster-label order (``k' <= max((n - p) // pool_factor,
        1)``, fewer only on distance ties). When there is nothing to reduce (``pool_factor``
        1, or ``k >= n - p``) the input tensor itself is returned. A list gives a list.

    Raises:
        TypeError: ``embs`` not a tensor (or list of them) of floats; a non-integer option.
        ValueError: a tensor that is not 2-D, non-finite values, ``pool_factor < 1``,
            ``protected_tokens < 0``, an unknown ``method``, protected rows with ``"colpali"``.

    Example:
        >>> x = torch.tensor([[1., 0.], [0., 1.], [0., 1.], [1., 0.], [1., 0.]])
        >>> pool_tokens(x, pool_factor=2)    # row 0 kept; rows 1-2 and 3-4 merge
        tensor([[1., 0.],
                [0., 1.],
                [1., 0.]])
        >>> tp.late_interaction.pool_tokens(x, pool_factor=1) is x
        True
        >>> [d.shape[0] for d in tp.late_interaction.pool_tokens([x, x[:2]], pool_factor=2)]
        [3, 2]
    """
    factor, protected = _options(pool_factor, protected_tokens, method)
    if isinstance(embs, Tensor):
        return _pool_one(_check_rows(embs, "embs"), factor, protected, method)
    if isinstance(embs, str | bytes | dict | set | frozenset) or not isinstance(embs, Sequence):
        raise TypeError(f"embs must be a Tensor [n_tokens, dim] or a list of them, got "
                        f"{_show(embs)}")
    docs = [_check_rows(e, f"embs[{i}]") for i, e in enumerate(embs)]
    return [_pool_one(d, factor, protected, method) for d in docs]
