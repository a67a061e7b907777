"""vLLM 0.33.0's scheduling rules, as pure functions the schedulers and closed forms call.

- ``long_prefill_cap``: the most tokens one request takes in a step (vLLM's
  ``long_prefill_token_threshold``, lifted for a lone request);
- ``step_order``: the order of a step's requests in its rows (Model Runner V2).

Each names the vLLM file and function it restates; tokpool's scheduler
(``tokpool.sim.schedule.scheduler``), the check of a given schedule
(``tokpool.sim.schedule.given``) and the closed forms (``tokpool.sim.backends.closed_form``)
call them, never a copy.
"""

from __future__ import annotations

from collections.abc import Sequence

from .sizes import positive_int as _positive_int

__all__ = ["long_prefill_cap", "step_order"]


def long_prefill_cap(threshold: int | None, eligible: int) -> int:
    """Most tokens one request may take in a step (0: no cap).

    vllm/v1/core/sched/scheduler.py, ``Scheduler.schedule``: ``long_prefill_token_threshold``
    (``SchedulerConfig``; ``None`` or 0: no cap) holds only while ``num_eligible_reqs`` (the
    requests running or waiting when the step is scheduled) is above 1; a lone request takes
    the whole budget (nobody to starve). Every running or waiting request's new tokens are then
    cut to it (``if 0 < long_prefill_token_threshold < num_new_tokens``), with or without
    chunked prefill. (``--long-prefill-token-threshold-adaptive``, off by default, is not
    modelled.)

    Args:
        threshold: ``long_prefill_token_threshold`` (``None`` or 0: no cap).
        eligible: requests running or waiting when the step is scheduled.

    Example:
        >>> long_prefill_cap(16, eligible=2), long_prefill_cap(16, eligible=1)
        (16, 0)
    """
    return (threshold or 0) if eligible > 1 else 0


def step_order(
    num_scheduled_tokens: Sequence[int],
    *,
    decode_query_len: int = 1,
    num_draft_tokens: Sequence[int] | None = None,
) -> list[int]:
    """The order in which MRV2 lays a step's requests out in its rows.

    vllm/v1/worker/gpu/model_runner.py, ``sort_batch_req_ids`` (called by
    ``GPUModelRunner.gather_batch_req_state``): a stable sort of the scheduler's order by
    (has no drafts, scheduled tokens != ``decode_query_len``, scheduled tokens). For pooling
    (no drafts, ``decode_query_len`` 1) that is ascending scheduled tokens, ties in scheduler
    order: the rows ``[0, n_0)`` belong to the request with the fewest tokens.

    Args:
        num_scheduled_tokens: per request, in the scheduler's order (running requests first,
            then newly admitted ones).
        decode_query_len: 1 without speculative decoding.
        num_draft_tokens: per request, speculative draft tokens (None: none).

    Returns:
        Indices into ``num_scheduled_tokens``, in row order.

    Example:
        >>> step_order([5, 1, 3, 1])
        [1, 3, 2, 0]
    """
    counts = [_positive_int("num_scheduled_tokens", int(n), minimum=0)
              for n in num_scheduled_tokens]
    drafts = [0] * len(counts) if num_draft_tokens is None else list(num_draft_tokens)
    if len(drafts) != len(counts):
        raise ValueError(
            f"num_draft_tokens has {len(drafts)} entries for {len(counts)} requests"
        )
    return sorted(
        range(len(counts)),
        key=lambda i: (not drafts[i], counts[i] != decode_query_len, counts[i]),
    )
