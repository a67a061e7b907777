"""The pooling data model, mirroring vLLM's ``vllm/v1/pool/metadata.py`` (Model Runner V2).

One step of an engine schedules some tokens of some requests. ``PoolingCursor`` says, per request
in batch order, how many tokens this step holds and where they sit in the flat hidden-state batch;
``PoolingStates`` is what a request carries from step to step (its chunk cache); and
``PoolingMetadata`` bundles both with the prompt's token ids for STEP pooling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .task_names import POOLING_TASKS


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
        prompt_len: the prompt length of the request this state was last used for (set by the
            token pooling methods' input check, ``None`` when fresh or cleaned), so that a
            state handed to another request is caught instead of concatenated.
        stale_tokens: rows kept from before a preemption that were NOT cleaned, as vLLM's V1
            model runner keeps them (``GPUModelRunner._update_states``; the simulator sets
            it): the resumed prefill restarts at token 0 and appends to them. 0 otherwise.
    """

    __slots__ = ("buffer", "hidden_states_cache", "num_filled", "prompt_len", "stale_tokens")

    def __init__(self) -> None:
        self.hidden_states_cache: list[Tensor] = []
        self.buffer: Tensor | None = None
        self.num_filled: int = 0
        self.prompt_len: int | None = None
        self.stale_tokens: int = 0

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
        self.prompt_len = None
        self.stale_tokens = 0

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


def _is_int(value: object) -> bool:
    """A Python or NumPy integer, not a bool (``True`` is an int to Python, never a length)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _as_lengths(values: Sequence[int] | Tensor, name: str) -> Tensor:
    if isinstance(values, np.ndarray):
        if values.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold integers, got a NumPy array of {values.dtype}")
        values = torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64))
    if isinstance(values, Tensor):
        if values.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(values.shape)}")
        if values.is_floating_point() or values.is_complex() or values.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers, got dtype {values.dtype}")
        return values.detach().to("cpu", torch.int64)
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a sequence of ints, got {type(values).__name__}")
    bad = [v for v in values if not _is_int(v)]
    if bad:
        raise TypeError(f"{name} must hold ints, got {bad[:3]}")
    huge = [int(v) for v in values if not -(2**63) <= int(v) < 2**63]
    if huge:
        raise ValueError(f"{name} {huge[:3]} do not fit int64 (positions up to 2**63 - 1); no "
                         "engine takes such a prompt: shorten it")
    return torch.tensor([int(v) for v in values], dtype=torch.int64)


def _is_list_like(value: object) -> bool:
    return isinstance(value, (Sequence, Tensor, np.ndarray)) and not isinstance(
        value, (str, bytes))


def _as_list(value) -> list:
    return value.tolist() if isinstance(value, (Tensor, np.ndarray)) else list(value)


def _check_id(value: object, name: str) -> int | None:
    if value is None:
        return None
    if not _is_int(value):
        raise TypeError(
            f"{name} must be an int token id (or None), got {value!r} ({type(value).__name__})"
        )
    if value < 0:
        raise ValueError(f"{name} must be a token id >= 0, got {value}")
    return int(value)


def _per_request_ids(value, n: int, name: str) -> list[int | None]:
    """``step_tag_id``: one id (or None) for every request, or one per request."""
    if value is None or _is_int(value):
        return [_check_id(value, name)] * n
    if not _is_list_like(value):
        raise TypeError(
            f"{name} must be an int, None, or one of those per request; got {value!r} "
            f"({type(value).__name__})"
        )
    value = _as_list(value)
    if len(value) != n:
        raise ValueError(f"{name} has {len(value)} entries for {n} requests")
    return [_check_id(v, f"{name}[{i}]") for i, v in enumerate(value)]


def _columns(value, name: str) -> list[int]:
    if not _is_list_like(value):
        raise TypeError(f"{name} must be a list of int column indices, got {value!r}")
    columns = _as_list(value)
    bad = [c for c in columns if not _is_int(c)]
    if bad:
        raise TypeError(f"{name} must hold int column indices, got {bad[:3]}")
    return [int(c) for c in columns]


def _per_request_columns(value, n: int) -> list[list[int] | None]:
    """``returned_token_ids``: one list for all requests, or one list (or None) per request."""
    name = "returned_token_ids"
    if value is None:
        return [None] * n
    if not _is_list_like(value):
        raise TypeError(
            f"{name} must be a list of column indices (or one list per request), got {value!r}"
        )
    entries = _as_list(value)
    if all(_is_int(v) for v in entries):
        return [_columns(entries, name)] * n
    if not all(v is None or _is_list_like(v) for v in entries):
        raise TypeError(
            f"{name} must hold int column indices (or one list per request), got {entries[:4]}"
        )
    if len(entries) != n:
        raise ValueError(f"{name} has {len(entries)} entries for {n} requests")
    return [None if v is None else _columns(v, f"{name}[{i}]") for i, v in enumerate(entries)]


def _check_ids_tensor(ids: Tensor, what: str) -> Tensor:
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(
            f"{what} must hold integer token ids, got dtype {ids.dtype}; a float id such as "
            "9.4 would be truncated to another token"
        )
    ids = ids.to(torch.int64)
    if ids.numel() and int(ids.min()) < 0:
        raise ValueError(f"{what} holds {int(ids.min())}; token ids are >= 0")
    return ids


def _as_id_row(row, i: int) -> Tensor:
    what = f"prompt_token_ids[{i}]"
    if isinstance(row, np.ndarray):
        row = torch.from_numpy(np.ascontiguousarray(row))
    if isinstance(row, Tensor):
        return _check_ids_tensor(row.detach().cpu(), what).reshape(-1)
    if not _is_list_like(row):
        raise TypeError(f"{what} must be a list of int token ids, got {type(row).__name__}")
    bad = [v for v in row if not _is_int(v)]
    if bad:
        raise TypeError(
            f"{what} must hold int token ids, got {bad[:3]}; a float id such as 9.4 would be "
            "truncated to another token"
        )
    return _check_ids_tensor(torch.tensor([int(v) for v in row], dtype=torch.int64), what)


def _pad_token_ids(token_ids: Sequence[Sequence[int]] | Tensor, prompt_lens: Tensor) -> Tensor:
    if isinstance(token_ids, np.ndarray) and token_ids.ndim == 2:
        token_ids = torch.from_numpy(np.ascontiguousarray(token_ids))
    if isinstance(token_ids, Tensor) and token_ids.dim() == 2:
        padded = _check_ids_tensor(token_ids.detach(), "prompt_token_ids")
        if padded.shape[0] != len(prompt_lens) or (
            len(prompt_lens) and padded.shape[1] < int(prompt_lens.max())
        ):
            raise ValueError(
                f"prompt_token_ids of shape {tuple(padded.shape)} do not cover prompt_lens "
                f"{prompt_lens.tolist()}"
            )
        return padded
    if not _is_list_like(token_ids):
        raise TypeError(
            "prompt_token_ids must be one list of int ids per request (or a 2-D int tensor), "
            f"got {type(token_ids).__name__}"
        )
    rows = [_as_id_row(t, i) for i, t in enumerate(token_ids)]
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


def _per_request_tasks(task, n: int) -> list[str | None]:
    if task is not None and not isinstance(task, str) and not _is_list_like(task):
        raise TypeError(f"task must be a task name or one per request, got {task!r}")
    tasks = [task] * n if task is None or isinstance(task, str) else list(task)
    if len(tasks) != n:
        raise ValueError(f"task has {len(tasks)} entries for {n} requests")
    unknown = [t for t in tasks if t is not None and t not in POOLING_TASKS]
    if unknown:
        raise ValueError(
            f"unknown pooling task(s) {unknown[:3]} in task=; choose from {list(POOLING_TASKS)}"
        )
    return tasks


def _check_step_lengths(prompt: Tensor, scheduled: Tensor, seqs: Tensor) -> None:
    for i, (p, s, q) in enumerate(zip(prompt.tolist(), scheduled.tolist(), seqs.tolist(),
                                      strict=True)):
        if p < 0 or s < 0 or q < 0:
            raise ValueError(
                f"request {i}: lengths must be non-negative, got prompt_len={p}, "
                f"num_scheduled_tokens={s}, seq_len={q}"
            )
        if p == 0 or s == 0:
            raise ValueError(
                f"request {i} has zero tokens (prompt_len={p}, num_scheduled_tokens={s}): a "
                "request in a step holds at least one token of a non-empty prompt — leave it "
                "out of this step's batch"
            )
        if s > p:
            raise ValueError(
                f"request {i}: {s} tokens scheduled but its prompt_len is {p}; a step "
                "schedules at most the whole prompt"
            )
        if q > p:
            raise ValueError(
                f"request {i}: seq_len {q} exceeds prompt_len {p}; seq_len counts prompt tokens "
                "computed after this step"
            )
        if s > q:
            raise ValueError(
                f"request {i}: {s} tokens scheduled but only {q} computed after the step "
                f"(seq_len), which would leave {q - s} computed before it; seq_len = tokens "
                f"computed before + the {s} scheduled (seq_lens=[{s}] for a first chunk)"
            )


def _as_states(states, n: int) -> list[PoolingStates]:
    if isinstance(states, (str, bytes)) or not isinstance(states, Sequence):
        raise TypeError(
            "states must be a list of PoolingStates (the previous step's meta.pooling_states), "
            f"got {type(states).__name__}"
        )
    pooling_states = list(states)
    if len(pooling_states) != n:
        raise ValueError(f"states has {len(pooling_states)} entries for {n} requests")
    bad = [type(s).__name__ for s in pooling_states if not isinstance(s, PoolingStates)]
    if bad:
        raise TypeError(f"states must be PoolingStates, got {bad[:3]}")
    if len({id(s) for s in pooling_states}) != n:
        raise ValueError(
            "states holds one PoolingStates object for two requests; each request needs its own"
        )
    return pooling_states


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
        ValueError: lengths that do not add up, naming the request and the numbers; a request
            with zero tokens (an empty prompt, or nothing scheduled: it would have no row of its
            own); negative token ids; an unknown task; one ``PoolingStates`` for two requests.
        TypeError: non-integer lengths or token ids (a float id such as 9.4 is refused, never
            truncated), or a ``step_tag_id`` / ``returned_token_ids`` that is not made of ints.

    Example:
        >>> meta = build_metadata([4], num_scheduled_tokens=[2], seq_lens=[2])  # first chunk
        >>> meta2 = build_metadata([4], num_scheduled_tokens=[2], states=meta.pooling_states)
    """
    prompt = _as_lengths(prompt_lens, "prompt_lens")
    if device is not None:
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise ValueError(f"device={device!r} is not a torch device ({err})") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device={str(device)!r} but CUDA is not available here; leave "
                             "device=None (CPU) or use the hidden states' device")
    n = len(prompt)
    scheduled = prompt.clone() if num_scheduled_tokens is None else _as_lengths(
        num_scheduled_tokens, "num_scheduled_tokens")
    seqs = prompt.clone() if seq_lens is None else _as_lengths(seq_lens, "seq_lens")
    for name, values in (("num_scheduled_tokens", scheduled), ("seq_lens", seqs)):
        if len(values) != n:
            raise ValueError(
                f"{name} has {len(values)} entries but prompt_lens has {n}; give one per request"
            )
    _check_step_lengths(prompt, scheduled, seqs)
    if states is None:
        pooling_states = [PoolingStates() for _ in range(n)]
    else:
        pooling_states = _as_states(states, n)
    token_ids = None if prompt_token_ids is None else _pad_token_ids(prompt_token_ids, prompt)
    tasks = _per_request_tasks(task, n)
    return PoolingMetadata(
        prompt_lens=prompt,
        prompt_token_ids=None if token_ids is None else token_ids.to(device),
        pooling_states=pooling_states,
        pooling_cursor=PoolingCursor.build(scheduled, prompt, seqs, device=device),
        step_tag_ids=_per_request_ids(step_tag_id, n, "step_tag_id"),
        returned_token_ids=_per_request_columns(returned_token_ids, n),
        tasks=tasks,
    )
