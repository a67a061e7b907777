"""Tensor mode: the engine loop with real tensors, the core's poolers and heads, and an oracle.

One iteration (step N), in this order:

1. the source writes step N's rows into the persistent buffer ``[max_num_batched_tokens, W]``
   (rows ``0..n-1``; the buffer is never reallocated, as a static CUDA-graph output);
2. pooling: ``AllPool``/``StepPool`` (the configured policy, chunked and async flags) on real
   ``build_metadata(..., states=...)`` metadata, or ``LastPool`` for sequence tasks;
3. the head on each finished request: cast to the head dtype, then the activation;
4. host copies: synchronous scheduling copies step N's outputs now; async scheduling copies
   step N-1's outputs now — after step N has rewritten the buffer, which is the race of
   DESIGN.md "Why the clone exists" — and leaves step N's for the next iteration.

Memory is measured from real storages: at the start of the step, after every allocation pooling
reports through ``AllPool.probe``, after the pooler returns, after each head tensor, and at the
end. Each measure walks every tensor the engine holds (``PoolingStates.tensors()`` of running
requests, pooling's outputs, head outputs, outputs awaiting their host copy) and sums unique
storages, skipping the persistent buffer. The oracle compares, with ``torch.equal``, each
pooled output before the head with the reference (``source.reference``, then STEP selection) and
each delivered host output with the head applied to that reference.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from ..heads import TokenClassifierHead, TokenEmbeddingHead
from ..metadata import PoolingStates, build_metadata
from ..ownership import storage_key, storage_nbytes
from ..pooling import AllPool, LastPool, StepPool
from .config import SimConfig
from .ledger import RequestRecord, StepRecord
from .scheduler import ScheduledStep, engine_steps


def make_pooler(config: SimConfig) -> AllPool | StepPool | LastPool:
    """The core pooling method the config describes."""
    if config.pooling_method == "LAST":
        return LastPool()
    cls = StepPool if config.pooling_method == "STEP" else AllPool
    return cls(
        enable_chunked_prefill=config.enable_chunked_prefill,
        async_scheduling=config.async_scheduling,
        policy=config.policy,
    )


def make_head(config: SimConfig) -> TokenEmbeddingHead | TokenClassifierHead:
    """The core head the config describes (no projector/classifier: see ``SimConfig``)."""
    head_dtype = config.head_dtype if config.head_casts else None
    if config.task in ("token_embed", "embed"):
        return TokenEmbeddingHead(head_dtype=head_dtype)
    return TokenClassifierHead(head_dtype=head_dtype)


class TensorEngine:
    """Runs a schedule on real tensors; see the module docstring."""

    def __init__(self, prompt_lens: Sequence[int], config: SimConfig, source) -> None:
        self.lens = list(prompt_lens)
        self.cfg = config
        self.source = source
        # [max_num_batched_tokens, width]: the ONE hidden-state buffer every step reuses.
        self.buffer = torch.empty((config.max_num_batched_tokens, config.width), dtype=config.dtype)
        self._buffer_key = storage_key(self.buffer)
        self.row_bytes = config.width * config.dtype_size
        self.pooler = make_pooler(config)
        self.head = make_head(config)
        self.offload = config.policy == "offload" and config.pooling_method != "LAST"
        self.tag = config.effective_step_tag_id
        self.states: dict[int, PoolingStates] = {}
        self.pending: list[tuple[int, Tensor, str]] = []  # awaiting the host copy
        self.delivered: dict[int, Tensor] = {}
        self.expected: dict[int, Tensor] = {}
        self.corrupted: set[int] = set()
        self.requests = [RequestRecord(r, n) for r, n in enumerate(self.lens)]
        if isinstance(self.pooler, AllPool):
            self.pooler.probe = lambda event, outputs: self._checkpoint(outputs)
        self._step_outputs: list[Tensor | None] = []
        self._step_extra: list[tuple[Tensor, str]] = []
        self._known: set = set()  # storage keys alive when the step began
        self._start_refs: list[Tensor] = []
        self._new: dict = {}  # storages first seen this step (their bytes were written)
        self._peak = 0
        self._d2h = 0
        self._prealloc_writes = 0

    # --- measuring ---------------------------------------------------------------------------

    def _held(self) -> Iterable[tuple[Tensor | None, str, bool, bool]]:
        """Every tensor the engine holds: ``(tensor, category, on_host, is_prealloc_buffer)``,
        categories in precedence order (a storage counts in the first it appears in)."""
        for state in self.states.values():
            for t in state.hidden_states_cache:
                yield t, "cache", False, False
            if state.buffer is not None:
                yield state.buffer, "cache", self.offload, True
        for t in self._step_outputs:
            yield t, "output", self.offload, False
        for category in ("output", "head"):
            for t, cat in self._step_extra:
                if cat == category:
                    yield t, cat, self.offload, False
            for _, t, cat in self.pending:
                if cat == category:
                    yield t, cat, self.offload, False

    def _measure(self) -> dict:
        """Unique live storages: ``key -> (nbytes, category, on_host, tensor)``; notes new ones."""
        live: dict = {}
        for t, category, host, is_buffer in self._held():
            if t is None:
                continue
            nbytes = storage_nbytes(t)
            key = storage_key(t)
            if nbytes == 0 or key == self._buffer_key or key in live:
                continue
            live[key] = (nbytes, category, host, t)
            if key not in self._known and key not in self._new:
                # Keeping a reference also keeps this address from being reused this step.
                self._new[key] = (t, nbytes, host or is_buffer)
        return live

    def _checkpoint(self, outputs: Sequence[Tensor | None] | None = None) -> None:
        if outputs is not None:
            self._step_outputs = list(outputs)
        live = self._measure()
        device = sum(nbytes for nbytes, _, host, _ in live.values() if not host)
        self._peak = max(self._peak, device)

    # --- one engine iteration ------------------------------------------------------------------

    def run(self, steps: Sequence[ScheduledStep]) -> list[StepRecord]:
        self._known = set()
        return [
            self._iteration(index, step)
            for index, step in engine_steps(steps, async_scheduling=self.cfg.async_scheduling)
        ]

    def _iteration(self, index: int, step: ScheduledStep | None) -> StepRecord:
        self._new = {}
        self._peak = 0
        self._step_outputs, self._step_extra = [], []
        self._d2h = 0
        self._prealloc_writes = 0
        head_outs: list[tuple[int, Tensor, str]] = []
        if step is not None:
            n = step.num_tokens
            self.source.fill(self.buffer[:n], step.chunks)  # [n_step_tokens, width] in place
            for r, start, _ in step.chunks:
                rec = self.requests[r]
                rec.num_chunks += 1
                if start == 0:
                    rec.first_step = index
                    self.states[r] = PoolingStates()
        self._checkpoint()  # the step starts with what the last one left
        if step is not None:
            pooled = self._pool(step)
            head_outs = self._head(step, pooled)
            del pooled
            self._step_outputs = []
            for r in step.finished:
                self.requests[r].finish_step = index
                del self.states[r]
        # Host copies: this step's outputs (sync) or the previous step's (async: read only now,
        # after this step rewrote the buffer).
        if self.cfg.async_scheduling:
            to_copy, self.pending = self.pending, head_outs
        else:
            to_copy = head_outs
        for r, t, _ in to_copy:
            self._deliver(index, r, t)
        return self._record(index, step)

    def _record(self, index: int, step: ScheduledStep | None) -> StepRecord:
        live = self._measure()
        by_category = {"cache": 0, "output": 0, "head": 0}
        host_bytes = 0
        for nbytes, category, host, _ in live.values():
            if host:
                host_bytes += nbytes
            else:
                by_category[category] += nbytes
        delivered = {storage_key(t): storage_nbytes(t) for t in self.delivered.values()}
        host_bytes += sum(nb for key, nb in delivered.items() if key not in live)
        copy = sum(nb for _, nb, host_or_buffer in self._new.values() if not host_or_buffer)
        self._known = set(live)
        # Hold what is alive now through the next step, so no storage freed during it can hand
        # its address to a new one (addresses are how storages are told apart).
        self._start_refs = [t for *_, t in live.values()]
        self._new = {}
        pool_bytes = sum(by_category.values())
        return StepRecord(
            step=index,
            num_scheduled_tokens=0 if step is None else step.num_tokens,
            num_requests=0 if step is None else len(step.chunks),
            num_finished=0 if step is None else len(step.finished),
            context_sum=0 if step is None else step.context_sum,
            pool_bytes=pool_bytes,
            pool_peak_bytes=max(self._peak, pool_bytes),
            pool_cache_bytes=by_category["cache"],
            pool_output_bytes=by_category["output"],
            pool_head_bytes=by_category["head"],
            host_bytes=host_bytes,
            copy_bytes=copy + self._prealloc_writes,
            d2h_bytes=self._d2h,
        )

    # --- pooling, head, host copy ---------------------------------------------------------------

    def _pool(self, step: ScheduledStep) -> dict[int, Tensor]:
        cfg = self.cfg
        batch = [r for r, _, _ in step.chunks]
        hidden = self.buffer[: step.num_tokens]  # [n_step_tokens, width], a view
        token_ids = None
        if cfg.pooling_method == "STEP" and self.tag is not None:
            token_ids = [self.source.token_ids(r) for r in batch]
        had_buffer = {r: self.states[r].buffer is not None for r in batch}
        meta = build_metadata(
            [self.lens[r] for r in batch],
            num_scheduled_tokens=[stop - start for _, start, stop in step.chunks],
            seq_lens=[stop for _, _, stop in step.chunks],
            states=[self.states[r] for r in batch],
            prompt_token_ids=token_ids,
            step_tag_id=self.tag if token_ids is not None else None,
            returned_token_ids=list(cfg.selected_columns) if cfg.selected_columns else None,
            task=cfg.task,
        )
        if isinstance(self.pooler, LastPool):
            gathered = self.pooler(hidden, meta)  # [n_requests, width], owned
            self._checkpoint([gathered])
            index = {r: i for i, r in enumerate(batch)}
            pooled = {r: gathered[index[r]] for r in step.finished}  # [width] views of it
            self._step_outputs = list(pooled.values())
            return pooled
        outputs = self.pooler(hidden, meta)
        self._checkpoint(outputs)
        if self.offload:
            self._d2h += step.num_tokens * self.row_bytes  # every chunk went to the host
        elif cfg.policy == "prealloc" and cfg.enable_chunked_prefill:
            for r, start, stop in step.chunks:
                if had_buffer[r] or stop < self.lens[r]:  # the buffer path, not a one-shot
                    self._prealloc_writes += (stop - start) * self.row_bytes
        return {r: out for r, out in zip(batch, outputs, strict=True) if out is not None}

    def _reference(self, request: int) -> Tensor:
        """What pooling must hand over for ``request`` (pre-head), on the host."""
        ref = self.source.reference(request)  # [prompt_len, width]
        cfg = self.cfg
        if cfg.pooling_method == "LAST":
            return ref[-1]  # [width]
        if cfg.pooling_method == "STEP":
            if cfg.selected_columns is not None:
                ref = ref[:, list(cfg.selected_columns)]  # [prompt_len, k]
            if self.tag is not None:
                ref = ref[self.source.token_ids(request) == self.tag]  # [n_tags, k]
        return ref

    def _apply_head(self, x: Tensor) -> tuple[Tensor, Tensor]:
        cast = self.head.forward_one(x, use_activation=False)  # cast only (or x itself)
        if not self.cfg.use_activation:
            return cast, cast
        return cast, self.head.forward_one(cast, use_activation=True)

    def _head(self, step: ScheduledStep, pooled: dict[int, Tensor]) -> list:
        outs: list[tuple[int, Tensor, str]] = []
        self._step_outputs = list(pooled.values())
        for r in step.finished:
            x = pooled[r]
            ref = self._reference(r)
            expected = self._apply_head(ref)[1]
            # Oracle before the head. With an identity head the delivered copy is x itself,
            # read later, so the check at delivery is strictly stronger: skip this pass.
            if expected is not ref and not torch.equal(x.cpu(), ref):
                self.corrupted.add(r)
            self.expected[r] = expected
            cast = self.head.forward_one(x, use_activation=False)
            self._step_extra = [(t, "head") for _, t, c in outs if c == "head"]
            self._step_extra += [(t, "output") for _, t, c in outs if c == "output"]
            if cast is not x:
                self._checkpoint_with(cast)
            y = cast
            if self.cfg.use_activation:
                y = self.head.forward_one(cast, use_activation=True)
                self._checkpoint_with(cast, y)
            del cast
            outs.append((r, y, "output" if y is x else "head"))
        self._step_extra = []
        return outs

    def _checkpoint_with(self, *tensors: Tensor) -> None:
        saved = list(self._step_extra)
        self._step_extra += [(t, "head") for t in tensors]
        self._checkpoint()
        self._step_extra = saved

    def _deliver(self, index: int, request: int, t: Tensor) -> None:
        if self.offload:
            host = t  # already on the host
        else:
            host = torch.empty(t.shape, dtype=t.dtype, device="cpu")
            host.copy_(t)  # the device-to-host copy: reads the buffer NOW if t is a view
            self._d2h += host.numel() * host.element_size()
        if not torch.equal(host, self.expected.pop(request)):  # oracle, what the user gets
            self.corrupted.add(request)
        self.delivered[request] = host
        rec = self.requests[request]
        rec.delivered_step = index
        rec.output_bytes = host.numel() * host.element_size()


def run_tensor(
    prompt_lens: Sequence[int], config: SimConfig, steps: Sequence[ScheduledStep], source
) -> tuple[list[StepRecord], list[RequestRecord], set[int], list[Tensor]]:
    """Tensor-mode ledger of a schedule: ``(steps, requests, corrupted, delivered outputs)``."""
    engine = TensorEngine(prompt_lens, config, source)
    records = engine.run(steps)
    for r in engine.corrupted:
        engine.requests[r].corrupted = True
    outputs = [engine.delivered[r] for r in range(len(prompt_lens))]
    return records, engine.requests, engine.corrupted, outputs
