"""Which kept views a later step overwrites: ``ViewTracker``, the one judge of overwrites.

The engine loop registers every chunk pooling keeps as a view of a step's output memory, records
every step's write (where each step writes is the step-memory rule,
``tokpool.sim.vllm_rules.step_memory``), and asks at read time how many of the view's rows were
rewritten first. Each write only visits the views still intact in that region, and a view that
is wholly overwritten leaves the list, so a run costs O(steps + views).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)  # identity: two views with equal fields are still two views
class KeptView:
    """A chunk kept as a view: rows ``[row0, row1)`` of ``region``, holding prompt positions
    from ``pos0``, written at ``step``; ``stale`` rows (from row0) overwritten since, first by
    ``overwritten_at``."""

    request: int
    region: int
    row0: int
    row1: int
    pos0: int
    step: int
    stale: int = 0
    overwritten_at: int | None = None


@dataclass
class ViewTracker:
    """Kept views per region; marks the rows each step's write destroys."""

    intact: dict[int, list[KeptView]] = field(default_factory=dict)

    def keep(self, view: KeptView) -> None:
        self.intact.setdefault(view.region, []).append(view)

    def write(self, step: int, region: int, rows: int) -> None:
        """Step ``step`` writes rows ``[0, rows)`` of ``region``."""
        views = self.intact.get(region)
        if not views:
            return
        still = []
        for v in views:
            hit = min(v.row1, rows) - v.row0
            if hit > v.stale:
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
