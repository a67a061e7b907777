"""A schedule given from outside (hand-written, recorded from an engine, or vLLM's own
scheduler's): checked to be one the step loop can run AND one the configured engine could
have made, so a wrong one is an error, not a silent simulation.

The engine's limits are checked by replaying the schedule through the rule functions tokpool's
own scheduler uses (``scheduler.KVCache``, ``long_prefill_cap``, ``may_admit``,
``holds_slot``), never by a second copy of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._args import as_whole
from .scheduler import KVCache, ScheduledStep, holds_slot, long_prefill_cap, may_admit


def check_schedule(
    steps: Sequence[ScheduledStep], prompt_lens: Sequence[int], *,
    max_num_batched_tokens: int, enable_chunked_prefill: bool,
    long_prefill_token_threshold: int | None = None, max_num_seqs: int | None = None,
    kv_cache_blocks: int | None = None, block_size: int = 16, async_scheduling: bool = False,
) -> list[ScheduledStep]:
    """Validate a schedule for ``prompt_lens`` against the engine's limits; return it as a list.

    Form: every field of every step is a whole number (``index``, each chunk's ``(request,
    start, stop)``, ``finished``, ``preempted``, ``kv_blocks``); step indices increase.

    Progress: each step's chunks continue their request where it stopped (from 0 after a
    preemption), ``finished`` lists exactly the requests whose last prompt token they compute,
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
    so it is not counted); and the KV cache (``KVCache``): a running request's chunk must get
    its blocks, a new one needs its WHOLE prompt's blocks free (an order of the step's new
    requests in which vLLM's rule admits each must exist). A step's ``kv_blocks`` is the
    replay's count: a given 0 (the default) is filled in, another value must equal it.

    Raises:
        TypeError: not a list of ``ScheduledStep``, or a field that is not a whole number.
        ValueError: the first rule broken, naming the step, the request, the numbers and the
            setting (``max_num_seqs``, ``kv_cache_blocks``, ...).
    """
    if isinstance(steps, str | bytes) or not isinstance(steps, Sequence):
        raise TypeError(f"schedule must be a list of ScheduledStep, got {type(steps).__name__}")
    lens = list(prompt_lens)
    kv = KVCache(kv_cache_blocks, block_size, lens)  # refuses a prompt that never fits
    done = [0] * len(lens)
    running: dict[int, None] = {}  # admitted, not preempted, not released: insertion order
    waiting: set[int] = set()  # preempted, not restarted: known to wait
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
        for r in [r for r in running if r in finished_at
                  and not holds_slot(finished_at[r], step.index,
                                     async_scheduling=async_scheduling)]:
            del running[r]  # its output was processed: blocks and slot released
            kv.free(r)
        for r in step.preempted:
            if r in just_finished:  # async: preempted while its finishing step was in flight
                running.pop(r, None)
                kv.free(r)
                continue
            if not 0 <= r < len(lens) or r in finished_at or r not in running:
                raise ValueError(f"{where}: request {r} cannot be preempted (unknown, finished "
                                 "or not running)")
            del running[r]
            kv.free(r)
            done[r] = 0
            waiting.add(r)
        if step.num_tokens > max_num_batched_tokens:
            raise ValueError(
                f"{where} computes {step.num_tokens} tokens, more than max_num_batched_tokens="
                f"{max_num_batched_tokens}; split it or raise the budget in the SimConfig"
            )
        continuing, admitted = _chunks(step, where, lens, done, running, finished_at,
                                       enable_chunked_prefill, long_prefill_token_threshold)
        eligible = len(running) + len(waiting | {r for r, _, _ in admitted})
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
        _grow_kv(kv, where, lens, continuing, admitted, kv_cache_blocks, block_size)
        for r, _, stop in step.chunks:
            done[r] = stop
            running.setdefault(r)
            waiting.discard(r)
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
                                 kv.used))
    missing = [r for r in range(len(lens)) if r not in finished_at]
    if missing:
        raise ValueError(f"the schedule never finishes requests {missing[:10]}: every prompt "
                         "must be computed to its last token")
    return out


def _chunks(step: ScheduledStep, where: str, lens: list[int], done: list[int],
            running: dict[int, None], finished_at: dict[int, int], chunked: bool,
            threshold: int | None) -> tuple[list[tuple[int, int, int]], ...]:
    """The step's chunks, checked to continue their requests: (running ones, new ones)."""
    seen: set[int] = set()
    continuing, admitted = [], []
    for r, start, stop in step.chunks:
        if not 0 <= r < len(lens):
            raise ValueError(f"{where}: request {r} is not in prompt_lens ({len(lens)} requests)")
        if r in seen or r in finished_at:
            raise ValueError(f"{where}: request {r} is scheduled twice or after it finished")
        seen.add(r)
        if start != done[r] or not start < stop <= lens[r]:
            raise ValueError(
                f"{where}: request {r} chunk [{start}, {stop}) must start at {done[r]} and end "
                f"by its prompt length {lens[r]}"
            )
        if not chunked and (start, stop) != (0, lens[r]) and not threshold:
            raise ValueError(f"{where}: request {r} is chunked but chunked prefill is off "
                             "and no long_prefill_token_threshold caps it")
        (continuing if r in running else admitted).append((r, start, stop))
    return continuing, admitted


def _grow_kv(kv: KVCache, where: str, lens: list[int], continuing, admitted,
             blocks: int | None, block_size: int) -> None:
    """The scheduler's KV rules for one step: running requests grow first; then new ones,
    each needing its whole prompt's blocks free. The step's new requests are tried in the
    order most likely to fit (most blocks reserved beyond the chunk first), so a schedule is
    refused only when no order of admission satisfies vLLM's rule."""
    for r, _, stop in continuing:
        if not kv.grow(r, stop):
            raise ValueError(
                f"{where}: request {r} needs {-(-stop // block_size)} KV blocks for its first "
                f"{stop} tokens, but the cache is full (kv_cache_blocks={blocks}, "
                f"{blocks - 1} usable; {kv.used} held): vLLM preempts a request first. Give "
                "more KV cache or preempt (ScheduledStep.preempted)"
            )

    def reserved(chunk):  # blocks held for the rest of the prompt beyond this chunk
        r, _, stop = chunk
        return -(-lens[r] // block_size) - -(-stop // block_size)

    for r, _, stop in sorted(admitted, key=reserved, reverse=True):
        if not kv.admit(r, lens[r], stop):
            raise ValueError(
                f"{where}: request {r} starts, but its whole prompt ({lens[r]} tokens, "
                f"{-(-lens[r] // block_size)} KV blocks) does not fit the free blocks "
                f"(kv_cache_blocks={blocks}, {blocks - 1} usable; {kv.used} held): vLLM "
                "admits a request only when its whole prompt fits. Start it later or give "
                "more KV cache"
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
    return ScheduledStep(index, tuple(whole_chunks), numbers("finished", step.finished),
                         numbers("preempted", step.preempted), kv_blocks)
