"""Late chunking as vLLM 0.33.0's token-embedding head does it: one row per chunk of tokens.

A ``token_embed`` request may ask for late chunking (``PoolingParams.late_chunking_params.
chunk_size``): the whole prompt is embedded in context, then the head mean-pools every
``chunk_size`` consecutive token rows into one row, the last chunk possibly partial — ⌈n /
chunk⌉ rows instead of n — accumulating in float32 (``_mean_pool_chunks``,
vllm/model_executor/layers/pooler/tokwise/heads.py). The means are cast to the head dtype (or,
without one, back to the hidden states' dtype), then the projector, the Matryoshka slice and
the normalisation run on the chunk rows. Pooling itself still holds every row until the
prompt finishes: a 32,768-token document at chunk 512 delivers 64 rows while AllPool's chunk
cache held all 32,768.

:func:`late_chunk_rows` is the row rule, :func:`late_chunk_pool` the arithmetic (bit for bit
vLLM's), :func:`late_chunk_tensors` the tensors it allocates, in order (what the simulator's
ledger counts: ``tokpool.sim.vllm_rules.classifier.head_tensors``).

Example:
    >>> tp.late_interaction.late_chunk_rows(32_768, 512)
    64
    >>> h = torch.arange(10.0).repeat(2, 1).T            # [10, 2]: row i is (i, i)
    >>> tp.late_interaction.late_chunk_pool(h, 4)         # chunks 0-3, 4-7, 8-9
    tensor([[1.5000, 1.5000],
            [5.5000, 5.5000],
            [8.5000, 8.5000]])
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from .._args import whole

__all__ = ["LATE_CHUNK_DTYPE", "MAX_CHUNK_SIZE", "late_chunk_pool", "late_chunk_rows",
           "late_chunk_stages", "late_chunk_tensors"]

#: vLLM's bound: ``LateChunkingParams.verify`` takes ``0 < chunk_size < 2**63``.
MAX_CHUNK_SIZE = 2**63 - 1
#: What the chunk means are accumulated and returned in (``mean(dtype=torch.float32)``).
LATE_CHUNK_DTYPE = torch.float32


def late_chunk_rows(num_tokens: int, chunk_size: int) -> int:
    """Rows a late-chunked request delivers: ⌈num_tokens / chunk_size⌉ (one per chunk, the
    last possibly partial; a prompt shorter than a chunk is one row).

    Args:
        num_tokens: the prompt's token rows (>= 1).
        chunk_size: tokens per chunk (>= 1).

    Raises:
        TypeError, ValueError: not whole numbers >= 1.

    Example:
        >>> rows = tp.late_interaction.late_chunk_rows
        >>> rows(1000, 512), rows(1024, 512), rows(3, 512)
        (2, 2, 1)
    """
    n = whole("num_tokens", num_tokens, minimum=1)
    c = whole("chunk_size", chunk_size, minimum=1, maximum=MAX_CHUNK_SIZE)
    return -(-n // c)


def late_chunk_pool(hidden: Tensor, chunk_size: int) -> Tensor:
    """Mean-pool every ``chunk_size`` rows of ``hidden`` in float32, as vLLM's head does before
    its cast, projector and normalisation (``_mean_pool_chunks``): bit for bit.

    Args:
        hidden: ``[n, H]`` token rows of one request (n >= 1, a floating dtype).
        chunk_size: tokens per chunk (>= 1; larger than n: one chunk of all n).

    Returns:
        ``[ceil(n / chunk_size), H]`` float32: the full chunks' means, then the partial last
        chunk's (``torch.cat`` of the two when there is a remainder).

    Raises:
        TypeError: ``hidden`` is not a floating tensor; ``chunk_size`` not a whole number.
        ValueError: ``hidden`` is not 2-D or has no rows; ``chunk_size`` < 1.

    Example:
        >>> x = torch.tensor([[1.0], [3.0], [10.0]], dtype=torch.bfloat16)
        >>> tp.late_interaction.late_chunk_pool(x, 2)
        tensor([[ 2.],
                [10.]])
    """
    if not isinstance(hidden, Tensor):
        raise TypeError(f"hidden must be a torch.Tensor [n, H], got {type(hidden).__name__}")
    if hidden.ndim != 2 or hidden.shape[0] == 0:
        raise ValueError(f"hidden must be [n, H] with n >= 1 (one request's token rows), got "
                         f"shape {tuple(hidden.shape)}")
    if not hidden.dtype.is_floating_point:
        raise TypeError(f"hidden must be a floating tensor (hidden states), got {hidden.dtype}")
    c = whole("chunk_size", chunk_size, minimum=1, maximum=MAX_CHUNK_SIZE)
    *_, (means, _) = late_chunk_stages(hidden, c)
    return means


def late_chunk_stages(hidden: Tensor, chunk_size: int) -> Iterator[tuple[Tensor, bool]]:
    """``late_chunk_pool``'s tensors as they are made, ``(tensor, transient)``, the order of
    ``late_chunk_tensors`` (the simulator's tensor backend measures memory after each); the
    last is the result. ``hidden`` and ``chunk_size`` are not checked here."""
    n = int(hidden.shape[0])
    c = min(chunk_size, n)  # one chunk of everything when the prompt is shorter
    full, rest = divmod(n, c)
    chunks = hidden[: full * c].reshape(full, c, hidden.shape[-1])  # [full, c, H] view
    means = chunks.mean(dim=1, dtype=LATE_CHUNK_DTYPE)  # [full, H] float32
    yield means, bool(rest)
    if rest:
        tail = hidden[full * c:].mean(dim=0, keepdim=True, dtype=LATE_CHUNK_DTYPE)  # [1, H]
        yield tail, True
        yield torch.cat([means, tail]), False  # [full + 1, H] float32


def late_chunk_tensors(num_tokens: int, width: int, chunk_size: int
                       ) -> list[tuple[int, int, bool]]:
    """The float32 tensors ``late_chunk_pool`` allocates for ``num_tokens`` rows, in order, as
    ``(rows, columns, transient)``: the full chunks' means ``[full, width]``, and with a
    remainder the partial mean ``[1, width]`` and their ``cat`` ``[full + 1, width]`` — the
    two inputs of the cat die once it exists (``transient``); the last tensor is the means
    the head goes on with (alive until the head returns).

    Example:
        >>> tp.late_interaction.late_chunk_tensors(1000, 8, 512)
        [(1, 8, True), (1, 8, True), (2, 8, False)]
        >>> tp.late_interaction.late_chunk_tensors(1024, 8, 512)
        [(2, 8, False)]
    """
    n = whole("num_tokens", num_tokens, minimum=1)
    c = min(whole("chunk_size", chunk_size, minimum=1, maximum=MAX_CHUNK_SIZE), n)
    full, rest = divmod(n, c)
    if not rest:
        return [(full, width, False)]
    return [(full, width, True), (1, width, True), (full + 1, width, False)]
