"""Watch a MaxSim function's tensors: the mini-batches it forms and the bytes it holds.

``AllocWatch`` is a ``TorchDispatchMode``: every op's output storage that did not exist before
(the inputs are excluded) is counted from its creation until its last tensor is collected, so
``peaks`` is, per mini-batch (a batch ends at its ``sum``), the most bytes the function held;
``batches`` are read from each ``bmm``'s operands (``[B, max_q, D]`` @ ``[B, D, max_d]``).
Used on vLLM's ``compute_maxsim_score_batched`` (parity) and on ``tp.maxsim_batched``.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class AllocWatch(TorchDispatchMode):
    def __init__(self, inputs):
        super().__init__()
        self._inputs = {t.untyped_storage().data_ptr() for t in inputs}
        self._live: dict[int, list[int]] = {}  # storage address -> [bytes, tensors alive]
        self.alive = 0
        self.peaks: list[int] = []
        self.batches: list[tuple[int, int, int]] = []  # (pairs, max_q, max_d)
        self._peak = 0

    def _drop(self, key: int) -> None:
        rec = self._live.get(key)
        if rec is not None:
            rec[1] -= 1
            if rec[1] == 0:
                self.alive -= rec[0]
                del self._live[key]

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
            rec = self._live.get(key)
            if rec is None:
                rec = self._live[key] = [storage.nbytes(), 0]
                self.alive += rec[0]
                self._peak = max(self._peak, self.alive)
            rec[1] += 1
            weakref.finalize(t, self._drop, key)
        if func is torch.ops.aten.sum.dim_IntList:  # the last op of a mini-batch
            self.peaks.append(self._peak)
            self._peak = self.alive
        return out
