"""A vLLM-shaped prefill scheduler: which tokens of which requests each step computes.

It follows vLLM 0.33.0's V1 ``Scheduler.schedule`` (``vllm/v1/core/sched/scheduler.py``) and
``KVCacheManager.allocate_slots`` (``vllm/v1/core/kv_cache_manager.py``) for pooling requests,
and the engine core's loop around them (``EngineCore.step`` / ``step_with_batch_queue``, in
``vllm/v1/engine/core.py``). ``tests/test_parity_schedule.py`` checks it step by step against
vLLM's own scheduler driven on the CPU (``tokpool.sim.vllm_run.vllm_schedule``).

Per step, with a token budget ``max_num_batched_tokens``:

1. running requests (admitted, partially prefilled) first, in admission order, each taking as
   many of its remaining tokens as the budget allows;
2. then, unless a request was preempted in this step, waiting requests in arrival order
   (ties: input order; preempted requests go back to the front), while the budget lasts and
   fewer than ``max_num_seqs`` requests run. With chunked prefill a request may take a partial
   chunk; without it, a prompt that does not fit the remaining budget waits (and blocks those
   behind it, first come first served, as vLLM's ``break`` does). A waiting request is
   admitted only when the KV cache has free blocks for its WHOLE prompt
   (``SchedulerConfig.scheduler_reserve_full_isl``, on by default).

With ``long_prefill_token_threshold`` (vLLM's flag of that name), no request takes more than
that many tokens in one step, unless it is the only request running or waiting (vLLM lifts
the cap then: nobody to starve). The cap applies with or without chunked prefill. The rule is
``vllm_rules.scheduling.long_prefill_cap`` (also importable from here).

With ``kv_cache_blocks`` (vLLM's ``num_gpu_blocks``) the cache is finite: block 0 is vLLM's
null block, so ``kv_cache_blocks - 1`` blocks hold KV. A running request that cannot get the
blocks for its next chunk preempts the LAST running request (recompute: its blocks are freed,
it goes back to the front of the waiting queue and restarts; the engine cleans its pooling
state), itself if it is the last, and no request after it runs in that step. The blocks are
kept as vLLM's ``KVCacheManager`` keeps them (``kv_blocks``): one block table per KV-cache
group (``kv_cache_groups``: a sliding-window group frees the blocks before its window and
admits a request with its window's blocks only).

With ``enable_prefix_caching`` (vLLM's default for causal pooling models) a waiting request
of a task that reads the cache (``embed``, ``classify``: ``vllm_rules.prefix_cache``) starts
after its longest run of cached blocks: blocks another prompt with the same leading token ids
computed (``prompt_token_ids``), or its own blocks from before a preemption that were not
evicted since. Its first chunk then starts at that token (``ScheduledStep.cached``).

A step's chunks are listed in ROW order, as Model Runner V2 lays them out in the step's hidden
states: ascending scheduled tokens, ties in scheduler order (``vllm_rules.step_order``). Which
rows a request occupies decides what a later write overwrites.

Pooling requests finish when the step that computes their last prompt token returns its
output (``Scheduler.update_from_output``): then their KV blocks are freed and their slot in
``max_num_seqs`` is released. Without async scheduling that is before the next step is
scheduled; with it (a batch queue of two steps) the next step is scheduled first, so a
request that finishes in step N still holds its blocks and its slot, and counts as running
for the threshold rule, while step N+1 is scheduled. Steps that schedule nothing (waiting for
an arrival, or, under async, for a step's output) are not listed: step indices jump; a
preemption made in such a call is listed in the next step's ``preempted``.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..._args import as_whole, items
from ...guard import ensure_fits

# Called through the module, never copied: the refusal tests swap the checks there.
from ..vllm_rules import engine_checks
from ..vllm_rules.kv_spec import max_in_flight_tokens
from ..vllm_rules.prefix_cache import reads_prefix_cache
from ..vllm_rules.scheduling import long_prefill_cap, step_order  # the threshold rule, row order
from .aborts import cancel_, check_aborts
from .block_counts import BlockCounts, counts_suffice
from .kv_blocks import KVBlocks, block_keys, unlimited_blocks

#: Bytes one KV block costs the block manager at most (its id in a block table, its
#: reference count, a prefix key): what a run's tables may take, checked before they are made.
BYTES_PER_BLOCK = 160


@dataclass(frozen=True)
class ScheduledStep:
    """One step of the schedule.

    Attributes:
        index: the step number (``schedule()`` calls since the start).
        chunks: ``(request, start, stop)`` in batch order: positions ``start..stop-1``.
        finished: requests whose last prompt token is computed in this step, batch order.
        preempted: requests preempted when this step was scheduled, or in a call just before
            it that scheduled nothing (KV cache full): their KV blocks and pooling state are
            dropped and their prefill restarts from token 0. Under async scheduling it may
            list a request that finished in the previous step (its output was in flight):
            vLLM frees its blocks, delivers its output and never schedules it again.
        kv_blocks: KV-cache blocks held right after the step is scheduled, every group: the
            running requests', finishing ones included, and under async those of requests
            finished in the previous step (freed only when its output is processed); vLLM's
            null block not counted (counted with or without a KV-cache limit).
        cached: ``(request, tokens)`` for the requests admitted in this step whose first
            ``tokens`` prompt tokens came from the prefix cache (their chunk starts there).
    """

    index: int
    chunks: tuple[tuple[int, int, int], ...]
    finished: tuple[int, ...]
    preempted: tuple[int, ...] = ()
    kv_blocks: int = 0
    cached: tuple[tuple[int, int], ...] = ()

    @property
    def num_tokens(self) -> int:
        return sum(stop - start for _, start, stop in self.chunks)

    @property
    def context_sum(self) -> int:
        """Σ over scheduled tokens of (position + 1): causal attention work of the step."""
        return sum((stop * (stop + 1) - start * (start + 1)) // 2 for _, start, stop in self.chunks)


_INT64_MAX = 2**63 - 1


def validate_prompt_lens(prompt_lens: object) -> list[int]:
    """Validate prompt lengths: a non-empty sequence of positive ints.

    Raises:
        TypeError: not a sequence of ints.
        ValueError: empty, or a length < 1 (naming the request and value).
    """
    if isinstance(prompt_lens, set | frozenset | dict):
        raise TypeError(f"prompt_lens must be an ordered sequence of ints (request i has "
                        f"prompt_lens[i] tokens), got a {type(prompt_lens).__name__}")
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
        if n > _INT64_MAX:  # every count downstream is int64 (numpy, pandas)
            raise ValueError(f"prompt_lens[{i}] = {n:.3g} tokens does not fit int64; no engine "
                             "holds such a prompt")
        lens.append(n)
    if not lens:
        raise ValueError("prompt_lens is empty: give at least one request")
    return lens


def check_arrival_steps(arrival_steps: Sequence[int] | None, n: int) -> list[int]:
    """Validate per-request arrival steps (default: all at step 0)."""
    if arrival_steps is None:
        return [0] * n
    given = items("arrival_steps", arrival_steps, empty=True,
                  what="a list of steps, one per request")
    if len(given) != n:
        raise ValueError(f"arrival_steps has {len(given)} entries for {n} requests")
    steps = [as_whole(s) for s in given]  # NumPy and tensor integers too, as prompt_lens
    bad = [(i, given[i]) for i, s in enumerate(steps) if s is None or s < 0]
    if bad:
        raise ValueError(f"arrival_steps must be whole numbers >= 0 (the first step each "
                         f"request may run in); got (request, value) {bad[:5]}")
    return steps  # type: ignore[return-value]


def check_prompt_token_ids(token_ids: object, lens: Sequence[int]) -> list[list[int]] | None:
    """Validate per-request prompt token ids against the prompt lengths (``None``: none given).

    Raises:
        TypeError: not a sequence of int sequences.
        ValueError: a count or a length that does not match ``lens``.
    """
    if token_ids is None:
        return None
    if isinstance(token_ids, (str, bytes)) or not isinstance(token_ids, Sequence):
        raise TypeError("prompt_token_ids must be a list of token-id lists, one per request, "
                        f"got {type(token_ids).__name__}")
    if len(token_ids) != len(lens):
        raise ValueError(f"prompt_token_ids has {len(token_ids)} prompts for {len(lens)} "
                         "requests")
    out = []
    for i, ids in enumerate(token_ids):
        ids = _ids(ids, i)
        if len(ids) != lens[i]:
            raise ValueError(f"prompt_token_ids[{i}] has {len(ids)} tokens but prompt_lens[{i}] "
                             f"is {lens[i]}")
        out.append(ids)
    return out


def _ids(ids: object, i: int) -> list[int]:
    if hasattr(ids, "tolist"):
        ids = ids.tolist()  # tensors, arrays
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise TypeError(f"prompt_token_ids[{i}] must be a sequence of ints, got "
                        f"{type(ids).__name__}")
    bad = [t for t in ids if isinstance(t, bool) or not isinstance(t, int) or t < 0]
    if bad:
        raise TypeError(f"prompt_token_ids[{i}] holds {bad[:3]}: token ids are ints >= 0")
    return list(ids)


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
    async_scheduling: bool = False,
    kv_cache_groups: Sequence[int | None] = (None,),
    max_model_len: int | None = None,
    enable_prefix_caching: bool = False,
    task: str = "token_embed",
    prompt_token_ids: Sequence[Sequence[int]] | None = None,
    aborts: Mapping[int, int] | None = None,
) -> list[ScheduledStep]:
    """The steps that prefill every request (see the module docstring for the rules).

    Args:
        prompt_lens: prompt length per request (each >= 1).
        max_num_batched_tokens, max_num_seqs, enable_chunked_prefill,
            long_prefill_token_threshold, block_size, async_scheduling, max_model_len,
            enable_prefix_caching: vLLM's flags of those names (``None``/0 threshold: no cap;
            ``None`` max_model_len: no limit).
        arrival_steps: per request, the first step it may be scheduled in (default all 0).
        kv_cache_blocks: vLLM's ``num_gpu_blocks`` (one is the null block); ``None``:
            every prompt's blocks at once (``kv_blocks.unlimited_blocks``: nothing preempted).
        kv_cache_groups: each KV-cache group's sliding window, ``None`` for full attention
            (``SimConfig.kv_group_windows``; default one full-attention group).
        task: the pooling task of every request (token tasks never read the prefix cache).
        prompt_token_ids: per request, its token ids (prompts that share leading tokens share
            prefix-cache blocks); default: every prompt has tokens of its own.
        aborts: ``{request: step}``: cancel the request right before ``schedule()`` call
            ``step`` (``Scheduler.finish_requests`` with ``FINISHED_ABORTED``; see
            ``schedule.aborts``): its KV blocks and slot are freed; a finished one is left.

    Returns:
        The steps that schedule tokens. ``ScheduledStep.kv_blocks``: the blocks held right
        after the step is scheduled (under async, those of requests finished in the previous
        step included).

    Raises:
        ValueError: a configuration vLLM cannot serve, where the real engine refuses the
            request or spins forever with no error: without chunked prefill, a prompt longer
            than the budget; a prompt needing more KV blocks than the cache holds (it is never
            admitted); a cache of fewer than 2 blocks. The message names the flag to change.
    """
    lens = validate_prompt_lens(prompt_lens)
    arrival = check_arrival_steps(arrival_steps, len(lens))
    token_ids = check_prompt_token_ids(prompt_token_ids, lens)
    abort_at = sorted((s, r) for r, s in check_aborts(aborts, len(lens), arrival).items())
    aborted: set[int] = set()
    budget_per_step = max_num_batched_tokens
    engine_checks.check_unchunked_prompts_schedulable(
        lens, budget_per_step, enable_chunked_prefill=enable_chunked_prefill)
    threshold = long_prefill_token_threshold or 0  # 0/None: no cap
    queue_size = 2 if async_scheduling else 1  # VllmConfig.max_concurrent_batches
    reads_cache = enable_prefix_caching and reads_prefix_cache(task)
    # Blocks nobody reads need no prefix keys: with every request skipping the cache (token
    # tasks) vLLM's cached blocks change which free block is handed out next, never how many
    # are free, so the schedule is the one without caching.
    kv = kv_blocks_for(lens, kv_cache_blocks, block_size, kv_cache_groups, max_model_len,
                    max_in_flight_tokens(budget_per_step, async_scheduling=async_scheduling),
                    reads_cache, token_ids)
    pending = collections.deque(sorted(range(len(lens)), key=lambda i: (arrival[i], i)))
    waiting: collections.deque[int] = collections.deque()
    running: list[int] = []
    computed = [0] * len(lens)
    in_flight: collections.deque[tuple[ScheduledStep, list[tuple[int, int]]]] = \
        collections.deque()
    finished_at: dict[int, list[int]] = {}
    finished: set[int] = set()
    steps: list[ScheduledStep] = []
    unreported = False  # finished requests not yet announced by a schedule() call
    carried: list[int] = []  # preemptions of calls that scheduled nothing: told with the next
    index = 0
    idle = 0
    while True:
        if not (waiting or running or unreported) and not in_flight:
            if not pending:
                break
            index = max(index, arrival[pending[0]])  # idle until the next arrival
        while pending and arrival[pending[0]] <= index:
            waiting.append(pending.popleft())
        while abort_at and abort_at[0][0] <= index:  # Scheduler.finish_requests(ABORTED)
            unreported |= cancel_(abort_at.pop(0)[1], running, waiting, kv, finished, aborted)
        if waiting or running or unreported:  # Scheduler.has_requests
            step, order = _schedule_step(index, lens, computed, running, waiting, kv,
                                         threshold, budget_per_step, max_num_seqs,
                                         enable_chunked_prefill, reads_cache)
            unreported = False
            index += 1
            in_flight.appendleft((step, order))
            if step.chunks:
                if carried:  # preempted in a call that then scheduled nothing
                    step = dataclasses.replace(step, preempted=(*carried, *step.preempted))
                    carried = []
                steps.append(step)
                idle = 0
            else:
                carried.extend(step.preempted)
                idle += 1
                if idle > queue_size + 1:
                    _raise_stuck(waiting, lens, step.index)
            if len(in_flight) < queue_size and (step.chunks or waiting or running):
                continue
        elif not in_flight:
            continue
        done, order = in_flight.pop()  # Scheduler.update_from_output of the oldest step
        for r, n in order:  # the scheduler's order (its num_scheduled_tokens)
            kv.in_flight[r] -= n
        for r, _ in order:
            if r in finished or not _finishes(done, r, lens):
                continue
            if r in aborted:  # async: aborted in flight; the runner pooled it, vLLM drops it
                finished.add(r)
                finished_at.setdefault(done.index, []).append(r)
                continue
            # its pooler output: finished. Under async a request preempted while this, its
            # last step, was in flight finishes too, from the waiting queue
            # (update_from_output's ``stopped_preempted_reqs``): never scheduled again.
            if r in running:
                running.remove(r)
            else:
                waiting.remove(r)
            kv.free(r)
            finished.add(r)
            finished_at.setdefault(done.index, []).append(r)
            unreported = True
    return [dataclasses.replace(s, finished=tuple(
        sorted(finished_at.get(s.index, ()), key=[r for r, _, _ in s.chunks].index)))
        for s in steps]


def _finishes(step: ScheduledStep, r: int, lens: list[int]) -> bool:
    return any(q == r and stop == lens[r] for q, _, stop in step.chunks)


def refuse_what_the_cache_never_admits(
    lens: Sequence[int], kv_cache_blocks: int | None, *, block_size: int,
    kv_cache_groups: Sequence[int | None], max_model_len: int | None, in_flight: int,
    reads_cache: bool, token_ids: Sequence[Sequence[int]] | None,
) -> None:
    """The KV refusal both schedulers apply before they run (vLLM itself would spin):
    ``engine_checks.check_prompts_fit_kv_cache`` over the groups; with prefix caching read and
    prompts that may share blocks, only a cache of fewer than two blocks (a hit can make room
    vLLM then admits with)."""
    if kv_cache_blocks is None:
        return
    if reads_cache and token_ids is not None:
        engine_checks.check_prompts_fit_kv_cache([], kv_cache_blocks, block_size)
        return
    engine_checks.check_prompts_fit_kv_cache(
        lens, kv_cache_blocks, block_size, kv_cache_groups=kv_cache_groups,
        max_model_len=max_model_len, max_in_flight_tokens=in_flight)


def kv_blocks_for(lens, blocks, block_size, groups, max_model_len, in_flight, caching,
                  token_ids) -> KVBlocks | BlockCounts:
    """The block manager, after vLLM's refusal of prompts the cache never admits (``schedule``
    and the replay of a given schedule, ``given.check_schedule``, both keep their blocks in
    one)."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
    groups = tuple(groups)
    if not groups:
        raise ValueError("kv_cache_groups needs at least one group (None: full attention)")
    refuse_what_the_cache_never_admits(
        lens, blocks, block_size=block_size, kv_cache_groups=groups, max_model_len=max_model_len,
        in_flight=in_flight, reads_cache=caching, token_ids=token_ids)
    held = unlimited_blocks(lens, block_size, len(groups))  # the most blocks the run can hold
    ensure_fits(held * BYTES_PER_BLOCK,
                what=f"tokpool's scheduler on {len(lens):,} prompt{'s' if len(lens) > 1 else ''}"
                     f" ({sum(lens):,} tokens): vLLM's block tables, {held:,} KV blocks of "
                     f"{block_size} tokens", cheaper="fewer or shorter prompts, or a larger "
                     "block_size (--block-size)")
    if blocks is None:
        blocks = held
    mml = max_model_len if max_model_len is not None else 1 << 62
    if counts_suffice(groups, caching=caching):  # no block's identity is ever read
        return BlockCounts(blocks, block_size, len(groups), max_model_len=mml, lens=lens)
    keys = block_keys(lens, block_size, token_ids) if caching else [[] for _ in lens]
    return KVBlocks(blocks, block_size, groups, caching=caching,
                    max_model_len=mml, max_in_flight_tokens=in_flight, lens=lens, keys=keys)


def _raise_stuck(waiting, lens: list[int], index: int) -> None:
    """Nothing can be scheduled, again and again: the real engine would spin."""
    r = waiting[0] if waiting else None
    detail = f"request {r} ({lens[r]} prompt tokens)" if r is not None else "no request"
    raise ValueError(
        f"the scheduler makes no progress at step {index}: {detail} is not scheduled again "
        "(its blocks never fit the KV cache), and vLLM's engine would spin forever with no "
        "error (vLLM's own scheduler does the same). Give the KV cache more blocks "
        "(kv_cache_blocks / gpu_memory_utilization) or raise max_num_batched_tokens / enable "
        "chunked prefill"
    )


def may_admit(running: int, max_num_seqs: int) -> bool:
    """Whether a waiting request may join ``running`` running requests (vLLM's
    ``len(self.running) == max_num_seqs: break``). Under async scheduling a request finished
    in the step before still counts (``holds_slot``)."""
    return running < max_num_seqs


def holds_slot(finished_step: int, step: int, *, async_scheduling: bool) -> bool:
    """Whether a request whose last prompt token was computed in ``finished_step`` still
    holds its KV blocks and its ``max_num_seqs`` slot while ``step`` is scheduled: its output
    is processed (``update_from_output``) before the next step is scheduled, or, under async
    scheduling (a batch queue of two), after it."""
    return step <= finished_step + (1 if async_scheduling else 0)


def _schedule_step(
    index: int, lens: list[int], computed: list[int], running: list[int],
    waiting: collections.deque[int], kv: KVBlocks, threshold: int, budget: int,
    max_num_seqs: int, chunked: bool, reads_cache: bool,
) -> tuple[ScheduledStep, list[tuple[int, int]]]:
    """One ``Scheduler.schedule()`` call: mutates the queues, ``computed`` and the cache.
    Returns the step and its ``(request, tokens)`` in scheduling order."""
    cap = long_prefill_cap(threshold, len(running) + len(waiting))
    chunks: list[tuple[int, int, int]] = []
    preempted: list[int] = []
    cached: list[tuple[int, int]] = []
    i = 0
    while i < len(running) and budget > 0:
        r = running[i]
        take = lens[r] - computed[r]
        if take == 0:  # async: its last chunk is in flight
            i += 1
            continue
        if 0 < cap < take:
            take = cap
        take = min(take, budget)
        while not kv.allocate(r, computed[r], take):
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
        break  # this request cannot run: nothing after it does
    # vLLM admits no waiting request in a step that preempted one (``if not preempted_reqs``)
    while not preempted and waiting and budget > 0 and may_admit(len(running), max_num_seqs):
        r = waiting[0]
        hit, num_hit = kv.cache_hit(r) if reads_cache else (None, 0)
        take = lens[r] - num_hit
        if 0 < cap < take:
            take = cap
        if not chunked and take > budget:
            break
        take = min(take, budget)
        if not kv.allocate(r, 0, take, hit=hit, num_hit=num_hit, admit=True):
            break  # its whole prompt does not fit the free blocks: it waits
        waiting.popleft()
        running.append(r)
        chunks.append((r, num_hit, num_hit + take))
        if num_hit:
            cached.append((r, num_hit))
        budget -= take
    order = [(r, stop - start) for r, start, stop in chunks]
    for r, start, stop in chunks:
        computed[r] = stop
        kv.in_flight[r] += stop - start  # until update_from_output processes the step
    rows = [chunks[j] for j in step_order([stop - start for _, start, stop in chunks])]
    return ScheduledStep(index, tuple(rows), (), tuple(preempted), kv.used, tuple(cached)), order


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
