"""Where each step's hidden states live, and which kept views a later step overwrites.

vLLM Model Runner V2 (0.33.0) runs a step as a CUDA-graph replay when its token count, padded up
to a capture size, is at most ``max_cudagraph_capture_size`` (and ``enforce_eager`` is off;
the sizes: ``tokpool.sim.vllm_rules``). A replay writes its output into graph memory that later
replays rewrite. Pooling models run PIECEWISE graphs, whose outputs live in the shared graph
pool; tokpool models that memory as rows ``[0, padded)`` of one persistent buffer (what a FULL
graph's ``hidden_states`` buffer is), so a view is overwritten by a later replay whose padded
size reaches its rows. A larger step runs eagerly and gets a fresh output tensor: a view kept
from it is never overwritten, but it keeps the whole step's tensor alive (pins it) until
released. See docs/DESIGN.md "Engine model" and docs/ENGINE_MODEL.md for the sources.

``output_memory="one_buffer"`` is the teaching model: every step writes rows ``[0, n)`` of one
buffer of ``max_num_batched_tokens`` rows.

``ViewTracker`` is the one judge of overwrites: the engine loop registers every chunk kept as a
view, records every step's write, and asks at read time how many of the view's rows were
rewritten first. Each write only visits the views still intact in that region, and a view that
is wholly overwritten leaves the list, so a run costs O(steps + views).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .vllm_rules import graph_size_for

GRAPH_REGION = 0  # the persistent buffer (graph output memory, or the teaching buffer)


def padded_graph_size(num_tokens: int, capture_sizes: tuple[int, ...]) -> int | None:
    """The capture size a ``num_tokens`` step replays, or ``None`` when it runs eagerly: vLLM's
    dispatch rule, ``tokpool.sim.vllm_rules.graph_size_for`` (``capture_sizes`` as
    ``SimConfig.capture_sizes`` gives them: ascending, empty when eager)."""
    return graph_size_for(num_tokens, capture_sizes)


def padded_graph_sizes(num_tokens, capture_sizes: tuple[int, ...]):
    """``padded_graph_size`` over a numpy array; 0 where the step runs eagerly."""
    import numpy as np

    sizes = np.asarray((*capture_sizes, 0), dtype=np.int64)
    i = np.searchsorted(sizes[:-1], np.asarray(num_tokens, dtype=np.int64), side="left")
    return sizes[i]  # the appended 0 answers indices past the last size (eager)


@dataclass(frozen=True)
class StepOutput:
    """Where one step's hidden states are written.

    Attributes:
        region: ``GRAPH_REGION`` for the persistent buffer, else a fresh id (eager output).
        rows_written: rows of the region the step writes, from row 0 (a graph replay writes
            its whole padded size).
        rows: rows of the region (the eager tensor's size, or the persistent buffer's).
        eager: the step ran eagerly and allocated a fresh output tensor.
    """

    region: int
    rows_written: int
    rows: int
    eager: bool


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


def step_output_for(config, num_tokens: int, next_region: int,
                    capture_sizes: tuple[int, ...] | None = None) -> StepOutput:
    """Where a ``num_tokens`` step writes under ``config.output_memory`` (pass
    ``config.capture_sizes`` as ``capture_sizes`` when calling it every step)."""
    if config.output_memory == "one_buffer":
        return StepOutput(GRAPH_REGION, num_tokens, config.max_num_batched_tokens, False)
    sizes = config.capture_sizes if capture_sizes is None else capture_sizes
    padded = padded_graph_size(num_tokens, sizes)
    if padded is None:
        return StepOutput(next_region, num_tokens, num_tokens, True)
    return StepOutput(GRAPH_REGION, padded, sizes[-1], False)
