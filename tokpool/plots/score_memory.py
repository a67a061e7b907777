"""A score call's memory per step: ``plot_memory_timeline`` with the worker's query cache.

``tp.simulate_score`` results carry ``steps.query_cache_bytes`` (cloned query rows the worker
keeps across steps) and ``steps.maxsim_scratch_bytes``; this figure draws the simulator's
ledger as ``plot_memory_timeline`` does, stacks the query cache on top of it, marks the steps
whose documents were scored in the worker with their MaxSim scratch, and separates the two
stages. It only draws what the result says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .._args import whole
from ._style import OKABE_ITO, format_bytes, new_axes, styled
from .memory import MEMORY_CATEGORIES, plot_memory_timeline

if TYPE_CHECKING:
    from ..late_interaction.simulate_score import ScoreResult

__all__ = ["MAXSIM_COLOUR", "QUERY_CACHE_COLOUR", "plot_score_memory"]

#: The query cache's colour in every score figure.
QUERY_CACHE_COLOUR = OKABE_ITO[5]
#: Steps whose documents were scored in the worker (MaxSim).
MAXSIM_COLOUR = OKABE_ITO[3]


@styled
def plot_score_memory(result: ScoreResult, *, engine: int = 0, ax: Axes | None = None,
                      legend: bool = True, title: str | None = None, **style: Any) -> Axes:
    """Pooling bytes per step of one engine of a score call, the query cache stacked on top.

    Args:
        result: a ``tp.simulate_score(...)`` result.
        engine: which data-parallel engine (``result.steps.engine``).
        ax: axes to draw into (a new figure when ``None``).
        legend: draw the legend.
        title: axes title (default: the path and the engine).
        **style: passed to ``plot_memory_timeline`` (``host``, ``zoom``, ``zoom_steps``).

    Returns:
        The axes.

    Raises:
        TypeError: not a ``ScoreResult``.
        ValueError: an engine the result has no steps for.
    """
    if not all(hasattr(result, a) for a in ("steps", "path", "peak_query_cache_bytes")):
        raise TypeError(f"result must be a tp.simulate_score(...) result, got "
                        f"{type(result).__name__}")
    whole("engine", engine, minimum=0)
    steps = result.steps[result.steps["engine"] == engine].reset_index(drop=True)
    if steps.empty:
        raise ValueError(f"engine {engine} ran nothing in this score call; its engines are "
                         f"{sorted(set(result.steps['engine']))}")
    ax = new_axes(ax, (7.6, 3.8))
    plot_memory_timeline(steps, ax=ax, legend=False, title="", **style)
    x = steps["step"].to_numpy()
    edges = np.append(x, x[-1] + 1) - 0.5
    below = sum(steps[c].to_numpy(dtype=float) for c, _, _ in MEMORY_CATEGORIES)
    cache = steps["query_cache_bytes"].to_numpy(dtype=float)
    ax.fill_between(edges, np.append(below, below[-1:]), np.append(below + cache,
                    (below + cache)[-1:]), step="post", color=QUERY_CACHE_COLOUR, alpha=0.8,
                    lw=0)
    scored = steps[steps["maxsim_scratch_bytes"] > 0]
    if len(scored):
        ax.scatter(scored["step"], scored["pool_peak_bytes"], marker="v", s=22,
                   color=MAXSIM_COLOUR, zorder=4)
    stage2 = steps.loc[steps["stage"] == 2, "step"]
    if len(stage2):
        ax.axvline(float(stage2.iloc[0]) - 0.5, color="0.3", lw=0.8, ls=":")
        ax.annotate("documents →", xy=(float(stage2.iloc[0]) - 0.5, 1), xycoords=(
            "data", "axes fraction"), xytext=(3, -3), textcoords="offset points", va="top",
            fontsize=8)
    top = max(ax.get_ylim()[1], float((below + cache).max()) * 1.15)
    ax.set_ylim(0, top or 1)
    if legend:
        handles, _ = ax.get_legend_handles_labels()
        handles.append(Patch(color=QUERY_CACHE_COLOUR, label="query cache (cloned rows, "
                             f"peak {format_bytes(result.peak_query_cache_bytes)})"))
        if len(scored):
            handles.append(Line2D([], [], marker="v", ls="", color=MAXSIM_COLOUR,
                                  label="documents scored in the worker (MaxSim, peak "
                                  f"{format_bytes(result.peak_maxsim_scratch_bytes)})"))
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3,
                  fontsize=8)
    ax.set_title(title if title is not None else
                 f"{result.path.name} scoring ({result.path.io_processor}) · engine {engine}")
    return ax
