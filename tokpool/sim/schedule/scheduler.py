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

import collections
from collections.abc import Sequence
from dataclasses import dataclass

from ..vllm_rules.engine import step_order


@dataclass(frozen=True)
class ScheduledStep:
    """One step of the schedule.

    Attributes:
        index: the step number (engine iterations since the start).
        chunks: ``(request, start, stop)`` in batch order: positions ``start..stop-1``.
        finished: requests whose last prompt token is computed in this step, batch order.
        preempted: requests preempted at the start of this step (KV cache full): their KV
            blocks and pooling state are dropped and their prefill restarts from token 0.
        kv_blocks: KV-cache blocks held during the step: the running requests', finishing
            ones included (counted with or without a KV-cache limit).
    """

    index: int
    chunks: tuple[tuple[int, int, int], ...]
    finished: tuple[int, ...]
    preempted: tuple[int, ...] = ()
    kv_blocks: int = 0

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
    kv_cache_blocks: int | None = None,
    block_size: int = 16,
) -> list[ScheduledStep]:
    """The steps that prefill every request (see the module docstring for the rules).

    With ``kv_cache_blocks`` the KV cache is finite, as vLLM's V1 scheduler sees it
    (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``): a running request that
    cannot get the blocks for its next chunk preempts the LAST running request (recompute: its
    blocks are freed, it goes back to the front of the waiting queue and restarts from token
    0; the engine cleans its pooling state), itself if it is the last; a waiting request is
    admitted only when its chunk's blocks are free. A finished pooling request frees its blocks.

    Raises:
        ValueError: without chunked prefill, a prompt longer than the budget (it could never
            run), or a prompt needing more KV blocks than the cache has, naming the numbers.
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
    kv = _KVCache(kv_cache_blocks, block_size, lens)
    waiting = collections.deque(sorted(range(len(lens)), key=lambda i: (arrival[i], i)))
    computed = [0] * len(lens)
    running: list[int] = []
    steps: list[ScheduledStep] = []
    index = 0
    while waiting or running:
        if not running and arrival[waiting[0]] > index:
            index = arrival[waiting[0]]  # idle until the next arrival
        budget = budget_per_step
        chunks: list[tuple[int, int, int]] = []
        preempted: list[int] = []
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            take = min(lens[r] - computed[r], budget, per_request)
            while not kv.grow(r, computed[r] + take):
                victim = running.pop()  # the lowest priority: the last admitted
                kv.free(victim)
                computed[victim] = 0
                waiting.appendleft(victim)
                preempted.append(victim)
                if victim == r:
                    break
            else:
                chunks.append((r, computed[r], computed[r] + take))
                budget -= take
                i += 1
                continue
            break  # this request preempted itself: nothing after it runs
        admitted = 0
        # vLLM admits no waiting request in a step that preempted one (``if not preempted_reqs``)
        while not preempted and waiting and budget > 0 and len(running) + admitted < max_num_seqs:
            r = waiting[0]
            if arrival[r] > index or (not enable_chunked_prefill and lens[r] > budget):
                break
            take = min(lens[r], budget, per_request)
            if not kv.grow(r, take):
                break  # no room for its first chunk: it waits
            waiting.popleft()
            chunks.append((r, 0, take))
            budget -= take
            admitted += 1
        for r, start, stop in chunks:  # scheduler order: admission order for the next steps
            computed[r] = stop
            if start == 0:
                running.append(r)
        rows = [chunks[i] for i in step_order([stop - start for _, start, stop in chunks])]
        finished = [r for r, _, stop in rows if stop == lens[r]]
        done = set(finished)
        kv_blocks = kv.used  # held during the step, the finishing requests' included
        for r in finished:
            kv.free(r)  # a pooling request is done after its prefill
        running = [r for r in running if r not in done]
        if not chunks and not preempted:
            raise RuntimeError(f"scheduler made no progress at step {index}")  # a bug guard
        steps.append(ScheduledStep(index, tuple(rows), tuple(finished), tuple(preempted),
                                   kv_blocks))
        index += 1
    return steps


class _KVCache:
    """KV-cache blocks per request (``None`` blocks: unlimited, only counted)."""

    def __init__(self, blocks: int | None, block_size: int, lens: list[int]) -> None:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
        self.total, self.size = blocks, block_size
        self.held: dict[int, int] = {}
        self.used = 0
        if blocks is not None:
            need = [(i, -(-n // block_size)) for i, n in enumerate(lens)]
            too_big = [(i, b) for i, b in need if b > blocks]
            if too_big:
                i, b = too_big[0]
                raise ValueError(
                    f"request {i} has {lens[i]} prompt tokens: {b} KV blocks of {block_size} "
                    f"tokens, but the KV cache has {blocks} blocks ({blocks * block_size} "
                    "tokens); vLLM refuses a max_model_len the cache cannot hold. Give more "
                    "KV cache (memory, gpu_memory_utilization, tensor parallelism) or shorter "
                    "prompts"
                )

    def grow(self, request: int, tokens: int) -> bool:
        """Hold blocks for ``tokens`` computed tokens of ``request``; False if they don't fit."""
        extra = -(-tokens // self.size) - self.held.get(request, 0)
        if self.total is not None and self.used + extra > self.total:
            return False
        self.held[request] = self.held.get(request, 0) + extra
        self.used += extra
        return True

    def free(self, request: int) -> None:
        self.used -= self.held.pop(request, 0)


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
