"""Aborts: a client hangs up, and vLLM cancels its request between two engine steps.

``aborts={request: step}`` (``tp.simulate``, both schedulers) cancels ``request`` right before
``Scheduler.schedule()`` call ``step``, as vLLM 0.33.0's engine core does with an abort from the
API process (``EngineCore.abort_requests`` -> ``Scheduler.finish_requests(ids,
RequestStatus.FINISHED_ABORTED)``, vllm/v1/core/sched/scheduler.py), in this order within the
call: arrivals of that step are added first, then the aborts, then the step is scheduled.

What vLLM does then, and what tokpool reproduces:

- ``finish_requests`` skips an id that is unknown or already finished (its output processed by
  ``update_from_output``): the abort is a **no-op**. A pooling request is finished once the step
  that computed its last prompt token is processed: before the next ``schedule()`` call without
  async scheduling, one call later with it (``holds_slot``).
- otherwise the request leaves the running or waiting queue, its KV blocks go back to the pool
  at once (``_free_request`` -> ``kv_cache_manager.free``; no KV connector: nothing deferred)
  and its id joins ``finished_req_ids``, so the model runner drops its state with the output of
  that very ``schedule()`` call (``Scheduler.has_requests`` is true while such ids wait, so the
  call is made even when nothing else runs): Model Runner V2's ``finish_requests`` ->
  ``PoolingRunner.remove_request`` -> ``PoolingStates.clean()``, the V1 runner's
  ``_update_states`` pops the request's ``CachedRequestState`` (a state kept across a
  preemption included). Its pooling bytes are freed in engine step ``step``.
- under async scheduling an abort can land while the step with the request's last prompt token
  is in flight: the runner has pooled it and its host copy is under way; ``update_from_output``
  then skips the request (``request is None``), so the output is **dropped**: computed and
  copied, never sent (``output dropped``).

``check_aborts`` refuses bad input in words; ``abort_outcomes`` says, from the schedule, what
each abort did (the same function for tokpool's scheduler and vLLM's driven one:
``tests/test_parity_aborts.py`` checks both against ``finish_requests``' own answer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from ..._args import INT32_MAX, as_whole
from ..._text import format_bytes

__all__ = [
    "ABORT_COLUMNS",
    "AbortOutcome",
    "abort_iterations",
    "abort_lines",
    "abort_map",
    "abort_outcomes",
    "cancel_",
    "check_aborts",
    "closed_form_outcomes",
    "parse_abort",
]

#: ``SimResult.aborts`` columns.
ABORT_COLUMNS: dict[str, str] = {
    "request": "index in prompt_lens",
    "step": "the schedule() call the abort arrived before (as given)",
    "outcome": "'aborted' (cancelled before it finished), 'output dropped' (async: cancelled "
               "while the step that finished it was in flight; computed and copied, never "
               "sent) or 'no-op' (already finished: vLLM's finish_requests ignores it)",
    "finish_step": "step of its last chunk, or -1 when it never finished",
    "freed_pool_bytes": "device bytes its pooling state held and the abort freed in `step` "
                        "(cloned chunks, a prealloc buffer; 0 for a no-op)",
    "freed_host_bytes": "host bytes its pooling state held and the abort freed (offload)",
}


@dataclass(frozen=True)
class AbortOutcome:
    """What one abort did (``SimResult.aborts`` row, before the bytes)."""

    request: int
    step: int
    outcome: str  # "aborted" | "output dropped" | "no-op"
    finish_step: int


def check_aborts(aborts: object, n: int, arrival: Sequence[int] | None = None) -> dict[int, int]:
    """Validate ``aborts``: a mapping ``{request: step}``.

    Raises:
        TypeError: not a mapping, or a request / step that is not a whole number.
        ValueError: an unknown request, a negative step, a step past 2**31 - 1, or a step
            before the request arrives (vLLM cannot cancel a request it has not been given).

    Example:
        >>> check_aborts({1: 3}, 2)
        {1: 3}
        >>> check_aborts({1: -1}, 2)
        Traceback (most recent call last):
        ValueError: aborts[1] = -1: an engine step is >= 0 (the schedule() call the abort ...
    """
    if aborts is None:
        return {}
    if not isinstance(aborts, Mapping):
        raise TypeError(f"aborts must be a dict {{request: step}} (the engine step in which "
                        f"each listed request is cancelled), got {type(aborts).__name__}")
    out: dict[int, int] = {}
    for key, value in aborts.items():
        r = as_whole(key)
        if r is None:
            raise TypeError(f"aborts keys are request indices (whole numbers), got {key!r}")
        if not 0 <= r < n:
            raise ValueError(f"aborts names request {r}, but there are only {n} requests (0 to "
                             f"{n - 1}): abort a request by its index in prompt_lens")
        s = as_whole(value)
        if s is None:
            raise TypeError(f"aborts[{r}] must be a whole engine step (an int >= 0), got "
                            f"{value!r}")
        if s < 0:
            raise ValueError(f"aborts[{r}] = {s}: an engine step is >= 0 (the schedule() call "
                             "the abort arrives before)")
        if s > INT32_MAX:
            raise ValueError(f"aborts[{r}] = {s}: past any run (engine steps are below "
                             f"{INT32_MAX + 1:,}); an abort after the request finished is a "
                             "no-op, so give its step within the run")
        if arrival is not None and s < arrival[r]:
            raise ValueError(f"aborts[{r}] = {s} but request {r} arrives at step {arrival[r]}: "
                             "vLLM cannot cancel a request it has not been given; abort it at "
                             f"step {arrival[r]} or later")
        out[r] = s
    return out


def cancel_(r: int, running: list[int], waiting, kv, finished: set[int],
            aborted: set[int]) -> bool:
    """``Scheduler.finish_requests([r], FINISHED_ABORTED)`` on tokpool's scheduler state
    (mutates the queues, the KV blocks ``kv`` and ``aborted``). Returns whether it took effect
    (``False``: already finished, as vLLM skips ``request.is_finished()``)."""
    if r in finished or r in aborted:
        return False
    if r in running:
        running.remove(r)
    elif r in waiting:
        waiting.remove(r)
    kv.free(r)  # _free_request -> kv_cache_manager.free: back to the pool at once
    aborted.add(r)
    return True


def abort_outcomes(steps: Sequence, aborts: Mapping[int, int], *,
                   async_scheduling: bool) -> list[AbortOutcome]:
    """What each abort did, from the schedule that ran with it (``ScheduledStep.finished``:
    the step that computed a request's last prompt token).

    A request finished in step ``f`` is processed before call ``f + 1`` (``f + 2`` under async
    scheduling); an abort at or after that is a no-op, one at ``f + 1`` under async drops the
    in-flight output, and a request that never finished was aborted.

    Example:
        >>> from tokpool.sim.schedule.scheduler import ScheduledStep
        >>> steps = [ScheduledStep(0, ((0, 0, 8),), (0,))]
        >>> [o.outcome for o in abort_outcomes(steps, {0: 1}, async_scheduling=False)]
        ['no-op']
        >>> [o.outcome for o in abort_outcomes(steps, {0: 1}, async_scheduling=True)]
        ['output dropped']
    """
    finish = {r: s.index for s in steps for r in s.finished}
    lag = 2 if async_scheduling else 1
    out = []
    for r, s in sorted(aborts.items()):
        f = finish.get(r, -1)
        if f < 0:
            kind = "aborted"
        elif s >= f + lag:
            kind = "no-op"
        else:
            kind = "output dropped"  # async only: s == f + 1
        out.append(AbortOutcome(r, s, kind, f))
    return out


def closed_form_outcomes(aborts: Mapping[int, int], num_steps: int, *,
                         async_scheduling: bool) -> list[AbortOutcome]:
    """What aborts do to ``mode="closed_form"``'s lone request of ``num_steps`` schedule()
    calls with tokens (its last chunk in step ``num_steps - 1``).

    Where an abort leaves the closed form exact: at or after the request's finish is
    processed (a **no-op**), or under async scheduling in the call right after its last step
    (**output dropped**: computed and copied, never sent). Both leave every byte the formula
    counts as it is (the request ran to its end), and ``freed_*`` are 0, as in analytic mode.
    An abort at or before the step of its last chunk cuts the prompt short: the formula solves
    a request that runs to its end (every step's chunk, the final cat, the head), so that is
    refused.

    Raises:
        ValueError: an abort before the request's last chunk (mid-prompt): use analytic mode.

    Example:
        >>> [o.outcome for o in closed_form_outcomes({0: 3}, 3, async_scheduling=True)]
        ['output dropped']
        >>> closed_form_outcomes({0: 1}, 3, async_scheduling=False)
        Traceback (most recent call last):
        ValueError: aborts[0] = 1 cancels the request mid-prompt (its last chunk runs in ...
    """
    finish = num_steps - 1
    for r, s in sorted(aborts.items()):
        if s <= finish:
            raise ValueError(
                f"aborts[{r}] = {s} cancels the request mid-prompt (its last chunk runs in step "
                f"{finish}), and mode='closed_form' solves a request that runs to its end (each "
                "chunk, the final cat, the head): run it with mode='analytic', which frees the "
                "kept chunks in that step; in closed form an abort applies from step "
                f"{finish + 1} on (a no-op, or output dropped under async scheduling)")

    class _Last:  # the one step abort_outcomes reads: the request's last
        index, finished = finish, (0,)

    return abort_outcomes([_Last()], aborts, async_scheduling=async_scheduling)


def abort_iterations(plan: list[tuple[int, object]],
                     outcomes: Sequence[AbortOutcome]) -> list[tuple[int, object]]:
    """The engine's iterations with an abort-only one ``(step, None)`` where an abort frees a
    request's state in a ``schedule()`` call that computes nothing (vLLM still hands the runner
    its ``finished_req_ids``)."""
    have = {index for index, _ in plan}
    extra = sorted({o.step for o in outcomes if o.outcome == "aborted"} - have)
    if not extra:
        return plan
    return sorted([*plan, *((s, None) for s in extra)], key=lambda item: item[0])


def aborts_frame(rows: Sequence[dict]) -> pd.DataFrame:
    """``SimResult.aborts`` in ``ABORT_COLUMNS`` order."""
    frame = pd.DataFrame(list(rows), columns=list(ABORT_COLUMNS))
    return frame.astype({c: "int64" for c in ABORT_COLUMNS if c != "outcome"})


# --- the command line: ``tokpool simulate --abort REQ:STEP`` (repeatable) -------------------


def parse_abort(text: str) -> tuple[int, int]:
    """One ``--abort REQ:STEP``: ``(request, step)`` (request: its index in ``--prompt-lens``;
    step: the engine step it is cancelled before). Whether the request exists is checked by
    ``check_aborts`` once the prompts are known.

    Raises:
        ValueError: not two whole numbers >= 0 joined by a colon.

    Example:
        >>> parse_abort("1:3")
        (1, 3)
        >>> parse_abort("1")
        Traceback (most recent call last):
        ValueError: --abort '1': give REQ:STEP, e.g. 1:3 (request 1, by its index in ...
    """
    req, sep, step = text.partition(":")
    values = [req.strip(), step.strip()]
    if not sep or not all(v.isdigit() and v.isascii() for v in values):
        raise ValueError(f"--abort {text!r}: give REQ:STEP, e.g. 1:3 (request 1, by its index "
                         "in --prompt-lens, cancelled before engine step 3); both whole "
                         "numbers >= 0")
    return int(values[0]), int(values[1])


def abort_map(pairs: Sequence[tuple[int, int]] | None) -> dict[int, int] | None:
    """The ``--abort`` flags as ``tp.simulate``'s ``aborts`` (``None`` without any).

    Raises:
        ValueError: one request given two steps.

    Example:
        >>> abort_map([(1, 3), (0, 2)])
        {1: 3, 0: 2}
    """
    if not pairs:
        return None
    out: dict[int, int] = {}
    for r, s in pairs:
        if r in out and out[r] != s:
            raise ValueError(f"--abort names request {r} twice (steps {out[r]} and {s}): a "
                             "request is cancelled once; keep one --abort per request")
        out[r] = s
    return out


def abort_lines(frame: pd.DataFrame | None) -> list[str]:
    """``SimResult.aborts`` as the command line prints it, one line per abort (none without
    aborts)."""
    lines: list[str] = []
    for row in (frame if frame is not None else pd.DataFrame()).itertuples(index=False):
        freed = int(row.freed_pool_bytes) + int(row.freed_host_bytes)
        what = {"aborted": f"freed {format_bytes(freed)} ({freed:,} B) of pooling state",
                "no-op": f"already finished in step {row.finish_step}: vLLM ignores it",
                "output dropped": "its output, computed and copied, is never sent"}
        lines.append(f"abort: request {row.request} before step {row.step}: {row.outcome}; "
                     f"{what.get(row.outcome, '')}")
    return lines
