"""One redraw for a burst of values from the browser, not one per value.

A slider that the browser moves several times while the kernel is busy (an arrow key held or
pressed quickly, clicks along the track) sends one message per value; the kernel handled each
in turn and drew every intermediate value, so the last one showed seconds late (measured in a
real kernel, ``benchmarks/explorer_drag.py``: five presses 30 ms apart, five redraws). A value
from the browser now only asks for a redraw on the kernel's event loop, ``SETTLE_S`` later;
values that arrive before it runs join that one redraw, which draws the controls as they are
by then.

A value set from code (``ex.budget.value = 4096``) still redraws at once, so code and tests
read ``ex.view`` right after setting it; so does every value where no event loop runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["SETTLE_S", "RedrawQueue", "from_browser"]

#: How long a redraw asked for by the browser waits for the values already on their way (the
#: kernel reads the messages waiting for it in a few milliseconds; a redraw takes 0.2-0.3 s).
SETTLE_S = 0.03


def from_browser(change: dict[str, Any] | None) -> bool:
    """Whether ``change`` came from the browser: ipywidgets holds the sent keys in the
    widget's ``_property_lock`` while it applies a message's state (``Widget.set_state``)."""
    owner = (change or {}).get("owner")
    return bool(getattr(owner, "_property_lock", None))


class RedrawQueue:
    """At most one pending redraw for the values the browser sends.

    Attributes:
        redraws: how many redraws ran (code and browser together).
        joined: how many browser values joined a redraw already asked for.
    """

    def __init__(self, redraw: Callable[[], Any]) -> None:
        self._redraw = redraw
        self._pending = False
        self.redraws = 0
        self.joined = 0

    def ask(self, change: dict[str, Any] | None = None) -> None:
        """Redraw now (a value from code, or no event loop), or once on the event loop."""
        if from_browser(change):
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:
                if self._pending:
                    self.joined += 1
                    return
                self._pending = True
                loop.call_later(SETTLE_S, self._run)
                return
        self._run()

    def _run(self) -> None:
        self._pending = False
        self.redraws += 1
        self._redraw()
