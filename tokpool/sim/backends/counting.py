"""Counting backend ("analytic" mode): the engine loop with integers instead of tensors.

A tensor is a ``_Storage`` record (bytes, device or host, reference count); a view of a step's
output memory is a ``_View`` (which rows, and the eager output it pins, if any). Pooling follows
``AllPool``'s two passes exactly — keep every chunk as the keep rule says, then hand finished
requests their output — so allocations happen at the same moments as in tensor mode, and the
peak is taken right after each of them. Nothing is allocated, so a million-token prompt costs
only its step count: each step touches the requests in it and the views still intact.
Corruption is judged by the loop (``backends.loop``) from the views it tracked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ...pooler.keep_rule import KeepRule
from ..config import SimConfig
from ..memory.ledger import RequestRecord, StepRecord
from ..schedule.scheduler import ScheduledStep
from ..vllm_rules.classifier import head_tensors, whole_tensor_delivered
from ..vllm_rules.pooling_kind import KeptRows
from ..vllm_rules.step_memory import StepOutput
from .loop import EngineLoop


class _Storage:
    """A tensor's storage: ``nbytes`` on the device or the host, alive while ``refs > 0``.
    A step's eager output is not pooling's while its step runs (``counted`` is False)."""

    __slots__ = ("cache_refs", "counted", "host", "nbytes", "refs")

    def __init__(self, nbytes: int, host: bool, counted: bool = True) -> None:
        self.nbytes = nbytes
        self.host = host
        self.refs = 0
        self.counted = counted
        self.cache_refs = 0  # views of it held in pooling states (an eager output)


@dataclass(frozen=True)
class _View:
    """Rows of a step's output memory; owns nothing, but pins ``base`` (an eager output)."""

    rows: int
    base: _Storage | None


Handle = _Storage | _View


@dataclass
class _State:
    cache: list[Handle] = field(default_factory=list)
    buffer: _Storage | None = None
    owned: int = 0  # device bytes of its clones and buffer


class CountingEngine(EngineLoop):
    """Runs a schedule with integer bookkeeping; see the module docstring."""

    def __init__(self, prompt_lens: Sequence[int], config: SimConfig, kept: KeptRows, *,
                 pooling_params: Sequence | None = None, aborts: Sequence = ()) -> None:
        super().__init__(prompt_lens, config, kept, pooling_params=pooling_params,
                         aborts=aborts)
        self.offload = self.outputs_on_host
        self.states: dict[int, _State] = {}
        self.device_live = 0  # device bytes of live (counted) storages, right now
        self.host_live = 0  # host bytes of live storages (offload buffers, host outputs)
        self._host_pinned: dict[int, int] = {}  # request -> host bytes its delivered view pins
        self.peak_step = 0
        self.copy = 0
        self.d2h = 0
        self.delivered_bytes = 0
        self.cache_pinned = 0  # device bytes of eager outputs that cached views pin
        self._step_output: _Storage | None = None
        self._selects = self.kind.selects(config)
        self._spans: dict[int, tuple[int, int]] = {}  # this step's pooled outputs' positions

    # --- storage bookkeeping ---------------------------------------------------------------

    def _alloc(self, nbytes: int, host: bool = False) -> _Storage:
        s = _Storage(nbytes, host)
        self._hold(s)
        if not host:
            self.copy += nbytes  # every new device tensor is written in full by its op
            self.peak_step = max(self.peak_step, self.device_live)
        return s

    def _count(self, s: _Storage, sign: int) -> None:
        if s.host:
            self.host_live += sign * s.nbytes
        elif s.counted:
            self.device_live += sign * s.nbytes

    def _hold(self, t: Handle | None) -> None:
        s = t.base if isinstance(t, _View) else t
        if s is not None:
            if s.refs == 0:
                self._count(s, +1)
            s.refs += 1

    def _drop(self, t: Handle | None) -> None:
        s = t.base if isinstance(t, _View) else t
        if s is not None:
            s.refs -= 1
            if s.refs == 0:
                self._count(s, -1)

    def _cache_pin(self, base: _Storage | None, sign: int) -> None:
        if base is None:
            return
        base.cache_refs += sign
        if base.counted and base.cache_refs == (1 if sign > 0 else 0):
            self.cache_pinned += sign * base.nbytes

    # --- loop hooks --------------------------------------------------------------------------

    def begin_iteration(self, index: int) -> None:
        self.copy = 0
        self.d2h = 0
        self.peak_step = self.device_live  # what the step starts with

    def write_step(self, index: int, step: ScheduledStep, out: StepOutput) -> None:
        self._step_output = (_Storage(out.rows * self.row_bytes, False, counted=False)
                             if out.fresh else None)
        starting = self.fresh_states  # a prefill (re)starts: new pooling state (not a kept one)
        for r, _, _ in step.chunks:
            if r in starting or r not in self.states:  # (unchunked: every chunk starts afresh)
                self.states[r] = _State()

    def end_iteration(self, index: int) -> None:
        s = self._step_output
        if s is not None:  # the engine lets go of the step's output: views now pin it
            s.counted = True
            if s.refs:
                self.device_live += s.nbytes
            if s.cache_refs:
                self.cache_pinned += s.nbytes
            self._step_output = None

    def pool(self, index: int, step: ScheduledStep, rules: list[KeepRule]) -> dict[int, Handle]:
        """Pooling's outputs for the finished requests (held), in batch order."""
        if not self.kind.token_level:  # LastPool: the step gathers one row per request
            pooled, gather = self._pool_last(step.chunks, step.finished)
            self._drop(gather)
            return pooled
        return self._select(self._pool_all(step.chunks, rules))

    def _pool_all(self, chunks, rules: list[KeepRule]) -> dict[int, Handle]:
        """``AllPool`` on ``chunks`` (``(request, start, stop)``, each with its rule): the
        finished requests' outputs, held."""
        rb = self.row_bytes
        # 1. keep each chunk as the rule says (AllPool's first pass).
        for (r, start, stop), rule in zip(chunks, rules, strict=True):
            state = self.states[r]
            n = stop - start
            if rule.keep == "view":
                view = _View(n, self._step_output)
                self._hold(view)
                state.cache.append(view)
                self._cache_pin(view.base, +1)
            elif rule.keep == "clone":
                state.cache.append(self._alloc(n * rb))
                state.owned += n * rb
            else:  # "buffer" / "host": copy into the request's buffer
                host = rule.keep == "host"
                if state.buffer is None:
                    state.buffer = _Storage(self.lens[r] * rb, host)
                    self._hold(state.buffer)  # allocated empty: no bytes written yet
                    state.owned += 0 if host else self.lens[r] * rb
                if host:
                    self.d2h += n * rb  # chunk copied device -> host
                else:
                    self.copy += n * rb  # chunk copied into the owned buffer
                    self.peak_step = max(self.peak_step, self.device_live)
        # 2. hand finished requests their output (AllPool's second pass).
        pooled: dict[int, Handle] = {}
        self._spans = {}
        for (r, start, stop), rule in zip(chunks, rules, strict=True):
            if rule.returns is None:
                continue
            # the prompt positions the output holds: the whole prompt, or (unchunked) the chunk
            self._spans[r] = (start, stop) if rule.returns == "chunk" else (0, self.lens[r])
            state = self.states[r]
            if rule.returns == "cat":
                # [cached rows, W], held by the output: the prompt's rows (and stale ones)
                out = self._alloc(self.pooled_rows[r] * rb)
            else:
                out = state.cache[0] if rule.returns == "chunk" else state.buffer
                self._hold(out)
            for t in (*state.cache, state.buffer):
                self._drop(t)
                if isinstance(t, _View):
                    self._cache_pin(t.base, -1)
            if stop == self.lens[r]:
                del self.states[r]  # cleaned on finish
            else:  # unchunked, split anyway: the chunk is handed over, the state holds nothing
                self.states[r] = _State()
            pooled[r] = out
        return pooled

    def _pool_last(self, chunks, finished) -> tuple[dict[int, Handle], _Storage]:
        """``LastPool`` on ``chunks``: the gather of the last scheduled row of each request,
        ``[n_requests, W]``, owned, held until the caller drops it; the finished requests'
        rows (views: each holds the whole gather)."""
        gather = self._alloc(len(chunks) * self.row_bytes)
        pooled: dict[int, Handle] = {}
        in_chunks = {r for r, _, _ in chunks}
        for r in finished:
            if r in in_chunks:
                pooled[r] = gather  # row r of it: a view, keeps the whole gather alive
                self._hold(gather)
                del self.states[r]
        return pooled, gather

    def _select(self, pooled: dict[int, Handle]) -> dict[int, Handle]:
        """The pooling kind's selection (STEP: columns, then tag rows; JINA_RANKING: the
        marker rows and the projector), each tensor dying when ``selection_dies`` says; the
        AllPool outputs die when the pooler returns. Without a
        selection the pooler returns AllPool's tensor itself."""
        cfg, kind = self.cfg, self.kind
        if not self._selects:
            return pooled  # held by the pooler and returned as they are
        s, host = cfg.dtype_size, self.offload
        out: dict[int, Handle] = {}
        for r, data in pooled.items():
            start, stop = self._spans[r]
            shapes = kind.selection_shapes(cfg, stop - start, self.kept.count(r, start, stop))
            dies = kind.selection_dies(cfg, len(shapes))
            made = []
            for j, (rows, width) in enumerate(shapes):
                made.append(self._alloc(rows * width * s, host))  # [rows, width]
                for i in range(j):
                    if dies[i] == j:  # its life ends once tensor j exists
                        self._drop(made[i])
            if not made:
                self._hold(data)  # no selection: StepPool returns AllPool's tensor itself
            out[r] = made[-1] if made else data
        for t in pooled.values():
            self._drop(t)
        return out

    def head(self, step: ScheduledStep, pooled: dict[int, Handle]) -> list:
        """The head's tensors per finished request (``vllm_rules.classifier.head_tensors``:
        late chunking's means, cast, the pooler head's classifier, activation; a transient
        dies once the next tensor exists, the rest are alive until the last is made); returns
        what the host copy reads."""
        host = self.offload
        outs = []
        for r in step.finished:
            x = pooled[r]
            rows, width = self._out_shape(r)
            made: list[_Storage] = []
            transients: list[_Storage] = []
            last = None
            for t in head_tensors(self.cfg, rows, width, self.params[r]):  # in order
                last = t
                if t.view:
                    continue  # the Matryoshka slice: a view of the tensor before it
                made.append(self._alloc(t.nbytes, host))  # [t.rows, t.cols]
                if t.transient:
                    transients.append(made[-1])
                else:
                    for d in transients:  # torch.cat's inputs die once it exists
                        self._drop(d)
                        made.remove(d)
                    transients = []
            for t in made[:-1]:
                self._drop(t)  # forward_chunk's locals die when it returns
            if last is None:
                self._hold(x)  # identity head: the output IS pooling's tensor
                y, nbytes, category = x, rows * width * self.cfg.dtype_size, "output"
            else:
                y = made[-1] if made else x
                if not made:
                    self._hold(x)  # a view of pooling's tensor is delivered
                nbytes = last.nbytes
                whole_tensor = whole_tensor_delivered(
                    [last], on_host=host, host_copy_copies=self.host_copy_copies)
                if whole_tensor is not None:
                    base = y.base if isinstance(y, _View) else y
                    whole = base.nbytes if base is not None else y.rows * self.row_bytes
                    if whole_tensor == "pinned":
                        self._host_pinned[r] = whole
                    else:
                        nbytes = whole
                category = "head" if made else "output"
            outs.append((r, (y, nbytes), category))
        for t in pooled.values():
            self._drop(t)
        return outs

    def _out_shape(self, request: int) -> tuple[int, int]:
        rows, width = self.request_kind(request).delivered_shape(self.cfg, self.kept, request,
                                                self.delivered_from.get(request, 0),
                                                self.lens[request])
        return rows + self.duplicated_rows(request), width  # stale rows are delivered too

    def preempt(self, request: int, *, keep_state: bool = False) -> None:
        if keep_state:
            return  # V1: the state and what it holds stay as they are
        state = self.states.pop(request)
        for t in (*state.cache, state.buffer):
            self._drop(t)
            if isinstance(t, _View):
                self._cache_pin(t.base, -1)

    def state_bytes(self, request: int) -> tuple[int, int] | None:
        state = self.states.get(request)
        if state is None:
            return None
        host = state.buffer.nbytes if state.buffer is not None and state.buffer.host else 0
        return state.owned, host

    def output_nbytes(self, output) -> int:
        on_host = isinstance(output[0], _Storage) and output[0].host
        return 0 if on_host or not self.host_copy_copies else output[1]

    def deliver(self, index: int, request: int, output) -> int:
        t, nbytes = output
        if not (isinstance(t, _Storage) and t.host) and self.host_copy_copies:
            self.d2h += nbytes  # a device tensor (or a view) copied to the host
        self.delivered_bytes += self._host_pinned.pop(request, nbytes)
        self._drop(t)
        return nbytes

    def memory(self) -> dict[str, int]:
        """End-of-step device bytes by category, unique storages (cache > output > head)."""
        seen: set[int] = set()
        totals = {"cache": 0, "output": 0, "head": 0}

        def add(t: Handle | None, category: str) -> None:
            s = t.base if isinstance(t, _View) else t
            if (s is not None and not s.host and s.counted and not s.cache_refs
                    and id(s) not in seen):
                seen.add(id(s))
                totals[category] += s.nbytes

        # clones and buffers (never shared), and eager outputs that cached views pin
        totals["cache"] = sum(state.owned for state in self.states.values()) + self.cache_pinned
        for category in ("output", "head"):
            for _, (t, _), cat in self.pending:
                if cat == category:
                    add(t, category)
        if sum(totals.values()) != self.device_live:  # an internal bookkeeping error
            raise RuntimeError(f"counting ledger out of balance: {totals} vs {self.device_live}")
        return {
            "pool_bytes": self.device_live,
            "pool_peak_bytes": max(self.peak_step, self.device_live),
            "pool_cache_bytes": totals["cache"],
            "pool_output_bytes": totals["output"],
            "pool_head_bytes": totals["head"],
            "host_bytes": self.host_live + self.delivered_bytes,
            "copy_bytes": self.copy,
            "d2h_bytes": self.d2h,
        }


def run_counting(
    prompt_lens: Sequence[int], config: SimConfig, steps: Sequence[ScheduledStep], *, source=None,
    pooling_params: Sequence | None = None, aborts: Sequence = (),
    engine_cls: type[CountingEngine] | None = None, **engine_args,
) -> tuple[list[StepRecord], list[RequestRecord], set[int], CountingEngine]:
    """Counting-mode ledger of a schedule: ``(step records, request records, corrupted,
    engine)``; the engine holds ``chunks``. ``pooling_params``: per request, its
    ``tp.PoolingParams`` or ``None``; ``engine_cls`` (with its ``engine_args``): another
    counting engine (a workload mixing tasks: ``backends.mixed``)."""
    kept = config.pooling_kind.kept_rows(config, source, len(prompt_lens))
    engine = (engine_cls or CountingEngine)(prompt_lens, config, kept,
                                            pooling_params=pooling_params, aborts=aborts,
                                            **engine_args)
    records = engine.run(steps)
    engine.finish(engine.judged)
    return records, engine.requests, engine.judged, engine
