"""MaxSim as vLLM 0.33.0 computes it, and what a rerank costs the worker before it runs.

Late interaction (ColBERT-style) scores a query against a document by their token embeddings:
for each query token the best dot product with any document token, summed over the query
tokens. vLLM computes it in two places, and tokpool follows both bit for bit:

- the API server, one pair at a time (``vllm/entrypoints/pooling/scoring/utils.py``
  ``compute_maxsim_score``): :func:`maxsim`;
- the worker, for the documents that finish in one step (``vllm/v1/pool/late_interaction.py``
  ``compute_maxsim_score_batched``, called by ``LateInteractionRunner._score``): mini-batches
  of at most ``max_batch_size`` pairs whose ``[B, max_q, max_d]`` float32 score matrix stays
  under ``max_score_matrix_elements`` — a single pair is never split, so one 32K × 32K pair is
  a 4 GiB matrix: :func:`maxsim_batched`.

Where the batches fall is decided once, by :func:`maxsim_batches`; :func:`maxsim_batched` runs
them and :func:`maxsim_plan` prices them (one row per mini-batch: the padded ``q_batch`` /
``d_batch``, the masks, the score matrix and the peak of everything the function holds), so
the plan and the arithmetic cannot disagree about a batch. On CUDA with one shared query the
worker uses a Triton flash-MaxSim kernel instead (``vllm/v1/pool/flash_maxsim``: fp16
operands, no score matrix); ``maxsim_plan(path="flash")`` sizes its scratch, labelled an
estimate.

Example:
    >>> q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])            # [Lq=2, D=2]
    >>> d = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.0, 2.0]])  # [Ld=3, D=2]
    >>> tp.late_interaction.maxsim(q, d)                                         # 1.0 + 2.0
    tensor(3.)
    >>> [float(s) for s in tp.late_interaction.maxsim_batched([q, q[:1]], [d, d[:1]])]
    [3.0, 0.5]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd
import torch
from torch import Tensor

from .._args import choice, each, items, whole
from ..guard import ensure_fits
from ..pooler.heads import dtype_size, resolve_dtype

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_SCORE_MATRIX_ELEMENTS",
    "MaxSimBatch",
    "maxsim",
    "maxsim_batched",
    "maxsim_batches",
    "maxsim_plan",
]

#: ``compute_maxsim_score_batched``'s defaults (vLLM 0.33.0; ``LateInteractionRunner`` passes
#: none, so the worker always uses these).
MAX_BATCH_SIZE = 64
MAX_SCORE_MATRIX_ELEMENTS = 64_000_000

_F32 = 4  # bytes of a float32: the padded batches, the score matrix and the scores
_BOOL = 1  # bytes of a bool: the masks
_F16 = 2  # bytes of a float16: the flash kernel's operands
_I32 = 4  # bytes of an int32: the flash kernel's offsets and lengths


def maxsim(q: Tensor, d: Tensor) -> Tensor:
    """One query against one document, as vLLM's API server scores a late-interaction pair
    (``compute_maxsim_score``): ``sum_i max_j <q_i, d_j>`` in float32.

    Args:
        q: ``[Lq, D]`` query token embeddings (any real dtype; cast to float32).
        d: ``[Ld, D]`` document token embeddings, ``Ld >= 1``, same ``D`` and device.

    Returns:
        A 0-d float32 tensor, bit for bit vLLM's (``float32`` matmul, max over the document
        tokens, sum over the query tokens). An empty query scores 0.

    Raises:
        TypeError: ``q`` or ``d`` is not a tensor.
        ValueError: not 2-D, different widths or devices, or an empty document (vLLM's
            ``amax`` fails there with an IndexError).

    Example:
        >>> maxsim(torch.ones(3, 4), torch.full((5, 4), 0.5))  # 3 query tokens x 2.0
        tensor(6.)
    """
    _check_pair("q", q, "d", d)
    if d.shape[0] == 0:
        raise ValueError(f"d has no tokens (shape {tuple(d.shape)}): MaxSim takes the best "
                         "document token for each query token, so a document needs at least "
                         "one (vLLM's compute_maxsim_score fails in amax here)")
    token_scores = torch.matmul(q.float(), d.float().T)  # [Lq, Ld] float32
    return token_scores.amax(dim=-1).sum()  # best doc token per query token, summed: []


@dataclass(frozen=True)
class MaxSimBatch:
    """One mini-batch of ``compute_maxsim_score_batched``: pairs ``[start, end)``, padded to
    the longest query (``max_q``) and document (``max_d``) among them."""

    start: int
    end: int
    max_q: int
    max_d: int

    @property
    def pairs(self) -> int:
        return self.end - self.start


def maxsim_batches(q_lens: Sequence[int], d_lens: Sequence[int], *,
                   max_batch_size: int = MAX_BATCH_SIZE,
                   max_score_matrix_elements: int = MAX_SCORE_MATRIX_ELEMENTS,
                   ) -> list[MaxSimBatch]:
    """Where vLLM's worker cuts the pairs into mini-batches: the one rule that
    :func:`maxsim_batched` runs and :func:`maxsim_plan` prices.

    ``compute_maxsim_score_batched`` takes up to ``max_batch_size`` pairs from ``start``, then
    drops the last pair while more than one remains and ``pairs * max_q * max_d`` exceeds
    ``max_score_matrix_elements`` (the maxima recomputed over the pairs kept). The padded
    maxima only grow as pairs are added, so this takes the longest run that fits, or one pair.

    Args:
        q_lens: query token counts, one per pair.
        d_lens: document token counts, one per pair (same length as ``q_lens``).
        max_batch_size: at most this many pairs per mini-batch (>= 1).
        max_score_matrix_elements: the cap on ``pairs * max_q * max_d`` (>= 1); a single pair
            over it still forms its own mini-batch.

    Returns:
        The mini-batches in order, covering every pair once (empty for no pairs).

    Raises:
        TypeError: a count or limit that is not a whole number.
        ValueError: negative counts, lists of different lengths, a limit below 1.

    Example:
        >>> [(b.start, b.end, b.max_q, b.max_d)
        ...  for b in tp.late_interaction.maxsim_batches([8, 8, 8], [100, 100, 400],
        ...                                               max_score_matrix_elements=2_000)]
        [(0, 2, 8, 100), (2, 3, 8, 400)]
    """
    q_lens = each("q_lens", items("q_lens", q_lens, empty=True),
                  lambda n, v: whole(n, v, minimum=0))
    d_lens = each("d_lens", items("d_lens", d_lens, empty=True),
                  lambda n, v: whole(n, v, minimum=0))
    if len(q_lens) != len(d_lens):
        raise ValueError(f"q_lens and d_lens must have the same length (one query and one "
                         f"document per pair), got {len(q_lens)} and {len(d_lens)}")
    max_batch_size, max_score_matrix_elements = _limits(max_batch_size,
                                                        max_score_matrix_elements)
    return _batches(q_lens, d_lens, max_batch_size, max_score_matrix_elements)


def _limits(max_batch_size: Any, max_score_matrix_elements: Any) -> tuple[int, int]:
    # vLLM's words first ("... must be greater than 0"), in vLLM's order
    n = whole("max_batch_size", max_batch_size)
    if n <= 0:
        raise ValueError(f"max_batch_size must be greater than 0, got {n} (pairs per "
                         "mini-batch; vLLM's default is 64)")
    m = whole("max_score_matrix_elements", max_score_matrix_elements)
    if m <= 0:
        raise ValueError(f"max_score_matrix_elements must be greater than 0, got {m} (the "
                         "cap on pairs x max_q x max_d; vLLM's default is 64,000,000)")
    return n, m


def _batches(q_lens: list[int], d_lens: list[int], max_batch_size: int,
             max_score_matrix_elements: int) -> list[MaxSimBatch]:
    out: list[MaxSimBatch] = []
    start, n = 0, len(q_lens)
    while start < n:
        window = min(start + max_batch_size, n) - start
        # prefix maxima: what vLLM's shrinking loop recomputes for each candidate end
        best = (1, q_lens[start], d_lens[start])
        mq = md = 0
        for k in range(1, window + 1):
            mq = max(mq, q_lens[start + k - 1])
            md = max(md, d_lens[start + k - 1])
            if k == 1 or k * mq * md <= max_score_matrix_elements:
                best = (k, mq, md)
            else:
                break  # pairs * max_q * max_d only grows with k
        k, mq, md = best
        out.append(MaxSimBatch(start, start + k, mq, md))
        start += k
    return out


def maxsim_batched(q_embs: Sequence[Tensor], d_embs: Sequence[Tensor], *,
                   max_batch_size: int = MAX_BATCH_SIZE,
                   max_score_matrix_elements: int = MAX_SCORE_MATRIX_ELEMENTS) -> list[Tensor]:
    """MaxSim for many (query, document) pairs, as vLLM's worker scores the documents that
    finish in one step (``compute_maxsim_score_batched``): bit for bit on the CPU.

    Each mini-batch (:func:`maxsim_batches`) copies its pairs into zero-padded float32
    ``q_batch [B, max_q, D]`` / ``d_batch [B, max_d, D]`` with boolean masks, takes
    ``bmm(q_batch, d_batchᵀ)`` (the ``[B, max_q, max_d]`` score matrix), sets padded document
    columns to ``-inf``, takes the max per query token, zeroes padded query rows and sums.

    Args:
        q_embs: ``B`` query embeddings, each ``[Lq_i, D]`` (a list, tuple or ``[B, Lq, D]``
            tensor).
        d_embs: ``B`` document embeddings, each ``[Ld_i, D]`` with the same ``D`` and device
            as its query.
        max_batch_size: pairs per mini-batch, at most (vLLM: 64).
        max_score_matrix_elements: cap on a mini-batch's ``B * max_q * max_d`` (vLLM:
            64,000,000); a single pair over it is scored alone, never split.

    Returns:
        ``B`` 0-d float32 tensors (views of each mini-batch's ``[B]`` scores, as vLLM's
        ``unbind``). No pairs: ``[]`` (vLLM returns before looking at the limits). An empty
        document batched with a non-empty one scores ``-inf``, as in vLLM. The same
        arithmetic, not the same lifetimes: each mini-batch's buffers go when it is done,
        where vLLM's loop keeps them until the next batch's replace them
        (:func:`maxsim_plan` prices vLLM's).

    Raises:
        ValueError: vLLM's refusals, in vLLM's order and beginning with its words: lists of
            different lengths, a limit below 1, a tensor that is not 2-D, a pair whose widths
            or devices differ; then tokpool's: a mini-batch whose documents are all empty
            (vLLM's ``amax`` fails there), and a mini-batch too big for the memory guard
            (``TOKPOOL_MEMORY_LIMIT``).
        TypeError: not sequences, an item that is not a tensor, a limit that is not a whole
            number (vLLM fails with raw errors there).

    Example:
        >>> q = [torch.ones(2, 4), torch.ones(3, 4)]
        >>> d = [torch.ones(5, 4), -torch.ones(1, 4)]
        >>> tp.late_interaction.maxsim_batched(q, d)
        [tensor(8.), tensor(-12.)]
    """
    q_embs = items("q_embs", q_embs, empty=True, what="a sequence of [Lq, D] tensors")
    d_embs = items("d_embs", d_embs, empty=True, what="a sequence of [Ld, D] tensors")
    if len(q_embs) != len(d_embs):
        raise ValueError(f"q_embs and d_embs must have the same length (one query per "
                         f"document), got {len(q_embs)} and {len(d_embs)}")
    if not q_embs:
        return []
    max_batch_size, max_score_matrix_elements = _limits(max_batch_size,
                                                        max_score_matrix_elements)
    for i, (q, d) in enumerate(zip(q_embs, d_embs, strict=True)):
        _check_pair(f"q_embs[{i}]", q, f"d_embs[{i}]", d)
    batches = _batches([int(q.shape[0]) for q in q_embs], [int(d.shape[0]) for d in d_embs],
                       max_batch_size, max_score_matrix_elements)
    _check_runnable(batches, q_embs)
    scores: list[Tensor] = []
    for b in batches:
        scores.extend(_score_batch(q_embs[b.start:b.end], d_embs[b.start:b.end], b))
    return scores


def _check_pair(qn: str, q: Any, dn: str, d: Any) -> None:
    for name, t in ((qn, q), (dn, d)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of token embeddings [tokens, dim], "
                            f"got {type(t).__name__}; convert it with torch.as_tensor(...)")
    if q.ndim != 2 or d.ndim != 2:
        raise ValueError(f"Each embedding tensor must be 2-D ([tokens, dim]): {qn} has shape "
                         f"{tuple(q.shape)}, {dn} has shape {tuple(d.shape)}")
    if q.shape[1] != d.shape[1]:
        raise ValueError(f"Query and document embeddings must have same dim: {qn} is "
                         f"{q.shape[1]} wide, {dn} is {d.shape[1]}")
    if q.device != d.device:
        raise ValueError(f"Query and document embeddings must be on same device: {qn} is on "
                         f"{q.device}, {dn} on {d.device}; move one with .to(...)")
    for name, t in ((qn, q), (dn, d)):
        if t.dtype.is_complex:
            raise TypeError(f"{name} is {t.dtype}: MaxSim scores real embeddings (a float32 "
                            "cast would drop the imaginary part)")


def _check_runnable(batches: list[MaxSimBatch], q_embs: list[Tensor]) -> None:
    for b in batches:
        if b.max_d == 0:
            raise ValueError(f"d_embs[{b.start}:{b.end}] form one mini-batch and have no "
                             "tokens at all: MaxSim needs a document token to take the best "
                             "of (vLLM's amax fails on this batch); drop the empty documents")
    device = q_embs[0].device
    dim = int(q_embs[0].shape[1])
    peak = max(_reference_peaks(batches, dim, converts=True, on_cpu=device.type == "cpu"))
    ensure_fits(peak, what=f"MaxSim over {len(q_embs):,} pairs (the largest mini-batch's "
                f"padded float32 batches and score matrix)", cheaper="a smaller "
                "max_score_matrix_elements cannot split a single pair; shorten the longest "
                "query or document, or size it first with tp.late_interaction.maxsim_plan",
                device=device if device.type == "cuda" else None)


def _score_batch(batch_q: list[Tensor], batch_d: list[Tensor], b: MaxSimBatch) -> list[Tensor]:
    device = batch_q[0].device
    dim = int(batch_q[0].shape[1])
    q_batch = torch.zeros((b.pairs, b.max_q, dim), dtype=torch.float32, device=device)
    d_batch = torch.zeros((b.pairs, b.max_d, dim), dtype=torch.float32, device=device)
    q_mask = torch.zeros((b.pairs, b.max_q), dtype=torch.bool, device=device)
    d_mask = torch.zeros((b.pairs, b.max_d), dtype=torch.bool, device=device)
    for i, (q, d) in enumerate(zip(batch_q, batch_d, strict=True)):
        q_batch[i, : q.shape[0]] = q.to(device=device, dtype=torch.float32)
        d_batch[i, : d.shape[0]] = d.to(device=device, dtype=torch.float32)
        q_mask[i, : q.shape[0]] = True
        d_mask[i, : d.shape[0]] = True
    token_scores = torch.bmm(q_batch, d_batch.transpose(1, 2))  # [B, max_q, max_d]
    token_scores.masked_fill_(~d_mask.unsqueeze(1), float("-inf"))  # padded doc columns
    best = token_scores.amax(dim=-1)  # [B, max_q]: best doc token per query token
    best.masked_fill_(~q_mask, 0.0)  # padded query rows add nothing
    return list(best.sum(dim=-1).unbind(0))  # B scores, views of one [B] tensor


# --- what a rerank costs the worker ---------------------------------------------------------


def _reference_peaks(batches: list[MaxSimBatch], dim: int, *, converts: bool,
                     on_cpu: bool) -> list[int]:
    """The most bytes ``compute_maxsim_score_batched`` holds while each mini-batch runs.

    Read from its code: each buffer is bound to a local name, so the previous mini-batch's
    buffers live until the new one of the same name exists (``q_batch = torch.zeros(...)``
    allocates before it releases); the scores of every mini-batch so far stay alive (the
    returned list holds views of them); ``.to(float32)`` makes a temporary per copied tensor
    when the embeddings are not float32 (``converts``); ``~mask`` makes one per
    ``masked_fill_``."""
    peaks: list[int] = []
    alive = dict.fromkeys(("q", "d", "qm", "dm", "s", "best"), 0)  # bytes bound to each name
    kept = 0  # the scores of the batches so far
    for b in batches:
        new = {"q": b.pairs * b.max_q * dim * _F32, "d": b.pairs * b.max_d * dim * _F32,
               "qm": b.pairs * b.max_q * _BOOL, "dm": b.pairs * b.max_d * _BOOL,
               "s": b.pairs * b.max_q * b.max_d * _F32, "best": b.pairs * b.max_q * _F32}
        peak = max(_rebind(alive, name, new[name], kept) for name in ("q", "d", "qm", "dm"))
        cast = max(b.max_q, b.max_d) * dim * _F32 if converts else 0
        # the copy loop: one cast temporary at a time; on a CPU, ``mask[i, :n] = True`` lifts
        # the ``True`` into a 1-byte tensor (on CUDA that byte is host memory)
        peak = max(peak, sum(alive.values()) + max(cast, _BOOL if on_cpu else 0) + kept,
                   _rebind(alive, "s", new["s"], kept))
        peak = max(peak, sum(alive.values()) + new["dm"] + kept,  # ~d_mask.unsqueeze(1)
                   _rebind(alive, "best", new["best"], kept))
        peak = max(peak, sum(alive.values()) + new["qm"] + kept)  # ~q_mask
        kept += b.pairs * _F32  # the [B] scores, held by the returned views
        peaks.append(max(peak, sum(alive.values()) + kept))
    return peaks


def _rebind(alive: dict[str, int], name: str, nbytes: int, kept: int) -> int:
    """``name = <new tensor>``: the new one exists while the old one still does; returns the
    bytes held at that moment and leaves the new size bound."""
    top = sum(alive.values()) + nbytes + kept
    alive[name] = nbytes
    return top


def maxsim_plan(q_lens: Sequence[int], d_lens: Sequence[int], dim: int, *,
                max_batch_size: int = MAX_BATCH_SIZE,
                max_score_matrix_elements: int = MAX_SCORE_MATRIX_ELEMENTS,
                dtype: torch.dtype | str = torch.float32, device: str = "cpu",
                path: Literal["reference", "flash"] = "reference") -> pd.DataFrame:
    """What scoring these pairs costs vLLM's worker, one row per mini-batch, before anyone
    runs it.

    ``path="reference"`` is ``compute_maxsim_score_batched`` (CPU, several distinct queries in
    one step, or the flash kernel off): its mini-batches are :func:`maxsim_batches`' — the
    ones :func:`maxsim_batched` runs — and its bytes are read from its code (exact for the
    tensors it creates; kernels' internal workspace is not counted). ``path="flash"`` is the
    Triton flash-MaxSim kernel vLLM uses on CUDA when every document of the step shares one
    query (``LateInteractionRunner._score_flash_shared_query``): one launch, no score
    matrix, no padding; its bytes are an ESTIMATE (``estimate`` is True): the documents
    packed by one ``torch.cat`` in their dtype, fp16 copies of the query and the packed
    documents unless already fp16, the query padded to a power-of-two width (>= 16), int32
    offsets and lengths, the float32 scores; not Triton's autotuning runs on the first launch
    of a shape bucket, nor the allocator's rounding.

    Args:
        q_lens: query token counts, one per pair (for ``"flash"``: one shared query, all
            equal).
        d_lens: document token counts, one per pair.
        dim: the embedding width ``D`` (>= 1).
        max_batch_size: as :func:`maxsim_batched` (vLLM: 64).
        max_score_matrix_elements: as :func:`maxsim_batched` (vLLM: 64,000,000).
        dtype: the dtype of the embeddings the worker holds (the head's output dtype:
            float32 by default in vLLM); not float32 adds the reference path's cast
            temporaries and changes the flash path's packed bytes.
        device: ``"cpu"`` or ``"cuda"`` (``"flash"`` needs ``"cuda"``, as vLLM).
        path: ``"reference"`` or ``"flash"``.

    Returns:
        A DataFrame, one row per mini-batch (``"flash"``: one row), columns ``start``,
        ``end``, ``pairs``, ``max_q``, ``max_d``, ``q_batch_bytes``, ``d_batch_bytes``,
        ``mask_bytes`` (both masks), ``score_matrix_bytes``, ``cast_bytes`` (the largest
        float32 cast temporary), ``score_bytes`` (its ``[B]`` float32 scores),
        ``peak_scratch_bytes`` (the most bytes the function holds while the batch runs:
        the previous batch's buffers until replaced, and every score so far, included),
        ``estimate``. ``attrs``: ``path``, ``estimate``, ``dim``, ``dtype``, ``device``,
        ``peak_scratch_bytes`` (the largest of the rows).

    Raises:
        TypeError: counts or limits that are not whole numbers, a dtype that is not one.
        ValueError: as :func:`maxsim_batches`; ``"flash"`` on a CPU or with different query
            lengths.

    Example:
        >>> plan = maxsim_plan([32] * 100, [512] * 100, 128)  # 1 query x 100 documents
        >>> plan[["start", "end", "max_q", "max_d", "score_matrix_bytes"]]
           start  end  max_q  max_d  score_matrix_bytes
        0      0   64     32    512             4194304
        1     64  100     32    512             2359296
        >>> int(plan.attrs["peak_scratch_bytes"])
        31041792
        >>> flash = maxsim_plan([32] * 100, [512] * 100, 128, device="cuda", path="flash")
        >>> int(flash.peak_scratch_bytes[0]), bool(flash.estimate[0])
        (39330992, True)
    """
    batches = maxsim_batches(q_lens, d_lens, max_batch_size=max_batch_size,
                             max_score_matrix_elements=max_score_matrix_elements)
    dim = whole("dim", dim, minimum=1)
    if dtype is None:
        raise TypeError("dtype must be a torch.dtype or a name (the embeddings' dtype, e.g. "
                        "torch.float32 or 'bfloat16'), got None")
    dt = resolve_dtype(dtype, what="dtype")
    device = choice("device", device, ("cpu", "cuda"))
    path = choice("path", path, ("reference", "flash"))
    q_list = [int(n) for n in items("q_lens", q_lens, empty=True)]  # checked by the batches
    d_list = [int(n) for n in items("d_lens", d_lens, empty=True)]
    if path == "flash":
        rows = _flash_rows(q_list, d_list, dim, dt, device, dtype_size(dt))
    else:
        peaks = _reference_peaks(batches, dim, converts=dt != torch.float32,
                                 on_cpu=device == "cpu")
        rows = [{
            "start": b.start, "end": b.end, "pairs": b.pairs, "max_q": b.max_q,
            "max_d": b.max_d,
            "q_batch_bytes": b.pairs * b.max_q * dim * _F32,
            "d_batch_bytes": b.pairs * b.max_d * dim * _F32,
            "mask_bytes": b.pairs * (b.max_q + b.max_d) * _BOOL,
            "score_matrix_bytes": b.pairs * b.max_q * b.max_d * _F32,
            "cast_bytes": max(b.max_q, b.max_d) * dim * _F32 if dt != torch.float32 else 0,
            "score_bytes": b.pairs * _F32,
            "peak_scratch_bytes": peak, "estimate": False,
        } for b, peak in zip(batches, peaks, strict=True)]
    columns = ["start", "end", "pairs", "max_q", "max_d", "q_batch_bytes", "d_batch_bytes",
               "mask_bytes", "score_matrix_bytes", "cast_bytes", "score_bytes",
               "peak_scratch_bytes", "estimate"]
    frame = pd.DataFrame(rows, columns=columns)
    frame = frame.astype({c: "int64" for c in columns[:-1]} | {"estimate": bool})
    frame.attrs.update(path=path, estimate=path == "flash", dim=dim, dtype=str(dt),
                       device=device,
                       peak_scratch_bytes=int(frame.peak_scratch_bytes.max()) if rows else 0)
    return frame


def _flash_rows(q_lens: list[int], d_lens: list[int], dim: int, dt: torch.dtype, device: str,
                size: int) -> list[dict[str, Any]]:
    if device != "cuda":
        raise ValueError("path='flash' is vLLM's Triton kernel, used only when the query "
                         "embeddings are on CUDA (LateInteractionRunner._score); on a CPU the "
                         "worker runs the reference path: use path='reference'")
    if not q_lens:
        return []
    if len(set(q_lens)) != 1:
        raise ValueError(f"path='flash' scores one shared query against every document, but "
                         f"q_lens has {len(set(q_lens))} different lengths; several queries "
                         "in one step take the reference path (path='reference')")
    lq, n, total = q_lens[0], len(d_lens), sum(d_lens)
    d_pad = 1 << (max(dim, 16) - 1).bit_length()  # vLLM's _next_pow2(max(d, 16))
    packed = total * dim * size if n > 1 else 0  # torch.cat(docs); one doc is used as is
    d_half = total * dim * _F16 if dt != torch.float16 else 0  # D_tensor.half()
    q_half = lq * dim * _F16 if dt != torch.float16 else 0  # Q.contiguous().half()
    q_pad = lq * d_pad * _F16 if dim < d_pad else 0  # Q_pad [Lq, d_pad]
    offsets = 2 * n * _I32  # doc_offsets and doc_lengths
    scores = n * _F32
    return [{
        "start": 0, "end": n, "pairs": n, "max_q": lq, "max_d": max(d_lens),
        "q_batch_bytes": q_half + q_pad, "d_batch_bytes": packed + d_half, "mask_bytes": 0,
        "score_matrix_bytes": 0, "cast_bytes": 0, "score_bytes": scores,
        "peak_scratch_bytes": packed + d_half + q_half + q_pad + offsets + scores,
        "estimate": True,
    }]
