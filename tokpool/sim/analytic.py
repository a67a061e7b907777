"""Analytic mode: the engine loop with integers instead of tensors.

It replays exactly what tensor mode does (``tokpool.sim.tensor``) — the same scheduler, the same
order of pooling, selection, head and host copies, the same allocation points — but a tensor is
just a ``_Storage`` record (bytes, device or host, reference count) and a view of the hidden
buffer is a ``_View`` (which rows, written at which step). Nothing is allocated, so prompts of
millions of tokens cost only their step count. Memory is the sum of live storages; the peak is
taken right after every allocation (the same moments tensor mode measures at).

Corruption: a view read after a later step rewrote some of its rows delivers wrong data. Every
step writes rows ``0..n_step_tokens-1`` of the buffer, so a view of rows ``[a, b)`` written at
step N and read at step M has its rows ``[a, min(b, max n_k))`` stale, the max over the steps
k in (N, M]. The request is corrupted when a stale row is one that pooling delivers (all rows;
for STEP with a tag, the tag rows). Tensor mode's oracle sees the same thing by comparing data,
as long as the source tells all tokens apart (``SyntheticSource`` does within its capacity).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..heads import dtype_size
from .config import SimConfig
from .ledger import RequestRecord, StepRecord
from .scheduler import ScheduledStep, engine_steps


class _Storage:
    """A tensor's storage: ``nbytes`` on the device or the host, alive while ``refs > 0``."""

    __slots__ = ("host", "nbytes", "refs")

    def __init__(self, nbytes: int, host: bool) -> None:
        self.nbytes = nbytes
        self.host = host
        self.refs = 0


@dataclass(frozen=True)
class _View:
    """Rows ``row0..row1-1`` of the hidden buffer, written at ``step``, holding positions
    ``pos0..`` of ``request``. Owns nothing."""

    step: int
    row0: int
    row1: int
    pos0: int


Tensor = _Storage | _View


@dataclass
class _State:
    cache: list[Tensor] = field(default_factory=list)
    buffer: _Storage | None = None


class KeptRows:
    """Which positions of each prompt pooling delivers: all, none, every k-th, or listed.

    Args:
        every: STEP tag period (positions ``k-1, 2k-1, ...``), or ``None``.
        positions: per request, sorted numpy arrays of kept positions (from token ids).
        keep_all: no row selection.
    """

    def __init__(self, *, every: int | None = None,
                 positions: Sequence[np.ndarray] | None = None, keep_all: bool = False) -> None:
        self.every = every
        self.positions = positions
        self.keep_all = keep_all

    @classmethod
    def for_config(cls, config: SimConfig, source=None, n_requests: int = 0) -> KeptRows:
        tag = config.effective_step_tag_id
        if config.pooling_method != "STEP" or tag is None:
            return cls(keep_all=True)
        if source is not None:
            ids = [source.token_ids(r) for r in range(n_requests)]
            if all(i is not None for i in ids):
                return cls(positions=[np.flatnonzero(i.numpy() == tag) for i in ids])
        return cls(every=config.step_tag_every)  # synthetic prompts; None = no tags at all

    def count(self, request: int, lo: int, hi: int) -> int:
        """Kept positions in ``[lo, hi)``."""
        if hi <= lo:
            return 0
        if self.keep_all:
            return hi - lo
        if self.positions is not None:
            pos = self.positions[request]
            return int(np.searchsorted(pos, hi) - np.searchsorted(pos, lo))
        if self.every is None:
            return 0
        return hi // self.every - lo // self.every


class AnalyticEngine:
    """Runs a schedule with integer bookkeeping; see the module docstring."""

    def __init__(self, prompt_lens: Sequence[int], config: SimConfig, kept: KeptRows) -> None:
        self.lens = list(prompt_lens)
        self.cfg = config
        self.kept = kept
        c = config
        self.row_bytes = c.width * c.dtype_size  # one hidden row, bytes
        self.offload = c.policy == "offload" and c.pooling_method != "LAST"
        self.clone_finished = c.async_scheduling and c.policy != "legacy"
        self.states: dict[int, _State] = {}
        self.device_live = 0  # device bytes of live storages, right now
        self.host_live = 0  # host bytes of live storages (offload buffers, pending host outputs)
        self.peak_step = 0  # this iteration's max of device_live
        self.copy = 0  # this iteration's device bytes written by pooling
        self.d2h = 0  # this iteration's device -> host bytes
        self.delivered_bytes = 0  # host bytes of delivered outputs (kept by the user)
        self.pending: list[tuple[int, Tensor, str, int]] = []  # (request, tensor, category, bytes)
        self.corrupted: set[int] = set()
        self._written_steps: list[int] = []  # compute-step indices, in order
        self._written_rows: list[int] = []  # rows each wrote
        self.requests = [RequestRecord(r, n) for r, n in enumerate(self.lens)]

    # --- storage bookkeeping ---------------------------------------------------------------

    def _alloc(self, nbytes: int, host: bool = False) -> _Storage:
        s = _Storage(nbytes, host)
        self._hold(s)
        if not host:
            self.copy += nbytes  # every new device tensor is written in full by its op
            self.peak_step = max(self.peak_step, self.device_live)
        return s

    def _hold(self, t: Tensor | None) -> None:
        if isinstance(t, _Storage):
            if t.refs == 0:
                if t.host:
                    self.host_live += t.nbytes
                else:
                    self.device_live += t.nbytes
            t.refs += 1

    def _drop(self, t: Tensor | None) -> None:
        if isinstance(t, _Storage):
            t.refs -= 1
            if t.refs == 0:
                if t.host:
                    self.host_live -= t.nbytes
                else:
                    self.device_live -= t.nbytes

    def _stale_rows(self, view: _View, read_step: int) -> int:
        """Rows of ``view`` (from its first) rewritten by steps in (view.step, read_step]."""
        lo = bisect.bisect_right(self._written_steps, view.step)
        hi = bisect.bisect_right(self._written_steps, read_step)
        written = max(self._written_rows[lo:hi], default=0)
        return max(0, min(view.row1, written) - view.row0)

    def _check_view(self, request: int, view: _View, read_step: int) -> None:
        stale = self._stale_rows(view, read_step)
        if self.kept.count(request, view.pos0, view.pos0 + stale):
            self.corrupted.add(request)

    # --- one engine iteration --------------------------------------------------------------

    def run(self, steps: Sequence[ScheduledStep]) -> list[StepRecord]:
        rows = []
        for index, step in engine_steps(steps, async_scheduling=self.cfg.async_scheduling):
            rows.append(self._iteration(index, step))
        return rows

    def _iteration(self, index: int, step: ScheduledStep | None) -> StepRecord:
        self.copy = 0
        self.d2h = 0
        self.peak_step = self.device_live  # what the step starts with (async: pending outputs)
        head_outs: list[tuple[int, Tensor, str, int]] = []
        if step is not None:
            n_tokens = step.num_tokens
            self._written_steps.append(index)
            self._written_rows.append(n_tokens)
            for r, start, _ in step.chunks:
                rec = self.requests[r]
                rec.num_chunks += 1
                if start == 0:
                    rec.first_step = index
                    self.states[r] = _State()
            pooled = self._pool(index, step)
            head_outs = self._head(step, pooled)
            for r in step.finished:
                self.requests[r].finish_step = index
                del self.states[r]
        # Host copies: this step's outputs (sync) or the previous step's (async, read after
        # this step wrote the buffer).
        if self.cfg.async_scheduling:
            to_copy, self.pending = self.pending, head_outs
        else:
            to_copy = head_outs
        for r, t, _, nbytes in to_copy:
            if isinstance(t, _View):
                self._check_view(r, t, index)
            if not (isinstance(t, _Storage) and t.host):
                self.d2h += nbytes  # a device tensor (or buffer view) copied to the host
            self.delivered_bytes += nbytes
            self.requests[r].delivered_step = index
            self.requests[r].output_bytes = nbytes
            self._drop(t)
        return StepRecord(
            step=index,
            num_scheduled_tokens=0 if step is None else step.num_tokens,
            num_requests=0 if step is None else len(step.chunks),
            num_finished=0 if step is None else len(step.finished),
            context_sum=0 if step is None else step.context_sum,
            pool_peak_bytes=self.peak_step,
            host_bytes=self.host_live + self.delivered_bytes,
            copy_bytes=self.copy,
            d2h_bytes=self.d2h,
            **self._breakdown(),
        )

    def _breakdown(self) -> dict[str, int]:
        """End-of-step device bytes by category, unique storages (cache > output > head)."""
        seen: set[int] = set()
        totals = {"cache": 0, "output": 0, "head": 0}

        def add(t: Tensor | None, category: str) -> None:
            if isinstance(t, _Storage) and not t.host and id(t) not in seen:
                seen.add(id(t))
                totals[category] += t.nbytes

        for state in self.states.values():
            for t in state.cache:
                add(t, "cache")
            add(state.buffer, "cache")
        for category in ("output", "head"):
            for _, t, cat, _ in self.pending:
                if cat == category:
                    add(t, category)
        if sum(totals.values()) != self.device_live:  # an internal bookkeeping error
            raise RuntimeError(f"analytic ledger out of balance: {totals} vs {self.device_live}")
        return {
            "pool_bytes": self.device_live,
            "pool_cache_bytes": totals["cache"],
            "pool_output_bytes": totals["output"],
            "pool_head_bytes": totals["head"],
        }

    # --- pooling ----------------------------------------------------------------------------

    def _pool(self, index: int, step: ScheduledStep) -> dict[int, Tensor]:
        """Pooling's outputs for the finished requests (held), in batch order."""
        cfg, rb = self.cfg, self.row_bytes
        rows = []
        row = 0
        for r, start, stop in step.chunks:
            rows.append((r, start, stop, _View(index, row, row + stop - start, start)))
            row += stop - start
        if cfg.pooling_method == "LAST":
            return self._pool_last(step, rows)
        pooled: dict[int, Tensor] = {}
        if not cfg.enable_chunked_prefill:
            for r, _, stop, view in rows:
                n = stop  # whole prompt
                if self.offload:
                    pooled[r] = self._alloc(n * rb, host=True)
                    self.d2h += n * rb
                elif self.clone_finished:
                    pooled[r] = self._alloc(n * rb)
                else:
                    pooled[r] = view
        elif cfg.policy in ("legacy", "clone"):
            self._pool_cache(index, step, rows, pooled)
        else:
            self._pool_buffer(rows, pooled)
        if cfg.pooling_method == "STEP":
            pooled = self._select(pooled)
        return pooled

    def _pool_cache(self, index, step, rows, pooled) -> None:
        rb = self.row_bytes
        # 1. retain each chunk: a clone unless legacy, or a finished one-shot view under sync.
        for r, start, stop, view in rows:
            state = self.states[r]
            done = stop == self.lens[r]
            owned = self.cfg.policy == "clone" and (
                not done or (self.clone_finished and not state.cache)
            )
            state.cache.append(self._alloc((stop - start) * rb) if owned else view)
        # 2. finished requests: the single cached chunk, or a concat of all of them.
        for r in step.finished:
            state = self.states[r]
            if len(state.cache) == 1:
                out = state.cache[0]
                self._hold(out)
            else:
                for t in state.cache[:-1]:
                    if isinstance(t, _View):
                        self._check_view(r, t, index)  # cat reads it now
                out = self._alloc(self.lens[r] * rb)  # [prompt_len, W]
            pooled[r] = out
            for t in state.cache:
                self._drop(t)
            state.cache = []

    def _pool_buffer(self, rows, pooled) -> None:
        rb = self.row_bytes
        for r, start, stop, view in rows:
            state = self.states[r]
            n = stop - start
            done = stop == self.lens[r]
            if done and state.buffer is None and not self.offload:
                # prealloc's one-shot finish follows the clone rule.
                pooled[r] = self._alloc(n * rb) if self.clone_finished else view
                continue
            if state.buffer is None:
                state.buffer = _Storage(self.lens[r] * rb, self.offload)
                self._hold(state.buffer)  # allocated empty: no bytes written yet
            if self.offload:
                self.d2h += n * rb  # chunk copied device -> host
            else:
                self.copy += n * rb  # chunk copied into the owned buffer
                self.peak_step = max(self.peak_step, self.device_live)
            if done:
                pooled[r] = state.buffer
                self._hold(state.buffer)
                self._drop(state.buffer)
                state.buffer = None

    def _pool_last(self, step: ScheduledStep, rows) -> dict[int, Tensor]:
        # LastPool gathers the last scheduled row of every request: [n_requests, W], owned.
        gather = self._alloc(len(rows) * self.row_bytes)
        pooled: dict[int, Tensor] = {}
        for r in step.finished:
            pooled[r] = gather  # row r of it: a view, keeps the whole gather alive
            self._hold(gather)
        self._drop(gather)
        return pooled

    def _select(self, pooled: dict[int, Tensor]) -> dict[int, Tensor]:
        """STEP: columns, then tag rows; the AllPool outputs die when StepPool returns."""
        cfg = self.cfg
        s, host = cfg.dtype_size, self.offload
        columns = cfg.selected_columns
        tag = cfg.effective_step_tag_id
        out: dict[int, Tensor] = {}
        for r, data in pooled.items():
            n = self.lens[r]
            width = cfg.width
            col = None
            if columns is not None:
                width = len(columns)
                col = self._alloc(n * width * s, host)  # [prompt_len, k]
                data = col
            if tag is not None:
                data = self._alloc(self.kept.count(r, 0, n) * width * s, host)  # [n_tags, k]
                self._drop(col)  # the column selection dies once rows are picked from it
            elif col is None:
                self._hold(data)  # no selection: StepPool returns AllPool's tensor itself
            out[r] = data
        for t in pooled.values():
            self._drop(t)
        return out

    # --- head -------------------------------------------------------------------------------

    def _head(self, step: ScheduledStep, pooled: dict[int, Tensor]) -> list:
        """Cast, then activation, per finished request; returns what the host copy reads."""
        cfg = self.cfg
        host = self.offload
        outs = []
        for r in step.finished:
            x = pooled[r]
            rows, width = self._out_shape(r)
            size = cfg.dtype_size
            y, category = x, "output"
            cast = None
            if cfg.head_casts:
                size = dtype_size(cfg.head_dtype)
                cast = self._alloc(rows * width * size, host)  # [rows, width] head dtype
                y, category = cast, "head"
            if cfg.use_activation:
                y, category = self._alloc(rows * width * size, host), "head"
                self._drop(cast)
            elif cast is None:
                self._hold(x)  # identity head: the output IS pooling's tensor
            outs.append((r, y, category, rows * width * size))
        for t in pooled.values():
            self._drop(t)
        return outs

    def _out_shape(self, request: int) -> tuple[int, int]:
        cfg = self.cfg
        if cfg.pooling_method == "LAST":
            return 1, cfg.width
        return self.kept.count(request, 0, self.lens[request]), cfg.output_width


def run_analytic(
    prompt_lens: Sequence[int], config: SimConfig, steps: Sequence[ScheduledStep], *, source=None
) -> tuple[list[StepRecord], list[RequestRecord], set[int]]:
    """Analytic ledger of a schedule: ``(step records, request records, corrupted)``."""
    kept = KeptRows.for_config(config, source, len(prompt_lens))
    engine = AnalyticEngine(prompt_lens, config, kept)
    records = engine.run(steps)
    for r in engine.corrupted:
        engine.requests[r].corrupted = True
    return records, engine.requests, engine.corrupted
