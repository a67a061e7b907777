"""Which kept views a later step overwrites: ``ViewTracker``, the one judge of overwrites.

The engine loop registers every chunk pooling keeps as a view of a step's output memory, records
every step's write (where each step writes is the step-memory rule,
``tokpool.sim.vllm_rules.step_memory``), and asks at read time how many of the view's rows were
rewritten first. Each write only visits the views still intact in that region, and a view that
is wholly overwritten leaves the list, so a run costs O(steps + views).

The tracker also keeps what it saw, for pictures and stories (``SimResult.buffer_writes``,
``SimResult.overwrites``): every write (step, region, rows), and every time a write rewrote rows
of a kept view that no earlier write had rewritten (``Overwrite``).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import pandas as pd


@dataclass(eq=False)  # identity: two views with equal fields are still two views
class KeptView:
    """A chunk kept as a view: rows ``[row0, row1)`` of ``region``, holding prompt positions
    from ``pos0``, written at ``step``; ``stale`` rows (from row0) overwritten since, first by
    ``overwritten_at``; ``widest`` the most rows one later write covered in its region (from
    row 0), by step ``widest_step`` (``None``: no step wrote the region while it was kept)."""

    request: int
    region: int
    row0: int
    row1: int
    pos0: int
    step: int
    stale: int = 0
    overwritten_at: int | None = None
    widest: int = 0
    widest_step: int | None = None


@dataclass(frozen=True)
class Overwrite:
    """Step ``step``'s write (``rows_written`` rows from row 0) rewrote rows ``[row0, row1)``
    of ``view``: rows of it no earlier write had rewritten."""

    step: int
    view: KeptView
    row0: int
    row1: int
    rows_written: int


@dataclass
class ViewTracker:
    """Kept views per region; marks the rows each step's write destroys.

    Attributes:
        intact: per region, the kept views with rows still intact.
        writes: every write, in order: step, region, rows (three int64 arrays: a long run
            keeps 24 bytes a step).
        overwrites: every ``Overwrite``, in order.
    """

    intact: dict[int, list[KeptView]] = field(default_factory=dict)
    writes: tuple[array, array, array] = field(
        default_factory=lambda: (array("q"), array("q"), array("q")))
    overwrites: list[Overwrite] = field(default_factory=list)

    def keep(self, view: KeptView) -> None:
        self.intact.setdefault(view.region, []).append(view)

    def write(self, step: int, region: int, rows: int) -> None:
        """Step ``step`` writes rows ``[0, rows)`` of ``region``."""
        for column, value in zip(self.writes, (step, region, rows), strict=True):
            column.append(value)
        views = self.intact.get(region)
        if not views:
            return
        still = []
        for v in views:
            if v.widest_step is None or rows > v.widest:
                v.widest, v.widest_step = rows, step
            hit = min(v.row1, rows) - v.row0
            if hit > v.stale:
                self.overwrites.append(Overwrite(step, v, v.row0 + v.stale, v.row0 + hit, rows))
                v.stale = hit
                if v.overwritten_at is None:
                    v.overwritten_at = step
            if v.stale < v.row1 - v.row0:
                still.append(v)
        self.intact[region] = still

    def release(self, view: KeptView) -> None:
        """The view was read (or dropped): stop tracking it."""
        views = self.intact.get(view.region)
        if views and view in views:
            views.remove(view)


#: ``SimResult.buffer_writes`` columns.
WRITE_COLUMNS: dict[str, str] = {
    "step": "engine step that wrote its hidden states",
    "region": "where: 0 is the persistent output memory (graph memory, or the teaching "
              "buffer), any other id a fresh tensor of that step",
    "rows_written": "rows written from row 0 (a graph replay writes its whole padded size)",
}

#: ``SimResult.overwrites`` columns: one row each time a step's write rewrote rows of a kept
#: view that no earlier write had rewritten.
OVERWRITE_COLUMNS: dict[str, str] = {
    "step": "engine step whose write rewrote the rows",
    "request": "whose kept view it was",
    "kept_step": "the step that computed the view's chunk (and kept the view)",
    "region": "memory region of the view (0: the persistent output memory)",
    "buffer_row_start": "first row rewritten",
    "buffer_row_end": "one past the last row rewritten (half-open)",
    "token_start": "prompt position the first rewritten row held when it was kept",
    "token_end": "one past the last such position (half-open)",
    "rows_written": "rows the step wrote, from row 0",
}


def writes_frame(tracker: ViewTracker) -> pd.DataFrame:
    """``SimResult.buffer_writes``: every write the tracker saw, in step order."""
    return pd.DataFrame({name: pd.Series(column, dtype="int64") for name, column
                         in zip(WRITE_COLUMNS, tracker.writes, strict=True)})


def overwrites_frame(tracker: ViewTracker) -> pd.DataFrame:
    """``SimResult.overwrites``: every ``Overwrite`` the tracker saw, in step order."""
    rows = [(o.step, o.view.request, o.view.step, o.view.region, o.row0, o.row1,
             o.view.pos0 + o.row0 - o.view.row0, o.view.pos0 + o.row1 - o.view.row0,
             o.rows_written) for o in tracker.overwrites]
    return pd.DataFrame(rows, columns=list(OVERWRITE_COLUMNS)).astype("int64")
