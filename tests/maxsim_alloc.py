"""Watch a MaxSim function's tensors: the mini-batches it forms and the bytes it holds.

``AllocWatch`` is a ``TorchDispatchMode``: every op's output storage that did not exist before
(the inputs are excluded) is counted from its creation until its last tensor is collected, so
``peaks`` is, per mini-batch (a batch ends at its ``sum``), the most bytes the function held;
``batches`` are read from each ``bmm``'s operands (``[B, max_q, D]`` @ ``[B, D, max_d]``).
Used on vLLM's ``compute_maxsim_score_batched`` (parity) and on
``tp.late_interaction.maxsim_batched``.
``FloatStorages`` counts the floating-point storages only (JinaForRanking's and a projector
head's bytes, tests/test_parity_late_interaction.py).
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveStorages(TorchDispatchMode):
    """Storages made under the mode, counted from their creation until their last tensor is
    collected: ``alive`` bytes now and ``peak`` since it was last reset. Subclasses say which
    outputs count (``_track``)."""

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, list[int]] = {}  # storage address -> [bytes counted, tensors]
        self.alive = self.peak = 0

    def _drop(self, key: int) -> None:
        rec = self._live.get(key)
        if rec is not None:
            rec[1] -= 1
            if rec[1] == 0:
                self.alive -= rec[0]
                del self._live[key]

    def _track(self, t: torch.Tensor, counted: bool = True) -> None:
        """One more tensor on ``t``'s storage; a new storage adds its bytes when ``counted``
        (its views later add nothing either way)."""
        storage = t.untyped_storage()
        key = storage.data_ptr()
        rec = self._live.get(key)
        if rec is None:
            rec = self._live[key] = [storage.nbytes() if counted else 0, 0]
            self.alive += rec[0]
            self.peak = max(self.peak, self.alive)
        rec[1] += 1
        weakref.finalize(t, self._drop, key)


class AllocWatch(LiveStorages):
    def __init__(self, inputs):
        super().__init__()
        self._inputs = {t.untyped_storage().data_ptr() for t in inputs}
        self.peaks: list[int] = []
        self.batches: list[tuple[int, int, int]] = []  # (pairs, max_q, max_d)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.bmm.default:
            (b, mq, _), (_, _, md) = args[0].shape, args[1].shape
            self.batches.append((int(b), int(mq), int(md)))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key in self._inputs or (key == 0 and storage.nbytes() == 0):
                continue
            self._track(t)
        if func is torch.ops.aten.sum.dim_IntList:  # the last op of a mini-batch
            self.peaks.append(self.peak)
            self.peak = self.alive
        return out


class FloatStorages(LiveStorages):
    """The floating-point storages only; ``skip``: storages not to count (the step's hidden
    states, which the engine owns); ``skip_shape``: leave out storages first made as a tensor
    whose last dim is this (a normaliser's ``[rows, 1]`` norms), views of them too."""

    def __init__(self) -> None:
        super().__init__()
        self.skip: set[int] = set()
        self.skip_shape: int | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                continue
            storage = t.untyped_storage()
            if storage.data_ptr() in self.skip or storage.nbytes() == 0:
                continue
            left_out = self.skip_shape is not None and t.ndim and t.shape[-1] == self.skip_shape
            self._track(t, counted=not left_out)
        return out
