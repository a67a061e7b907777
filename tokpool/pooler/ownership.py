"""Who owns which bytes: storage identity, owned vs view vs stranded bytes.

A pooled output can be a *view* into the engine's hidden-state buffer (zero bytes of its own,
wrong as soon as the buffer is reused) or *own* its storage (a clone, a concat, a preallocated
buffer). Memory accounting counts unique storages, so two views of one clone count once.

Gotcha (symptom, cause, wrong, right):
    Symptom: a delivered per-token embedding holds the next step's numbers.
    Cause: the output is a view of a buffer the next step overwrites before the host copy reads it.
    Wrong: ``out = hidden[start:end]`` kept across a step.
    Right: ``out = hidden[start:end].clone()`` (or copy it out before the buffer is reused).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from torch import Tensor


def _storage(t: Tensor, name: str = "tensor"):
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__} ({t!r:.60})")
    return t.untyped_storage()


def storage_key(t: Tensor) -> tuple[str, int]:
    """Identity of the storage behind ``t``: ``(device, data_ptr)``."""
    return (str(t.device), _storage(t).data_ptr())


def storage_nbytes(t: Tensor) -> int:
    """Bytes of the whole storage behind ``t`` (not just the part ``t`` addresses)."""
    return int(_storage(t).nbytes())


def tensor_nbytes(t: Tensor) -> int:
    """Bytes ``t`` itself addresses: ``numel * element_size``."""
    return t.numel() * t.element_size()


def shares_storage(a: Tensor, b: Tensor) -> bool:
    """True when ``a`` and ``b`` are backed by the same storage (one is a view of the other).

    Empty storages never count as shared: they hold no bytes to overwrite.
    """
    if _storage(a, "a").nbytes() == 0 or _storage(b, "b").nbytes() == 0:
        return False
    return storage_key(a) == storage_key(b)


def _unique(tensors: Iterable[Tensor | None], name: str = "tensors"
            ) -> dict[tuple[str, int], Tensor]:
    if not isinstance(tensors, Iterable):
        raise TypeError(f"{name} must be an iterable of tensors (or None), got "
                        f"{type(tensors).__name__} ({tensors!r:.60})")
    seen: dict[tuple[str, int], Tensor] = {}
    for i, t in enumerate(tensors):
        if t is None or _storage(t, f"{name}[{i}]").nbytes() == 0:
            continue
        seen.setdefault(storage_key(t), t)
    return seen


def owned_bytes(
    tensors: Iterable[Tensor | None], *, exclude: Iterable[Tensor] = ()
) -> int:
    """Bytes of the unique storages that ``tensors`` keep alive.

    Args:
        tensors: tensors (``None`` entries are skipped); views of one storage count once.
        exclude: tensors whose storages are not counted (e.g. the engine's persistent
            hidden-state buffer, which pooling does not own).
    """
    excluded = set(_unique(exclude, "exclude"))
    return sum(
        storage_nbytes(t) for key, t in _unique(tensors).items() if key not in excluded
    )


def stranded_bytes(tensors: Iterable[Tensor | None]) -> int:
    """Bytes kept alive but addressed by none of ``tensors``.

    A small view of a large storage pins the whole storage: the difference is stranded.
    """
    addressed: dict[tuple[str, int], set[tuple[int, int]]] = {}
    storages = _unique(tensors)
    for t in tensors:
        if t is None or _storage(t).nbytes() == 0:
            continue
        start = t.storage_offset() * t.element_size()
        addressed.setdefault(storage_key(t), set()).add((start, start + _extent(t)))
    stranded = 0
    for key, t in storages.items():
        covered = _union_length(sorted(addressed.get(key, ())))
        stranded += storage_nbytes(t) - covered
    return stranded


def _extent(t: Tensor) -> int:
    """Bytes spanned by ``t`` from its first element (contiguous or strided)."""
    if t.numel() == 0:
        return 0
    span = 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(),
                                                                    strict=True))
    return span * t.element_size()


def _union_length(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, -1
    for lo, hi in intervals:
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


@dataclass(frozen=True)
class OwnershipReport:
    """How the bytes of some outputs split, relative to a buffer that will be reused."""

    view_bytes: int
    owned_bytes: int
    stranded_bytes: int
    n_views: int
    n_owned: int


def ownership_report(
    outputs: Iterable[Tensor | None], buffer: Tensor | None = None
) -> OwnershipReport:
    """Split ``outputs`` into views of ``buffer`` and tensors that own their storage."""
    outs = [t for t in outputs if t is not None]
    views = [t for t in outs if buffer is not None and shares_storage(t, buffer)]
    owned = [t for t in outs if not (buffer is not None and shares_storage(t, buffer))]
    return OwnershipReport(
        view_bytes=sum(tensor_nbytes(t) for t in views),
        owned_bytes=owned_bytes(owned),
        stranded_bytes=stranded_bytes(owned),
        n_views=len(views),
        n_owned=len(owned),
    )
