"""Progress of a long step loop: a text bar over the engine's iterations.

``simulate(progress=...)`` sets whether the loop shows it (``None``: only when the run has at
least ``AUTO_STEPS`` engine steps, about two seconds of the analytic loop); the command line
puts the bar on stderr (``bar_file``), a notebook gets it on stdout as ordinary output (as
``tp.sweep``'s bar: a text bar survives save and reopen). The work bounds
(``limits.check_work``) are asked before the loop starts, so a refused run shows no bar.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TextIO, TypeVar

__all__ = ["AUTO_STEPS", "bar_file", "check_progress", "show_progress", "ticks"]

#: Engine steps from which ``progress=None`` shows the bar.
AUTO_STEPS = 50_000
_SHOW: contextvars.ContextVar[bool | None] = contextvars.ContextVar("tokpool_progress",
                                                                   default=False)
_FILE: contextvars.ContextVar[TextIO | None] = contextvars.ContextVar("tokpool_progress_file",
                                                                     default=None)
T = TypeVar("T")


def check_progress(progress: object) -> bool | None:
    """``progress`` as given, or ``TypeError`` (True, False or None: only when long).

    Example:
        >>> check_progress(None) is None
        True
    """
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be True, False or None (only when long), got "
                        f"{progress!r}")
    return progress


@contextlib.contextmanager
def show_progress(progress: bool | None) -> Iterator[None]:
    """Within the block, the step loop shows its bar as ``progress`` says."""
    token = _SHOW.set(check_progress(progress))
    try:
        yield
    finally:
        _SHOW.reset(token)


@contextlib.contextmanager
def bar_file(file: TextIO) -> Iterator[None]:
    """Within the block, bars go to ``file`` (the command line: stderr)."""
    token = _FILE.set(file)
    try:
        yield
    finally:
        _FILE.reset(token)


def ticks(plan: Sequence[T], what: str = "tokpool simulate") -> Iterable[T]:
    """``plan`` itself, or wrapped in a bar of ``len(plan)`` steps when it is to be shown."""
    show = _SHOW.get()
    if show is None:
        show = len(plan) >= AUTO_STEPS
    if not show:
        return plan
    from tqdm.std import tqdm  # on use: import tokpool stays light

    return tqdm(plan, total=len(plan), desc=what, unit="step",
                file=_FILE.get() or sys.stdout, mininterval=0.5)
