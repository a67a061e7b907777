"""Token-wise pooling (ALL, STEP) under chunked prefill, with four retention policies.

``AllPool`` hands each finished request its ``[prompt_len, hidden]`` hidden states. Under chunked
prefill a request's chunks arrive over several steps, in a buffer the next step reuses, so what
it keeps between steps decides both correctness and memory:

- ``legacy``   views only (pre PR #50931): wrong as soon as the buffer is reused.
- ``clone``    PR #50931: clone unfinished chunks (and, under async scheduling, a request that
               finishes in one shot); concat the chunks at the finish.
- ``prealloc`` one owned ``[prompt_len, hidden]`` buffer per request, each chunk copied in once;
               no concat, so no transient ``2T - L`` peak and one copy per token instead of two.
- ``offload``  each chunk copied to host memory as it arrives; nothing kept on the device.

See DESIGN.md ("Semantics", "Retention policies and memory") for the exact table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ..guard import ensure_fits
from ._checks import check_sequence_call, check_token_call, check_token_pool_options
from .keep_rule import RETENTION_POLICIES, KeepRule, RetentionPolicy, check_policy, keep_rule
from .metadata import PoolingCursor, PoolingMetadata, PoolingStates

__all__ = [
    "RETENTION_POLICIES", "AllPool", "CLSPool", "LastPool", "MeanPool", "RetentionPolicy",
    "StepPool", "check_policy", "get_pooling_method",
]

#: ``probe(event, outputs_so_far)`` is called after each allocation pooling makes, so a memory
#: ledger can measure live storages at the exact moments of a step (events: ``"retain"``,
#: ``"concat"``, ``"clean"``; StepPool adds ``"select"``, passing every tensor it holds).
MemoryProbe = Callable[[str, Sequence[Tensor | None]], None]


def _check_hidden(hidden_states: Tensor, cursor: PoolingCursor) -> list[int]:
    if not isinstance(hidden_states, Tensor):
        raise TypeError(f"hidden_states must be a Tensor, got {type(hidden_states).__name__}")
    if hidden_states.dim() != 2:
        raise ValueError(
            f"hidden_states must be [n_tokens, hidden], got shape {tuple(hidden_states.shape)}"
        )
    sizes = cursor.num_scheduled_tokens_cpu.tolist()
    if hidden_states.shape[0] != sum(sizes):
        raise ValueError(
            f"hidden_states has {hidden_states.shape[0]} rows but the cursor schedules "
            f"{sum(sizes)} tokens ({sizes}); slice the step's rows out of the buffer first"
        )
    return sizes


def _host_buffer(rows: int, like: Tensor) -> Tensor:
    # Pinned host memory lets the device-to-host copy run asynchronously on CUDA.
    pin = like.is_cuda and torch.cuda.is_available()
    return torch.empty((rows, like.shape[1]), dtype=like.dtype, device="cpu", pin_memory=pin)


class AllPool:
    """ALL pooling: every token's hidden state, per finished request.

    Args:
        enable_chunked_prefill: requests may arrive in several chunks (steps).
        async_scheduling: the engine launches step N+1 before collecting step N's output, so a
            finished output must own its storage (the buffer may be overwritten meanwhile).
        policy: what to keep between steps (see module docstring).

    Call:
        ``pool(hidden_states, metadata)`` with ``hidden_states`` ``[n_step_tokens, hidden]``
        returns one entry per request: ``[prompt_len, hidden]`` when it finishes this step,
        else ``None``. Without chunked prefill nothing is kept across steps, as in vLLM: every
        request's ``[n_scheduled, hidden]`` chunk is returned, finished or not (a request
        split by ``long_prefill_token_threshold`` gets its last chunk only; the engine drops
        unfinished requests' outputs).

    Raises:
        ValueError: unknown policy; rows that do not match the cursor; a chunk that does not
            continue what the request's state holds (pass the previous step's states).
    """
    pooling_type = "ALL"

    def __init__(
        self,
        *,
        enable_chunked_prefill: bool = True,
        async_scheduling: bool = False,
        policy: RetentionPolicy = "clone",
    ) -> None:
        check_token_pool_options(enable_chunked_prefill, async_scheduling, policy)
        check_policy(policy)
        self.enable_chunked_prefill = bool(enable_chunked_prefill)
        self.async_scheduling = bool(async_scheduling)
        self.policy = policy
        self.probe: MemoryProbe | None = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(enable_chunked_prefill={self.enable_chunked_prefill}, "
            f"async_scheduling={self.async_scheduling}, policy={self.policy!r})"
        )

    def get_supported_tasks(self) -> frozenset[str]:
        return frozenset({"token_embed", "token_classify"})

    def _notify(self, event: str, outputs: Sequence[Tensor | None]) -> None:
        if self.probe is not None:
            self.probe(event, outputs)

    def __call__(self, hidden_states: Tensor, metadata: PoolingMetadata) -> list[Tensor | None]:
        check_token_call(hidden_states, metadata, type(self).__name__)
        return self.forward(hidden_states, metadata)

    def rule(self, *, finished: bool, first_chunk: bool) -> KeepRule:
        """The ownership-table cell for one chunk (``tokpool.pooler.keep_rule``)."""
        return keep_rule(self.policy, chunked=self.enable_chunked_prefill,
                         async_scheduling=self.async_scheduling, finished=finished,
                         first_chunk=first_chunk)

    def forward(self, hidden_states: Tensor, metadata: PoolingMetadata) -> list[Tensor | None]:
        cursor = metadata.get_pooling_cursor()
        sizes = _check_hidden(hidden_states, cursor)
        chunks = list(torch.split(hidden_states, sizes))  # each [n_scheduled_i, hidden] (views)
        states = metadata.pooling_states
        if self.enable_chunked_prefill:  # without it nothing is kept: states are not read
            self._check_continuity(states, cursor)
        finished = cursor.get_finished_mask()
        prompt_lens = cursor.prompt_lens_cpu.tolist()
        # "first chunk" is an empty cache (vLLM: not p.hidden_states_cache); a state kept
        # across a preemption (stale_tokens) is not empty at the restart
        rules = [
            self.rule(finished=bool(done), first_chunk=before == 0 and not state.num_cached_tokens)
            for before, done, state in zip(cursor.num_computed_before.tolist(), finished, states,
                                           strict=True)
        ]
        # 1. Keep each chunk as the table says (clones and buffer copies happen here).
        for state, chunk, rule, prompt_len in zip(states, chunks, rules, prompt_lens,
                                                  strict=True):
            self._keep(state, chunk, rule, prompt_len)
        # 2. Hand finished requests their whole prompt and clean their state.
        outputs: list[Tensor | None] = []
        for state, rule in zip(states, rules, strict=True):
            if rule.returns is None:
                outputs.append(None)
                continue
            if rule.returns == "chunk":
                outputs.append(state.hidden_states_cache[0])
            elif rule.returns == "buffer":
                outputs.append(state.buffer)
            else:
                # [prompt_len, hidden], new storage; the final chunk may stay a view because
                # the concat copies it right away.
                outputs.append(torch.cat(state.hidden_states_cache, dim=0))
                self._notify("concat", outputs)
            state.clean()
            self._notify("clean", outputs)
        return outputs

    def _keep(self, state: PoolingStates, chunk: Tensor, rule: KeepRule, prompt_len: int) -> None:
        if rule.keep in ("view", "clone"):
            state.hidden_states_cache.append(chunk.clone() if rule.keep == "clone" else chunk)
            if rule.keep == "clone":
                self._notify("retain", [])
            return
        if state.buffer is None:

            width = chunk.shape[1]
            ensure_fits(
                prompt_len * width * chunk.element_size(),  # [prompt_len, width] buffer bytes
                what=f"policy={self.policy!r}: the [{prompt_len:,}, {width:,}] "
                     f"{'host' if rule.keep == 'host' else 'device'} buffer of one request",
                cheaper="policy='clone' (memory grows with the chunks computed) or a shorter "
                        "prompt",
                device=None if rule.keep == "host" else chunk.device,
            )
            state.buffer = (
                _host_buffer(prompt_len, chunk)
                if rule.keep == "host"
                else chunk.new_empty((prompt_len, chunk.shape[1]))  # [prompt_len, hidden]
            )
        start = state.num_filled
        state.buffer[start : start + chunk.shape[0]].copy_(chunk)
        state.num_filled += chunk.shape[0]
        self._notify("retain", [])

    @staticmethod
    def _check_continuity(states: list[PoolingStates], cursor: PoolingCursor) -> None:
        if len(states) != len(cursor):
            raise ValueError(f"{len(states)} pooling states for {len(cursor)} requests")
        before = cursor.num_computed_before.tolist()
        for i, (state, done) in enumerate(zip(states, before, strict=True)):
            if state.num_cached_tokens - state.stale_tokens != done:
                raise ValueError(
                    f"request {i}: the cursor says {done} tokens were computed before this step "
                    f"but its pooling state holds {state.num_cached_tokens}; pass the previous "
                    "step's meta.pooling_states as states= (and clean states on preemption)"
                )


class StepPool(AllPool):
    """STEP pooling for process reward models: ALL, then columns, then step-tag rows.

    For each finished request: keep columns ``returned_token_ids`` (if given), then rows whose
    prompt token equals ``step_tag_id`` (if given; no match gives ``(0, width)``). A head runs
    after this selection, so a PRM's softmax is over the selected columns only.
    """
    pooling_type = "STEP"
    # vLLM 0.33.0's StepPool inherits AllPool's task set: token_embed is served too.

    def forward(self, hidden_states: Tensor, metadata: PoolingMetadata) -> list[Tensor | None]:
        pooled = super().forward(hidden_states, metadata)
        needs_ids = any(
            data is not None and tag is not None
            for data, tag in zip(pooled, metadata.step_tag_ids, strict=True)
        )
        token_ids = metadata.get_prompt_token_ids_cpu() if needs_ids else [None] * len(pooled)
        out: list[Tensor | None] = []
        for data, ids, tag, columns in zip(
            pooled, token_ids, metadata.step_tag_ids, metadata.returned_token_ids, strict=True
        ):
            if data is None:
                out.append(None)
                continue
            if columns:
                width = data.shape[1]
                bad = [c for c in columns if not -width <= c < width]
                if bad:
                    raise ValueError(
                        f"returned_token_ids {bad} are outside the pooled width {width}"
                    )
                selected = data[:, list(columns)]  # [prompt_len, n_columns], new storage
                self._notify("select", [*out, selected, *pooled])
                data = selected
            if tag is not None:
                if data.shape[0] != ids.shape[0]:
                    raise ValueError(
                        f"STEP pooling with step_tag_id={tag} selects rows of the whole "
                        f"{ids.shape[0]}-token prompt, but this request's output holds "
                        f"{data.shape[0]} rows: chunked prefill is off and the prompt was "
                        "split (long_prefill_token_threshold). vLLM 0.33.0's StepPool fails "
                        "here too (IndexError); enable chunked prefill or schedule whole "
                        "prompts"
                    )
                rows = (ids == tag).nonzero(as_tuple=True)[0].to(data.device)
                selected = data[rows]  # [n_steps, n_columns], new storage
                self._notify("select", [*out, selected, data, *pooled])
                data = selected
            out.append(data)
        return out


# --- sequence-level poolers ---------------------------------------------------------------

_MEAN_POOL_ACCUMULATION_CHUNK_BYTES = 16 * 1024 * 1024  # bounds the float32 temporary


class CLSPool:
    """First token of each request: ``[n_requests, hidden]``. Needs whole prompts."""
    pooling_type = "CLS"

    def get_supported_tasks(self) -> frozenset[str]:
        return frozenset({"embed", "classify", "token_embed", "token_classify"})

    def __call__(self, hidden_states: Tensor, metadata: PoolingMetadata) -> Tensor:
        check_sequence_call(hidden_states, metadata, type(self).__name__)
        cursor = metadata.get_pooling_cursor()
        if cursor.is_partial_prefill():
            raise RuntimeError("partial prefill is not supported with CLS pooling")
        _check_hidden(hidden_states, cursor)
        return hidden_states[cursor.first_token_indices_gpu]


class LastPool(CLSPool):
    """Last scheduled token of each request: ``[n_requests, hidden]``; never raises on partial
    steps (it returns the last token of the chunk)."""

    pooling_type = "LAST"

    def __call__(self, hidden_states: Tensor, metadata: PoolingMetadata) -> Tensor:
        check_sequence_call(hidden_states, metadata, type(self).__name__)
        cursor = metadata.get_pooling_cursor()
        _check_hidden(hidden_states, cursor)
        return hidden_states[cursor.last_token_indices_gpu]


class MeanPool(CLSPool):
    """Mean over each request's tokens, accumulated and returned in float32:
    ``[n_requests, hidden]``. Needs whole prompts."""

    pooling_type = "MEAN"

    def __call__(self, hidden_states: Tensor, metadata: PoolingMetadata) -> Tensor:
        check_sequence_call(hidden_states, metadata, type(self).__name__)
        cursor = metadata.get_pooling_cursor()
        if cursor.is_partial_prefill():
            raise RuntimeError("partial prefill is not supported with MEAN pooling")
        _check_hidden(hidden_states, cursor)
        lens = cursor.prompt_lens_cpu
        n, hidden = int(lens.numel()), hidden_states.shape[-1]
        device = hidden_states.device
        if n == 0:
            return hidden_states.new_empty((0, hidden), dtype=torch.float32)
        segment = torch.repeat_interleave(torch.arange(n, device=device), lens.to(device))
        sums = torch.zeros((n, hidden), dtype=torch.float32, device=device)
        rows = max(1, _MEAN_POOL_ACCUMULATION_CHUNK_BYTES // (hidden * 4))
        for start in range(0, hidden_states.shape[0], rows):
            stop = start + rows
            sums.index_add_(0, segment[start:stop], hidden_states[start:stop].float())
        return sums / lens.to(device=device, dtype=torch.float32).unsqueeze(1)


PoolingMethod = AllPool | StepPool | CLSPool | LastPool | MeanPool


def get_pooling_method(name: str, **kwargs) -> PoolingMethod:
    """Pooling method by vLLM's name: ``"ALL" | "STEP" | "CLS" | "LAST" | "MEAN"``.

    Keyword arguments go to ``AllPool``/``StepPool`` (chunked prefill, async, policy).

    Raises:
        NotImplementedError: an unknown name (named in the message).
    """
    token_methods = {"ALL": AllPool, "STEP": StepPool}
    sequence_methods = {"CLS": CLSPool, "LAST": LastPool, "MEAN": MeanPool}
    if name in token_methods:
        return token_methods[name](**kwargs)
    if name in sequence_methods:
        if kwargs:
            raise TypeError(f"{name} pooling takes no options, got {sorted(kwargs)}")
        return sequence_methods[name]()
    raise NotImplementedError(
        f"Unknown pooling type: {name!r}; choose one of "
        f"{sorted(token_methods) + sorted(sequence_methods)}"
    )
