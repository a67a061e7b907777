"""The files a late-interaction indexer writes, per indexer and version, and their bytes.

:func:`tokpool.late_interaction.multivector_index_bytes` adds these up. Each layout is one
indexer's folder, read from its writer code and checked against folders the real library wrote
(``tests/test_index_real.py``, ``benchmarks/index_real.py``):

``"colbert"`` — colbert-ai 0.2.22 (``CollectionIndexer``): ``{chunk}.codes.pt`` (int32 centroid
    ids), ``{chunk}.residuals.pt`` (uint8 ``[N, dim / 8 · nbits]``), ``centroids.pt`` (fp16
    ``[K, dim]``), ``ivf.pid.pt`` (``indexing/utils.py``'s ``optimize_ivf``: int32 document ids,
    one per (centroid, document) pair, padded by the longest list, and int64 list lengths
    ``[K]``), ``avg_residual.pt``, ``buckets.pt``, ``plan.json`` and ``metadata.json`` (each with
    the whole config), ``doclens.{chunk}.json``, ``{chunk}.metadata.json``. Every ``.pt`` is a
    ``torch.save`` zip archive: about 1.5 KiB of container around its tensors.
``"fast-plaid"`` — fast-plaid 1.7.0 (``FastPlaid.create``): ``merged_codes.npy`` (int64 ids) and
    ``merged_residuals.npy``, the single copy, each padded by ``max(doc_lens) - doc_lens[-1]``
    rows behind a fixed 192-byte header (``search/storage.py``); ``centroids.npy`` (fp16),
    ``ivf.npy`` (int64 document ids, one per (centroid, document) pair: ``rust/index/create.rs``'s
    ``optimize_ivf``) and ``ivf_lengths.npy`` (int32 ``[K]``); for ``≤ 1,000`` documents
    (``start_from_scratch``) also ``embeddings.npy``, every raw vector as given, pickled one array
    per document; the codec (``avg_residual``, ``bucket_cutoffs``, ``bucket_weights``,
    ``cluster_threshold``) and small JSON files.
``"pylate"`` — PyLate 1.6.0's ``indexes.PLAID`` on the fast-plaid it pins (``<= 1.4.6``; 1.4.6
    here): the same folder (in ``{index}/fast_plaid_index``) except that the per-chunk
    ``{chunk}.codes.npy`` and ``{chunk}.residuals.npy`` stay beside ``merged_codes.npy`` and
    ``merged_residuals.npy`` (numpy's 128-byte header): codes and residuals are kept twice.
    PyLate adds two pickled id maps (``documents_ids_to_plaid_ids.pkl`` and the reverse).

Parts (:attr:`IndexBytes.parts`): ``codes``, ``residuals``, ``centroids``, ``ivf`` (the inverted
file and its lengths), ``second copy`` (PyLate's merged codes and residuals), ``vectors`` (raw
vectors: ``nbits=None``, or fast-plaid's ``embeddings.npy``), ``small files`` (the codec, JSON and
pickles). Each part is whole files, headers included. Three parts are estimates, said where they
are made: the inverted file's (centroid, document) pairs (expected value when a document's
tokens fall on the centroids uniformly: real text repeats centroids within a document more, so
its inverted file is smaller), the small files (their JSON and pickles hold numbers whose digits
vary) and colbert-ai's inverted-file padding.
"""

from __future__ import annotations

import math
import re

__all__ = ["FILE_PARTS", "expected_ivf_pairs", "folder_part", "id_map_pickle_bytes",
           "layout_files"]

#: Per layout: (file-name pattern, part). The first match names a real folder's file's part.
FILE_PARTS: dict[str, tuple[tuple[str, str], ...]] = {
    "colbert": ((r"\d+\.codes\.pt", "codes"), (r"\d+\.residuals\.pt", "residuals"),
                (r"centroids\.pt", "centroids"), (r"ivf(\.pid)?\.pt", "ivf"),
                (r".*", "small files")),
    "fast-plaid": ((r"merged_codes\.npy", "codes"), (r"merged_residuals\.npy", "residuals"),
                   (r"centroids\.npy", "centroids"), (r"ivf(_lengths)?\.npy", "ivf"),
                   (r"embeddings\.npy", "vectors"), (r".*", "small files")),
    "pylate": ((r"(.*/)?\d+\.codes\.npy", "codes"), (r"(.*/)?\d+\.residuals\.npy", "residuals"),
               (r"(.*/)?merged_(codes|residuals)\.npy", "second copy"),
               (r"(.*/)?centroids\.npy", "centroids"), (r"(.*/)?ivf(_lengths)?\.npy", "ivf"),
               (r"(.*/)?embeddings\.npy", "vectors"), (r".*", "small files")),
}

# Container bytes (measured on the files the libraries wrote; constant to within ~50 B):
#: ``torch.save``'s zip archive around one tensor (colbert-ai's ``.pt`` files).
TORCH_SAVE_BYTES = 1_570
#: ... and around each further tensor in the same archive (``ivf.pid.pt`` holds two).
TORCH_SAVE_EXTRA_TENSOR = 230
#: fast-plaid 1.7's fixed merged-file header (``storage.MERGED_HEADER_LEN``).
MERGED_HEADER = 192
#: numpy's own ``.npy`` header (64-byte aligned): fast-plaid 1.4.6's merged files.
NUMPY_HEADER = 128
#: ``np.save`` of an object array, per document (a pickled ``ndarray``), and once.
PICKLED_ARRAY_BYTES = 39.7
PICKLED_ARRAYS_ONCE = 200
#: colbert-ai: ``plan.json`` + ``metadata.json`` (the exported config twice), the codec's two
#: small ``.pt`` files and ``{chunk}.metadata.json``.
COLBERT_SMALL = 1_680 + 1_659 + 1_612 + 1_829 + 109
#: fast-plaid: ``metadata.json``, ``plan.json``, ``{chunk}.metadata.json``, manifests.
FAST_PLAID_JSON = {"fast-plaid": 210 + 36 + 78 + 130, "pylate": 173 + 36 + 78 + 126}
#: Documents per chunk file (colbert-ai's ``get_chunksize`` and fast-plaid's ``batch_size``).
CHUNK_DOCS = 25_000


def folder_part(layout: str, name: str) -> str:
    """The part a file of a real index folder belongs to (``FILE_PARTS``).

    Example:
        >>> folder_part("pylate", "fast_plaid_index/merged_codes.npy")
        'second copy'
    """
    for pattern, part in FILE_PARTS[layout]:
        if re.fullmatch(pattern, name):
            return part
    raise ValueError(f"no part for {name!r} in layout {layout!r}")  # pragma: no cover


def tch_npy_header(descr: str, shape: tuple[int, ...]) -> int:
    """Bytes of ``tch::Tensor::write_npy``'s header (padded to 16; fast-plaid's Rust files).

    Example:
        >>> tch_npy_header("<f2", (2048, 128))
        80
    """
    body = (f"{{'descr': '{descr}', 'fortran_order': False, 'shape': "
            f"({','.join(str(s) for s in shape)},), }}")
    return ((10 + len(body) + 1 + 15) // 16) * 16


def expected_ivf_pairs(counts: dict[int, int], partitions: int) -> float:
    """Expected (centroid, document) pairs: ``Σ K · (1 - (1 - 1/K)^L)`` over documents.

    A document of ``L`` vectors lands in that many distinct lists on average when each vector's
    centroid is uniform over ``K``; both indexers store one id per pair (an upper bound of
    ``L``; real text, whose tokens repeat centroids, has fewer).

    Example:
        >>> round(expected_ivf_pairs({100: 10}, 1024), 1)   # 10 documents of 100: < 1,000
        953.2
    """
    k = partitions
    return sum(c * k * -math.expm1(n * math.log1p(-1 / k)) if k > 1 else c
               for n, c in counts.items())


def id_map_pickle_bytes(n_docs: int) -> int:
    """Bytes of ``pickle.dumps({str(i): i for i in range(n)})`` (protocol 4), worked out.

    PyLate keeps this map and its reverse (``documents_ids_to_plaid_ids.pkl``); with ids
    ``"0"`` ... ``"n-1"`` (longer ids: more bytes). Per entry: the key as ``SHORT_BINUNICODE``
    (2 B + digits) and ``MEMOIZE`` (1 B), the value as ``BININT1`` / ``BININT2`` / ``BININT``
    (2 / 3 / 5 B); ``MARK`` + ``SETITEMS`` per 1,000 entries; a 9-byte ``FRAME`` per 64 KiB;
    14 B of protocol, empty dict and stop.

    Example:
        >>> import pickle
        >>> all(id_map_pickle_bytes(n) == len(pickle.dumps({str(i): i for i in range(n)},
        ...                                                 protocol=4)) for n in (300, 1200, 5000))
        True
    """
    digits = sum(max(0, min(n_docs, 10**d) - 10 ** (d - 1) * (d > 1)) * d
                 for d in range(1, len(str(max(n_docs - 1, 0))) + 1))
    ints = (2 * min(n_docs, 256) + 3 * max(0, min(n_docs, 65_536) - 256)
            + 5 * max(0, n_docs - 65_536))
    payload = 3 * n_docs + digits + ints + 2 * (n_docs // 1_000 + 1) + 3
    return payload + 9 * math.ceil(payload / 65_536) + 2


def _doclens_json(counts: dict[int, int]) -> int:
    """Bytes of ``json.dumps(doc_lens)`` without spaces: ``[a,b,...]``."""
    n = sum(counts.values())
    return 2 + (n - 1) + sum(len(str(length)) * c for length, c in counts.items())


def layout_files(layout: str, *, counts: dict[int, int], last_len: int, n_vectors: int,
                 dim: int, nbits: int, partitions: int, raw_itemsize: int) -> dict[str, int]:
    """Bytes of each part of ``layout``'s folder (see the module docstring).

    Args:
        layout: ``"colbert"``, ``"fast-plaid"`` or ``"pylate"``.
        counts: ``{vectors per document: documents}``.
        last_len: the last document's vectors (fast-plaid pads its merged files by
            ``max - last`` rows).
        n_vectors, dim, nbits, partitions: ``N``, the width, bits per dimension, ``K``.
        raw_itemsize: bytes of one raw vector value (fast-plaid's ``embeddings.npy``).

    Returns:
        ``{part: bytes}``, every part (zeros included).
    """
    n_docs = sum(counts.values())
    row = dim // 8 * nbits  # residual bytes per vector
    pairs = round(expected_ivf_pairs(counts, partitions))  # ESTIMATE (uniform centroids)
    chunks = math.ceil(n_docs / CHUNK_DOCS)
    doclens = _doclens_json(counts)
    parts = dict.fromkeys(("codes", "residuals", "centroids", "ivf", "second copy", "vectors",
                           "small files"), 0)
    if layout == "colbert":
        parts["codes"] = n_vectors * 4 + chunks * TORCH_SAVE_BYTES
        parts["residuals"] = n_vectors * row + chunks * TORCH_SAVE_BYTES
        parts["centroids"] = partitions * dim * 2 + TORCH_SAVE_BYTES
        stride = math.ceil(2 * pairs / partitions)  # ESTIMATE: padding by the longest list
        parts["ivf"] = ((pairs + stride) * 4 + partitions * 8 + TORCH_SAVE_BYTES
                        + TORCH_SAVE_EXTRA_TENSOR)
        parts["small files"] = COLBERT_SMALL + doclens
        return parts
    pad = max(counts) - last_len  # merged files' padding rows
    codec = (tch_npy_header("<f4", (dim,)) + dim * 4 + tch_npy_header("<f4", (1,)) + 4
             + tch_npy_header("<f4", (2**nbits - 1,)) + (2**nbits - 1) * 4
             + tch_npy_header("<f4", (2**nbits,)) + 2**nbits * 4)
    parts["centroids"] = tch_npy_header("<f2", (partitions, dim)) + partitions * dim * 2
    parts["ivf"] = (tch_npy_header("<i8", (pairs,)) + pairs * 8
                    + tch_npy_header("<i4", (partitions,)) + partitions * 4)
    if n_docs <= 1_000:  # start_from_scratch: the raw vectors as given, one array a document
        parts["vectors"] = (n_vectors * dim * raw_itemsize + round(PICKLED_ARRAY_BYTES * n_docs)
                            + PICKLED_ARRAYS_ONCE)
    parts["small files"] = codec + FAST_PLAID_JSON[layout] + doclens
    if layout == "fast-plaid":
        parts["codes"] = MERGED_HEADER + (n_vectors + pad) * 8
        parts["residuals"] = MERGED_HEADER + (n_vectors + pad) * row
        return parts
    parts["codes"] = chunks * tch_npy_header("<i8", (n_vectors,)) + n_vectors * 8
    parts["residuals"] = chunks * tch_npy_header("<u1", (n_vectors, row)) + n_vectors * row
    parts["second copy"] = 2 * NUMPY_HEADER + (n_vectors + pad) * (8 + row)
    parts["small files"] += 2 * id_map_pickle_bytes(n_docs)  # the map and its reverse
    return parts
