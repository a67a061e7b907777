"""The one engine step loop, shared by the tensor and counting backends.

One iteration (step N), in this order:

1. the step's hidden states are written where the engine would put them
   (``vllm_rules.step_memory``: graph output memory rewritten by later replays, a fresh eager
   tensor, or the teaching model's one buffer); the write destroys kept views it covers;
2. pooling decides per chunk from the keep rule (``tokpool.pooler.keep_rule``) and runs the pooler
   of the config's pooling kind (``vllm_rules.pooling_kind``: ``AllPool``/``StepPool`` for
   token tasks, ``LastPool`` for sequence tasks);
3. the head runs on each finished request (cast to the head dtype, then the activation);
4. host copies: synchronous scheduling copies step N's outputs now; async scheduling copies
   step N-1's outputs now — after step N rewrote output memory (the race of DESIGN.md "Why the
   clone exists") — and leaves step N's for the next iteration.

The loop owns everything that does not depend on how bytes are held: the schedule, request
records, ``SimResult.chunks`` (what the keep rule did with each chunk, when it was read, which
step overwrote it), the views pooling keeps and the memory they pin. A backend subclass does the
pooling, head and host copies: ``TensorEngine`` on real tensors (bytes measured from storages,
corruption seen by an exact oracle), ``CountingEngine`` with integers (corruption judged here,
from the views the loop tracked).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ...pooler.keep_rule import KeepRule, keep_rule
from ..config import SimConfig
from ..memory.ledger import RequestRecord, StepRecord
from ..memory.views import KeptView, ViewTracker
from ..schedule.aborts import AbortOutcome, abort_iterations
from ..schedule.scheduler import ScheduledStep, engine_steps

# Called through the module, never copied: the seam tests swap the rule there.
from ..vllm_rules import step_memory as step_memory_rule
from ..vllm_rules.classifier import head_output, head_tensors
from ..vllm_rules.cpu_platform import host_copy_copies
from ..vllm_rules.pooling_kind import KeptRows
from ..vllm_rules.runner import keeps_pooling_state_on_preemption
from ..vllm_rules.step_memory import StepOutput
from .progress import ticks  # a bar over a long run's steps
from .timing import estimate_step_times


@dataclass
class ChunkRecord:
    """One row of ``SimResult.chunks`` (see ``CHUNK_COLUMNS``)."""

    step: int
    request: int
    token_start: int
    token_end: int
    buffer_row_start: int
    eager: bool
    action: str
    owned: bool
    read_at_step: int | None = None
    overwritten_at_step: int | None = None
    overwritten_rows: int = 0
    widest_write: int | None = None
    widest_write_step: int | None = None


#: ``SimResult.chunks`` columns, one line each.
CHUNK_COLUMNS: dict[str, str] = {
    "step": "engine step that computed the chunk",
    "request": "index in prompt_lens",
    "token_start": "first prompt position of the chunk",
    "token_end": "one past its last position (half-open: [token_start, token_end))",
    "buffer_row_start": "first row of the step's output memory holding the chunk",
    "eager": "the step ran eagerly: a fresh output tensor, never overwritten (graph replays "
             "and the teaching buffer are rewritten by later steps)",
    "action": "what pooling did with it (keep rule label: clone, view, view + cat, prealloc, "
              "offload; gather for sequence pooling)",
    "owned": "pooling holds an owned copy (False: only a view of output memory)",
    "read_at_step": "step whose cat, copy or host copy read the chunk's rows",
    "overwritten_at_step": "first step that rewrote rows of a kept view before that read (NA "
                           "when none did); the request is corrupted when a delivered row "
                           "was among them",
    "overwritten_rows": "rows of a kept view rewritten before that read, from its first row (0 "
                        "when none were)",
    "widest_write": "most rows one step wrote, from row 0, into a kept view's memory between "
                    "its step and its read (NA: not kept as a view past its step, or no step "
                    "wrote that memory meanwhile); fewer than the view's last row + 1 and the "
                    "view survived only because that write was short",
    "widest_write_step": "the step of that write (NA as for widest_write)",
}


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector. A run adds records per step that live to its end;
    the collector would walk all of them again and again (quadratic in steps). Nothing here
    makes cycles, and tensors are freed by reference counting."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def admitted(step: ScheduledStep) -> set[int]:
    """Requests whose prefill (re)starts in ``step``: from token 0, or after the tokens a
    prefix-cache hit gave them (``ScheduledStep.cached``). Their pooling state is new."""
    return {r for r, start, _ in step.chunks if start == 0} | {r for r, _ in step.cached}


def copies_at_finish(config: SimConfig, params=None) -> bool:
    """Does the pipeline copy a finished output within its step (STEP selection, or a head
    tensor: a cast, late chunking's means, an activation; ``head_tensors`` with the request's
    ``params``)? Then a one-shot view is read there, not by the host copy."""
    return config.pooling_kind.selects(config) or any(
        not t.view for t in head_tensors(config, 1, 1, params))


class EngineLoop(ABC):
    """The step loop; a backend implements its abstract hooks (``begin_iteration`` ...
    ``output_nbytes``)."""

    def __init__(self, prompt_lens: Sequence[int], config: SimConfig, kept: KeptRows, *,
                 pooling_params: Sequence[Any] | None = None,
                 aborts: Sequence[AbortOutcome] = ()) -> None:
        self.lens = list(prompt_lens)
        # client aborts (schedule.aborts): the runner drops the request's state in the step
        self.aborts = list(aborts)
        self._aborts_at: dict[int, list[int]] = {}
        for o in self.aborts:
            if o.outcome == "aborted":
                self._aborts_at.setdefault(o.step, []).append(o.request)
        #: request -> (device, host) bytes its pooling state held when an abort freed it
        self.freed_by_abort: dict[int, tuple[int, int]] = {}
        self.cfg = config
        # per request, its tp.PoolingParams (None: the engine's defaults); the head asks them
        self.params = list(pooling_params) if pooling_params is not None else [None] * len(
            self.lens)
        self.kind = config.pooling_kind
        self.kept = kept
        self.row_bytes = config.width * config.dtype_size  # one hidden row, bytes
        self.requests = [RequestRecord(r, n) for r, n in enumerate(self.lens)]
        self.chunks: list[ChunkRecord] = []
        self.tracker = ViewTracker()
        self.judged: set[int] = set()  # corrupted, judged from the views the loop tracked
        # request -> first prompt position its delivered output holds (0 unless a split prompt
        # without chunked prefill delivers its last chunk alone)
        self.delivered_from: dict[int, int] = {}
        self.pending: list[tuple[int, Any, str]] = []  # awaiting the host copy (async)
        self._views: dict[int, list[tuple[KeptView, ChunkRecord]]] = {}
        # Eager outputs pinned by views: region -> [rows, rows covered by live views], and per
        # request the rows of its own views there; kept up to date as views come and go.
        self._eager_rows: dict[int, int] = {}
        self._pinned: dict[int, int] = {}  # region -> rows its live views cover
        self._stranded_rows = 0
        self._beyond: dict[int, int] = {}  # request -> rows its views pin beyond its own
        self._own_rows: dict[int, dict[int, int]] = {}
        self._touched: set[int] = set()
        self._next_region = 1
        by_params: dict[int, bool] = {}  # asked once per distinct params (most share None)
        self._copies_at_finish = [
            by_params[id(p)] if id(p) in by_params else
            by_params.setdefault(id(p), copies_at_finish(config, p)) for p in self.params]
        self._persistent_rows = config.buffer_rows
        self._step_outputs_by_size: dict[int, StepOutput] = {}  # the rule, asked once a size
        # The kind's rule and label per (finished, first chunk), asked once a run (hot path)
        self._chunk_rules = {
            (finished, first): (rule, self.kind.chunk_label(rule))
            for finished in (False, True) for first in (False, True)
            for rule in [self.kind.chunk_rule(config, finished=finished, first_chunk=first)]
        }
        # per request, its own rules (a workload mixing tasks: ``backends.mixed``); None: the kind's
        self._rules_by_request: list[dict] | None = None
        # vLLM's V1 runner keeps a preempted request's pooling state (``vllm_rules.runner``):
        # its stale chunks stay cached, and the resumed prefill appends to them. Only for
        # pooling that keeps a list of chunks (AllPool's cache), with chunked prefill.
        self.keeps_stale = (
            keeps_pooling_state_on_preemption(config.model_runner) and self.kind.token_level
            and config.enable_chunked_prefill
            and keep_rule(config.policy, async_scheduling=config.async_scheduling,
                          finished=False, first_chunk=True).keep not in ("buffer", "host"))
        self._cache_rows: dict[int, int] = {}  # request -> rows its pooling cache holds now
        self._kept_states: set[int] = set()  # preempted, state kept (V1): not new at resume
        self.fresh_states: set[int] = set()  # this step: requests whose pooling state is new
        self._final_returns: dict[int, str | None] = {}  # request -> its final chunk's return
        #: request -> rows pooling handed over at its finish (more than its prompt: stale rows)
        self.pooled_rows: dict[int, int] = {}
        # Delivering an output copies it (not on vLLM's CPU platform: ``.to("cpu")`` of a CPU
        # tensor is the tensor itself).
        self.host_copy_copies = host_copy_copies(config.hardware)
        # The policy keeps chunks in host memory (offload): pooling's outputs live there too.
        self.outputs_on_host = self.kind.token_level and keep_rule(
            config.policy, async_scheduling=False, finished=True, first_chunk=True
        ).keep == "host"

    # --- backend hooks -------------------------------------------------------------------

    @abstractmethod
    def begin_iteration(self, index: int) -> None:
        """Start iteration ``index``: reset the step's counters."""

    @abstractmethod
    def write_step(self, index: int, step: ScheduledStep, out: StepOutput) -> None:
        """Write the step's hidden states where the step-memory rule put them (``out``)."""

    @abstractmethod
    def pool(self, index: int, step: ScheduledStep, rules: list[KeepRule]) -> dict[int, Any]:
        """Pool the step's rows (each chunk kept as its rule says); the finished requests'
        pooled outputs."""

    @abstractmethod
    def head(self, step: ScheduledStep, pooled: dict[int, Any]) -> list[tuple[int, Any, str]]:
        """The head on each finished request: ``(request, output, category)`` to copy."""

    @abstractmethod
    def deliver(self, index: int, request: int, output: Any) -> int:
        """The host copy of ``output``; returns the bytes delivered."""

    @abstractmethod
    def end_iteration(self, index: int) -> None:
        """End iteration ``index``: the engine lets go of the step's output."""

    @abstractmethod
    def memory(self) -> dict[str, int]:
        """The step's ledger columns: pooling's device bytes by category, host, copies."""

    @abstractmethod
    def preempt(self, request: int, *, keep_state: bool = False) -> None:
        """The KV cache preempted ``request``: its prefill restarts; its pooling state is
        cleaned, or kept as it is (``keep_state``: vLLM's V1 runner)."""

    @abstractmethod
    def state_bytes(self, request: int) -> tuple[int, int] | None:
        """``(device, host)`` bytes the request's pooling state owns (cloned chunks, its
        buffer); ``None`` when it has no state."""

    @abstractmethod
    def output_nbytes(self, output: Any) -> int:
        """Bytes the host copy of ``output`` moves (for the async race's timing)."""

    # --- the loop --------------------------------------------------------------------------

    def run(self, steps: Sequence[ScheduledStep]) -> list[StepRecord]:
        with paused_gc():
            plan = abort_iterations(
                engine_steps(steps, async_scheduling=self.cfg.async_scheduling), self.aborts)
            return [self._iteration(index, step) for index, step in ticks(plan)]

    def _iteration(self, index: int, step: ScheduledStep | None) -> StepRecord:
        self.begin_iteration(index)
        outs: list[tuple[int, Any, str]] = []
        if step is not None and self.pending:
            self._deliver(index, self._copies_won(step))  # copies that finish before the write
        for r in self._aborts_at.get(index, ()):
            self._abort(r)
        if step is not None:
            for r in step.preempted:
                self._preempt(r)
            starting = admitted(step)
            self.fresh_states = starting - self._kept_states  # a kept (stale) state goes on
            self._kept_states -= starting
            out = self._where_step_writes(step.num_tokens)
            if out.fresh:
                self._next_region += 1
                self._eager_rows[out.region] = out.rows
            self.tracker.write(index, out.region, out.rows_written)
            self.write_step(index, step, out)
            rules = self._plan(index, step, out)
            pooled = self.pool(index, step, rules)
            outs = self.head(step, pooled)
            for r in step.finished:
                self._read_views(r, index, at_finish=True)
                self.requests[r].finish_step = index
        # Host copies: this step's outputs (sync) or the previous step's (async: read only now,
        # after this step wrote its output memory).
        if self.cfg.async_scheduling:
            to_copy, self.pending = self.pending, outs
        else:
            to_copy = outs
        self._deliver(index, to_copy)
        self.end_iteration(index)
        return self._record(index, step)

    def _deliver(self, index: int, outputs: list[tuple[int, Any, str]]) -> None:
        for r, output, _ in outputs:
            self._read_views(r, index, at_finish=False)
            rec = self.requests[r]
            rec.output_bytes = self.deliver(index, r, output)
            rec.delivered_step = index

    def _copies_won(self, step: ScheduledStep) -> list[tuple[int, Any, str]]:
        """Under ``async_overwrite="forward_end"``: the pending host copies that complete
        before ``step``'s forward writes its output memory (ESTIMATED times: the copies run
        one after another on the copy stream at PCIe bandwidth; the forward takes the
        roofline estimate). They leave ``self.pending``; the rest are read after the write."""
        cfg = self.cfg
        if cfg.async_overwrite != "forward_end":
            return []
        forward_s = float(estimate_step_times(
            [step.num_tokens], [step.context_sum], [0], [0], model=cfg.model,
            hardware=cfg.hardware, weight_bytes_per_parameter=cfg.dtype_size,
            async_scheduling=True)["est_forward_s"][0])
        won, elapsed = [], 0.0
        for item in self.pending:
            elapsed += self.output_nbytes(item[1]) / cfg.hardware.pcie_bandwidth
            if elapsed > forward_s:
                break
            won.append(item)
        self.pending = self.pending[len(won):]
        return won

    def _where_step_writes(self, num_tokens: int) -> StepOutput:
        """Where a ``num_tokens`` step writes: the step-memory rule (a fresh tensor gets the
        next region id)."""
        out = self._step_outputs_by_size.get(num_tokens)
        if out is None:
            out = step_memory_rule.step_output(self.cfg, num_tokens, -1, self._persistent_rows)
            self._step_outputs_by_size[num_tokens] = out
        if out.fresh:
            out = dataclasses.replace(out, region=self._next_region)
        return out

    def _preempt(self, request: int) -> None:
        self.requests[request].num_preemptions += 1
        if self.requests[request].finish_step >= 0:
            # Async: preempted while the step that finished it was in flight. vLLM frees its
            # KV blocks, yet still delivers that step's pooler output and never schedules it
            # again (``Scheduler.update_from_output``): its pooling is done, nothing to clean.
            return
        if self.keeps_stale:
            # V1: GPUModelRunner._update_states keeps the request's state; its chunks (and any
            # views with what they pin) stay until the resumed request's cat reads them.
            self._kept_states.add(request)
            self.preempt(request, keep_state=True)
            return
        for view, _chunk in self._views.pop(request, []):
            self.tracker.release(view)  # never read: the request starts over
            self._pin(view, -1)
        self._cache_rows.pop(request, None)
        self.preempt(request)

    def _abort(self, request: int) -> None:
        """A client abort reached the runner (``finished_req_ids``): V2's ``remove_request``
        cleans the request's pooling state, V1's ``_update_states`` pops it (a state kept
        across a preemption too); its kept views are never read."""
        held = self.state_bytes(request)
        self.freed_by_abort[request] = held or (0, 0)
        for view, _chunk in self._views.pop(request, []):
            self.tracker.release(view)
            self._pin(view, -1)
        self._cache_rows.pop(request, None)
        self._kept_states.discard(request)
        if held is not None:
            self.preempt(request)  # the backend frees what the state holds

    def _plan(self, index: int, step: ScheduledStep, out: StepOutput) -> list[KeepRule]:
        """The keep rule of every chunk; records chunks and registers kept views."""
        rules: list[KeepRule] = []
        row = 0
        starting = admitted(step)
        for r, tokens in step.cached:
            self.requests[r].num_cached_tokens += tokens  # KV from the prefix cache
        for r, start, stop in step.chunks:
            rec = self.requests[r]
            rec.num_chunks += 1
            if r in starting:
                rec.first_step = index
            finished = stop == self.lens[r]
            # the keep rule's "first chunk" is an EMPTY cache (AllPool: not
            # p.hidden_states_cache): a resumed V1 request still holds its stale chunks
            first = r in starting and not self._cache_rows.get(r, 0)
            rules_of = (self._chunk_rules if self._rules_by_request is None
                        else self._rules_by_request[r])
            rule, label = rules_of[finished, first]
            if rule is None:  # nothing kept: the step gathers its row
                chunk = ChunkRecord(index, r, start, stop, row, out.fresh, label, True, index)
            else:
                rules.append(rule)
                cached = self._cache_rows.get(r, 0) + (stop - start)
                if rule.returns is None:
                    self._cache_rows[r] = cached
                else:
                    self._cache_rows.pop(r, None)
                    self._final_returns[r] = rule.returns
                    self.pooled_rows[r] = cached if rule.returns == "cat" else stop - start
                    if self.pooled_rows[r] > stop:  # stale rows from before a preemption
                        self.judged.add(r)
                chunk = ChunkRecord(index, r, start, stop, row, out.fresh, label, rule.owned)
                if finished and rule.returns == "chunk" and start > 0:
                    # Chunked prefill off, the prompt split anyway: the final chunk alone is
                    # handed over (vLLM's AllPool keeps nothing), so rows [0, start) are missing.
                    self.delivered_from[r] = start
                    self.judged.add(r)
                if rule.owned or rule.returns == "cat" or (not finished and rule.returns):
                    # copied (or cat) within its own step; or, unchunked and unfinished, handed
                    # to the head and dropped by the runner within the step
                    chunk.read_at_step = index
                else:
                    view = KeptView(r, out.region, row, row + stop - start, start, index)
                    self.tracker.keep(view)
                    self._views.setdefault(r, []).append((view, chunk))
                    self._pin(view, +1)
            self.chunks.append(chunk)
            row += stop - start
        return rules

    def _read_views(self, request: int, index: int, *, at_finish: bool) -> None:
        """The request's kept views are read now: by the cat or a copy in its finishing step,
        or by the host copy. Rows rewritten before this read corrupt the output."""
        kept = self._views.get(request)
        if not kept:
            return
        left = []
        for view, chunk in kept:
            handed_over = (chunk.token_end == self.lens[request]
                           and self._final_returns.get(request) == "chunk")  # no cat
            if at_finish and handed_over and not self._copies_at_finish[request]:
                left.append((view, chunk))  # handed over as is: the host copy reads it
                continue
            chunk.read_at_step = index
            chunk.overwritten_at_step = view.overwritten_at
            chunk.overwritten_rows = view.stale
            if view.widest_step is not None:  # a step wrote its memory while it was kept
                chunk.widest_write, chunk.widest_write_step = view.widest, view.widest_step
            if self.kept.count(request, view.pos0, view.pos0 + view.stale):
                self.judged.add(request)
            self.tracker.release(view)
            self._pin(view, -1)
        if left:
            self._views[request] = left
        else:
            del self._views[request]

    def _pin(self, view: KeptView, sign: int) -> None:
        """A view of an eager output starts (+1) or stops (-1) pinning it."""
        rows = self._eager_rows.get(view.region)
        if rows is None:
            return  # graph or teaching-buffer memory: owned by the engine, never pinned
        n = view.row1 - view.row0
        covered = self._pinned.get(view.region, 0)
        if sign > 0 and covered == 0:
            self._stranded_rows += rows  # the whole tensor is pinned from now on
        covered += sign * n
        self._stranded_rows -= sign * n
        if covered:
            self._pinned[view.region] = covered
        else:
            del self._pinned[view.region]  # nothing pins it any more: freed
            del self._eager_rows[view.region]
            self._stranded_rows -= rows
        # The request's own stranded rows: the tensors it pins minus its rows in them.
        mine = self._own_rows.setdefault(view.request, {})
        own = mine.get(view.region, 0)
        beyond = self._beyond.get(view.request, 0) - sign * n
        if sign > 0 and own == 0:
            beyond += rows
        own += sign * n
        if own:
            mine[view.region] = own
        else:
            del mine[view.region]
            beyond -= rows
        self._beyond[view.request] = beyond
        self._touched.add(view.request)

    def _stranded(self) -> int:
        """Bytes of eager step outputs that kept views pin beyond the rows they cover; updates
        each touched request's most stranded bytes."""
        for r in self._touched:
            rec = self.requests[r]
            rec.stranded_bytes = max(rec.stranded_bytes, self._beyond[r] * self.row_bytes)
        self._touched.clear()
        newest = self._next_region - 1
        if newest in self._eager_rows and newest not in self._pinned:
            del self._eager_rows[newest]  # this step's output, pinned by nothing: freed
        return self._stranded_rows * self.row_bytes

    def _record(self, index: int, step: ScheduledStep | None) -> StepRecord:
        return StepRecord(
            step=index,
            num_scheduled_tokens=0 if step is None else step.num_tokens,
            num_requests=0 if step is None else len(step.chunks),
            num_finished=0 if step is None else len(step.finished),
            context_sum=0 if step is None else step.context_sum,
            stranded_bytes=self._stranded(),
            kv_bytes=0 if step is None else step.kv_blocks * self.cfg.kv_block_bytes,
            num_cached_tokens=0 if step is None else sum(n for _, n in step.cached),
            **self.memory(),
        )

    def request_kind(self, request: int):
        """The pooling kind that pools ``request`` (the config's; a mixed-task engine's
        sequence requests: LAST)."""
        return self.kind

    def duplicated_rows(self, request: int) -> int:
        """Rows pooling handed over beyond the request's prompt: stale chunks a V1 runner kept
        across a preemption (0 otherwise)."""
        if request not in self.pooled_rows:
            return 0
        return max(0, self.pooled_rows[request] - self.lens[request])

    def finish(self, corrupted: set[int]) -> None:
        for r in corrupted:
            self.requests[r].corrupted = True
        for rec in self.requests:
            r = rec.request
            if rec.finish_step < 0:
                continue
            rows, width = self.request_kind(r).delivered_shape(self.cfg, self.kept, r,
                                                    self.delivered_from.get(r, 0), self.lens[r])
            rec.duplicated_rows = self.duplicated_rows(r)
            # what the head hands over (one row per late chunk): vllm_rules.classifier
            rec.delivered_rows = head_output(self.cfg, rows + rec.duplicated_rows, width,
                                             self.params[r])[0]
