"""How many bytes a late-interaction index holds: raw token vectors, or PLAID's residual codes.

One vector per document (a dense bi-encoder) costs ``n_docs · dim · itemsize``. Late
interaction keeps one vector per document *token*, so its index is ``tokens / docs`` times
larger — unless the vectors are pooled (:func:`tokpool.late_interaction.pool_tokens`,
``pool_factor``) or
compressed. The two indexers people use compress the same way (ColBERTv2's residual scheme,
Santhanam et al. 2022): each vector is stored as the id of its nearest k-means centroid plus its
residual from that centroid, quantised to ``nbits`` per dimension and packed into bytes. They
differ in the width of the centroid id and their default ``nbits``:

``layout="colbert"`` — colbert-ai (stanford-futuredata/ColBERT):
    ``colbert/indexing/codecs/residual_embeddings.py`` keeps ``codes`` as int32 (4 bytes a
    vector) and ``residuals`` as uint8 ``[N, dim // 8 * nbits]``; ``codecs/residual.py`` saves
    the centroid table ``.half()`` (fp16) and asserts ``dim % (nbits * 8) == 0``;
    ``infra/config/settings.py``: ``nbits = 1``; ``indexing/collection_indexer.py``:
    ``num_partitions = 2 ** floor(log2(16 · sqrt(num_embeddings_est)))``.
``layout="fast-plaid"`` — fast-plaid 1.7.0 (lightonai/fast-plaid):
    ``rust/index/create.rs`` writes the codes from an ``argmax`` (int64, 8 bytes a vector) and
    the residuals uint8 ``[N, dim / 8 * nbits]``; ``python/fast_plaid/search/fast_plaid.py``:
    ``nbits = 4`` by default, the same partition rule, ``K = min(num_partitions, sample
    tokens)``, centroids normalised and ``.half()``.
``layout="pylate"`` — PyLate 1.6.0's ``indexes.PLAID``, on the fast-plaid it pins (``<= 1.4.6``),
    which keeps the codes and residuals twice (per chunk and merged).

Both estimate ``N`` from a sample of documents; here ``N`` is the real vector count (the
estimate when every document is sampled) and ``K`` is capped at ``N`` as fast-plaid caps it
(colbert-ai's k-means would refuse fewer training vectors than partitions). The total is the
indexer's whole folder, file by file (:mod:`tokpool.late_interaction.index_files`): the
inverted file, fast-plaid's raw ``embeddings.npy`` (``≤ 1,000`` documents), the codec, JSON
metadata and every file's header included; within 1 % of folders colbert-ai 0.2.22, fast-plaid
1.7.0 and PyLate 1.6.0 wrote (``tests/test_index_real.py``,
``benchmarks/results/index_bytes_real.json``).

Example:
    >>> b = multivector_index_bytes([100] * 1_000, 128, nbits=2, layout="colbert")
    >>> b.n_vectors, b.partitions, b.codes_bytes, b.residual_bytes, b.centroid_bytes  # + headers
    (100000, 4096, 401570, 3201570, 1050146)
    >>> b.total_bytes, b.dense_bytes   # the whole folder: the inverted file and small files too
    (5094144, 256000)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import pandas as pd
import torch

from .._args import _show, choice, each, items, whole
from ..pooler.heads import dtype_size, resolve_dtype
from .index_files import layout_files
from .token_pooling import pooled_length

__all__ = ["DEFAULT_NBITS", "INDEX_LAYOUTS", "INDEX_OPTIONS", "IndexBytes", "index_bytes_table",
           "multivector_index_bytes", "plaid_partitions"]

#: The residual layouts ``multivector_index_bytes`` knows (``nbits=None`` is raw storage).
INDEX_LAYOUTS: tuple[str, ...] = ("colbert", "fast-plaid", "pylate")
#: Each indexer's default bits per dimension (``nbits="default"``).
DEFAULT_NBITS: dict[str, int] = {"colbert": 1, "fast-plaid": 4, "pylate": 4}
#: Bytes of one centroid id: colbert-ai's int32, fast-plaid's (and so PyLate's) int64.
CODE_BYTES: dict[str, int] = {"colbert": 4, "fast-plaid": 8, "pylate": 8}
#: Bytes of one centroid-table value (both save the table as fp16).
CENTROID_ITEMSIZE = 2

Layout = Literal["colbert", "fast-plaid", "pylate"]


@dataclass(frozen=True)
class IndexBytes:
    """A multi-vector index's bytes, part by part, beside one dense vector per document.

    Attributes:
        layout: ``"raw"`` (every vector in ``dtype``), ``"colbert"``, ``"fast-plaid"`` or
            ``"pylate"`` (one indexer's whole folder: :mod:`tokpool.late_interaction.index_files`).
        n_docs, n_tokens: documents and their token rows before pooling.
        n_vectors: vectors stored (after ``pool_factor``; the upper bound ``pool_tokens`` gives).
        dim, dtype, nbits, pool_factor: as asked (``nbits`` 0 for raw storage).
        partitions: k-means centroids ``K`` (0 for raw storage).
        vector_bytes: raw vectors ``n_vectors · dim · itemsize``: raw storage, or fast-plaid's
            ``embeddings.npy`` (``≤ 1,000`` documents; ``dtype`` as given to the indexer).
        codes_bytes: ``n_vectors · code bytes`` (4: colbert-ai's int32; 8: fast-plaid's int64),
            file headers (and fast-plaid's padding rows) included, as are the parts below.
        residual_bytes: ``n_vectors · dim · nbits / 8`` (uint8, packed).
        centroid_bytes: ``K · dim · 2`` (the fp16 centroid table).
        dense_bytes: one ``dtype`` vector of ``dim`` per document, for comparison.
        ivf_bytes: the inverted file (one id per (centroid, document) pair: an ESTIMATE,
            uniform centroids) and its ``K`` lengths.
        copy_bytes: PyLate's pinned fast-plaid's second copy of codes and residuals.
        small_bytes: the codec, JSON metadata, document lengths, PyLate's id maps.
    """

    layout: str
    n_docs: int
    n_tokens: int
    n_vectors: int
    dim: int
    dtype: str
    nbits: int
    pool_factor: int
    partitions: int
    vector_bytes: int
    codes_bytes: int
    residual_bytes: int
    centroid_bytes: int
    dense_bytes: int
    ivf_bytes: int = 0
    copy_bytes: int = 0
    small_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        """The whole folder: every part (raw storage: the vectors alone)."""
        return (self.vector_bytes + self.codes_bytes + self.residual_bytes + self.centroid_bytes
                + self.ivf_bytes + self.copy_bytes + self.small_bytes)

    @property
    def bytes_per_vector(self) -> float:
        """``total_bytes / n_vectors`` (the centroid table shared out)."""
        return self.total_bytes / self.n_vectors if self.n_vectors else 0.0

    @property
    def times_dense(self) -> float:
        """``total_bytes / dense_bytes``: how many dense indexes this index is worth."""
        return self.total_bytes / self.dense_bytes if self.dense_bytes else math.nan

    @property
    def parts(self) -> dict[str, int]:
        """The non-zero parts, by name, in bytes."""
        named = {"vectors": self.vector_bytes, "codes": self.codes_bytes,
                 "residuals": self.residual_bytes, "centroids": self.centroid_bytes,
                 "ivf": self.ivf_bytes, "second copy": self.copy_bytes,
                 "small files": self.small_bytes}
        return {k: v for k, v in named.items() if v}

    def as_row(self) -> dict[str, object]:
        """Every field and the derived totals, for a ``pandas.DataFrame`` row."""
        return {**asdict(self), "total_bytes": self.total_bytes,
                "bytes_per_vector": self.bytes_per_vector, "times_dense": self.times_dense}


def plaid_partitions(n_vectors: int) -> int:
    """PLAID's centroid count for ``n_vectors`` vectors: ``2^⌊log2(16·√N)⌋``, at most ``N``.

    Example:
        >>> [tp.late_interaction.plaid_partitions(n) for n in (1, 100, 10_000, 1_000_000)]
        [1, 100, 1024, 8192]
    """
    n = whole("n_vectors", n_vectors, minimum=1)
    return min(int(2 ** math.floor(math.log2(16 * math.sqrt(n)))), n)


def _length_counts(doc_lens: object) -> dict[int, int]:
    """``{length: how many documents}``; a NumPy array or tensor of integers is checked at once
    (a corpus of millions of documents), a list one value at a time (the first bad one named).
    """
    if isinstance(doc_lens, torch.Tensor):
        doc_lens = doc_lens.detach().cpu().numpy()
    if isinstance(doc_lens, np.ndarray) and doc_lens.dtype.kind in "iu" and doc_lens.ndim == 1:
        if doc_lens.size == 0:
            raise ValueError("doc_lens is empty; give at least one")
        if int(doc_lens.min()) < 1:
            first = int(np.argmax(doc_lens < 1))
            raise ValueError(f"doc_lens[{first}] must be a whole number >= 1, got "
                             f"{int(doc_lens[first])}")
        values, counts = np.unique(doc_lens, return_counts=True)
        return {int(v): int(c) for v, c in zip(values, counts, strict=True)}
    lens = each("doc_lens", items("doc_lens", doc_lens, what="a list of token counts"),
                lambda name, v: whole(name, v, minimum=1))
    out: dict[int, int] = {}
    for n in lens:
        out[n] = out.get(n, 0) + 1
    return out


def _nbits(nbits: object, layout: str, dim: int) -> int:
    if nbits == "default":
        return DEFAULT_NBITS[layout]
    bits = whole("nbits", nbits, minimum=1, maximum=8,
                 why=" (bits per dimension; None for raw storage, 'default' for the indexer's)")
    choice("nbits", bits, (1, 2, 4, 8))
    if layout == "colbert" and dim % (8 * bits):
        raise ValueError(
            f"layout='colbert' needs dim divisible by 8 · nbits = {8 * bits} (colbert-ai asserts "
            f"dim % (nbits * 8) == 0), got dim={dim}; use a smaller nbits or "
            "layout='fast-plaid'")
    return bits


def multivector_index_bytes(
    doc_lens: Sequence[int],
    dim: int,
    dtype: str | torch.dtype = "float16",
    pool_factor: int = 1,
    nbits: int | Literal["default"] | None = None,
    layout: Layout = "colbert",
    *,
    protected_tokens: int = 1,
) -> IndexBytes:
    """Bytes of a multi-vector index over documents of ``doc_lens`` tokens, part by part.

    Args:
        doc_lens: token rows of each document (what the encoder returns for it): a list, or a
            1-D integer array / tensor (checked at once, for corpora of millions).
        dim: width of one token vector (ColBERT's 128, MiniLM's 384).
        dtype: dtype of raw vectors and of the dense comparison (``"float16"``, ...).
        pool_factor: ``tp.late_interaction.pool_tokens``'s factor before indexing (1: every row);
        the vector
            count uses its rule with ``protected_tokens`` (an upper bound: distance ties can
            leave fewer).
        nbits: ``None`` for raw storage (every vector in ``dtype``); else bits per dimension
            of the residual (1, 2, 4 or 8) or ``"default"`` (colbert-ai 1, fast-plaid 4).
        layout: ``"colbert"`` (int32 codes) or ``"fast-plaid"`` (int64 codes); only read with
            ``nbits``.
        protected_tokens: rows ``pool_tokens`` keeps unpooled per document (PyLate's 1).

    Returns:
        An :class:`IndexBytes`: ``.total_bytes``, ``.parts``, ``.dense_bytes``, ...

    Raises:
        TypeError: a non-integer length, dim, factor or nbits.
        ValueError: empty ``doc_lens``, a length below 1, an unknown layout or dtype, an nbits
            the layout cannot pack (colbert-ai: ``dim % (8 · nbits)``; both: ``dim % 8``).

    Example:
        >>> raw = tp.late_interaction.multivector_index_bytes([512] * 100, 384)
        >>> raw.layout, raw.n_vectors, raw.total_bytes, raw.times_dense
        ('raw', 51200, 39321600, 512.0)
        >>> multivector_index_bytes([512] * 100, 384, pool_factor=2).n_vectors   # 1 + 511 // 2
        25600
        >>> tp.late_interaction.multivector_index_bytes([512] * 100, 384, nbits="default",
        ...                            layout="fast-plaid").parts   # <= 1,000 documents
        {'vectors': 39325770, 'codes': 409792, 'residuals': 9830592, 'centroids': 1572944, \
'ivf': 370840, 'small files': 2839}
    """
    counts = _length_counts(doc_lens)  # {length: documents}
    width = whole("dim", dim, minimum=1)
    torch_dtype = resolve_dtype(dtype)
    if torch_dtype is None:
        raise TypeError(f"dtype must be a floating-point dtype or its name, got {_show(dtype)}")
    itemsize = dtype_size(torch_dtype)
    factor = whole("pool_factor", pool_factor, minimum=1)
    protected = whole("protected_tokens", protected_tokens, minimum=0)
    n_docs = sum(counts.values())
    n_vectors = sum(pooled_length(n, factor, protected) * c for n, c in counts.items())
    common = {"n_docs": n_docs, "n_tokens": sum(n * c for n, c in counts.items()),
              "n_vectors": n_vectors, "dim": width,
              "dtype": str(torch_dtype).removeprefix("torch."), "pool_factor": factor,
              "dense_bytes": n_docs * width * itemsize}
    if nbits is None:
        return IndexBytes(layout="raw", nbits=0, partitions=0,
                          vector_bytes=n_vectors * width * itemsize,  # N · dim · itemsize
                          codes_bytes=0, residual_bytes=0, centroid_bytes=0, **common)
    choice("layout", layout, INDEX_LAYOUTS)
    if width % 8:
        raise ValueError(f"residual layouts pack dim / 8 · nbits bytes per vector; dim must be "
                         f"a multiple of 8, got {width}; use nbits=None for raw storage")
    bits = _nbits(nbits, layout, width)
    k = plaid_partitions(n_vectors)
    pooled = {}  # {vectors per document: documents}
    for n, c in counts.items():
        pooled[pooled_length(n, factor, protected)] = pooled.get(
            pooled_length(n, factor, protected), 0) + c
    last = pooled_length(_last_length(doc_lens), factor, protected)
    # each part is whole files: N · (4 | 8) B codes, N · dim / 8 · nbits B residuals,
    # K · dim · 2 B fp16 centroids, the inverted file, ... (index_files.layout_files)
    files = layout_files(layout, counts=pooled, last_len=last, n_vectors=n_vectors, dim=width,
                         nbits=bits, partitions=k, raw_itemsize=itemsize)
    return IndexBytes(
        layout=layout, nbits=bits, partitions=k, vector_bytes=files["vectors"],
        codes_bytes=files["codes"], residual_bytes=files["residuals"],
        centroid_bytes=files["centroids"], ivf_bytes=files["ivf"],
        copy_bytes=files["second copy"], small_bytes=files["small files"], **common)


def _last_length(doc_lens: object) -> int:
    """The last document's token rows (fast-plaid pads its merged files by ``max - last``)."""
    if isinstance(doc_lens, torch.Tensor | np.ndarray):
        return int(doc_lens[-1])
    return int(list(doc_lens)[-1])  # type: ignore[call-overload]


#: The options ``index_bytes_table`` compares by default: (label, pool_factor, nbits, layout).
INDEX_OPTIONS: tuple[tuple[str, int, int | str | None, str], ...] = (
    ("raw fp16", 1, None, "colbert"),
    ("raw fp16, pool 2", 2, None, "colbert"),
    ("raw fp16, pool 4", 4, None, "colbert"),
    ("colbert-ai 2-bit", 1, 2, "colbert"),
    ("fast-plaid 4-bit", 1, "default", "fast-plaid"),
    ("colbert-ai 2-bit, pool 2", 2, 2, "colbert"),
)


def index_bytes_table(corpus_tokens: Sequence[int], doc_len: int, dim: int, *,
                      dtype: str | torch.dtype = "float16",
                      options: Sequence[tuple[str, int, int | str | None, str]] = INDEX_OPTIONS
                      ) -> pd.DataFrame:
    """Index bytes against corpus size: one row per (corpus size, option), plus the dense row.

    Args:
        corpus_tokens: corpus sizes in tokens; each is ``corpus_tokens // doc_len`` documents
            of ``doc_len`` tokens (at least one).
        doc_len: tokens per document.
        dim: vector width.
        dtype: raw vectors' and the dense vector's dtype.
        options: ``(label, pool_factor, nbits, layout)`` per curve.

    Returns:
        A DataFrame with ``corpus_tokens``, ``n_docs``, ``option``, ``n_vectors``,
        ``total_bytes`` and each part (``IndexBytes.as_row``); the option ``"dense (1 per
        document)"`` is one vector per document.

    Example:
        >>> t = tp.late_interaction.index_bytes_table([1_024_000], 128, 128).set_index("option")
        >>> int(t.loc["raw fp16", "total_bytes"]), int(t.loc["dense (1 per document)",
        ...                                                  "total_bytes"])   # x 128 x 2 B
        (262144000, 2048000)
    """
    sizes = each("corpus_tokens", items("corpus_tokens", corpus_tokens),
                 lambda n, v: whole(n, v, minimum=1))
    length = whole("doc_len", doc_len, minimum=1)
    rows = []
    for tokens in sizes:
        n_docs = max(tokens // length, 1)
        lens = np.full(n_docs, length, dtype=np.int64)  # [n_docs]
        for label, factor, nbits, layout in options:
            b = multivector_index_bytes(lens, dim, dtype, pool_factor=factor, nbits=nbits,
                                        layout=layout)  # type: ignore[arg-type]
            rows.append({"corpus_tokens": tokens, "option": label, **b.as_row()})
        dense = multivector_index_bytes(np.ones(n_docs, dtype=np.int64), dim, dtype)
        rows.append({"corpus_tokens": tokens, "option": "dense (1 per document)",
                     **dense.as_row()})
    return pd.DataFrame(rows)
