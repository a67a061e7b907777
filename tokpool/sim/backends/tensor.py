"""Tensor backend: the engine loop (``backends.loop``) on real tensors, with an oracle.

Each step's hidden states are written where the engine would put them: rows of the persistent
graph-output buffer (a replay; padding rows get NaN, as a replay overwrites its whole padded
size), a fresh eager tensor, or the teaching model's one buffer. Pooling is the core pooler of
the config's pooling kind (``AllPool``/``StepPool``/``LastPool``), then the core's heads; host
copies go to (pinned, on CUDA) host memory, on a side stream when ``device`` is a GPU.

Memory is measured from real storages: at the start of the step, after every allocation pooling
reports through ``AllPool.probe``, after the pooler returns, after each head tensor, and at the
end. Each measure walks every tensor the engine holds (``PoolingStates.tensors()`` of running
requests, pooling's outputs, head outputs, outputs awaiting their host copy) and sums unique
storages, skipping the persistent buffer and the step's own output while its step runs (after
that, an eager output kept alive by a view is pooling's: pinned). The oracle compares, with
``torch.equal``, each pooled output before the head with the reference (the pooling kind's:
``source.reference``, then STEP's selection) and each delivered host output with the head
applied to that reference.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from ...pooler.heads import TokenClassifierHead, TokenEmbeddingHead
from ...pooler.jina_ranking import marker_positions
from ...pooler.keep_rule import KeepRule
from ...pooler.late_chunking import late_chunk_stages
from ...pooler.metadata import PoolingStates, build_metadata
from ...pooler.ownership import storage_key, storage_nbytes
from ..config import SimConfig
from ..memory.ledger import RequestRecord, StepRecord
from ..schedule.scheduler import ScheduledStep
from ..vllm_rules.classifier import drops_bos, projector_layers
from ..vllm_rules.step_memory import StepOutput
from .loop import EngineLoop


def make_pooler(config: SimConfig):
    """The pooling method the config's pooling kind runs (``vllm_rules.pooling_kind``)."""
    return config.pooling_kind.pooler(config)


def make_head(config: SimConfig) -> TokenEmbeddingHead | TokenClassifierHead:
    """The core head the config describes (no projector; the classifier when it runs in the
    pooler head: ``make_classifier``).

    The simulator must deliver corrupted outputs to observe them, and a replay's padding rows
    hold NaN (see ``TensorEngine.write_step``), so its heads do not refuse non-finite input.
    """
    head_dtype = config.head_dtype if config.head_casts else None
    if config.task in ("token_embed", "embed"):
        return TokenEmbeddingHead(head_dtype=head_dtype, check_finite=False)
    return TokenClassifierHead(head_dtype=head_dtype, classifier=make_classifier(config),
                               check_finite=False)


def make_classifier(config: SimConfig):
    """The adapter's score head when it runs in the pooler head (``vllm_rules.classifier``):
    ``[rows, hidden] -> [rows, num_labels]`` in the head dtype (vLLM's ``ReplicatedLinear``
    with ``params_dtype=head_dtype``), fixed seeded weights; ``None`` otherwise. A plain
    weight, not a parameter: autograd must not keep the input alive."""
    if config.task not in ("token_classify", "classify") or config.classifier != "pooler_head":
        return None
    generator = torch.Generator().manual_seed(28)
    weight = torch.randn((config.num_labels, config.hidden_size), generator=generator)
    weight = weight.to(config.output_dtype)  # [num_labels, hidden]
    return lambda x: torch.nn.functional.linear(x, weight.to(x.device))  # [rows, num_labels]


def make_projector(config: SimConfig) -> list:
    """The token_embed head's projector layers (``vllm_rules.classifier.projector_layers``):
    seeded ``[width, in]`` Linear weights (plain tensors, no autograd) in the input's dtype,
    and ``tanh`` for an activation layer (its values do not matter, its tensor does)."""
    generator = torch.Generator().manual_seed(29)
    layers, width = [], config.width
    for out, linear in projector_layers(config):
        if not linear:
            layers.append(torch.tanh)
            continue
        weight = torch.randn((out, width), generator=generator) / width ** 0.5  # [out, in]
        layers.append(lambda x, w=weight: torch.nn.functional.linear(x, w.to(x.device, x.dtype)))
        width = out
    return layers


class TensorEngine(EngineLoop):
    """Runs a schedule on real tensors; see the module docstring."""

    #: What a replay writes in its padding rows: NaN differs from every reference row, so the
    #: oracle sees a view of those rows as corrupted (the simulator's heads pass NaN through).
    padding_value = float("nan")

    def __init__(self, prompt_lens: Sequence[int], config: SimConfig, source,
                 device: torch.device | str = "cpu", *,
                 pooling_params: Sequence | None = None, aborts: Sequence = ()) -> None:
        super().__init__(prompt_lens, config, config.pooling_kind.kept_rows(
            config, source, len(prompt_lens)), pooling_params=pooling_params, aborts=aborts)
        self.source = source
        self.device = torch.device(device)
        # The persistent output memory: [rows, width], never reallocated (graph output).
        self.buffer = torch.empty((config.buffer_rows, config.width), dtype=config.dtype,
                                  device=self.device)
        self._buffer_key = storage_key(self.buffer) if self.buffer.numel() else None
        self._step_output: Tensor | None = None  # this step's eager output, engine-held
        self._step_output_keys: set = set()
        self._hidden: Tensor | None = None
        self._copy_stream = (torch.cuda.Stream(device=self.device)
                             if self.device.type == "cuda" else None)
        self._inflight: dict[int, tuple[Tensor, torch.cuda.Event]] = {}
        self.pooler = make_pooler(config)
        self.head_module = make_head(config)
        self._classifier = self.head_module.__dict__.get("classifier")
        self._projector = make_projector(config)
        # the activation alone (the cast and the classifier are their own stages)
        self._activation = (TokenEmbeddingHead(head_dtype=None, check_finite=False)
                            if config.task in ("token_embed", "embed") else
                            TokenClassifierHead(head_dtype=None, check_finite=False))
        self.offload = self.outputs_on_host
        # Offload keeps chunks on the host, but a chunk handed over as it is (a split without
        # chunked prefill, keep_rule's "chunk") stays on the device: its storages, this step's.
        self._device_outputs: set = set()
        self.tag = self.kind.row_tag(config)
        self.states: dict[int, PoolingStates] = {}
        self.delivered: dict[int, Tensor] = {}
        self.expected: dict[int, Tensor] = {}
        self.corrupted: set[int] = set()
        if self.kind.token_level:  # AllPool and its kin report each allocation
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
            yield t, "output", self._on_host(t), False
        for category in ("output", "head"):
            for t, cat in self._step_extra:
                if cat == category:
                    yield t, cat, self._on_host(t) if cat == "output" else self.offload, False
            for _, t, cat in self.pending:
                if cat == category:
                    yield t, cat, self._on_host(t) if cat == "output" else self.offload, False

    def _on_host(self, output: Tensor | None) -> bool:
        """Whether pooling's ``output`` lives on the host: offload's buffers do, a chunk
        handed over as it is does not (the counting backend looks at the output the same way)."""
        return (self.offload and output is not None
                and storage_key(output) not in self._device_outputs)

    def _measure(self) -> dict:
        """Unique live storages: ``key -> (nbytes, category, on_host, tensor)``; notes new ones."""
        live: dict = {}
        engine_held = {self._buffer_key}
        if self._step_output is not None:
            engine_held.add(storage_key(self._step_output))
        for t, category, host, is_buffer in self._held():
            if t is None:
                continue
            nbytes = storage_nbytes(t)
            key = storage_key(t)
            if nbytes == 0 or key in engine_held or key in live:
                continue
            live[key] = (nbytes, category, host, t)
            if key not in self._known and key not in self._new:
                # Keeping a reference also keeps this address from being reused this step.
                # An eager step output pinned by a view was written by the model, not pooling.
                written_by_model = key in self._step_output_keys
                self._new[key] = (t, nbytes, host or is_buffer or written_by_model)
        return live

    def _checkpoint(self, outputs: Sequence[Tensor | None] | None = None) -> None:
        if outputs is not None:
            self._step_outputs = list(outputs)
        live = self._measure()
        device = sum(nbytes for nbytes, _, host, _ in live.values() if not host)
        self._peak = max(self._peak, device)

    # --- loop hooks ------------------------------------------------------------------------

    def begin_iteration(self, index: int) -> None:
        # Only outputs still waiting for their host copy matter; a freed storage's address
        # may be handed to a new one.
        pending = {storage_key(t) for _, t, _ in self.pending}
        self._device_outputs &= pending
        self._new = {}
        self._peak = 0
        self._step_outputs, self._step_extra = [], []
        self._d2h = 0
        self._prealloc_writes = 0
        self._step_output_keys: set = set()
        self._checkpoint()  # the step starts with what the last one left

    def write_step(self, index: int, step: ScheduledStep, out: StepOutput) -> None:
        n = step.num_tokens
        if out.fresh:
            # [n_step_tokens, width]: a fresh output tensor, as an eager forward allocates.
            hidden = torch.empty((n, self.cfg.width), dtype=self.cfg.dtype, device=self.device)
            self._step_output = hidden
            self._step_output_keys.add(storage_key(hidden))
        else:
            hidden = self.buffer[:n]  # rows [0, n) of the persistent buffer
            if out.rows_written > n and hidden.is_floating_point():
                self.buffer[n : out.rows_written].fill_(self.padding_value)  # a replay's padding
        skip = getattr(self.source, "skip_cached", None)  # optional: see HiddenStateSource
        for r, tokens in step.cached if skip is not None else ():
            skip(r, tokens)  # a prefix-cache hit: the source starts the request after them
        self.source.fill(hidden, step.chunks)  # [n_step_tokens, width] in place
        self._hidden = hidden
        for r in self.fresh_states:  # a prefill (re)starts: new pooling state (not a kept one)
            self.states[r] = PoolingStates()

    def end_iteration(self, index: int) -> None:
        self._step_output = None  # the engine lets go of it: only views keep it alive now
        self._hidden = None

    def pool(self, index: int, step: ScheduledStep, rules: list[KeepRule]) -> dict[int, Tensor]:
        cfg = self.cfg
        batch = [r for r, _, _ in step.chunks]
        hidden = self._hidden  # [n_step_tokens, width]
        token_ids = None
        if self.kind.needs_token_ids(cfg):  # the kind selects rows by their token id
            token_ids = [self.source.token_ids(r) for r in batch]
        columns = self.kind.columns(cfg)
        meta = build_metadata(
            [self.lens[r] for r in batch],
            num_scheduled_tokens=[stop - start for _, start, stop in step.chunks],
            seq_lens=[stop for _, _, stop in step.chunks],
            states=[self.states[r] for r in batch],
            prompt_token_ids=token_ids,
            step_tag_id=self.tag if token_ids is not None else None,
            returned_token_ids=list(columns) if columns else None,
            task=cfg.task,
        )
        if not self.kind.token_level:  # LastPool: one gathered row per request
            gathered = self.pooler(hidden, meta)  # [n_requests, width], owned
            self._checkpoint([gathered])
            index_of = {r: i for i, r in enumerate(batch)}
            pooled = {r: gathered[index_of[r]] for r in step.finished}  # [width] views of it
            self._step_outputs = list(pooled.values())
            self._drop_finished(step)
            return pooled
        outputs = self.pooler(hidden, meta)
        self._check_gathered(batch)
        if self.offload and not self.kind.selects(cfg):  # a selection is made on the host
            self._device_outputs.update(
                storage_key(out) for out, rule in zip(outputs, rules, strict=True)
                if out is not None and rule.returns == "chunk")
        self._checkpoint(outputs)
        for (_, start, stop), rule in zip(step.chunks, rules, strict=True):
            if rule.keep == "host":
                self._d2h += (stop - start) * self.row_bytes  # chunk copied to the host
            elif rule.keep == "buffer":
                self._prealloc_writes += (stop - start) * self.row_bytes
        self._drop_finished(step)
        return {r: out for r, out in zip(batch, outputs, strict=True) if out is not None}

    def _check_gathered(self, batch: list[int]) -> None:
        """JinaForRanking: the marker rows as gathered, before the projector, against the
        prompt's own (the projector's ReLU can map an overwritten row to the right output,
        which the check at delivery would then miss); the pooler lets go of them."""
        gathered = getattr(self.pooler, "last_gathered", None)
        if not gathered:
            return
        for r, rows in zip(batch, gathered, strict=True):
            if rows is None:
                continue
            positions = marker_positions(self.source.token_ids(r))
            if not torch.equal(rows.cpu(), self.source.reference(r)[positions]):
                self.corrupted.add(r)
        self.pooler.last_gathered = []

    def _drop_finished(self, step: ScheduledStep) -> None:
        for r in step.finished:
            del self.states[r]

    def _reference(self, request: int) -> Tensor:
        """What pooling must hand over for ``request`` (pre-head), on the host."""
        return self.kind.reference(self.cfg, self.source, request)

    def _head_stages(self, x: Tensor, params=None):
        """The head's tensors for ``x``, in order, as ``(tensor, transient)``
        (``vllm_rules.classifier.head_tensors``: late chunking's means, cast, classifier,
        the Matryoshka slice, activation), each yielded as it is made; pooling's tensor itself
        is never yielded (a slice of it is)."""
        cfg = self.cfg
        if not self.kind.has_head:
            return  # TokenPooler(head=None): pooling's output is delivered as it is
        embed = cfg.task in ("token_embed", "embed")
        activation = cfg.use_activation
        if params is not None and params.use_activation is not None:
            activation = bool(params.use_activation)
        y = x
        if params is not None and params.late_chunking_size is not None and embed:
            for y, transient in late_chunk_stages(x, params.late_chunking_size):
                yield y, transient  # float32 chunk means: [ceil(n / chunk), width]
            target = cfg.head_dtype if cfg.head_dtype is not None else cfg.dtype
            if y.dtype != target:
                y = y.to(target)  # [rows, width] head dtype (no head dtype: the model's)
                yield y, False
        elif cfg.head_casts:
            y = x.to(cfg.head_dtype)  # [rows, width] head dtype
            yield y, False
        for i, layer in enumerate(self._projector):
            y = layer(y)  # [rows, layer width]
            yield y, i < len(self._projector) - 1
        if self._classifier is not None:
            y = self._classifier(y)  # [rows, num_labels]
            yield y, False
        if params is not None and params.dimensions is not None and embed:
            y = y[..., : params.dimensions]  # [rows, dimensions]: a view
            if not activation:
                yield y, False
        if activation:
            y = self._activation.forward_one(y, use_activation=True)
            yield y, False
        if drops_bos(cfg) and (params is None or params.late_chunking_size is None):
            yield y[1:], False  # BOSEOSFilter: the BOS row dropped, a view

    def _apply_head(self, x: Tensor, params=None) -> Tensor:
        stages = [t for t, _ in self._head_stages(x, params)]
        return stages[-1] if stages else x

    def head(self, step: ScheduledStep, pooled: dict[int, Tensor]) -> list:
        outs: list[tuple[int, Tensor, str]] = []
        self._step_outputs = list(pooled.values())
        for r in step.finished:
            x = pooled[r]
            ref = self._reference(r)
            expected = self._apply_head(ref, self.params[r])
            # Oracle before the head. With an identity head the delivered copy is x itself,
            # read later, so the check at delivery is strictly stronger: skip this pass.
            if expected is not ref and not torch.equal(x.cpu(), ref):  # pre-head: no NaN of its own
                self.corrupted.add(r)
            self.expected[r] = expected
            self._step_extra = [(t, "head") for _, t, c in outs if c == "head"]
            self._step_extra += [(t, "output") for _, t, c in outs if c == "output"]
            made: list[Tensor] = []
            transients: list[Tensor] = []
            for t, transient in self._head_stages(x, self.params[r]):  # forward_chunk's locals
                made.append(t)
                self._checkpoint_with(*made)
                if transient:
                    transients.append(t)
                elif transients:  # torch.cat's inputs die once it exists
                    made = [m for m in made if not any(m is d for d in transients)]
                    transients = []
            y = made[-1] if made else x
            del made, transients
            base = x if x._base is None else x._base
            of_x = y is x or y._base is base  # pooling's tensor, or its Matryoshka slice
            outs.append((r, y, "output" if of_x else "head"))
        self._step_extra = []
        self._step_outputs = []
        if self._copy_stream is not None:
            self._launch_copies(outs)
        return outs

    def _launch_copies(self, outs: list) -> None:
        """CUDA: enqueue each output's device-to-host copy on the copy stream at the END of its
        step, as vLLM's ``AsyncPoolingOutput`` does; the main stream does not wait for it, so
        under async scheduling the next step's writes race the copy on the hardware."""
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(self.device))
        self._copy_stream.wait_event(done)
        with torch.cuda.stream(self._copy_stream):
            for r, t, _ in outs:
                if self._on_host(t):
                    continue  # already on the host
                host = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
                host.copy_(t, non_blocking=True)
                event = torch.cuda.Event()
                event.record(self._copy_stream)
                self._inflight[r] = (host, event)

    def _checkpoint_with(self, *tensors: Tensor) -> None:
        saved = list(self._step_extra)
        self._step_extra += [(t, "head") for t in tensors]
        self._checkpoint()
        self._step_extra = saved

    def preempt(self, request: int, *, keep_state: bool = False) -> None:
        if keep_state:  # V1: the chunks stay; the resumed prefill appends to them
            state = self.states[request]
            state.stale_tokens = state.num_cached_tokens
        else:
            self.states.pop(request).clean()  # its clones / buffer are freed
        self.source.reset(request)  # its KV cache is gone: the prefill restarts at token 0

    def state_bytes(self, request: int) -> tuple[int, int] | None:
        state = self.states.get(request)
        if state is None:
            return None
        # owned chunks (clones: no base); views of step output memory own nothing
        device = sum(storage_nbytes(t) for t in state.hidden_states_cache if t._base is None)
        host = 0
        if state.buffer is not None:
            if self.offload:
                host = storage_nbytes(state.buffer)
            else:
                device += storage_nbytes(state.buffer)
        return device, host

    def output_nbytes(self, output: Tensor) -> int:
        return (0 if self._on_host(output) or not self.host_copy_copies
                else output.numel() * output.element_size())

    def deliver(self, index: int, request: int, t: Tensor) -> int:
        if self._on_host(t):
            host = t  # already on the host
        elif not self.host_copy_copies:
            host = t.to("cpu")  # vLLM's CPU platform: the tensor itself, 0 bytes copied
        else:
            if request in self._inflight:  # CUDA: the copy launched at the end of its step
                host, event = self._inflight.pop(request)
                event.synchronize()
            else:
                host = torch.empty(t.shape, dtype=t.dtype, device="cpu")
                host.copy_(t)  # the device-to-host copy: reads the memory NOW if t is a view
            self._d2h += host.numel() * host.element_size()
        if not _same_values(host, self.expected.pop(request)):  # oracle, what the user gets
            self.corrupted.add(request)
        self.delivered[request] = host
        return host.numel() * host.element_size()

    def memory(self) -> dict[str, int]:
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
        copy = sum(nb for _, nb, not_pooling in self._new.values() if not not_pooling)
        self._known = set(live)
        # Hold what is alive now through the next step, so no storage freed during it can hand
        # its address to a new one (addresses are how storages are told apart).
        self._start_refs = [t for *_, t in live.values()]
        self._new = {}
        pool_bytes = sum(by_category.values())
        return {
            "pool_bytes": pool_bytes,
            "pool_peak_bytes": max(self._peak, pool_bytes),
            "pool_cache_bytes": by_category["cache"],
            "pool_output_bytes": by_category["output"],
            "pool_head_bytes": by_category["head"],
            "host_bytes": host_bytes,
            "copy_bytes": copy + self._prealloc_writes,
            "d2h_bytes": self._d2h,
        }


def run_tensor(
    prompt_lens: Sequence[int], config: SimConfig, steps: Sequence[ScheduledStep], source,
    *, device: torch.device | str = "cpu", pooling_params: Sequence | None = None,
    aborts: Sequence = (), engine_cls: type[TensorEngine] | None = None, **engine_args,
) -> tuple[list[StepRecord], list[RequestRecord], set[int], list[Tensor | None],
           TensorEngine]:
    """Tensor-mode ledger of a schedule: ``(steps, requests, corrupted, delivered outputs,
    engine)``; the engine holds ``chunks`` and the loop's own verdict ``judged``.
    ``pooling_params``: per request, its ``tp.PoolingParams`` or ``None``; ``engine_cls``
    (with its ``engine_args``): another tensor engine (mixed tasks: ``backends.mixed``)."""
    engine = (engine_cls or TensorEngine)(prompt_lens, config, source, device=device,
                                          pooling_params=pooling_params, aborts=aborts,
                                          **engine_args)
    records = engine.run(steps)
    engine.finish(engine.corrupted)
    outputs = [engine.delivered.get(r) for r in range(len(prompt_lens))]  # None: aborted
    return records, engine.requests, engine.corrupted, outputs, engine


def _same_values(got: Tensor, expected: Tensor) -> bool:
    """``torch.equal`` where a NaN the head itself makes counts as equal to the same NaN.

    A float16 head normalising an all-zero row (late chunking's mean of ``+c`` and ``-c``)
    divides 0 by an ``eps`` that underflows to 0: NaN, as in vLLM. ``torch.equal`` calls
    NaN unequal to itself, which would flag that output corrupted; a view that reads the
    NaN padding rows instead of real values still differs from the oracle.
    """
    if torch.equal(got, expected):
        return True
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return False
    nan = torch.isnan(got)
    return torch.equal(nan, torch.isnan(expected)) and torch.equal(got[~nan], expected[~nan])
