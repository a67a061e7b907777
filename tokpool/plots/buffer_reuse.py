"""The reused hidden-states buffer, step by step: what pooling keeps of it, and what breaks.

Every engine step writes its hidden states into the first rows of the same persistent buffer
(graph output memory, or the teaching buffer). A chunk that pooling keeps as a *view* of those
rows (an entry of ``AllPool``'s ``hidden_states_cache``, or a finished output that waits for
its host copy) still points at the rows after a later step has written other tokens there; a
*clone* owns a copy and does not care.

``buffer_reuse_panels`` reads one ``SimResult`` into one ``BufferPanel`` per engine step — the
rows and what they hold, the views alive then and the rows rewritten under them, the clones —
from what the engine recorded (``SimResult.chunks``, ``buffer_writes`` and ``overwrites``: the
view tracker's own record), so the picture shows the simulator's verdict, never a second
opinion. ``plot_buffer_reuse`` draws one panel (``step=k``) or every step, one under another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from .._args import whole
from ..sim.vllm_rules.step_memory import PERSISTENT_REGION
from ._style import OKABE_ITO, format_range, styled

if TYPE_CHECKING:
    from ..sim import SimResult

__all__ = ["BufferPanel", "CloneAt", "Segment", "ViewAt", "buffer_reuse_panels",
           "plot_buffer_reuse"]

#: Request colours (red is kept for what breaks, yellow is too pale for white text).
REQUEST_COLOURS: tuple[str, ...] = tuple(c for i, c in enumerate(OKABE_ITO) if i not in (3, 6))
REWRITTEN = OKABE_ITO[3]  # vermillion: rows rewritten under a kept view
SAFE = OKABE_ITO[2]  # green: an owned copy
PADDING = "0.82"
#: Most engine steps drawn together (``step=None``); longer runs are drawn one step a time.
MAX_PANELS = 24
#: Width of the figure, inches: shown at a notebook's or a README's width (about 880 px) its
#: smallest text (7.5 pt) is still about 10 px tall. Steps are stacked, one under another.
FIGURE_WIDTH = 9.0
#: The smallest text drawn, points.
MIN_FONT = 7.5

# x layout of a panel (data units): view cards | brackets | buffer column | clone column
_CARD = (0.0, 1.45)
_BUFFER = (1.85, 2.85)
_CLONE = (3.12, 4.5)


@dataclass(frozen=True)
class Segment:
    """Rows ``[row0, row1)`` of the buffer after a step: request ``request``'s tokens
    ``[token0, token1)`` written by step ``step`` (``request = -1``: a graph replay's
    padding rows; ``-2``: never written)."""

    row0: int
    row1: int
    request: int
    token0: int
    token1: int
    step: int


@dataclass(frozen=True)
class ViewAt:
    """A view pooling keeps of rows ``[row0, row1)`` (request ``request``'s tokens
    ``[token0, token1)``, kept by step ``kept_step``, read by step ``read_step``), as seen at
    one step. ``output``: the request's finished output waiting for its host copy (else an
    entry of its ``hidden_states_cache``). ``rewritten_now``: ``(row0, row1, token0, token1)``
    of the rows this step's write rewrote under it; ``rewritten_before``: the same, with the
    step, for earlier writes. ``corrupted_at_read``: rows of it were rewritten before the read
    (``SimResult.chunks.overwritten_rows``)."""

    request: int
    kept_step: int
    read_step: int
    row0: int
    row1: int
    token0: int
    token1: int
    output: bool
    rewritten_now: tuple[tuple[int, int, int, int], ...]
    rewritten_before: tuple[tuple[int, int, int, int, int], ...]
    corrupted_at_read: bool


@dataclass(frozen=True)
class CloneAt:
    """An owned copy pooling holds at a step: request ``request``'s tokens
    ``[token0, token1)``, copied by step ``kept_step`` (``kind``: the keep rule's label);
    ``instead_of_view``: not held by this run, drawn beside a view as what the clone policy
    keeps instead."""

    request: int
    token0: int
    token1: int
    kept_step: int
    kind: str
    instead_of_view: bool = False


@dataclass(frozen=True)
class BufferPanel:
    """The buffer at the end of one engine step's write, and what pooling holds then.

    Attributes:
        step: the engine step.
        rows: rows of the persistent buffer drawn (``SimConfig.buffer_rows``, at least the
            most any step wrote).
        rows_written: rows this step wrote into it, from row 0 (0: it computed nothing, or
            wrote a fresh tensor).
        fresh: this step wrote a fresh (eager) tensor instead of the buffer.
        contents: what every row holds after this step (``Segment`` runs, top to bottom).
        views: the views pooling keeps of the buffer during this step.
        clones: the owned copies pooling holds during this step.
    """

    step: int
    rows: int
    rows_written: int
    fresh: bool
    contents: tuple[Segment, ...]
    views: tuple[ViewAt, ...]
    clones: tuple[CloneAt, ...]


def _check(result: Any) -> None:
    if not all(hasattr(result, a) for a in ("chunks", "buffer_writes", "overwrites", "mode")):
        raise TypeError(f"plot_buffer_reuse: result must be a SimResult (tp.simulate(...)), "
                        f"got {type(result).__name__}")
    if result.mode == "closed_form" or result.buffer_writes is None:
        raise ValueError("plot_buffer_reuse: this result is a closed form, which has no engine "
                         "steps to draw; run tp.simulate(..., mode='tensor') or "
                         "mode='analytic'")


def buffer_reuse_panels(result: SimResult, *,
                        clone_beside_views: bool = True) -> list[BufferPanel]:
    """One ``BufferPanel`` per engine step of ``result``, from what the engine recorded.

    Args:
        result: a ``tp.simulate(...)`` result (tensor or analytic mode).
        clone_beside_views: beside every kept view, the clone that PR #50931's ``"clone"``
            policy keeps instead (``CloneAt.instead_of_view``): the same tokens, owned.

    Returns:
        Panels in step order, one per row of ``result.steps``.

    Raises:
        TypeError: ``result`` is not a ``SimResult``.
        ValueError: a closed-form result (no steps).

    Example:
        >>> cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=8, policy="legacy")
        >>> panels = tp.viz.buffer_reuse_panels(tp.simulate([20], cfg))
        >>> [(p.step, p.rows_written) for p in panels]
        [(0, 8), (1, 8), (2, 4)]
        >>> panels[1].views[0].rewritten_now  # step 1 rewrote rows 0-7 under tokens 0-7's view
        ((0, 8, 0, 8),)
    """
    _check(result)
    chunks = result.chunks
    reqs = result.requests
    n_rows = int(result.config.buffer_rows)
    writes = result.buffer_writes
    persistent = writes[writes["region"] == PERSISTENT_REGION]
    if len(persistent):
        n_rows = max(n_rows, int(persistent["rows_written"].max()))
    n_rows = max(n_rows, 1)
    # what each row holds: request (-2 never written, -1 padding), token, writing step
    holder = np.full(n_rows, -2, dtype=np.int64)
    token = np.zeros(n_rows, dtype=np.int64)
    written = np.full(n_rows, -1, dtype=np.int64)
    read = chunks["read_at_step"].fillna(-1).astype("int64")
    kept = chunks[(~chunks["owned"]) & (~chunks["eager"]) & (read > chunks["step"])]
    over = result.overwrites
    finish = dict(zip(reqs["request"], reqs["finish_step"], strict=True))
    delivered = dict(zip(reqs["request"], reqs["delivered_step"], strict=True))
    prompt = dict(zip(reqs["request"], reqs["prompt_len"], strict=True))
    owned = chunks[chunks["owned"] & chunks["action"].isin(["clone", "prealloc"])]
    panels = []
    for k in (int(s) for s in result.steps["step"]):
        mine = writes[writes["step"] == k]
        rows_written, fresh = 0, bool(len(mine)) and bool(
            (mine["region"] != PERSISTENT_REGION).all())
        for w in mine.itertuples(index=False):
            if w.region == PERSISTENT_REGION:
                rows_written = int(w.rows_written)
                holder[:rows_written], written[:rows_written] = -1, k  # padding unless a chunk
        if rows_written:
            for c in chunks[(chunks["step"] == k) & ~chunks["eager"]].itertuples(index=False):
                a, n = int(c.buffer_row_start), int(c.token_end - c.token_start)
                holder[a:a + n] = c.request
                token[a:a + n] = np.arange(c.token_start, c.token_end)
        views, clones = [], []
        for c in kept[(kept["step"] <= k) & (read[kept.index] >= k)].itertuples():
            hit = over[(over["request"] == c.request) & (over["kept_step"] == c.step)
                       & (over["buffer_row_start"] >= c.buffer_row_start)
                       & (over["buffer_row_start"] < c.buffer_row_start + c.token_end
                          - c.token_start)]
            now = tuple((int(o.buffer_row_start), int(o.buffer_row_end), int(o.token_start),
                         int(o.token_end)) for o in hit[hit["step"] == k].itertuples())
            before = tuple((int(o.buffer_row_start), int(o.buffer_row_end), int(o.token_start),
                            int(o.token_end), int(o.step))
                           for o in hit[hit["step"] < k].itertuples())
            views.append(ViewAt(
                request=int(c.request), kept_step=int(c.step), read_step=int(read[c.Index]),
                row0=int(c.buffer_row_start),
                row1=int(c.buffer_row_start + c.token_end - c.token_start),
                token0=int(c.token_start), token1=int(c.token_end),
                output=int(c.token_end) == int(prompt[c.request]),
                rewritten_now=now, rewritten_before=before,
                corrupted_at_read=int(c.overwritten_rows) > 0))
            if clone_beside_views:
                clones.append(CloneAt(int(c.request), int(c.token_start), int(c.token_end),
                                      int(c.step), "clone", instead_of_view=True))
        for c in owned[owned["step"] <= k].itertuples(index=False):
            final = int(c.token_end) == int(prompt[c.request])
            until = int(delivered[c.request] if final else finish[c.request])
            if k <= until and (until > c.step or k == c.step):
                clones.append(CloneAt(int(c.request), int(c.token_start), int(c.token_end),
                                      int(c.step), str(c.action)))
        panels.append(BufferPanel(step=k, rows=n_rows, rows_written=rows_written, fresh=fresh,
                                  contents=_runs(holder, token, written), views=tuple(views),
                                  clones=tuple(clones)))
    return panels


def _runs(holder: np.ndarray, token: np.ndarray, written: np.ndarray) -> tuple[Segment, ...]:
    """Maximal runs of rows with one holder, consecutive tokens and one writing step."""
    out: list[Segment] = []
    start = 0
    for r in range(1, len(holder) + 1):
        same = (r < len(holder) and holder[r] == holder[start] and written[r] == written[start]
                and (holder[r] < 0 or token[r] == token[r - 1] + 1))
        if not same:
            t0 = int(token[start]) if holder[start] >= 0 else 0
            t1 = int(token[r - 1]) + 1 if holder[start] >= 0 else 0
            out.append(Segment(start, r, int(holder[start]), t0, t1, int(written[start])))
            start = r
    return tuple(out)


def _colour(request: int) -> str:
    return REQUEST_COLOURS[request % len(REQUEST_COLOURS)]


def _spread(centres: Sequence[float], height: float, low: float) -> list[float]:
    """Card centres as near ``centres`` as possible without overlapping (top to bottom)."""
    order = sorted(range(len(centres)), key=lambda i: centres[i])
    out = [0.0] * len(centres)
    edge = low
    for i in order:
        c = max(centres[i], edge + height / 2)
        out[i] = c
        edge = c + height / 2 + 0.12 * height
    return out


def _draw_panel(ax: Axes, panel: BufferPanel, *, title: bool) -> tuple[float, float]:
    """Draw one panel; returns its y range (bottom, top) so stacked panels can share
    one."""
    rows = panel.rows
    height_in = ax.get_position().height * ax.figure.get_size_inches()[1]
    row_in = height_in / (rows * 1.55)  # the drawn range is about 1.55 buffer heights
    label_rows = max(1, int(np.ceil(0.13 / max(row_in, 1e-6))))  # rows one text line needs
    x0, x1 = _BUFFER
    for seg in panel.contents:
        now = seg.step == panel.step
        if seg.request == -2:
            face, alpha, text, colour = "white", 1.0, "", "0.5"
        elif seg.request == -1:
            face, alpha, text, colour = PADDING, 1.0 if now else 0.5, "padding", "0.25"
        else:
            face, alpha, colour = _colour(seg.request), 1.0 if now else 0.38, "white"
            text = f"req {seg.request} tok {format_range(seg.token0, seg.token1)}"
            if not now:
                colour = "0.1"
                text += f"\n(from step {seg.step})" if seg.row1 - seg.row0 >= 2 * label_rows \
                    else ""
        ax.add_patch(Rectangle((x0, seg.row0), x1 - x0, seg.row1 - seg.row0, facecolor=face,
                               alpha=alpha, edgecolor="0.35", lw=0.6, zorder=2,
                               gid="buffer"))
        if text and seg.row1 - seg.row0 >= label_rows:
            ax.text((x0 + x1) / 2, (seg.row0 + seg.row1) / 2, text, ha="center", va="center",
                    fontsize=7.5, color=colour, zorder=5, linespacing=1.0)
    ax.add_patch(Rectangle((x0, 0), x1 - x0, rows, fill=False, edgecolor="0.2", lw=1.2,
                           zorder=6))
    # row numbers: the first row, every run's first row, the last row
    marks = sorted({0, rows - 1, *(s.row0 for s in panel.contents)})
    shown = []
    for r in marks:
        if not shown or r - shown[-1] >= label_rows:
            shown.append(r)
    for r in shown:
        ax.text(x1 + 0.04, r + 0.5, str(r), ha="left", va="center", fontsize=7.5,
                color="0.4")
    # the views pooling keeps: cards on the left, a bracket over their rows, an arrow between
    card_h = max(rows * 0.24, label_rows * 5.0)  # four lines of text and a margin
    centres = _spread([(v.row0 + v.row1) / 2 for v in panel.views], card_h, 0.0)
    lanes: list[tuple[int, int]] = []
    for v, cy in zip(panel.views, centres, strict=True):
        lane = sum(1 for a, b in lanes if a < v.row1 and v.row0 < b)
        lanes.append((v.row0, v.row1))
        bx = x0 - 0.1 - 0.09 * lane
        broken = bool(v.rewritten_now or v.rewritten_before)
        edge = REWRITTEN if broken else _colour(v.request)
        ax.plot([bx, bx], [v.row0 + 0.08, v.row1 - 0.08], color=edge, lw=2.2, zorder=7,
                solid_capstyle="butt")
        for y in (v.row0 + 0.08, v.row1 - 0.08):
            ax.plot([bx, x0], [y, y], color=edge, lw=1.2, zorder=7)
        # the arrow lands on the rows themselves (the buffer's edge, level with the middle of
        # the view's rows; views over the same rows land a little apart), past the bracket
        land = v.row0 + (v.row1 - v.row0) * min(0.5 + 0.15 * lane, 0.9)
        ax.annotate("", xy=(x0, land), xytext=(_CARD[1], cy),
                    arrowprops={"arrowstyle": "-|>", "color": edge, "lw": 1.4,
                                "shrinkA": 0, "shrinkB": 0}, zorder=8,
                    gid=f"arrow:{v.request}:{v.kept_step}:{v.row0}:{v.row1}")
        ax.add_patch(Rectangle((_CARD[0], cy - card_h / 2), _CARD[1] - _CARD[0], card_h,
                               facecolor="white", edgecolor=edge, lw=1.6 if broken else 1.0,
                               ls="-" if broken else (0, (3, 2)), zorder=4,
                               gid=f"view:{v.request}:{v.kept_step}"))
        where = "output for the host copy" if v.output else "entry of its cache"
        if v.rewritten_now:
            state = f"✗ step {panel.step} rewrote rows"
        elif v.rewritten_before:
            state = f"✗ rewritten in step {v.rewritten_before[0][4]}"
        else:
            state = "✓ rows intact so far"
        if panel.step == v.read_step:
            state = ("✗ read now: wrong rows" if v.corrupted_at_read
                     else "✓ read now: intact by luck")
        ax.text((_CARD[0] + _CARD[1]) / 2, cy,
                f"view: req {v.request} tok {format_range(v.token0, v.token1)}\n"
                f"kept in step {v.kept_step},\n{where}\n{state}",
                ha="center", va="center", fontsize=7.5, linespacing=1.15, zorder=5,
                color=REWRITTEN if broken else "0.15")
        for r0, r1, *_ in v.rewritten_before:
            ax.add_patch(Rectangle((x0, r0), x1 - x0, r1 - r0, fill=False, hatch="///",
                                   edgecolor=REWRITTEN, alpha=0.45, lw=0, zorder=3,
                                   gid="rewritten_before"))
        for r0, r1, *_ in v.rewritten_now:
            ax.add_patch(Rectangle((x0, r0), x1 - x0, r1 - r0, fill=False, hatch="xxx",
                                   edgecolor=REWRITTEN, lw=1.8, zorder=3,
                                   gid=f"rewritten:{panel.step}:{v.request}:{r0}:{r1}"))
    # owned copies: rows of their own beside the buffer (one row a token, the buffer's scale),
    # untouched by its writes; a clone drawn instead of a view sits level with the view's card
    beside = iter(centres)
    wanted = [next(beside) - (c.token1 - c.token0) / 2 if c.instead_of_view else 0.0
              for c in panel.clones]
    tops: list[float] = []
    edge_y = 0.0
    for c, want in sorted(zip(panel.clones, wanted, strict=True), key=lambda p: p[1]):
        top = max(want, edge_y)
        tops.append(top)
        n = c.token1 - c.token0
        edge_y = top + n + max(0.6, 1.2 * label_rows)  # room for the caption under it
        cx0, cx1 = _CLONE[0] + 0.12, _CLONE[1] - 0.12
        ax.add_patch(Rectangle((cx0, top), cx1 - cx0, n, facecolor=_colour(c.request),
                               edgecolor=SAFE, lw=1.6, ls=(0, (3, 2)) if c.instead_of_view
                               else "-", zorder=4, gid=f"clone:{c.request}:{c.token0}:{c.token1}"))
        for r in range(1, n):  # one row a token, as in the buffer
            ax.plot([cx0, cx1], [top + r, top + r], color="white", lw=0.4, alpha=0.6,
                    zorder=4.5)
        if n >= label_rows:
            ax.text((cx0 + cx1) / 2, top + n / 2,
                    f"req {c.request} tok {format_range(c.token0, c.token1)}",
                    ha="center", va="center", fontsize=7.5, color="white", zorder=5)
        caption = ("policy 'clone' would own these ✓" if c.instead_of_view
                   else f"{c.kind} from step {c.kept_step}: owned ✓")
        ax.text((cx0 + cx1) / 2, top + n + 0.15, caption, ha="center", va="top",
                fontsize=7.5, color="#00553a", zorder=5)
    clone_bottom = edge_y
    # what broke in this step, in words, under the buffer
    notes = [f"✗ step {panel.step} wrote rows {format_range(r0, r1)}: req {v.request} "
             f"tok {format_range(t0, t1)} still points here"
             for v in panel.views for r0, r1, t0, t1 in v.rewritten_now]
    bottom = max([rows, clone_bottom, *(cy + card_h / 2 for cy in centres)])
    for i, note in enumerate(notes):
        ax.text(_CARD[0], bottom + (0.55 + i * 0.9) * label_rows, note, ha="left", va="top",
                fontsize=7.5, color=REWRITTEN, fontweight="bold")
    extra = (len(notes) * 0.9 + 0.8) * label_rows
    ax.set_xlim(_CARD[0] - 0.05, _CLONE[1] + 0.05)
    ax.set_ylim(bottom + extra, -2.2 * label_rows)  # rows run top to bottom
    for x, text in ((sum(_CARD) / 2, "views pooling keeps"),
                    ((x0 + x1) / 2, "the buffer"),
                    (sum(_CLONE) / 2, "owned copies")):
        ax.text(x, -0.5 * label_rows, text, ha="center", va="bottom", fontsize=8,
                color="0.3", fontweight="bold")
    ax.set_axis_off()
    if title:
        ax.set_title(_panel_title(panel), fontsize=9, loc="left")
    return bottom + extra, -2.2 * label_rows


def _panel_title(panel: BufferPanel) -> str:
    if panel.fresh:
        return f"step {panel.step}: ran eagerly (fresh tensor), buffer untouched"
    if not panel.rows_written:
        return f"step {panel.step}: computes nothing, only copies out"
    return f"step {panel.step}: writes rows {format_range(0, panel.rows_written)}"


def _figure_title(result: SimResult) -> str:
    c = result.config
    mode = "async" if c.async_scheduling else "sync"
    return (f"The reused hidden-states buffer, engine step by engine step\npolicy "
            f"{c.policy!r}, {mode} scheduling, {c.max_num_batched_tokens} tokens per step")


def _legend_handles(panels: Sequence[BufferPanel]) -> list[Any]:
    requests = sorted({s.request for p in panels for s in p.contents if s.request >= 0})
    handles: list[Any] = [Patch(color=_colour(r), label=f"request {r}'s tokens")
                          for r in requests]
    if any(s.request == -1 for p in panels for s in p.contents):
        handles.append(Patch(color=PADDING, label="padding (graph replay)"))
    if any(s.request >= 0 and s.step != p.step for p in panels for s in p.contents):
        handles.append(Patch(facecolor=_colour(0), alpha=0.38,
                             label="rows left from an earlier step"))
    if any(v.rewritten_now for p in panels for v in p.views):
        handles.append(Patch(facecolor="white", edgecolor=REWRITTEN, hatch="xxx",
                             label="rewritten this step under a kept view"))
    if any(v.rewritten_before for p in panels for v in p.views):
        handles.append(Patch(facecolor="white", edgecolor=REWRITTEN, hatch="///", alpha=0.5,
                             label="rewritten earlier, view still points there"))
    if any(p.views for p in panels):
        handles.append(Line2D([], [], color="0.3", lw=1.4, marker=">", markevery=[-1],
                              label="view: points at buffer rows, owns nothing"))
    if any(p.clones for p in panels):
        handles.append(Patch(facecolor="white", edgecolor=SAFE, lw=1.2,
                             label="clone: owns a copy, no write can touch it"))
    return handles


@styled
def plot_buffer_reuse(
    result: SimResult,
    *,
    step: int | None = None,
    ax: Axes | Sequence[Axes] | None = None,
    clone_beside_views: bool = True,
    legend: bool = True,
) -> Axes | list[Axes]:
    """Draw the reused hidden-states buffer step by step, with the views pooling keeps.

    Each panel is one engine step: the buffer's rows top to bottom and which request's
    tokens they hold (faded: left over from an earlier step); on the left the views pooling
    keeps (``AllPool``'s ``hidden_states_cache`` entries that are views, and finished outputs
    that are views awaiting their host copy), each a card with a bracket over the rows it
    points at and an arrow that ends on those rows (the buffer's edge); rows that this step's
    write rewrote under a kept view are cross-hatched red (earlier ones hatched lightly),
    with a sentence under the buffer
    ("step 2 wrote rows 0–3: req 0 tok 8–11 still points here"); on the right the owned
    copies (clones), drawn as rows of their own (one row a token, the buffer's scale), which
    the buffer's writes never touch. Steps are stacked one under another, ``FIGURE_WIDTH``
    inches wide, no text under ``MIN_FONT`` points: readable at a notebook's width.
    Everything comes from ``buffer_reuse_panels(result)``: the engine's own record.

    Args:
        result: a ``tp.simulate(...)`` result (tensor or analytic mode).
        step: draw only this engine step (one panel); ``None``: every step, one under
            another (9 in wide).
        ax: with ``step``: the axes to draw into (a new figure when ``None``). Without it:
            one axes per step (a new figure when ``None``, one step a row).
        clone_beside_views: beside every view, the clone the ``"clone"`` policy keeps instead.
        legend: add the legend (under the panels, or under the one panel).

    Returns:
        The axes (one step), or the list of axes, one per step.

    Raises:
        TypeError: ``result`` is not a ``SimResult``, or ``ax`` is not an Axes (a sequence of
            Axes without ``step``).
        ValueError: a closed-form result, a step the run does not have, too few axes, or more
            than ``MAX_PANELS`` steps without ``step``.

    Example:
        >>> cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=8, policy="legacy")
        >>> axes = tp.viz.plot_buffer_reuse(tp.simulate([20], cfg))
        >>> len(axes), axes[1].get_title(loc="left")
        (3, 'step 1: writes rows 0–7')
    """
    import matplotlib.pyplot as plt

    panels = buffer_reuse_panels(result, clone_beside_views=clone_beside_views)
    steps = [p.step for p in panels]
    per_in = 1.9 + 0.09 * min(panels[0].rows, 32)
    if step is not None:
        whole("step", step, minimum=0, maximum=steps[-1],
              why=f" (the run has engine steps 0 to {steps[-1]})")
        if ax is not None and not isinstance(ax, Axes):
            raise TypeError(f"ax must be a matplotlib Axes with step=, got {type(ax).__name__}")
        if ax is None:
            _, ax = plt.subplots(figsize=(6.4, per_in + 1.8), layout="constrained")
        _draw_panel(ax, panels[step], title=True)
        if legend:
            ax.figure.legend(handles=_legend_handles([panels[step]]),
                             loc="outside lower center", ncol=2, fontsize=7.5)
        return ax
    if len(panels) > MAX_PANELS:
        raise ValueError(f"the run has {len(panels)} engine steps; plot_buffer_reuse draws at "
                         f"most {MAX_PANELS} together. Pass step= for one of them, or walk "
                         "them with tp.buffer_reuse_explorer(result)")
    if ax is None:  # one step under another, so the text stays readable at a notebook's width
        fig, grid = plt.subplots(len(panels), 1, figsize=(FIGURE_WIDTH,
                                                          per_in * len(panels) + 1.3),
                                 layout="constrained", squeeze=False)
        axes = list(grid.ravel())
        fig.suptitle(_figure_title(result), fontsize=10, fontweight="bold", x=0.01,
                     ha="left")
    else:
        if isinstance(ax, Axes) or not all(isinstance(a, Axes) for a in ax):
            raise TypeError("without step=, ax must be a sequence of Axes, one per engine step")
        axes = list(ax)
        if len(axes) < len(panels):
            raise ValueError(f"the run has {len(panels)} engine steps; got {len(axes)} axes")
        fig = axes[0].figure
    limits = [_draw_panel(a, panel, title=True) for a, panel in zip(axes, panels, strict=False)]
    shared = (max(b for b, _ in limits), min(t for _, t in limits))
    for a in axes[:len(panels)]:
        a.set_ylim(*shared)  # one scale: a row is as tall in every panel
    if legend:
        fig.legend(handles=_legend_handles(panels), loc="outside lower center", ncol=2,
                   fontsize=MIN_FONT)
    return axes[:len(panels)]
