"""A score call's memory per step: ``plot_memory_timeline`` with the worker's query cache.

``tp.simulate_score`` results carry ``steps.query_cache_bytes`` (cloned query rows the worker
keeps across steps) and ``steps.maxsim_scratch_bytes``; this figure draws the simulator's
ledger as ``plot_memory_timeline`` does, stacks the query cache on top of it, marks the steps
whose documents were scored in the worker with their MaxSim scratch, and separates the two
stages. It only draws what the result says, and every in-step peak is drawn by its parts
(``score_peak_parts``: the query cache, the MaxSim scratch, and pooling's own tensors, broken
down by ``tp.sim.peak_parts`` where the step has one request), each part in the legend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .._args import whole
from ._style import OKABE_ITO, format_bytes, new_axes, styled
from .memory import MEMORY_CATEGORIES, PEAK_BAR_WIDTH, _part_style, plot_memory_timeline

if TYPE_CHECKING:
    from ..late_interaction.simulate_score import ScoreResult

__all__ = ["MAXSIM_COLOUR", "QUERY_CACHE_COLOUR", "plot_score_memory", "score_peak_parts"]

#: Pooling's own tensors in a score step that ``tp.sim.peak_parts`` does not break down.
POOLED_ROWS = "pooled rows of the step's requests (not broken down)"
#: The query cache's colour in every score figure.
QUERY_CACHE_COLOUR = OKABE_ITO[5]
#: Steps whose documents were scored in the worker (MaxSim).
MAXSIM_COLOUR = OKABE_ITO[3]


def score_peak_parts(result: ScoreResult, row: int) -> dict[str, int]:
    """What one step's in-step peak is made of, summing to its ``pool_peak_bytes`` to the byte.

    Args:
        result: a ``tp.simulate_score(...)`` result.
        row: the row of ``result.steps``.

    Returns:
        ``{part: bytes}``: ``"query cache"`` and ``"MaxSim scratch"`` when the step holds them,
        then pooling's own tensors — ``tp.sim.peak_parts`` of the stage's run where they add up
        (one request in the step), else one part naming the step's requests.
    """
    from ..sim.results.peak_parts import peak_parts  # the stage run says what its peak holds

    step = result.steps.iloc[row]
    parts: dict[str, int] = {}
    for name, column in (("query cache", "query_cache_bytes"),
                         ("MaxSim scratch", "maxsim_scratch_bytes")):
        if int(step[column]) > 0:
            parts[name] = int(step[column])
    rest = int(step["pool_peak_bytes"]) - sum(parts.values())
    own: dict[str, int] = {}
    for stage, offset in zip(result.stages, result.stage_offsets, strict=True):
        local = int(step["step"]) - offset
        if 0 <= local < len(stage.steps) and int(stage.steps["pool_peak_bytes"].iloc[local]) \
                == rest and int(step.get("engine", 0)) == int(getattr(stage, "engine", 0)):
            try:
                own = peak_parts(stage, local)
            except (ValueError, TypeError):
                own = {}
            break
    if sum(own.values()) != rest or len(own) == 0:
        own = {POOLED_ROWS: rest}
    parts.update({k: v for k, v in own.items() if v > 0})
    return parts


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
    plot_memory_timeline(steps, ax=ax, legend=True, title="", **style)
    shown = ax.get_legend()  # the ledger's own entries (chunk cache, peak line, host line)
    timeline_handles = list(shown.legend_handles)
    for h, t in zip(timeline_handles, shown.texts, strict=True):
        h.set_label("peak during the step (bar: what it is made of)"
                    if t.get_text().startswith("peak during") else t.get_text())
    shown.remove()
    x = steps["step"].to_numpy()
    edges = np.append(x, x[-1] + 1) - 0.5
    below = sum(steps[c].to_numpy(dtype=float) for c, _, _ in MEMORY_CATEGORIES)
    cache = steps["query_cache_bytes"].to_numpy(dtype=float)
    ax.fill_between(edges, np.append(below, below[-1:]), np.append(below + cache,
                    (below + cache)[-1:]), step="post", color=QUERY_CACHE_COLOUR, alpha=0.8,
                    lw=0)
    scored = steps[steps["maxsim_scratch_bytes"] > 0]
    # every in-step peak above the step's end drawn by its parts, each part labelled once
    rows = np.flatnonzero(steps["pool_peak_bytes"].to_numpy() > (below + cache))
    full = result.steps.index[result.steps["engine"] == engine]
    # one bar call per part (its steps, heights and bottoms together), not one per step and
    # part: 26 steps' calls were a quarter of the plot's own time (60 -> 46 ms CPU)
    segments: dict[str, tuple[str, str, list[float], list[int], list[float]]] = {}
    for i in rows:
        bottom = 0.0
        for name, nbytes in score_peak_parts(result, int(full[i])).items():
            if name == "query cache":
                colour, words = QUERY_CACHE_COLOUR, (
                    f"query cache (cloned rows, peak "
                    f"{format_bytes(result.peak_query_cache_bytes)})")
            elif name == "MaxSim scratch":
                colour, words = MAXSIM_COLOUR, (
                    f"documents scored in the worker: MaxSim scratch (peak "
                    f"{format_bytes(result.peak_maxsim_scratch_bytes)})")
            else:
                colour, words = _part_style(name)
            xs, heights, bottoms = segments.setdefault(name, (colour, words, [], [], []))[2:]
            xs.append(x[i])
            heights.append(nbytes)
            bottoms.append(bottom)
            bottom += nbytes
    labelled: set[str] = set()
    for name, (colour, words, xs, heights, bottoms) in segments.items():
        ax.bar(xs, heights, width=PEAK_BAR_WIDTH, bottom=bottoms, color=colour,
               edgecolor="black", linewidth=0.6, zorder=3, gid=f"peak part: {name}",
               label=None if words in labelled else f"{words}")
        labelled.add(words)
    stage2 = steps.loc[steps["stage"] == 2, "step"]
    if len(stage2):
        ax.axvline(float(stage2.iloc[0]) - 0.5, color="0.3", lw=0.8, ls=":")
        ax.annotate("documents →", xy=(float(stage2.iloc[0]) - 0.5, 1), xycoords=(
            "data", "axes fraction"), xytext=(3, -3), textcoords="offset points", va="top",
            fontsize=8)
    top = max(ax.get_ylim()[1], float((below + cache).max()) * 1.15)
    ax.set_ylim(0, top or 1)
    if legend:
        handles = list(timeline_handles)
        if cache.any():
            handles.append(Patch(color=QUERY_CACHE_COLOUR, label="query cache (cloned rows, "
                                 f"peak {format_bytes(result.peak_query_cache_bytes)})"))
        bars, _ = ax.get_legend_handles_labels()
        have = {h.get_label() for h in handles}
        handles += [b for b in bars if b.get_label() not in have  # the parts drawn here
                    and not b.get_label().startswith("peak during")]
        if len(scored) and not any("MaxSim" in h.get_label() for h in handles):
            handles.append(Line2D([], [], marker="v", ls="", color=MAXSIM_COLOUR,
                                  label="documents scored in the worker (MaxSim, peak "
                                  f"{format_bytes(result.peak_maxsim_scratch_bytes)})"))
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2,
                  fontsize=8)
    ax.set_title(title if title is not None else
                 f"{result.path.name} scoring ({result.path.io_processor}) · engine {engine}")
    return ax
