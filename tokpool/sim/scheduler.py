"""A vLLM-shaped prefill scheduler: which tokens of which requests each step computes.

Per step, with a token budget ``max_num_batched_tokens``:

1. running requests (admitted, partially prefilled) first, in admission order, each taking as
   many of its remaining tokens as the budget allows;
2. then waiting requests in arrival order (ties: input order), while the budget lasts and fewer
   than ``max_num_seqs`` requests run. With chunked prefill a request may take a partial chunk;
   without it, a prompt that does not fit the remaining budget waits (and blocks those behind
   it, first come first served, as vLLM's ``break`` does).

With ``long_prefill_token_threshold`` (vLLM's flag of that name), no request takes more than
that many tokens in one step.

A step's chunks are listed in ROW order, as Model Runner V2 lays them out in the step's hidden
states: ascending scheduled tokens, ties in scheduler order (``vllm_rules.step_order``). Which
rows a request occupies decides what a later write overwrites.

Pooling requests finish when their last prompt token is computed (no decode). Nothing is
preempted. Steps where nothing can run (waiting for arrivals) are skipped: step indices jump.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .vllm_rules import step_order


@dataclass(frozen=True)
class ScheduledStep:
    """One step of the schedule.

    Attributes:
        index: the step number (engine iterations since the start).
        chunks: ``(request, start, stop)`` in batch order: positions ``start..stop-1``.
        finished: requests whose last prompt token is computed in this step, batch order.
    """

    index: int
    chunks: tuple[tuple[int, int, int], ...]
    finished: tuple[int, ...]

    @property
    def num_tokens(self) -> int:
        return sum(stop - start for _, start, stop in self.chunks)

    @property
    def context_sum(self) -> int:
        """Σ over scheduled tokens of (position + 1): causal attention work of the step."""
        return sum((stop * (stop + 1) - start * (start + 1)) // 2 for _, start, stop in self.chunks)


def check_prompt_lens(prompt_lens: object) -> list[int]:
    """Validate prompt lengths: a non-empty sequence of positive ints.

    Raises:
        TypeError: not a sequence of ints.
        ValueError: empty, or a length < 1 (naming the request and value).
    """
    if isinstance(prompt_lens, (str, bytes)) or not isinstance(prompt_lens, Sequence):
        try:  # numpy arrays, tensors, ranges
            prompt_lens = list(prompt_lens)  # type: ignore[call-overload]
        except TypeError:
            raise TypeError(
                f"prompt_lens must be a sequence of ints, got {type(prompt_lens).__name__}"
            ) from None
    lens = []
    for i, n in enumerate(prompt_lens):
        if hasattr(n, "item") and not isinstance(n, bool):
            n = n.item()  # numpy / torch scalars
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"prompt_lens[{i}] must be an int, got {n!r}")
        if n < 1:
            raise ValueError(
                f"prompt_lens[{i}] = {n}: a prompt has at least one token; drop empty requests"
            )
        lens.append(n)
    if not lens:
        raise ValueError("prompt_lens is empty: give at least one request")
    return lens


def check_arrival_steps(arrival_steps: Sequence[int] | None, n: int) -> list[int]:
    """Validate per-request arrival steps (default: all at step 0)."""
    if arrival_steps is None:
        return [0] * n
    steps = list(arrival_steps)
    if len(steps) != n:
        raise ValueError(f"arrival_steps has {len(steps)} entries for {n} requests")
    bad = [(i, s) for i, s in enumerate(steps)
           if isinstance(s, bool) or not isinstance(s, int) or s < 0]
    if bad:
        raise ValueError(f"arrival_steps must be ints >= 0; got (request, value) {bad[:5]}")
    return steps


def schedule(
    prompt_lens: Sequence[int],
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    enable_chunked_prefill: bool,
    arrival_steps: Sequence[int] | None = None,
    long_prefill_token_threshold: int | None = None,
) -> list[ScheduledStep]:
    """The steps that prefill every request (see the module docstring for the rules).

    Raises:
        ValueError: without chunked prefill, a prompt longer than the budget (it could never
            run), naming the request and both numbers.
    """
    lens = check_prompt_lens(prompt_lens)
    arrival = check_arrival_steps(arrival_steps, len(lens))
    budget_per_step = max_num_batched_tokens
    if not enable_chunked_prefill:
        too_long = [(i, n) for i, n in enumerate(lens) if n > budget_per_step]
        if too_long:
            i, n = too_long[0]
            raise ValueError(
                f"request {i} has {n} prompt tokens but max_num_batched_tokens is "
                f"{budget_per_step} and chunked prefill is disabled, so it can never be "
                f"scheduled ({len(too_long)} such requests); enable chunked prefill or raise "
                "the budget"
            )
    per_request = long_prefill_token_threshold or budget_per_step  # 0/None: no limit
    order = sorted(range(len(lens)), key=lambda i: (arrival[i], i))
    computed = [0] * len(lens)
    running: list[int] = []
    next_waiting = 0
    steps: list[ScheduledStep] = []
    index = 0
    while next_waiting < len(order) or running:
        if not running and arrival[order[next_waiting]] > index:
            index = arrival[order[next_waiting]]  # idle until the next arrival
        budget = budget_per_step
        chunks: list[tuple[int, int, int]] = []
        for r in running:
            if budget == 0:
                break
            take = min(lens[r] - computed[r], budget, per_request)
            chunks.append((r, computed[r], computed[r] + take))
            budget -= take
        admitted = 0
        while next_waiting < len(order) and budget > 0 and len(running) + admitted < max_num_seqs:
            r = order[next_waiting]
            if arrival[r] > index or (not enable_chunked_prefill and lens[r] > budget):
                break
            take = min(lens[r], budget, per_request)
            chunks.append((r, 0, take))
            budget -= take
            admitted += 1
            next_waiting += 1
        for r, start, stop in chunks:  # scheduler order: admission order for the next steps
            computed[r] = stop
            if start == 0:
                running.append(r)
        rows = [chunks[i] for i in step_order([stop - start for _, start, stop in chunks])]
        finished = [r for r, _, stop in rows if stop == lens[r]]
        done = set(finished)
        running = [r for r in running if r not in done]
        steps.append(ScheduledStep(index, tuple(rows), tuple(finished)))
        index += 1
    return steps


def engine_steps(
    steps: Sequence[ScheduledStep], *, async_scheduling: bool
) -> list[tuple[int, ScheduledStep | None]]:
    """The engine's iterations: the compute steps, plus collect-only ones under async.

    Under async scheduling a step's outputs are copied to the host during the NEXT iteration.
    When no compute step follows immediately (the last step, or an idle gap before an
    arrival), the engine still runs that next iteration, which only collects: it appears as
    ``(index, None)``.
    """
    plan: list[tuple[int, ScheduledStep | None]] = []
    for i, step in enumerate(steps):
        plan.append((step.index, step))
        following = steps[i + 1].index if i + 1 < len(steps) else None
        if async_scheduling and step.finished and following != step.index + 1:
            plan.append((step.index + 1, None))
    return plan
