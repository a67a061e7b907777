"""Ownership schedule: which request's chunk runs in which step, what pooling keeps, what breaks.

``schedule_frame`` turns a ``SimResult`` into one row per (step, request) chunk — its rows in
the persistent hidden-state buffer, what pooling does with it, whether it is kept as a *view*
and the step whose buffer write overwrites it before it is read. ``plot_ownership_schedule``
draws that as a step × request Gantt chart; ``plot_buffer_rows`` draws the buffer itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from ..sim.results.analysis import overwritten_requests, schedule_frame
from ._style import OKABE_ITO, format_range, new_axes, styled

__all__ = [
    "CHUNK_KINDS", "overwritten_requests", "plot_buffer_rows", "plot_ownership_schedule",
    "schedule_frame",
]

if TYPE_CHECKING:
    from ..sim import SimResult

#: Chunk kinds, with the colour and legend text used everywhere.
CHUNK_KINDS: dict[str, tuple[str, str]] = {
    "clone": (OKABE_ITO[0], "clone (owns a copy)"),
    "view": (OKABE_ITO[1], "view of the buffer (owns nothing)"),
    "view + cat": (OKABE_ITO[2], "last chunk: view, then cat (new copy)"),
    "prealloc": (OKABE_ITO[4], "copied into a preallocated buffer"),
    "offload": (OKABE_ITO[5], "copied to host memory"),
    "gather": ("0.6", "last row gathered (sequence task)"),
}
OVERWRITE_COLOUR = OKABE_ITO[3]
INTACT_COLOUR = OKABE_ITO[2]



#: Narrowest room (inches) one step's tick label gets; closer steps label every k-th one.
STEP_LABEL_IN = 0.32


def step_label_every(ax: Axes, n_steps: int, *, room: float = STEP_LABEL_IN) -> int:
    """Label every k-th step so that tick labels never overlap: k such that each labelled
    step gets ``room`` inches of the axes' width (read before layout)."""
    width_in = ax.get_position().width * ax.figure.get_size_inches()[0]
    per_step = width_in / max(n_steps, 1)
    if per_step >= room:
        return 1
    for k in (2, 5, 10, 20, 50, 100):
        if k * per_step >= room:
            return k
    return 200


def _title(result: SimResult) -> str:
    c = result.config
    mode = "async" if c.async_scheduling else "sync"
    chunked = "chunked prefill" if c.enable_chunked_prefill else "no chunked prefill"
    return (f"policy={c.policy!r}, {mode} scheduling, {chunked}, "
            f"budget {c.max_num_batched_tokens} tokens/step")


@styled
def plot_ownership_schedule(
    result: SimResult,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    annotate: bool = True,
) -> Axes:
    """Step × request Gantt chart of a simulation: chunks, what pooling keeps, what breaks.

    Each box is one chunk of one request in one step, coloured by what pooling does with it
    (clone, view, view + cat, prealloc, offload). A line carries a kept chunk to the step that
    reads it: solid when pooling owns a copy, dashed when it only holds a view of the reused
    buffer. A red ✕ marks the step whose buffer write overwrites such a view before it is read;
    the arrow at the end of each row is the host copy, red and labelled when the delivered
    output is corrupted.

    Args:
        result: a ``tp.simulate(...)`` result.
        ax: axes to draw into (a new figure sized to the run when ``None``).
        title: axes title (default: policy, scheduling, budget).
        annotate: write each chunk's token range in its box (inclusive: ``0–7`` = tokens 0
            to 7).

    Returns:
        The axes.
    """
    frame = schedule_frame(result)
    reqs = result.requests
    n_req = len(reqs)
    last_step = int(max(result.steps["step"].max(), reqs["delivered_step"].max()))
    ax = new_axes(ax, (max(7.0, 1.0 * (last_step + 1) + 1.6), 0.68 * n_req + 2.6))
    corrupted = set(result.corrupted)
    h, w = 0.46, 0.62  # box height (rows) and width (steps)
    lane = h / 2 + 0.1  # kept chunks run along a lane just under their request's boxes
    aborted = {} if getattr(result, "aborts", None) is None else {
        int(a.request): int(a.step) for a in result.aborts.itertuples()
        if a.outcome == "aborted"}
    for row in frame.itertuples(index=False):
        colour = CHUNK_KINDS[row.kind][0]
        y = row.request
        ax.add_patch(Rectangle((row.step - w / 2, y - h / 2), w, h, facecolor=colour,
                               edgecolor="white", lw=0.8, zorder=3))
        if annotate:
            ax.text(row.step, y, format_range(row.start, row.stop), ha="center", va="center",
                    fontsize=7.5, color="white" if row.kind != "gather" else "black", zorder=4)
        owned = row.kind != "view"
        final = row.stop == result.prompt_lens[row.request]
        if not owned:
            end = row.read_step  # a view lives until it is read
        elif not final and row.kind in ("clone", "prealloc"):
            end = int(reqs.at[row.request, "finish_step"])  # kept until the request finishes
            end = aborted.get(row.request, end) if end < 0 else end  # ... or is aborted
        elif final and row.kind != "offload":
            end = int(reqs.at[row.request, "delivered_step"])  # output awaiting its host copy
        else:
            end = -1
        if end > row.step:
            ax.plot([row.step, end], [y + lane, y + lane], color=colour, lw=2.4,
                    ls="-" if owned else (0, (2, 1.5)), zorder=2, solid_capstyle="butt")
            ax.plot([row.step, row.step], [y + h / 2, y + lane], color=colour, lw=1.2, zorder=2)
        if row.overwritten_step >= 0:
            ax.scatter([row.overwritten_step], [y + lane], marker="X", s=110,
                       color=OVERWRITE_COLOUR, edgecolors="white", linewidths=0.8, zorder=6)
    for r, step in aborted.items():  # the client hung up: the runner drops the state here
        ax.text(step, r, "✕ aborted", color=OVERWRITE_COLOUR, ha="center", va="center",
                fontsize=8, fontweight="bold", zorder=6)
    for rec in reqs.itertuples(index=False):
        if rec.delivered_step < 0:
            continue  # aborted: nothing delivered
        bad = rec.request in corrupted
        colour = OVERWRITE_COLOUR if bad else INTACT_COLOUR
        x = rec.delivered_step + w / 2 + 0.02
        ax.annotate("", xy=(x + 0.25, rec.request), xytext=(x, rec.request),
                    arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 2.2}, zorder=5)
        if bad:
            ax.text(x + 0.05, rec.request - h / 2 - 0.04, "corrupted", color=OVERWRITE_COLOUR,
                    va="bottom", ha="left", fontsize=8, fontweight="bold")
    ax.set_xlim(-0.6, last_step + 1.0)
    ax.set_ylim(n_req - 0.3, -0.7)
    steps_with_work = set(frame["step"])
    every = step_label_every(ax, last_step + 1)
    if every == 1:
        roomy = step_label_every(ax, last_step + 1, room=0.7) == 1  # "(collect)" fits
        ax.set_xticks(range(last_step + 1), [
            f"{s}" if s in steps_with_work or not roomy else f"{s}\n(collect)"
            for s in range(last_step + 1)
        ])
    else:  # too narrow for one label per step: every k-th step, the rest unlabelled ticks
        ax.set_xticks(range(last_step + 1), minor=True)
        ax.set_xticks(range(0, last_step + 1, every))
    labels = [f"req {r} · {n} tok" for r, n in zip(reqs["request"], reqs["prompt_len"],
                                                     strict=True)]
    ax.set_yticks(range(n_req), labels)
    for tick, r in zip(ax.get_yticklabels(), reqs["request"], strict=True):
        if r in corrupted:
            tick.set_color(OVERWRITE_COLOUR)
            tick.set_fontweight("bold")
    ax.set_xlabel("engine step")
    ax.grid(axis="y", visible=False)
    kinds = [k for k in CHUNK_KINDS if k in set(frame["kind"])]
    handles: list[Any] = [Patch(color=CHUNK_KINDS[k][0], label=CHUNK_KINDS[k][1]) for k in kinds]
    kept_view = bool(((frame["kind"] == "view") & (frame["read_step"] > frame["step"])).any())
    handles += [
        Line2D([], [], color="0.3", lw=2, label="kept, owned copy"),
        *([Line2D([], [], color="0.3", lw=2, ls=(0, (2, 1.5)), label="kept, only a view")]
          if kept_view else []),
        Line2D([], [], ls="", marker="X", color=OVERWRITE_COLOUR, ms=9,
               label="buffer rows overwritten before read"),
        Line2D([], [], ls="", marker=">", color=INTACT_COLOUR, ms=8, label="host copy, intact"),
        Line2D([], [], ls="", marker=">", color=OVERWRITE_COLOUR, ms=8,
               label="host copy, corrupted"),
    ]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3,
              fontsize=8)
    ax.set_title(title if title is not None else _title(result), loc="left", fontsize=10)
    return ax


@styled
def plot_buffer_rows(
    result: SimResult,
    *,
    ax: Axes | None = None,
    title: str | None = "The persistent hidden-state buffer, step by step",
) -> Axes:
    """Which request's tokens occupy which rows of the reused hidden-state buffer, per step.

    Every step writes its tokens into rows ``0..n-1`` of the same buffer, so a chunk's rows are
    rewritten by the next step that schedules at least that many tokens. Hatched boxes are
    chunks pooling keeps only as a view; a red edge marks the ones overwritten before read.

    Args:
        result: a ``tp.simulate(...)`` result.
        ax: axes to draw into (a new figure when ``None``).
        title: axes title.

    Returns:
        The axes.
    """
    frame = schedule_frame(result)
    budget = result.config.max_num_batched_tokens
    n_steps = int(result.steps["step"].max()) + 1
    ax = new_axes(ax, (max(6.0, 0.8 * n_steps + 2.8), 3.8))
    palette = [c for i, c in enumerate(OKABE_ITO) if i not in (3, 6)]
    for row in frame.itertuples(index=False):
        colour = palette[row.request % len(palette)]
        view = row.kind == "view" and row.read_step > row.step
        bad = row.overwritten_step >= 0
        ax.add_patch(Rectangle(
            (row.step - 0.4, row.buffer_start), 0.8, row.buffer_stop - row.buffer_start,
            facecolor=colour, alpha=0.85, hatch="///" if view else None,
            edgecolor=OVERWRITE_COLOUR if bad else "white", lw=2.0 if bad else 0.8, zorder=3,
        ))
        rows_used = row.buffer_stop - row.buffer_start
        if rows_used >= budget * 0.08:
            label = (f"req {row.request}\ntok {format_range(row.start, row.stop)}"
                     if rows_used >= budget * 0.2 else f"r{row.request}")
            ax.text(row.step, (row.buffer_start + row.buffer_stop) / 2, label,
                    ha="center", va="center", fontsize=7.5, color="white", zorder=4)
    ax.set_xlim(-0.6, n_steps - 0.4)
    ax.set_ylim(budget, 0)
    ax.set_xticks(range(n_steps))
    ax.set_xlabel("engine step")
    ax.set_ylabel("buffer row")
    ax.grid(axis="x", visible=False)
    requests = sorted(set(frame["request"]))
    handles: list[Any] = [Patch(color=palette[r % len(palette)], label=f"request {r}")
                          for r in requests]
    if ((frame["kind"] == "view") & (frame["read_step"] > frame["step"])).any():
        handles.append(Patch(facecolor="white", edgecolor="0.3", hatch="///",
                             label="kept as a view"))
    if (frame["overwritten_step"] >= 0).any():
        handles.append(Patch(facecolor="white", edgecolor=OVERWRITE_COLOUR, lw=2,
                             label="overwritten before read"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    if title:
        ax.set_title(title)
    return ax
