"""A schedule given from outside (hand-written, recorded from an engine, or vLLM's own
scheduler's): checked to be one the step loop can run AND one the configured engine could
have made, so a wrong one is an error, not a silent simulation.

The engine's limits are checked by replaying the schedule through the rule functions tokpool's
own scheduler uses (its block manager ``kv_blocks.KVBlocks`` built by ``kv_blocks_for``,
``may_admit``, ``holds_slot``, and the threshold rule
``vllm_rules.scheduling.long_prefill_cap``), never by a second copy of them.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from typing import Any

from ..._args import as_whole
from ..vllm_rules.kv_spec import max_in_flight_tokens
from ..vllm_rules.scheduling import long_prefill_cap
from .kv_blocks import KVBlocks
from .scheduler import (
    ScheduledStep,
    check_arrival_steps,
    check_prompt_token_ids,
    holds_slot,
    kv_blocks_for,
    may_admit,
)


def check_schedule(
    steps: Sequence[ScheduledStep], prompt_lens: Sequence[int], *,
    max_num_batched_tokens: int, enable_chunked_prefill: bool,
    long_prefill_token_threshold: int | None = None, max_num_seqs: int | None = None,
    kv_cache_blocks: int | None = None, block_size: int = 16, async_scheduling: bool = False,
    reads_prefix_cache: bool = True, kv_cache_groups: Sequence[int | None] = (None,),
    max_model_len: int | None = None, prompt_token_ids: Sequence[Sequence[int]] | None = None,
    arrival_steps: Sequence[int] | None = None,
) -> list[ScheduledStep]:
    """Validate a schedule for ``prompt_lens`` against the engine's limits; return it as a list.

    Form: every field of every step is a whole number (``index``, each chunk's ``(request,
    start, stop)``, ``finished``, ``preempted``, ``kv_blocks``); step indices increase.

    Progress: each step's chunks continue their request where it stopped (from 0 after a
    preemption, or from the tokens the step lists in ``cached`` for it: a prefix-cache hit,
    which must be the hit the cache holds; ``reads_prefix_cache=False`` — prefix caching off,
    or a token task, ``vllm_rules.prefix_cache`` — refuses any), ``finished`` lists exactly
    the requests whose last prompt token they compute,
    in chunk order, and every request finishes exactly once. Without chunked prefill a prompt
    is scheduled whole, unless a ``long_prefill_token_threshold`` is set (vLLM's
    ``Scheduler.schedule`` applies the cap before its no-chunking check, and lifts it for a
    lone request, whose rest then runs in one chunk). Under async scheduling vLLM may preempt
    a request whose last chunk is still in flight; it is finished all the same
    (``update_from_output``), so a preemption of a request finished by the step listed just
    before is accepted and changes nothing.

    Limits, replayed with the scheduler's own rules: at most ``max_num_batched_tokens`` per
    step; at most ``max_num_seqs`` requests running (``may_admit``; a finished request holds
    its slot while ``holds_slot``); no chunk over the threshold while another request runs or
    is known to wait (``long_prefill_cap``; a request not yet scheduled may not have arrived,
    so it is not counted); and the KV cache (the scheduler's ``KVBlocks``, every KV-cache group,
    sliding windows and prefix caching as configured): a running request's chunk must get its
    blocks, a new one needs its WHOLE prompt's blocks free, in vLLM's scheduling order
    (running requests as admitted, then preempted ones, then first come first served). A
X

    Raises:
        TypeError: not a list of ``ScheduledStep``, or a field that is not a whole number.
        ValueError: the first rule broken, naming the step, the request, the numbers and the
            setting (``max_num_seqs``, ``kv_cache_blocks``, ...).
    """
    if isinstance(steps, str | bytes) or not isinstance(steps, Sequence):
        raise TypeError(f"schedule must be a list of ScheduledStep, got {type(steps).__name__}")
    lens = list(prompt_lens)
    token_ids = check_prompt_token_ids(prompt_token_ids, lens)
    arrival = check_arrival_steps(arrival_steps, len(lens))  # orders the waiting queue
    kv = kv_blocks_for(lens, kv_cache_blocks, block_size, kv_cache_groups, max_model_len,
                       max_in_flight_tokens(max_num_batched_tokens,
                                            async_scheduling=async_scheduling),
                       reads_prefix_cache, token_ids)  # refuses a prompt that never fits
    unprocessed: list[tuple[int, list[tuple[int, int]]]] = []  # steps whose output is pending
    done = [0] * len(lens)
    running: dict[int, None] = {}  # admitted, not preempted, not released: insertion order
    waiting: list[int] = []  # preempted, not restarted: vLLM's waiting queue's front
    finished_at: dict[int, int] = {}
    last_index = -1
    just_finished: set[int] = set()  # finished by the step listed just before
    out: list[ScheduledStep] = []
    for k, given in enumerate(steps):
        step = _whole_fields(given, k)
        where = f"schedule step {step.index}"
        if step.index <= last_index:
            raise ValueError(f"{where}: step indices must increase (previous {last_index})")
        last_index = step.index
        for index, order in [u for u in unprocessed if not holds_slot(
                u[0], step.index, async_scheduling=async_scheduling)]:
            # update_from_output, in the step's scheduling order (it decides which freed
            # block is reused first): its tokens are no longer in flight, and the requests it
            # finished release their blocks and slots
            for r, n in order:
                kv.in_flight[r] -= n
            for r, _ in order:
                if finished_at.get(r) == index:
                    running.pop(r, None)
                    kv.free(r)
            unprocessed.remove((index, order))
        victims: list[int] = []
        admitted_order = list(running)  # the scheduler's running queue as the step starts
        done_before = list(done)
        for r in step.preempted:
            if r in just_finished:  # async: preempted while its finishing step was in flight
                running.pop(r, None)
                kv.free(r)
                continue
            if not 0 <= r < len(lens) or r in finished_at or r not in running:
                raise ValueError(f"{where}: request {r} cannot be preempted (unknown, finished "
                                 "or not running)")
            del running[r]
            victims.append(r)  # its blocks are freed when the scheduler would (below)
            done[r] = 0
            waiting.insert(0, r)  # Scheduler._preempt_request: appendleft
        if step.num_tokens > max_num_batched_tokens:
            raise ValueError(
                f"{where} computes {step.num_tokens} tokens, more than max_num_batched_tokens="
                f"{max_num_batched_tokens}; split it or raise the budget in the SimConfig"
            )
        hits = _hits(step, where, lens, done, reads_prefix_cache)
        continuing, admitted = _chunks(step, where, lens, done, running, finished_at,
                                       enable_chunked_prefill, long_prefill_token_threshold,
                                       hits)
        eligible = len(running) + len(set(waiting) | {r for r, _, _ in admitted})
        cap = long_prefill_cap(long_prefill_token_threshold, eligible)
        for r, start, stop in step.chunks:
            if cap and stop - start > cap:
                raise ValueError(
                    f"{where}: request {r} takes {stop - start} tokens, more than "
                    f"long_prefill_token_threshold={cap}, while {eligible - 1} other "
                    "request(s) run or wait (vLLM lifts the cap only for a lone request); "
                    "split the chunk or raise the threshold"
                )
        for j, (r, _, _) in enumerate(admitted):
            if max_num_seqs is not None and not may_admit(len(running) + j, max_num_seqs):
                raise ValueError(
                    f"{where}: request {r} starts while {len(running) + j} requests run (or "
                    f"hold their slot until their output is processed), the most "
                    f"max_num_seqs={max_num_seqs} allows; start it later or raise max_num_seqs"
                )
        # vLLM's scheduling order: running requests as they were admitted, then the waiting
        # queue (preempted requests at its front, then first come first served)
        position = {r: i for i, r in enumerate(running)}
        continuing.sort(key=lambda chunk: position[chunk[0]])
        queue = [r for r in admitted_order if r in position or r in victims]
        _grow_running(kv, where, queue, continuing, victims, kv_cache_blocks, lens=lens,
                      done=done_before, cap=cap, budget=max_num_batched_tokens)
        kv, admitted = _admit(kv, where, lens, admitted, kv_cache_blocks, block_size, hits,
                              step.kv_blocks, waiting, arrival)
        for r, start, stop in (*continuing, *admitted):  # running: in admission order
            done[r] = stop
            running.setdefault(r)
            if r in waiting:
                waiting.remove(r)
            kv.in_flight[r] += stop - start  # until its output is processed
        unprocessed.append((step.index, [(r, stop - start)
                                         for r, start, stop in (*continuing, *admitted)]))
        if step.kv_blocks not in (0, kv.used):
            raise ValueError(f"{where}: kv_blocks={step.kv_blocks}, but its requests hold "
                             f"{kv.used} blocks of {block_size} tokens after it is scheduled; "
                             "leave kv_blocks=0 to have it counted")
        expected = tuple(r for r, _, stop in step.chunks if stop == lens[r])
        if tuple(step.finished) != expected:
            raise ValueError(f"{where}: finished must be {expected} (the requests whose last "
                             f"token it computes, in chunk order), got {tuple(step.finished)}")
        for r in expected:
            finished_at[r] = step.index
        just_finished = set(expected)
        out.append(ScheduledStep(step.index, step.chunks, step.finished, step.preempted,
                                 kv.used, step.cached))
    missing = [r for r in range(len(lens)) if r not in finished_at]
    if missing:
        raise ValueError(f"the schedule never finishes requests {missing[:10]}: every prompt "
                         "must be computed to its last token")
    return out


def _hits(step: ScheduledStep, where: str, lens: list[int], done: list[int],
          reads_cache: bool) -> dict[int, int]:
    """The step's prefix-cache hits ``{request: tokens}``, checked to be possible."""
    hits = dict(step.cached)
    if hits and not reads_cache:
        raise ValueError(
            f"{where} lists prefix-cache hits {step.cached}, but this engine reads no prefix "
            "cache (prefix caching off, or a token task, which vLLM recomputes in full)")
    for r, tokens in hits.items():
        if not 0 <= r < len(lens) or done[r] != 0 or not 0 < tokens < lens[r]:
            raise ValueError(
                f"{where}: a prefix-cache hit of {tokens} tokens for request {r} must be of "
                "a request starting its prefill (none computed), shorter than its prompt")
    return hits


def _chunks(step: ScheduledStep, where: str, lens: list[int], done: list[int],
            running: dict[int, None], finished_at: dict[int, int], chunked: bool,
            threshold: int | None, hits: dict[int, int]
            ) -> tuple[list[tuple[int, int, int]], ...]:
    """The step's chunks, checked to continue their requests: (running ones, new ones)."""
    seen: set[int] = set()
    continuing, admitted = [], []
    for r, start, stop in step.chunks:
        if not 0 <= r < len(lens):
            raise ValueError(f"{where}: request {r} is not in prompt_lens ({len(lens)} requests)")
        if r in seen or r in finished_at:
            raise ValueError(f"{where}: request {r} is scheduled twice or after it finished")
        seen.add(r)
        expected_start = done[r] + hits.get(r, 0)
        if start != expected_start or not start < stop <= lens[r]:
            raise ValueError(
                f"{where}: request {r} chunk [{start}, {stop}) must start at {expected_start} "
                f"and end by its prompt length {lens[r]}"
            )
        if not chunked and (start, stop) != (hits.get(r, 0), lens[r]) and not threshold:
            raise ValueError(f"{where}: request {r} is chunked but chunked prefill is off "
                             "and no long_prefill_token_threshold caps it")
        (continuing if r in running else admitted).append((r, start, stop))
    return continuing, admitted


def _grow_running(kv: KVBlocks, where: str, queue: list[int], continuing, victims: list[int],
                  blocks: int | None, *, lens: list[int], done: list[int], cap: int,
                  budget: int) -> None:
    """The running queue, as vLLM's ``Scheduler.schedule`` walks it (``KVBlocks.allocate``):
    each request in admission order gets the blocks for its chunk, and when they do not fit
    the LAST running request is preempted (one of the step's ``victims``) until they do,
    or until the request preempts itself. The order of the attempts and frees is vLLM's: it
    decides which blocks a sliding window drops and which freed block is handed out next.
    Victims left over (preempted in a call that scheduled nothing) are freed before the new
    requests come in."""
    chunk_of = {r: (start, stop) for r, start, stop in continuing}
    alive = list(queue)
    i = 0
    while i < len(alive) and budget > 0:
        r = alive[i]
        if r in chunk_of:
            start, stop = chunk_of[r]
        elif r in victims:  # it tried the chunk vLLM would give it, and preempted itself
            start = done[r]
            stop = start + min(lens[r] - start, cap or lens[r], budget)
        else:
            i += 1  # running, not scheduled in this step
            continue
        while not kv.allocate(r, start, stop - start):
            victim = alive.pop()
            if victim not in victims:  # (vLLM lists a step's preemptions as a set)
                raise ValueError(
                    f"{where}: request {r} needs more KV blocks for its first {stop} tokens, "
                    f"but the cache is full (kv_cache_blocks={blocks}, {_usable(blocks)}; "
                    f"{kv.used} held): vLLM preempts request {victim} (the last running) "
                    "first. Give more KV cache or preempt (ScheduledStep.preempted)"
                )
            victims.remove(victim)
            kv.free(victim)
            if victim == r:
                break
        else:
            chunk_of.pop(r, None)
            budget -= stop - start
            i += 1
            continue
        break  # this request cannot run: nothing after it does
    if chunk_of:
        r = next(iter(chunk_of))
        raise ValueError(
            f"{where}: request {r} is scheduled, but vLLM's scheduler stops before it: the "
            f"cache is full (kv_cache_blocks={blocks}, {_usable(blocks)}; {kv.used} held) or "
            "an earlier running request preempted itself. Give more KV cache or preempt "
            "(ScheduledStep.preempted)")
    for r in victims:
        kv.free(r)
    victims.clear()


def _usable(blocks: int | None) -> str:
    return "unlimited" if blocks is None else f"{blocks - 1} usable"


#: At most this many of a step's new requests are tried in every order of admission.
_ORDERS_TRIED = 5


def _admit(kv: KVBlocks, where: str, lens: list[int], admitted, blocks: int | None,
           block_size: int, hits: dict[int, int], kv_blocks: int, waiting: list[int],
           arrival: list[int],
           ) -> tuple[KVBlocks, list]:
    """The step's new requests, each needing its whole prompt's blocks free, from the cache hit
    the step lists (which must be the one the cache holds). A given schedule does not say in
    which order vLLM's waiting queue admitted them, and the
    order decides which blocks they share or evict: an order is accepted when vLLM's rule
    admits each request and the blocks held come to the step's ``kv_blocks`` (when given).
    Tried: the waiting queue's order (preempted requests at its front, the last preempted
    first; then first come first served: by ``arrival_steps`` when given, else by index), then,
    for up to ``_ORDERS_TRIED`` new requests, every other order. Returns the block manager
    after the admissions and the order used."""
    front = {r: i for i, r in enumerate(waiting)}
    likely = sorted(admitted, key=lambda chunk: (front.get(chunk[0], len(front)),
                                                 arrival[chunk[0]], chunk[0]))
    if len(likely) <= 1:
        _admit_in_order(kv, where, lens, likely, blocks, block_size, hits)
        return kv, likely
    orders = [likely]
    if len(likely) <= _ORDERS_TRIED:
        orders += [list(o) for o in itertools.permutations(likely) if list(o) != likely]
    first_error: ValueError | None = None
    for order in orders:
        trial = copy.deepcopy(kv)
        try:
            _admit_in_order(trial, where, lens, order, blocks, block_size, hits)
        except ValueError as err:
            first_error = first_error or err
            continue
        if kv_blocks in (0, trial.used):
            return trial, order
        first_error = first_error or ValueError(
            f"{where}: kv_blocks={kv_blocks}, but its requests hold {trial.used} blocks of "
            f"{block_size} tokens after it is scheduled; leave kv_blocks=0 to have it counted")
    raise first_error


def _admit_in_order(kv: KVBlocks, where: str, lens: list[int], admitted, blocks: int | None,
                    block_size: int, hits: dict[int, int]) -> None:
    for r, start, stop in admitted:
        hit, num_hit = kv.cache_hit(r) if r in hits else (None, 0)
        if num_hit != hits.get(r, 0):
            raise ValueError(
                f"{where}: request {r} starts after a prefix-cache hit of {hits[r]} tokens, but "
                f"the cache holds {num_hit} tokens of its prompt when it starts (vLLM's "
                "get_computed_blocks)")
        if not kv.allocate(r, 0, stop - start, hit=hit, num_hit=num_hit, admit=True):
            raise ValueError(
                f"{where}: request {r} starts, but its whole prompt ({lens[r]} tokens, "
                f"{-(-lens[r] // block_size)} KV blocks) does not fit the free blocks "
                f"(kv_cache_blocks={blocks}, {_usable(blocks)}; {kv.used} held): vLLM admits "
                "a request only when its whole prompt fits. Start it later or give more KV "
                "cache"
            )


def _whole_fields(step: Any, position: int) -> ScheduledStep:
    """``step`` with every field checked to be whole numbers (NumPy integers become ints)."""
    if not isinstance(step, ScheduledStep):
        raise TypeError(f"schedule entries must be ScheduledStep, got {type(step).__name__} "
                        f"at position {position}")
    index = as_whole(step.index)
    if index is None or index < 0:
        raise TypeError(f"schedule entry {position}: index must be a whole number >= 0 (the "
                        f"step number), got {step.index!r}")
    where = f"schedule step {index}"

    def numbers(name: str, value: Any) -> tuple[int, ...]:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence | tuple):
            raise TypeError(f"{where}: {name} must be a tuple of request indices, got "
                            f"{value!r}")
        ints = [as_whole(v) for v in value]
        if any(v is None for v in ints):
            raise TypeError(f"{where}: {name} must hold whole request indices, got "
                            f"{tuple(value)!r}")
        return tuple(ints)  # type: ignore[arg-type]

    chunks = step.chunks
    if isinstance(chunks, str | bytes) or not isinstance(chunks, Sequence):
        raise TypeError(f"{where}: chunks must be a tuple of (request, start, stop), got "
                        f"{chunks!r}")
    whole_chunks = []
    for chunk in chunks:
        parts = (None,) if isinstance(chunk, str | bytes) or not isinstance(
            chunk, Sequence) or len(chunk) != 3 else tuple(as_whole(v) for v in chunk)
        if any(v is None for v in parts):
            raise TypeError(f"{where}: chunk {chunk!r} must be (request, start, stop): three "
                            "whole numbers, start and stop whole token positions (a float "
                            "or a bool is not one)")
        whole_chunks.append(parts)
    kv_blocks = as_whole(step.kv_blocks)
    if kv_blocks is None or kv_blocks < 0:
        raise TypeError(f"{where}: kv_blocks must be a whole number >= 0, got "
                        f"{step.kv_blocks!r}")
    cached = step.cached
    if isinstance(cached, str | bytes) or not isinstance(cached, Sequence) or any(
            isinstance(c, str | bytes) or not isinstance(c, Sequence) or len(c) != 2
            or any(as_whole(v) is None for v in c) for c in cached):
        raise TypeError(f"{where}: cached must be a tuple of (request, tokens) whole numbers, "
                        f"got {cached!r}")
    return ScheduledStep(index, tuple(whole_chunks), numbers("finished", step.finished),
                         numbers("preempted", step.preempted), kv_blocks,
                         tuple((as_whole(r), as_whole(n)) for r, n in cached))
