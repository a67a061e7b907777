"""The schedule of a saturated queue in closed form: the prompts as one stream of tokens.

When every request is waiting from the start and nothing but the token budget limits a step,
vLLM's scheduler (``scheduler.schedule``) cuts the prompts, in arrival order, into consecutive
slices of ``max_num_batched_tokens`` tokens: the running request (the one the previous step
left unfinished) takes what it has left, then waiting requests are admitted one after another
while the budget lasts, the last one taking a partial chunk. Step ``k`` computes the stream's
tokens ``[k·B, (k+1)·B)``. ``stream_schedule`` lays that out with array arithmetic, one
``ScheduledStep`` per step, instead of asking the queues and the block manager step by step.

It applies (``stream_applies``) only when the loop would do exactly that:

- chunked prefill on, no ``long_prefill_token_threshold`` (no cap on a chunk);
- every request arrives at step 0;
- synchronous scheduling (a finished request releases its blocks and its slot before the next
  step is scheduled);
- no KV-cache limit (``kv_cache_blocks=None``: every prompt's blocks fit, nothing is
  preempted) and no cache read by anyone (block counts suffice, ``block_counts``);
- every prompt within ``max_model_len``;
- and, checked on the result, no step holds more than ``max_num_seqs`` requests (the one limit
  that could stop an admission).

Otherwise it returns ``None`` and ``scheduler.schedule`` runs (as for anything added to the
scheduler later: requests that end early, other queues). The refusals and bounds are the
scheduler's own, asked first. Step ``k``'s ``kv_blocks`` are the blocks of the requests in it:
in a synchronous engine those are all the running ones. tests/test_fast_analytic.py compares
the two schedules on random workloads, field by field.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..vllm_rules import engine_checks
from ..vllm_rules.kv_spec import max_in_flight_tokens
from ..vllm_rules.prefix_cache import reads_prefix_cache
from .block_counts import counts_suffice
from .scheduler import (
    ScheduledStep,
    check_arrival_steps,
    check_prompt_token_ids,
    kv_blocks_for,
    validate_prompt_lens,
)

__all__ = ["stream_applies", "stream_schedule"]


def stream_applies(
    lens: Sequence[int], *, enable_chunked_prefill: bool, arrival_steps: Sequence[int] | None,
    long_prefill_token_threshold: int | None, kv_cache_blocks: int | None,
    async_scheduling: bool, kv_cache_groups: Sequence[int | None], max_model_len: int | None,
    reads_cache: bool,
) -> bool:
    """Whether the run is a saturated stream (see the module docstring; ``max_num_seqs`` is
    checked on the result).

    Example:
        >>> stream_applies([100, 200], enable_chunked_prefill=True, arrival_steps=None,
        ...                long_prefill_token_threshold=None, kv_cache_blocks=None,
        ...                async_scheduling=False, kv_cache_groups=(None,),
        ...                max_model_len=None, reads_cache=False)
        True
    """
    return (bool(enable_chunked_prefill) and not long_prefill_token_threshold
            and (arrival_steps is None or not any(arrival_steps))
            and kv_cache_blocks is None and not async_scheduling
            and counts_suffice(tuple(kv_cache_groups), caching=reads_cache)
            and (max_model_len is None or max(lens) <= max_model_len))


def stream_schedule(
    prompt_lens: Sequence[int], *, max_num_batched_tokens: int, max_num_seqs: int,
    enable_chunked_prefill: bool, arrival_steps: Sequence[int] | None = None,
    long_prefill_token_threshold: int | None = None, kv_cache_blocks: int | None = None,
    block_size: int = 16, async_scheduling: bool = False,
    kv_cache_groups: Sequence[int | None] = (None,), max_model_len: int | None = None,
    enable_prefix_caching: bool = False, task: str = "token_embed",
    prompt_token_ids: Sequence[Sequence[int]] | None = None,
) -> list[ScheduledStep] | None:
    """``scheduler.schedule``'s steps for a saturated stream, or ``None`` where it does not
    apply (then run ``scheduler.schedule``). Takes ``scheduler.schedule``'s arguments.

    Raises:
        ValueError: what ``scheduler.schedule`` refuses before it starts (the same checks).

    Example:
        >>> [(s.index, s.chunks, s.finished) for s in stream_schedule(
        ...     [5, 3, 4], max_num_batched_tokens=6, max_num_seqs=8,
        ...     enable_chunked_prefill=True)]
        [(0, ((1, 0, 1), (0, 0, 5)), (0,)), (1, ((1, 1, 3), (2, 0, 4)), (1, 2))]
    """
    lens = validate_prompt_lens(prompt_lens)
    arrival = check_arrival_steps(arrival_steps, len(lens))
    reads_cache = enable_prefix_caching and reads_prefix_cache(task)
    if not stream_applies(lens, enable_chunked_prefill=enable_chunked_prefill,
                          arrival_steps=arrival,
                          long_prefill_token_threshold=long_prefill_token_threshold,
                          kv_cache_blocks=kv_cache_blocks, async_scheduling=async_scheduling,
                          kv_cache_groups=kv_cache_groups, max_model_len=max_model_len,
                          reads_cache=reads_cache):
        return None  # before any other work: the scheduler asks its checks itself
    # the scheduler's refusals and its memory bound, asked as it asks them
    token_ids = check_prompt_token_ids(prompt_token_ids, lens)
    engine_checks.check_unchunked_prompts_schedulable(
        lens, max_num_batched_tokens, enable_chunked_prefill=enable_chunked_prefill)
    kv_blocks_for(lens, kv_cache_blocks, block_size, kv_cache_groups, max_model_len,
                  max_in_flight_tokens(max_num_batched_tokens,
                                       async_scheduling=async_scheduling),
                  reads_cache, token_ids)
    return _cut(lens, max_num_batched_tokens, max_num_seqs, block_size, len(kv_cache_groups))


def _cut(lens: list[int], budget: int, max_num_seqs: int, block_size: int,
         groups: int) -> list[ScheduledStep] | None:
    """The stream cut into steps of ``budget`` tokens; ``None`` when a step would hold more
    than ``max_num_seqs`` requests."""
    n = np.asarray(lens, dtype=np.int64)
    end = np.cumsum(n)
    begin = end - n  # each prompt's first token in the stream
    first, last = begin // budget, (end - 1) // budget  # the steps it spans
    per = last - first + 1  # its chunks
    req = np.repeat(np.arange(len(lens), dtype=np.int64), per)
    step = np.repeat(first, per) + (np.arange(int(per.sum()), dtype=np.int64)
                                    - np.repeat(np.cumsum(per) - per, per))
    b, e = begin[req], end[req]
    start = np.maximum(b, step * budget) - b  # prompt positions of the chunk
    stop = np.minimum(e, (step + 1) * budget) - b
    num_steps = int(last[-1]) + 1
    counts = np.bincount(step, minlength=num_steps)
    if int(counts.max()) > max_num_seqs:
        return None  # max_num_seqs stops admissions: the scheduler's loop decides
    bounds_a = np.concatenate(([0], np.cumsum(counts)))  # every step holds a chunk
    blocks = np.add.reduceat(-(-stop // block_size), bounds_a[:-1]) * groups
    bounds = bounds_a.tolist()
    req_l, start_l, stop_l = req.tolist(), start.tolist(), stop.tolist()
    blocks_l = blocks.tolist()
    out: list[ScheduledStep] = []
    for k in range(num_steps):
        lo, hi = bounds[k], bounds[k + 1]
        chunks = list(zip(req_l[lo:hi], start_l[lo:hi], stop_l[lo:hi], strict=True))
        if hi - lo > 1:
            # MRV2's rows: ascending scheduled tokens, ties in scheduler order
            # (vllm_rules.scheduling.step_order, for tokens >= 1)
            chunks.sort(key=lambda c: c[2] - c[1])
        done = tuple(r for r, _, s in chunks if s == lens[r])
        out.append(ScheduledStep(k, tuple(chunks), done, (), blocks_l[k], ()))
    return out
