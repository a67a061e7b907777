"""A schedule given from outside (hand-written, recorded from an engine, or vLLM's own
scheduler's): checked to be one the step loop can run, so a wrong one is an error, not a silent
simulation."""

from __future__ import annotations

from collections.abc import Sequence

from .scheduler import ScheduledStep


def check_schedule(
    steps: Sequence[ScheduledStep], prompt_lens: Sequence[int], *,
    max_num_batched_tokens: int, enable_chunked_prefill: bool,
    long_prefill_token_threshold: int | None = None,
    reads_prefix_cache: bool = True,
) -> list[ScheduledStep]:
    """Validate a schedule for ``prompt_lens``; return it as a list.

    Each step's chunks must continue their request where it stopped (from 0 after a
    preemption, or from the tokens the step lists in ``cached`` for it: a prefix-cache hit),
    fit the token budget, list as ``finished`` exactly the requests whose last
    prompt token they compute, and every request must finish exactly once; step indices
    increase. Without chunked prefill a prompt is scheduled whole, unless a
    ``long_prefill_token_threshold`` is set (vLLM's ``Scheduler.schedule`` applies the cap before
    its no-chunking check, and lifts it for a lone request, whose rest then runs in one chunk).
    Under async scheduling vLLM may preempt a request whose last chunk is still in flight; it is
    finished all the same (``update_from_output``), so a preemption of a request finished by the
    step listed just before is accepted and changes nothing.

    ``reads_prefix_cache=False`` (prefix caching off, or a token task: ``vllm_rules.
    prefix_cache``) refuses any prefix-cache hit.

    Raises:
        TypeError: not a sequence of ``ScheduledStep``.
        ValueError: the first rule broken, naming the step, the request and the numbers.
    """
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence):
        raise TypeError(f"schedule must be a list of ScheduledStep, got {type(steps).__name__}")
    lens = list(prompt_lens)
    done = [0] * len(lens)
    finished_at: dict[int, int] = {}
    last_index = -1
    just_finished: set[int] = set()  # finished by the step listed just before
    for step in steps:
        if not isinstance(step, ScheduledStep):
            raise TypeError(f"schedule entries must be ScheduledStep, got {type(step).__name__}")
        where = f"schedule step {step.index}"
        if step.index <= last_index:
            raise ValueError(f"{where}: step indices must increase (previous {last_index})")
        last_index = step.index
        for r in step.preempted:
            if r in just_finished:
                continue  # async: preempted while its finishing step was in flight
            if not 0 <= r < len(lens) or r in finished_at:
                raise ValueError(f"{where}: request {r} cannot be preempted (unknown or finished)")
            done[r] = 0
        if step.num_tokens > max_num_batched_tokens:
            raise ValueError(
                f"{where} computes {step.num_tokens} tokens, more than max_num_batched_tokens="
                f"{max_num_batched_tokens}; split it or raise the budget in the SimConfig"
            )
        seen: set[int] = set()
        hits = dict(step.cached)
        if hits and not reads_prefix_cache:
            raise ValueError(
                f"{where} lists prefix-cache hits {step.cached}, but this engine reads no prefix "
                "cache (prefix caching off, or a token task, which vLLM recomputes in full)")
        for r, tokens in hits.items():
            if not 0 <= r < len(lens) or done[r] != 0 or not 0 < tokens < lens[r]:
                raise ValueError(
                    f"{where}: a prefix-cache hit of {tokens} tokens for request {r} must be of "
                    "a request starting its prefill (none computed), shorter than its prompt")
        for r, start, stop in step.chunks:
            if not 0 <= r < len(lens):
                raise ValueError(
                    f"{where}: request {r} is not in prompt_lens ({len(lens)} requests)")
            if r in seen or r in finished_at:
                raise ValueError(f"{where}: request {r} is scheduled twice or after it finished")
            seen.add(r)
            expected_start = done[r] + hits.get(r, 0)
            if start != expected_start or not start < stop <= lens[r]:
                raise ValueError(
                    f"{where}: request {r} chunk [{start}, {stop}) must start at {expected_start} "
                    f"and end by its prompt length {lens[r]}"
                )
            capped = bool(long_prefill_token_threshold)  # vLLM chunks by the cap, not by budget
            whole = (hits.get(r, 0), lens[r])  # all of it but the cached tokens
            if not enable_chunked_prefill and (start, stop) != whole and not capped:
                raise ValueError(f"{where}: request {r} is chunked but chunked prefill is off "
                                 "and no long_prefill_token_threshold caps it")
            done[r] = stop
        expected = tuple(r for r, _, stop in step.chunks if stop == lens[r])
        if tuple(step.finished) != expected:
            raise ValueError(f"{where}: finished must be {expected} (the requests whose last "
                             f"token it computes, in chunk order), got {tuple(step.finished)}")
        for r in expected:
            finished_at[r] = step.index
        just_finished = set(expected)
    missing = [r for r in range(len(lens)) if r not in finished_at]
    if missing:
        raise ValueError(f"the schedule never finishes requests {missing[:10]}: every prompt "
                         "must be computed to its last token")
    return list(steps)
