"""Input checks for the pooling methods, kept apart from their branch logic.

``pooling.py`` calls these with one line at the top of ``__init__`` / ``__call__``; nothing here
changes what a pooling method returns for valid input. Each check raises a ``TypeError`` or
``ValueError`` that names the offending value and says what to do instead.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .metadata import PoolingMetadata


def check_flag(value: object, name: str) -> bool:
    """A real ``bool`` (or NumPy bool); ``"no"``, ``0`` or ``None`` are refused, not guessed.

    Raises:
        TypeError: ``value`` is not a bool (the message shows it).
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(
        f"{name} must be True or False, got {value!r} ({type(value).__name__}); a string such "
        f"as 'no' is truthy and would silently mean True"
    )


def check_token_pool_options(
    enable_chunked_prefill: object, async_scheduling: object, policy: object
) -> None:
    """``AllPool``/``StepPool`` constructor arguments (the policy name is checked by its owner).

    Raises:
        TypeError: a flag that is not a bool, or a policy that is not a string.
    """
    check_flag(enable_chunked_prefill, "enable_chunked_prefill")
    check_flag(async_scheduling, "async_scheduling")
    if not isinstance(policy, str):
        raise TypeError(
            f"policy must be a string ('legacy', 'clone', 'prealloc' or 'offload'), got "
            f"{policy!r} ({type(policy).__name__})"
        )


def _check_step_inputs(hidden_states: object, metadata: object, what: str) -> None:
    if not isinstance(metadata, PoolingMetadata):
        raise TypeError(
            f"{what} takes (hidden_states, metadata) with metadata a PoolingMetadata (from "
            f"tp.build_metadata), got {type(metadata).__name__}"
        )
    if not isinstance(hidden_states, Tensor):
        raise TypeError(
            f"hidden_states must be a Tensor [n_tokens, hidden], got "
            f"{type(hidden_states).__name__}"
        )


def check_sequence_call(hidden_states: object, metadata: object, what: str) -> None:
    """CLS/LAST/MEAN inputs: every request in the step has at least one token.

    A request with zero tokens has no first or last row of its own: its index would point at the
    next request's row (CLS), at row -1 (LAST), or divide by zero (MEAN).

    Raises:
        TypeError: metadata or hidden states of the wrong type.
        ValueError: a request with no tokens in this step (its index is named).
    """
    _check_step_inputs(hidden_states, metadata, what)
    cursor = metadata.get_pooling_cursor()
    counts = cursor.num_scheduled_tokens_cpu.tolist()
    empty = [i for i, n in enumerate(counts) if n < 1]
    if empty:
        raise ValueError(
            f"{what}: request(s) {empty[:5]} have 0 tokens in this step (num_scheduled_tokens "
            f"{counts[:8]}); every request needs at least one token — drop empty requests "
            "from the batch"
        )


def check_token_call(hidden_states: object, metadata: object, what: str) -> None:
    """ALL/STEP inputs: a chunk must continue what its request's state already holds.

    Checks, for each request whose state holds earlier chunks: the same dtype, width and device
    as those chunks (an engine keeps one hidden-state dtype for a request's whole prefill), and
    the same prompt length as the request the state was started for. The same state object may
    not appear twice in one batch. Then each state is tagged with its request's prompt length,
    so that a later step can tell another request's state (``PoolingStates.clean`` clears the
    tag).

    Raises:
        TypeError: metadata or hidden states of the wrong type.
        ValueError: a dtype, width or device change; a state shared by two requests; a state
            that belongs to a request of another prompt length.
    """
    _check_step_inputs(hidden_states, metadata, what)
    states = metadata.pooling_states
    seen: dict[int, int] = {}
    for i, state in enumerate(states):
        first = seen.setdefault(id(state), i)
        if first != i:
            raise ValueError(
                f"requests {first} and {i} share one PoolingStates object; each request needs "
                "its own (build_metadata creates fresh ones; pass each request's own state)"
            )
    prompt_lens = metadata.prompt_lens.tolist()
    if len(states) != len(prompt_lens):
        return  # the pooling method reports the count mismatch with its own message
    width = hidden_states.shape[-1] if hidden_states.dim() >= 1 else None
    dtype, device = hidden_states.dtype, hidden_states.device
    for i, (state, prompt_len) in enumerate(zip(states, prompt_lens, strict=True)):
        cache = state.hidden_states_cache
        ref = state.buffer if state.buffer is not None else (cache[0] if cache else None)
        if ref is None:
            continue  # a fresh (or cleaned) state: nothing to agree with
        owner = state.prompt_len
        if owner is not None and owner != prompt_len:
            raise ValueError(
                f"request {i} has prompt_len {prompt_len} but its pooling state was started "
                f"for a request of prompt_len {owner} (it holds {state.num_cached_tokens} "
                "tokens): states of another request; pass each request's own state, in batch "
                "order"
            )
        if ref.dtype != dtype or ref.shape[-1] != width:
            raise ValueError(
                f"request {i}: this step's hidden states are {dtype} [n, {width}] but its "
                f"earlier chunks are {ref.dtype} [n, {ref.shape[-1]}]; a request's chunks must "
                "share one dtype and width — cast the hidden states, or call state.clean() to "
                "restart the request"
            )
        if ref.device != device and ref.device.type != "cpu":
            raise ValueError(
                f"request {i}: this step's hidden states are on {device} but its earlier "
                f"chunks are on {ref.device}; keep a request on one device"
            )
    for state, prompt_len in zip(states, prompt_lens, strict=True):
        state.prompt_len = int(prompt_len)


def first_nonfinite(x: Tensor) -> str | None:
    """``None`` when ``x`` is all finite, else where and what the first NaN/±Inf is.

    The happy path is one ``sum`` reduction: NaN and ±Inf propagate to it, so a finite sum means
    a finite tensor. Only a non-finite sum (a bad value, or an overflowing sum of large ones)
    builds the ``x``-sized mask that tells the two apart and locates the value.
    """
    if not (x.is_floating_point() or x.is_complex()) or x.numel() == 0:
        return None
    x = x.detach()
    if bool(torch.isfinite(x.sum())):
        return None
    bad = ~torch.isfinite(x)
    count = int(bad.sum())
    if count == 0:
        return None  # the sum overflowed; every value is finite
    first = tuple(int(i) for i in bad.nonzero()[0].tolist())
    value = x[first].item()
    where = f"row {first[0]}" if len(first) == 2 else f"index {first}"
    return f"{count} of {x.numel()} values are NaN or Inf (first: {value} at {where})"


def check_rows_match(hidden_states: object, metadata: object, what: str) -> None:
    """Whole-prompt poolers: ``hidden_states`` is ``[sum(prompt_lens), hidden]``.

    Raises:
        TypeError: metadata or hidden states of the wrong type.
        ValueError: not 2-D, or a row count that differs from the metadata's tokens.
    """
    _check_step_inputs(hidden_states, metadata, what)
    if hidden_states.dim() != 2:
        raise ValueError(
            f"{what}: hidden_states must be [n_tokens, hidden], got shape "
            f"{tuple(hidden_states.shape)}"
        )
    scheduled = metadata.get_pooling_cursor().num_scheduled_tokens_cpu.tolist()
    if hidden_states.shape[0] != sum(scheduled):
        raise ValueError(
            f"{what}: hidden_states has {hidden_states.shape[0]} rows but the metadata holds "
            f"{sum(scheduled)} tokens ({scheduled[:8]}); pass exactly this step's rows"
        )
