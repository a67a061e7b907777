"""Run one hostile case in a forked child with a time and memory cap, and say what it got.

The parent imports tokpool (and torch, transformers, ipywidgets, a tiny model) once; each case
runs in a ``fork`` of it, so a case costs a fork (tens of milliseconds), not an import
(seconds). The child caps its address space (``RLIMIT_AS``: the parent's size plus
``HEADROOM``) and sets ``TOKPOOL_MEMORY_LIMIT`` below that cap, so an allocation the memory
guard should have refused ends as a ``MemoryError`` (a blow-up), not as a slow machine; an
alarm and the parent's deadline bound its time. ``OMP_NUM_THREADS=1`` must be set before torch
is imported: a fork after OpenMP has started its threads can hang in the child.

An outcome is one of:

- ``clear``: a ``ValueError``/``TypeError`` (or a subclass) raised by tokpool's own code (the
  innermost frame of its traceback is in the ``tokpool`` package) whose message names what the
  case says it must name (the input, its allowed values);
- ``correct``: the call returned and the case's check of the result passed;
- ``raw``: any other exception, or a ``ValueError`` raised inside a library, or a tokpool error
  whose message does not name the input;
- ``wrong``: a result where an error was due, or a result the check rejects (silent and wrong);
- ``hang``: over the time cap; ``memory``: ``MemoryError``, or killed past the memory cap;
  ``crash``: the child died another way (a signal).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import resource
import select
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import tokpool

TOKPOOL_DIR = str(Path(tokpool.__file__).resolve().parent)
WIDGETS_DIR = str(Path(TOKPOOL_DIR) / "widgets")
#: Address space a case may add to the parent's before ``MemoryError``.
HEADROOM = 3 << 30
#: The memory guard's limit inside a case: an allocation over it must be refused up front.
GUARD_LIMIT = "1G"
#: Wall seconds a case may take (the parent kills it a little later).
TIME_CAP = 30.0
ACCEPTABLE = ("clear", "correct")
OUTCOMES = ("clear", "correct", "raw", "wrong", "hang", "memory", "crash")


class _Timeout(BaseException):
    """Raised by the alarm inside a case (a BaseException: no ``except Exception`` eats it)."""


class Shown(Exception):
    """A refusal a user SAW rather than caught: the CLI's one line on stderr, an explorer's
    panel message. ``cause`` is the exception behind it (``None``: tokpool refused the value
    itself, e.g. a control's validator); it must itself be a clear tokpool error."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


@dataclasses.dataclass
class Case:
    """One hostile input.

    Attributes:
        area: the part of the surface (``"configs"``, ``"cli"``, ``"explorers"``, ...).
        name: what is tried, short and unique within the area.
        call: runs the input; returns the result (or raises).
        names: words the error message must contain (case-insensitive): the input's name, its
            allowed values or range. A refusal without them is ``raw``.
        expect: ``"error"`` (must be refused), ``"answer"`` (must return a result that passes
            ``check``) or ``"either"`` (a clear error, or a result that passes ``check``).
        check: for results: returns ``True`` (right) or a string saying what is wrong.
        time_cap: seconds.
    """

    area: str
    name: str
    call: Callable[[], Any]
    names: Sequence[str] = ()
    expect: str = "error"
    check: Callable[[Any], bool | str] | None = None
    time_cap: float = TIME_CAP


def _status(key: str) -> int:
    """``/proc/self/status`` field in bytes (``VmRSS``, ``VmHWM``, ``VmSize``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def raise_site(err: BaseException) -> str:
    """``path:line`` of the innermost frame of ``err``'s traceback."""
    tb = traceback.extract_tb(err.__traceback__)
    if not tb:
        return "?"
    return f"{tb[-1].filename}:{tb[-1].lineno}"


def classify_error(err: BaseException, names: Sequence[str]) -> tuple[str, str]:
    """``(outcome, why)`` for an exception a case raised."""
    if isinstance(err, _Timeout):
        return "hang", "over the time cap"
    if isinstance(err, MemoryError):
        return "memory", "MemoryError"
    if isinstance(err, Shown):
        if err.cause is not None:
            cause = err.cause  # behind an explorer's "control: ..." wrapper, the real error
            while cause.__cause__ is not None and raise_site(cause).startswith(WIDGETS_DIR):
                cause = cause.__cause__
            outcome, why = classify_error(cause, ())
            if outcome != "clear":
                return outcome, f"behind the message: {why}"
        missing = unnamed(str(err), names)
        return ("raw", f"the message does not name {missing}") if missing else ("clear", "")
    if not isinstance(err, (ValueError, TypeError)):
        return "raw", f"{type(err).__module__}.{type(err).__name__} is not a ValueError/TypeError"
    site = raise_site(err)
    if not os.path.realpath(site.rsplit(":", 1)[0]).startswith(TOKPOOL_DIR):
        return "raw", f"raised outside tokpool, at {site}"
    missing = unnamed(str(err), names)
    if missing:
        return "raw", f"the message does not name {missing}"
    return "clear", ""


def unnamed(message: str, names: Sequence[str]) -> list[str]:
    """The ``names`` a message does not mention, in any spelling a reader would take for the
    same name (``max_num_seqs``, ``--max-num-seqs``, ``max num seqs``; a plural's singular)."""
    text = message.lower()

    def spellings(name: str) -> set[str]:
        base = name.lower().lstrip("-")
        forms = {base, base.replace("_", "-"), base.replace("_", " "), base.replace("-", "_"),
                 base.replace("-", " ")}
        return forms | {f[:-1] for f in forms if f.endswith("s") and len(f) > 3}

    return [n for n in names if not any(f in text for f in spellings(n))]


def _child(case: Case, write_fd: int) -> None:
    report: dict[str, Any] = {}
    try:
        quiet = os.open(os.devnull, os.O_WRONLY)  # what a case prints is not the report
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        cap = _status("VmSize") + HEADROOM
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        os.environ["TOKPOOL_MEMORY_LIMIT"] = GUARD_LIMIT

        def alarm(*_):
            raise _Timeout()

        signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, case.time_cap)
        rss0 = _status("VmRSS")
        start = time.perf_counter()
        try:
            result = case.call()
        except BaseException as err:
            signal.setitimer(signal.ITIMER_REAL, 0)
            outcome, why = classify_error(err, case.names)
            if outcome == "clear" and case.expect == "answer":
                outcome, why = "wrong", "refused an input that has an answer"
            cause = err.cause if isinstance(err, Shown) and err.cause is not None else err
            report.update(error=type(cause).__name__, site=raise_site(cause),
                          message=str(err)[:600])
        else:
            signal.setitimer(signal.ITIMER_REAL, 0)
            if case.expect == "error":
                outcome, why = "wrong", f"returned {_short(result)} where an error was due"
            else:
                verdict = True if case.check is None else case.check(result)
                outcome, why = ("correct", "") if verdict is True else ("wrong", str(verdict))
        report.update(outcome=outcome, why=why, seconds=time.perf_counter() - start,
                      peak_bytes=max(0, _status("VmHWM") - rss0), peak_rss=_status("VmHWM"),
                      rss_at_start=rss0)
    except BaseException as err:
        report = {"outcome": "crash", "why": f"runner: {type(err).__name__}: {err}"}
    try:
        os.write(write_fd, json.dumps(report, default=str).encode())
    finally:
        os._exit(0)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


@dataclasses.dataclass
class _Running:
    case: Case
    pid: int
    fd: int
    deadline: float
    chunks: list[bytes] = dataclasses.field(default_factory=list)


def _start(case: Case) -> _Running:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_fd)
        _child(case, write_fd)
    os.close(write_fd)
    # the alarm fires first; the deadline catches a child stuck in C code
    return _Running(case, pid, read_fd, time.monotonic() + case.time_cap + 15)


def _finish(run: _Running, *, killed: bool) -> dict[str, Any]:
    os.close(run.fd)
    _, status = os.waitpid(run.pid, 0)
    base = {"area": run.case.area, "name": run.case.name}
    if killed:
        return {**base, "outcome": "hang", "why": "killed past the deadline",
                "seconds": run.case.time_cap + 15}
    if not run.chunks:
        why = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.WEXITSTATUS(status)}")
        outcome = "memory" if os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9 else "crash"
        return {**base, "outcome": outcome, "why": why}
    return {**base, **json.loads(b"".join(run.chunks))}


def run_cases(cases: Sequence[Case], *, workers: int = 2,
              on_report: Callable[[dict[str, Any]], None] | None = None
              ) -> list[dict[str, Any]]:
    """Run every case in its own forked child, ``workers`` at a time; reports in case order.

    The slow cases (those with a time cap above the default: they start vLLM) go first, so
    the other workers run the many quick ones meanwhile. The parent's objects are frozen out
    of the garbage collector first: a child's collection would touch (and so copy) every
    page the parent holds, tripling the cost of a fork.
    """
    gc.collect()
    gc.freeze()
    pending = sorted(enumerate(cases), key=lambda pc: -pc[1].time_cap)
    running: dict[int, tuple[int, _Running]] = {}  # fd -> (position, run)
    reports: dict[int, dict[str, Any]] = {}
    while pending or running:
        while pending and len(running) < max(1, workers):
            position, case = pending.pop(0)
            run = _start(case)
            running[run.fd] = (position, run)
        timeout = max(0.0, min(r.deadline for _, r in running.values()) - time.monotonic())
        ready, _, _ = select.select(list(running), [], [], timeout)
        for fd in ready:
            position, run = running[fd]
            data = os.read(fd, 1 << 16)
            if data:
                run.chunks.append(data)
                continue
            del running[fd]
            reports[position] = _finish(run, killed=False)
            if on_report:
                on_report(reports[position])
        now = time.monotonic()
        for fd, (position, run) in list(running.items()):
            if now >= run.deadline:
                os.kill(run.pid, signal.SIGKILL)
                del running[fd]
                reports[position] = _finish(run, killed=True)
                if on_report:
                    on_report(reports[position])
    return [reports[i] for i in range(len(cases))]


def run_case(case: Case) -> dict[str, Any]:
    """Run ``case`` in a forked child; its report (``outcome``, ``why``, ``seconds``, ...)."""
    return run_cases([case], workers=1)[0]


def summarise(reports: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Counts per area: cases and each outcome."""
    table: dict[str, dict[str, int]] = {}
    for r in reports:
        row = table.setdefault(r["area"], {"cases": 0, **dict.fromkeys(OUTCOMES, 0)})
        row["cases"] += 1
        row[r["outcome"]] += 1
    return table
