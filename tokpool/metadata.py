"""The pooling data model, mirroring vLLM's ``vllm/v1/pool/metadata.py`` (Model Runner V2).

One step of an engine schedules some tokens of some requests. ``PoolingCursor`` says, per request
in batch order, how many tokens this step holds and where they sit in the flat hidden-state batch;
``PoolingStates`` is what a request carries from step to step (its chunk cache); and
``PoolingMetadata`` bundles both with the prompt's token ids for STEP pooling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor


class PoolingStates:
    """Per-request pooling state that outlives a step.

    Created when the request is added; cleaned on finish, abort and preemption (a preempted
    request restarts its prefill from scratch, so its cache must go).

    Attributes:
        hidden_states_cache: chunks kept by ``AllPool`` (policies ``legacy``/``clone``),
            each ``[n_tokens_in_chunk, hidden]``.
        buffer: the one owned ``[prompt_len, hidden]`` tensor of policies ``prealloc``
            (device) and ``offload`` (host), or ``None``.
        num_filled: rows of ``buffer`` written so far.
    """

    __slots__ = ("buffer", "hidden_states_cache", "num_filled")

    def __init__(self) -> None:
        self.hidden_states_cache: list[Tensor] = []
        self.buffer: Tensor | None = None
        self.num_filled: int = 0

    @property
    def num_cached_tokens(self) -> int:
        """Tokens of this request's prompt that pooling holds so far."""
        if self.buffer is not None:
            return self.num_filled
        return sum(int(t.shape[0]) for t in self.hidden_states_cache)

    def tensors(self) -> list[Tensor]:
        """Every tensor this state keeps alive (for memory accounting)."""
        kept = list(self.hidden_states_cache)
        if self.buffer is not None:
            kept.append(self.buffer)
        return kept

    def clean(self) -> None:
        """Drop everything cached (finish, abort, preemption)."""
        self.hidden_states_cache.clear()
        self.buffer = None
        self.num_filled = 0

    def __repr__(self) -> str:
        return (
            f"PoolingStates(cached_chunks={len(self.hidden_states_cache)}, "
            f"cached_tokens={self.num_cached_tokens})"
        )


def _exclusive_cumsum(counts: Tensor) -> Tensor:
    starts = torch.zeros_like(counts)
    if counts.numel() > 1:
        torch.cumsum(counts[:-1], dim=0, out=starts[1:])
    return starts


@dataclass
class PoolingCursor:
    """Where each request's tokens sit in this step's flat hidden-state batch.

    All tensors are 1-D with one entry per request, in batch order. The ``*_cpu`` fields are on
    the host (vLLM keeps them there to avoid device syncs); the token indices are on the device
    of the hidden states.

    Attributes:
        index: request positions in the batch this cursor was cut from.
        first_token_indices_gpu: exclusive cumsum of scheduled tokens.
        last_token_indices_gpu: cumsum of scheduled tokens minus one.
        prompt_lens_cpu: full prompt length per request.
        seq_lens_cpu: tokens computed *after* this step (``num_computed + num_scheduled``).
        num_scheduled_tokens_cpu: tokens of the request in this step.
    """

    index: list[int]
    first_token_indices_gpu: Tensor
    last_token_indices_gpu: Tensor
    prompt_lens_cpu: Tensor
    seq_lens_cpu: Tensor
    num_scheduled_tokens_cpu: Tensor

    @classmethod
    def build(
        cls,
        num_scheduled_tokens: Tensor,
        prompt_lens: Tensor,
        seq_lens: Tensor,
        *,
        device: torch.device | str | None = None,
        index: list[int] | None = None,
    ) -> PoolingCursor:
        """Derive the token indices from per-request counts (all 1-D int64 CPU tensors)."""
        starts = _exclusive_cumsum(num_scheduled_tokens)
        return cls(
            index=list(range(len(prompt_lens))) if index is None else index,
            first_token_indices_gpu=starts.to(device),
            last_token_indices_gpu=(starts + num_scheduled_tokens - 1).to(device),
            prompt_lens_cpu=prompt_lens,
            seq_lens_cpu=seq_lens,
            num_scheduled_tokens_cpu=num_scheduled_tokens,
        )

    # Friendlier names for the same fields.
    @property
    def num_scheduled_tokens(self) -> Tensor:
        return self.num_scheduled_tokens_cpu

    @property
    def prompt_lens(self) -> Tensor:
        return self.prompt_lens_cpu

    @property
    def seq_lens(self) -> Tensor:
        return self.seq_lens_cpu

    @property
    def first_token_indices(self) -> Tensor:
        return self.first_token_indices_gpu

    @property
    def last_token_indices(self) -> Tensor:
        return self.last_token_indices_gpu

    @property
    def num_computed_before(self) -> Tensor:
        """Tokens each request had computed before this step."""
        return self.seq_lens_cpu - self.num_scheduled_tokens_cpu

    def __len__(self) -> int:
        return int(self.prompt_lens_cpu.numel())

    def __getitem__(self, indices: slice) -> PoolingCursor:
        """The cursor of a sub-batch, with token indices recomputed relative to it."""
        if not isinstance(indices, slice):
            raise TypeError(f"a cursor is sliced with a slice, got {type(indices).__name__}")
        scheduled = self.num_scheduled_tokens_cpu[indices]
        return PoolingCursor.build(
            scheduled,
            self.prompt_lens_cpu[indices],
            self.seq_lens_cpu[indices],
            device=self.first_token_indices_gpu.device,
            index=self.index[indices],
        )

    def is_partial_prefill(self) -> bool:
        """Batch-level: true if any request's scheduled tokens differ from its prompt length."""
        return not bool(torch.all(self.prompt_lens_cpu == self.num_scheduled_tokens_cpu))

    def is_finished(self) -> Tensor:
        """Per request (bool tensor): the prompt is fully computed after this step."""
        return self.prompt_lens_cpu == self.seq_lens_cpu

    def get_finished_mask(self) -> list[bool]:
        return self.is_finished().tolist()


@dataclass
class PoolingMetadata:
    """Everything a pooling method needs about one step's batch.

    Attributes:
        prompt_lens: ``[n_requests]`` int64, CPU.
        prompt_token_ids: ``[n_requests, max_prompt_len]`` int64 padded with 0, or ``None``.
        pooling_states: one ``PoolingStates`` per request, batch order.
        pooling_cursor: the step's cursor.
        step_tag_ids: per request, the token id whose rows STEP pooling keeps (or ``None``).
        returned_token_ids: per request, the columns STEP pooling keeps (or ``None``).
        tasks: per request, the pooling task (or ``None``).
    """

    prompt_lens: Tensor
    prompt_token_ids: Tensor | None
    pooling_states: list[PoolingStates]
    pooling_cursor: PoolingCursor | None = None
    step_tag_ids: list[int | None] = field(default_factory=list)
    returned_token_ids: list[list[int] | None] = field(default_factory=list)
    tasks: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.prompt_lens)
        for name in ("step_tag_ids", "returned_token_ids", "tasks"):
            if not getattr(self, name):
                setattr(self, name, [None] * n)

    def __len__(self) -> int:
        return int(self.prompt_lens.numel())

    def get_pooling_cursor(self) -> PoolingCursor:
        if self.pooling_cursor is None:
            raise ValueError("this PoolingMetadata has no cursor; build it with build_metadata()")
        return self.pooling_cursor

    def get_prompt_token_ids_cpu(self) -> list[Tensor]:
        """Per request, its prompt token ids ``[prompt_len]`` (padding removed)."""
        if self.prompt_token_ids is None:
            raise ValueError(
                "STEP pooling needs the prompt token ids: pass prompt_token_ids= to "
                "build_metadata()"
            )
        ids = self.prompt_token_ids.cpu()
        return [ids[i, :n] for i, n in enumerate(self.prompt_lens.tolist())]

    def __getitem__(self, indices: slice) -> PoolingMetadata:
        """The metadata of a sub-batch; the cursor's token indices are recomputed."""
        if not isinstance(indices, slice):
            raise TypeError(f"metadata is sliced with a slice, got {type(indices).__name__}")
        return PoolingMetadata(
            prompt_lens=self.prompt_lens[indices],
            prompt_token_ids=None
            if self.prompt_token_ids is None
            else self.prompt_token_ids[indices],
            pooling_states=self.pooling_states[indices],
            pooling_cursor=None if self.pooling_cursor is None else self.pooling_cursor[indices],
            step_tag_ids=self.step_tag_ids[indices],
            returned_token_ids=self.returned_token_ids[indices],
            tasks=self.tasks[indices],
        )


def _as_lengths(values: Sequence[int] | Tensor, name: str) -> Tensor:
    if isinstance(values, Tensor):
        if values.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(values.shape)}")
        if values.is_floating_point() or values.is_complex() or values.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers, got dtype {values.dtype}")
        return values.detach().to("cpu", torch.int64)
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a sequence of ints, got {type(values).__name__}")
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int)]
    if bad:
        raise TypeError(f"{name} must hold ints, got {bad[:3]}")
    return torch.tensor(list(values), dtype=torch.int64)


def _per_request(value, n: int, name: str) -> list:
    """A scalar applies to every request; a list must have one entry per request."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return [value] * n
    value = list(value)
    if len(value) != n:
        raise ValueError(f"{name} has {len(value)} entries for {n} requests")
    return value


def _per_request_columns(value, n: int) -> list[list[int] | None]:
    """``returned_token_ids``: one list for all requests, or one list (or None) per request."""
    if value is None:
        return [None] * n
    value = list(value)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [list(value)] * n
    if len(value) != n:
        raise ValueError(f"returned_token_ids has {len(value)} entries for {n} requests")
    return [None if v is None else list(v) for v in value]


def _pad_token_ids(token_ids: Sequence[Sequence[int]] | Tensor, prompt_lens: Tensor) -> Tensor:
    if isinstance(token_ids, Tensor) and token_ids.dim() == 2:
        padded = token_ids.to(torch.int64)
        if padded.shape[0] != len(prompt_lens) or (
            len(prompt_lens) and padded.shape[1] < int(prompt_lens.max())
        ):
            raise ValueError(
                f"prompt_token_ids of shape {tuple(padded.shape)} do not cover prompt_lens "
                f"{prompt_lens.tolist()}"
            )
        return padded
    rows = [torch.as_tensor(t, dtype=torch.int64).reshape(-1) for t in token_ids]
    if len(rows) != len(prompt_lens):
        raise ValueError(
            f"prompt_token_ids has {len(rows)} prompts for {len(prompt_lens)} requests"
        )
    for i, (row, n) in enumerate(zip(rows, prompt_lens.tolist(), strict=True)):
        if row.numel() != n:
            raise ValueError(
                f"request {i}: prompt_token_ids has {row.numel()} ids but prompt_len is {n}"
            )
    width = max((r.numel() for r in rows), default=0)
    padded = torch.zeros((len(rows), width), dtype=torch.int64)
    for i, row in enumerate(rows):
        padded[i, : row.numel()] = row
    return padded


def build_metadata(
    prompt_lens: Sequence[int] | Tensor,
    *,
    num_scheduled_tokens: Sequence[int] | Tensor | None = None,
    seq_lens: Sequence[int] | Tensor | None = None,
    states: Sequence[PoolingStates] | None = None,
    prompt_token_ids: Sequence[Sequence[int]] | Tensor | None = None,
    step_tag_id: int | Sequence[int | None] | None = None,
    returned_token_ids: Sequence[int] | Sequence[Sequence[int] | None] | None = None,
    task: str | Sequence[str | None] | None = None,
    device: torch.device | str | None = None,
) -> PoolingMetadata:
    """Build one step's ``PoolingMetadata`` with its cursor.

    Args:
        prompt_lens: full prompt length per request, batch order.
        num_scheduled_tokens: tokens of each request in this step (default: the whole prompt).
        seq_lens: tokens computed after this step (default: ``prompt_lens``, i.e. finishing).
        states: the previous step's ``meta.pooling_states`` to continue those requests
            (default: fresh states).
        prompt_token_ids: per request, its prompt's ids (needed by STEP pooling).
        step_tag_id: STEP pooling's row selector, one id for all requests or one per request.
        returned_token_ids: STEP pooling's column selector, one list for all or one per request.
        task: the pooling task, one for all or one per request.
        device: device of the cursor's token indices (default: CPU).

    Raises:
        ValueError: lengths that do not add up, naming the request and the numbers.
        TypeError: non-integer lengths.

    Example:
        >>> meta = build_metadata([4], num_scheduled_tokens=[2], seq_lens=[2])  # first chunk
        >>> meta2 = build_metadata([4], num_scheduled_tokens=[2], states=meta.pooling_states)
    """
    prompt = _as_lengths(prompt_lens, "prompt_lens")
    n = len(prompt)
    scheduled = prompt.clone() if num_scheduled_tokens is None else _as_lengths(
        num_scheduled_tokens, "num_scheduled_tokens")
    seqs = prompt.clone() if seq_lens is None else _as_lengths(seq_lens, "seq_lens")
    for name, values in (("num_scheduled_tokens", scheduled), ("seq_lens", seqs)):
        if len(values) != n:
            raise ValueError(
                f"{name} has {len(values)} entries but prompt_lens has {n}; give one per request"
            )
    for i, (p, s, q) in enumerate(zip(prompt.tolist(), scheduled.tolist(), seqs.tolist(),
                                      strict=True)):
        if p < 0 or s < 0 or q < 0:
            raise ValueError(
                f"request {i}: lengths must be non-negative, got prompt_len={p}, "
                f"num_scheduled_tokens={s}, seq_len={q}"
            )
        if q > p:
            raise ValueError(
                f"request {i}: seq_len {q} exceeds prompt_len {p}; seq_len counts prompt tokens "
                "computed after this step"
            )
        if s > q:
            raise ValueError(
                f"request {i}: {s} tokens scheduled but only {q} computed after the step "
                f"(seq_len); scheduled tokens cannot exceed the remaining {p - (q - s)} of "
                f"prompt_len {p} — did you forget seq_lens=?"
            )
    if states is None:
        pooling_states = [PoolingStates() for _ in range(n)]
    else:
        pooling_states = list(states)
        if len(pooling_states) != n:
            raise ValueError(f"states has {len(pooling_states)} entries for {n} requests")
        bad = [type(s).__name__ for s in pooling_states if not isinstance(s, PoolingStates)]
        if bad:
            raise TypeError(f"states must be PoolingStates, got {bad[:3]}")
    token_ids = None if prompt_token_ids is None else _pad_token_ids(prompt_token_ids, prompt)
    tasks = [task] * n if task is None or isinstance(task, str) else list(task)
    if len(tasks) != n:
        raise ValueError(f"task has {len(tasks)} entries for {n} requests")
    return PoolingMetadata(
        prompt_lens=prompt,
        prompt_token_ids=None if token_ids is None else token_ids.to(device),
        pooling_states=pooling_states,
        pooling_cursor=PoolingCursor.build(scheduled, prompt, seqs, device=device),
        step_tag_ids=_per_request(step_tag_id, n, "step_tag_id"),
        returned_token_ids=_per_request_columns(returned_token_ids, n),
        tasks=tasks,
    )
