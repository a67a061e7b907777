"""Memory pictures: one run's per-step ledger, and peaks against prompt length per policy."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from .._args import whole
from ._style import OKABE_ITO, at_least_ticks, format_bytes, format_tokens, new_axes, styled
from .zero_points import draw_zero_points, zero_legend_entry

if TYPE_CHECKING:
    from ..sim import SimResult

#: Colour per retention policy (the same in every figure).
POLICY_COLOURS: dict[str, str] = {
    "legacy": OKABE_ITO[3],
    "clone": OKABE_ITO[0],
    "prealloc": OKABE_ITO[2],
    "offload": OKABE_ITO[1],
}
#: Axis labels for the byte columns of ``tp.sweep``.
BYTE_LABELS: dict[str, str] = {
    "peak_pooling_bytes": "peak device bytes held by pooling",
    "peak_device_bytes": "peak device bytes (pooling + hidden-state buffer)",
    "copy_bytes": "device bytes copied by pooling",
    "d2h_bytes": "bytes copied device → host",
    "host_bytes": "host bytes (delivered outputs)",
    "output_bytes": "bytes of the delivered output",
}
#: Line style per policy, widest first, so coinciding curves all stay visible.
POLICY_STYLES: dict[str, dict[str, Any]] = {
    "legacy": {"lw": 4.0, "alpha": 0.45},
    "clone": {"lw": 2.2},
    "prealloc": {"lw": 1.6, "ls": (0, (4, 2))},
    "offload": {"lw": 1.6, "ls": ":"},
}
#: Ledger categories of ``SimResult.steps`` stacked in the timeline, with colours and labels.
MEMORY_CATEGORIES: tuple[tuple[str, str, str], ...] = (
    ("pool_cache_bytes", OKABE_ITO[0], "chunk cache (clones / prealloc buffer)"),
    ("pool_output_bytes", OKABE_ITO[2], "pooled output awaiting host copy"),
    ("pool_head_bytes", OKABE_ITO[4], "head output (cast / activation)"),
)


def _bytes_axis(axis: Any, *, log: bool, vmax: float | None = None) -> None:
    """Binary units on a bytes axis: powers of 4 on a log axis, round steps of one unit else;
    at least three ticks however narrow the range (``at_least_ticks``)."""
    if log:
        at_least_ticks(axis, ticker.LogLocator(base=4, numticks=30), log=True, unit=1024)
        axis.set_minor_locator(ticker.NullLocator())
    elif vmax:
        unit = 1024 ** max(0, min(4, int(np.log(max(vmax, 1)) // np.log(1024))))
        span = vmax / unit
        # below one unit, binary fractions: 256 MiB steps, not 205 MiB ones
        nice = (*(1 / 8, 1 / 4, 1 / 2), *(m * 10**e for e in range(0, 5) for m in (1, 2, 2.5, 5)))
        step = next(n for n in nice if span / n <= 6)
        at_least_ticks(axis, ticker.MultipleLocator(step * unit), log=False, unit=1024)
    else:
        at_least_ticks(axis, ticker.MaxNLocator(nbins=6), log=False, unit=1024)
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: format_bytes(v) if v > 0 else "0"))


def _tokens_axis(axis: Any) -> None:
    """Prompt lengths on a log axis: every power of two over a range of up to 6 doublings
    (1K … 32K: the longest gets its tick), every power of four over a wider one."""
    lo, hi = sorted(axis.get_data_interval())
    doublings = np.log2(hi / lo) if lo > 0 and np.isfinite(hi / lo) else 99.0
    base = 2 if doublings <= 6 else 4
    at_least_ticks(axis, ticker.LogLocator(base=base, numticks=30), log=True)
    axis.set_minor_locator(ticker.NullLocator())
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: format_tokens(v)))


def _hardware_bytes(hardware: Any) -> tuple[str, int] | None:
    """``(label, bytes)`` for a hardware preset name, a ``Hardware`` or a byte count; ``None``
    for a device without a memory total (the CPU: no line is drawn)."""
    if hardware is None:
        return None
    if isinstance(hardware, (int, np.integer)) and not isinstance(hardware, bool):
        whole("hardware (bytes of device memory)", hardware, minimum=1)
        return f"device memory ({format_bytes(hardware)})", int(hardware)
    if isinstance(hardware, str):
        from ..sim.vllm_rules.devices import resolve_hardware  # names resolve in one place

        hardware = resolve_hardware(hardware)
    if not hasattr(hardware, "hbm_bytes"):
        raise TypeError(f"hardware must be a preset name (tp.HARDWARE_PRESETS), a Hardware or "
                        f"a byte count, got {type(hardware).__name__} {hardware!r:.40}")
    if hardware.hbm_bytes is None:  # vLLM's CPU platform: the host's memory, no device total
        return None
    return f"{hardware.name} memory ({format_bytes(hardware.hbm_bytes)})", int(hardware.hbm_bytes)


#: The device-memory line is drawn only when it is at most this many times the highest point.
HARDWARE_LINE_RANGE = 8.0


def _outside_legend(ax: Axes, handles: list[Any]) -> None:
    """Legend to the right of the axes, where it cannot cover a curve."""
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)


def _steps_frame(result_or_steps: SimResult | pd.DataFrame) -> pd.DataFrame:
    steps = getattr(result_or_steps, "steps", result_or_steps)
    if not isinstance(steps, pd.DataFrame):
        raise TypeError(f"result must be a tp.simulate(...) result or its steps DataFrame, got "
                        f"{type(result_or_steps).__name__}")
    missing = [c for c in ("step", "pool_peak_bytes") if c not in steps.columns]
    if missing:
        raise ValueError(f"result: the steps table lacks {missing}; pass a tp.simulate(...) "
                         "result (mode='tensor' or 'analytic') or its .steps")
    return steps


#: Colour and legend words of each part of an in-step peak (``tp.sim.peak_parts``), the same
#: colours as the end-of-step categories: one colour, one kind of tensor. A head cast ("float32
#: cast") takes ``CAST_COLOUR``.
PEAK_PARTS: dict[str, tuple[str, str]] = {
    "chunk cache": (OKABE_ITO[0], "chunk cache (clones / prealloc buffer)"),
    "pooled output": (OKABE_ITO[2], "pooled output (model dtype)"),
    "STEP selection": (OKABE_ITO[6], "STEP selection (columns, tag rows)"),
    "classifier logits": (OKABE_ITO[1], "classifier logits (head)"),
    "activation": (OKABE_ITO[4], "activation (the head's output)"),
    "head output": (OKABE_ITO[4], "head output (cast / activation)"),
}
CAST_COLOUR = OKABE_ITO[5]
#: Width of the peak's stacked bar, in steps (the end-of-step fill shows on either side).
PEAK_BAR_WIDTH = 0.5


def _part_style(name: str) -> tuple[str, str]:
    """``(colour, legend words)`` of a peak part."""
    if name.endswith(" cast"):
        return CAST_COLOUR, f"{name} (head)"
    return PEAK_PARTS.get(name, ("0.6", name))


def _peak_bars(ax: Axes, result: Any, steps: pd.DataFrame, peak: np.ndarray) -> dict[str, str]:
    """At each step whose in-step peak is above its end-of-step bytes, the peak's parts
    (``tp.sim.peak_parts``: chunk cache, pooled output, the head's cast and activation) as a
    stacked bar; returns ``{colour: legend words}`` of what was drawn."""
    from ..sim.results.peak_parts import peak_parts  # the result says what the peak is made of

    x = steps["step"].to_numpy()
    end = steps["pool_bytes"].to_numpy(dtype=float)
    drawn: dict[str, str] = {}
    for i in np.flatnonzero(peak > end):
        bottom = 0.0
        for name, nbytes in peak_parts(result, int(x[i])).items():
            colour, words = _part_style(name)
            first = colour not in drawn  # the axes hold what the legend names (issue 48)
            drawn.setdefault(colour, words)
            ax.bar(x[i], nbytes, width=PEAK_BAR_WIDTH, bottom=bottom, color=colour,
                   edgecolor="black", linewidth=0.6, zorder=3, gid=f"peak part: {name}",
                   label=words if first else None)
            bottom += nbytes
    return drawn


def _draw_ledger(ax: Axes, steps: pd.DataFrame, *, host: bool, label_peak: bool = True,
                 result: Any = None) -> tuple[np.ndarray, float, list[Any]]:
    """Stacked categories, the in-step peak (its parts stacked, given the ``result``) and host
    bytes; returns (step edges, top value, legend handles of what is drawn: one per colour)."""
    from matplotlib.patches import Patch

    x = steps["step"].to_numpy()
    edges = np.append(x, x[-1] + 1) - 0.5 if len(x) else np.array([0.0])
    layers = [steps[c].to_numpy(dtype=float) for c, _, _ in MEMORY_CATEGORIES]
    bottom = np.zeros(len(x))
    colours: dict[str, str] = {}  # colour → legend words, in drawing order
    for values, (_, colour, label) in zip(layers, MEMORY_CATEGORIES, strict=True):
        top = bottom + values
        ax.fill_between(edges, np.append(bottom, bottom[-1:]), np.append(top, top[-1:]),
                        step="post", color=colour, alpha=0.85, lw=0,
                        label=label if values.any() and colour not in colours else None)
        if values.any():  # nothing drawn: no legend entry
            colours.setdefault(colour, label)
        bottom = top
    peak = steps["pool_peak_bytes"].to_numpy(dtype=float)
    bars: dict[str, str] = {}
    if result is not None and hasattr(result, "requests"):
        bars = _peak_bars(ax, result, steps, peak)
    for colour, words in bars.items():
        if colour == PEAK_PARTS["activation"][0] and colour in colours:
            colours[colour] = words  # the head output awaiting its copy IS the activation's
        colours.setdefault(colour, words)
    handles: list[Any] = [Patch(color=c, label=w) for c, w in colours.items()]
    peak_words = "peak during the step (bar: what it is made of)" if bars else \
        "peak during the step"
    ax.stairs(peak, edges, color="black", lw=1.2, gid="pool_peak_bytes", label=peak_words)
    handles.append(Line2D([], [], color="black", lw=1.2, label=peak_words))
    if label_peak and len(peak) and peak.max() > 0:
        i = len(peak) - 1 - int(peak[::-1].argmax())  # the last step at the peak: clear of an inset
        ax.annotate(f"peak {format_bytes(peak[i])}", xy=(x[i], peak[i]), xytext=(0, 3),
                    textcoords="offset points", ha="center" if 0 < i < len(x) - 1 else
                    ("left" if i == 0 else "right"), va="bottom", fontsize=8.5)
    if host:
        ax.stairs(steps["host_bytes"].to_numpy(dtype=float), edges, color="0.45", lw=1.2,
                  ls="--", label="host memory (outputs, offload)")
        handles.append(Line2D([], [], color="0.45", lw=1.2, ls="--",
                              label="host memory (outputs, offload)"))
    top = max(peak.max(initial=0), bottom.max(initial=0),
              steps["host_bytes"].max() if host else 0)
    return edges, float(top), handles


#: Runs longer than this many steps get a zoom inset on their last steps (``zoom=None``).
ZOOM_AFTER_STEPS = 40


@styled
def plot_memory_timeline(
    result: SimResult | pd.DataFrame,
    *,
    ax: Axes | None = None,
    host: bool = True,
    legend: bool = True,
    title: str | None = None,
    zoom: bool | None = None,
    zoom_steps: int = 5,
) -> Axes:
    """Pooling's device bytes step by step, stacked by category, with the in-step peak.

    The filled areas are the bytes alive at the *end* of each step (chunk cache, outputs waiting
    for their host copy, head outputs); the black line is the *peak during* the step. Where the
    peak is above the end-of-step bytes (the clone policy's transient ``cat``, the head's
    float32 cast and activation), a stacked bar in the step shows what the peak is made of
    (``tp.sim.peak_parts``: chunk cache, pooled output, float32 cast, activation; given a
    result, not a bare steps frame). The dashed line is host memory. On a long run (hundreds of
    steps) those events last one step each, so an inset magnifies the last ``zoom_steps``
    steps. The legend lists only what is drawn.

    Args:
        result: a ``tp.simulate(...)`` result (or its ``steps`` DataFrame).
        ax: axes to draw into (a new figure when ``None``).
        host: also draw ``host_bytes``.
        legend: draw the legend.
        title: axes title (default: policy and prompt lengths).
        zoom: draw the inset (``None``: when the run has more than ``ZOOM_AFTER_STEPS`` steps).
        zoom_steps: how many final steps the inset shows.

    Returns:
        The axes.
    """
    steps = _steps_frame(result)
    whole("zoom_steps", zoom_steps, minimum=1)
    ax = new_axes(ax, (7.6, 3.8))
    edges, top, handles = _draw_ledger(ax, steps, host=host,
                              result=result if hasattr(result, "steps") else None)
    top *= 1.15  # headroom for the peak label
    if zoom is None:
        zoom = len(steps) > ZOOM_AFTER_STEPS
    zoom = bool(zoom) and len(steps) > zoom_steps
    if zoom:  # the inset sits above the data it would cover (a prealloc buffer is high early)
        top = max(top, _under_inset(steps, edges, host=host) / (INSET_BOX[1] * 0.9))
    if len(ax.get_shared_y_axes().get_siblings(ax)) > 1:  # sharey: never cut another panel
        top = max(top, ax.get_ylim()[1])
    _bytes_axis(ax.yaxis, log=False, vmax=float(top))
    ax.set_ylim(0, top or 1)
    ax.set_xlim(edges[0], edges[-1])
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set_xlabel("engine step")
    ax.set_ylabel("bytes owned by pooling")
    if zoom:
        _zoom_inset(ax, steps, host=host, n=zoom_steps, top=top,
                    result=result if hasattr(result, "steps") else None)
    if legend:
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3,
                  fontsize=8)
    if title is None and hasattr(result, "config"):
        c = result.config
        lens = result.prompt_lens
        shown = ", ".join(format_tokens(n) for n in lens[:4]) + (" …" if len(lens) > 4 else "")
        title = (f"Pooling memory per step · policy={c.policy!r}, "
                 f"{'async' if c.async_scheduling else 'sync'}, prompts [{shown}] tokens")
    if title:
        ax.set_title(title, loc="left", fontsize=10)
    return ax


#: Where the zoom inset sits, in axes fractions: (left, bottom, width, height).
INSET_BOX = (0.11, 0.42, 0.34, 0.5)  # left of it: the inset's own tick labels


def _under_inset(steps: pd.DataFrame, edges: np.ndarray, *, host: bool) -> float:
    """The highest byte count drawn in the inset's x range."""
    lo = edges[0] + INSET_BOX[0] * (edges[-1] - edges[0])
    hi = edges[0] + (INSET_BOX[0] + INSET_BOX[2]) * (edges[-1] - edges[0])
    x = steps["step"].to_numpy()
    inside = steps[(x + 0.5 >= lo) & (x - 0.5 <= hi)]
    columns = ["pool_peak_bytes", "pool_bytes"] + (["host_bytes"] if host else [])
    return float(inside[columns].to_numpy().max(initial=0))


def _zoom_inset(ax: Axes, steps: pd.DataFrame, *, host: bool, n: int, top: float,
                result: Any = None) -> None:
    """Magnify the last ``n`` steps in an inset at the upper left, above the data there."""
    last = steps.iloc[-n:]
    inset = ax.inset_axes(INSET_BOX)
    _draw_ledger(inset, last, host=host, label_peak=False, result=result)
    lo, hi = float(last["step"].iloc[0]) - 0.5, float(last["step"].iloc[-1]) + 0.5
    inset.set_xlim(lo, hi)
    inset.set_ylim(0, top)
    inset.set_xticks(last["step"].to_numpy())
    inset.tick_params(labelsize=7)
    _bytes_axis(inset.yaxis, log=False, vmax=top)
    inset.set_title(f"last {n} steps, magnified", fontsize=7.5, loc="left")
    inset.grid(alpha=0.25)
    ax.indicate_inset((lo, 0, hi - lo, top), inset, edgecolor="0.4")


def _select_async(df: pd.DataFrame, async_scheduling: bool | None) -> tuple[pd.DataFrame, str]:
    values = sorted(set(df["async_scheduling"])) if "async_scheduling" in df.columns else []
    if async_scheduling is None:
        async_scheduling = values[-1] if values else None
    if async_scheduling is None:
        return df, ""
    chosen = df[df["async_scheduling"] == async_scheduling]
    if chosen.empty:
        raise ValueError(f"no rows with async_scheduling={async_scheduling}; it has {values}")
    return chosen, "async" if async_scheduling else "sync"


def _plot_lines(df: pd.DataFrame, y: str, ax: Axes, *, hue: str, floor_zero: bool,
                zero_label: str = "0 B on the device") -> list[Any]:
    """One line per value of ``hue``; returns legend entries for all-zero series."""
    if hue not in df.columns:
        raise ValueError(f"df lacks the hue column {hue!r}; it has {list(df.columns)}")
    extra: list[Any] = []
    zeros = None  # the colour of a series whose zero points are on the lower edge
    for i, (name, group) in enumerate(df.groupby(hue, sort=False)):
        g = group.sort_values("prompt_len")
        if hue == "policy":
            colour = POLICY_COLOURS.get(str(name), "0.3")
            style = POLICY_STYLES.get(str(name), {"lw": 2.0})
        else:
            colour = OKABE_ITO[i % len(OKABE_ITO)]
            style = {"lw": 2.0}
        values = g[y].to_numpy(dtype=float)
        if floor_zero and np.all(values <= 0):
            extra.append(Line2D([], [], color=colour, lw=2, ls=":",
                                label=f"{name}: {zero_label}"))
            continue
        shown = np.where(values > 0, values, np.nan) if floor_zero else values
        ax.plot(g["prompt_len"], shown, color=colour, label=str(name), **style)
        if floor_zero and zero_label.startswith("0 B") and draw_zero_points(
                ax, g["prompt_len"].to_numpy(), values, colour, str(name)):
            zeros = colour
        _mark_refused(ax, g, shown, colour)
        if "corrupted" in g.columns and g["corrupted"].any():
            bad = g[g["corrupted"]]
            ax.scatter(bad["prompt_len"], np.where(bad[y] > 0, bad[y], np.nan), marker="x",
                       s=36, color="black", zorder=5, lw=1.2)
    return extra + ([zero_legend_entry(zeros)] if zeros is not None else [])


def _refused(g: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the rows vLLM refuses to start for: past the context only, any other check
    (the columns ``tokpool.sim.startup.mark_startup_refusals`` adds)."""
    if "vllm_starts" not in g.columns:  # not marked: nothing to draw
        none = np.zeros(len(g), dtype=bool)
        return none, none
    from ..sim.startup import CONTEXT_CHECK  # the verdict is the simulator's: one place

    refused = ~g["vllm_starts"].to_numpy(dtype=bool)
    context = refused & (g["refused_by"].to_numpy(dtype=object) == CONTEXT_CHECK)
    return context, refused & ~context


def _mark_refused(ax: Axes, g: pd.DataFrame, y: np.ndarray, colour: Any) -> None:
    """Open markers on the points vLLM would refuse to start for (drawn as if it started)."""
    context, hard = _refused(g)
    x = g["prompt_len"].to_numpy()
    for mask, marker in ((context, "o"), (hard, "s")):
        if mask.any():
            ax.scatter(x[mask], y[mask], marker=marker, s=22, facecolors="white",
                       edgecolors=colour, linewidths=1.1, zorder=4)


def _refusal_legend(df: pd.DataFrame) -> list[Any]:
    """Legend entries for the refused points' markers, in plain words: the full refusal (its
    vLLM message and the function that raises it) is in the sweep's ``refusal`` column and
    ``tp.sim.refusal_summary``, never in the figure."""
    context, hard = _refused(df)
    entries = []
    if context.any():
        entries.append(Line2D([], [], ls="", marker="o", mfc="white", mec="black",
                              label="past the model's context:\nvLLM refuses it; drawn as if"))
    if hard.any():
        from ..sim.startup import REFUSAL_REASONS  # the simulator's words, one place

        checks = sorted(set(df.loc[hard, "refused_by"]))
        reasons = "; ".join(REFUSAL_REASONS.get(c, "another start-up check") for c in checks)
        entries.append(Line2D([], [], ls="", marker="s", mfc="white", mec="black",
                              label=f"vLLM refuses to start:\n{_wrap(reasons)}; drawn as if"))
    return entries


def _wrap(text: str, width: int = 30) -> str:
    """``text`` in lines of at most ``width`` characters (a legend entry stays narrow)."""
    return "\n".join(textwrap.wrap(text, width)) or text


#: Colours of the single runs drawn over the curves (``points=``), none a policy's colour.
POINT_COLOURS: tuple[str, ...] = (OKABE_ITO[4], OKABE_ITO[7], OKABE_ITO[5], OKABE_ITO[6])
#: Markers of the single runs, one per point (the open one of the same shape: delivered).
POINT_MARKERS: tuple[str, ...] = ("D", "*", "^", "P")


def _points_frame(points: Any, y: str, *, log: bool) -> pd.DataFrame:
    """``points`` as a checked DataFrame: ``prompt_len``, ``label``, the ``y`` column and
    optionally ``output_bytes`` (what the run delivers to the host)."""
    if isinstance(points, dict):
        raise TypeError("points must be a DataFrame or a list of dicts (one per run), got one "
                        "dict; wrap it in a list: points=[{...}]")
    if isinstance(points, (list, tuple)):
        if not all(isinstance(p, dict) for p in points):
            raise TypeError("points: every item must be a dict with prompt_len, label and "
                            f"{y!r} (optionally output_bytes), got "
                            f"{sorted({type(p).__name__ for p in points})}")
        points = pd.DataFrame(list(points))
    if not isinstance(points, pd.DataFrame):
        raise TypeError(f"points must be a DataFrame or a list of dicts, got "
                        f"{type(points).__name__}")
    if points.empty:
        raise ValueError("points is empty; pass points=None to draw the curves alone")
    missing = [c for c in ("prompt_len", "label", y) if c not in points.columns]
    if missing:
        raise ValueError(f"points lack column(s) {missing}: each point needs prompt_len, a "
                         f"label and {y!r} (the curves' y), optionally output_bytes; they have "
                         f"{list(points.columns)} (a run's row: dict(r.summary(), label=...))")
    numbers = ["prompt_len", y] + (["output_bytes"] if "output_bytes" in points.columns
                                   and y != "output_bytes" else [])
    for column in numbers:
        values = pd.to_numeric(points[column], errors="coerce")
        wrong = values.isna() | ((values <= 0) if log else (values < 0))
        if wrong.any():
            bad = points.loc[wrong, column].tolist()
            raise ValueError(f"points: {column} must be {'> 0 on a log axis' if log else '>= 0'}"
                             f", got {bad}" + ("; pass loglog=False to draw zeros" if log else ""))
    labels = points["label"]
    if not all(isinstance(v, str) and v.strip() for v in labels):
        raise TypeError(f"points: every label must be a non-empty string, got {labels.tolist()}")
    return points


def _draw_points(ax: Axes, points: pd.DataFrame, y: str) -> list[Any]:
    """Each run as a filled marker at its ``y`` bytes and, given its ``output_bytes``, an open
    marker at what it delivers joined to it by a thin line; returns their legend entries."""
    delivered = "output_bytes" in points.columns and y != "output_bytes"
    entries: list[Any] = []
    for i, row in enumerate(points.itertuples(index=False)):
        colour = POINT_COLOURS[i % len(POINT_COLOURS)]
        marker = POINT_MARKERS[i % len(POINT_MARKERS)]
        x, held = float(row.prompt_len), float(getattr(row, y))
        label = str(row.label)
        words = f"{label if chr(10) in label else _wrap(label, 34)}:\nholds {format_bytes(held)}"
        if delivered:
            out = float(row.output_bytes)
            ax.plot([x, x], [held, out], color=colour, lw=0.9, zorder=5,
                    gid=f"point link: {label}")
            ax.plot([x], [out], ls="", marker=marker, ms=8, mfc="white", mec=colour, mew=1.6,
                    zorder=6, gid=f"point delivered: {label}")
            words += f", delivers {format_bytes(out)}"
        ax.plot([x], [held], ls="", marker=marker, ms=9, color=colour, mec="black", mew=0.6,
                zorder=6, gid=f"point: {label}")
        entries.append(Line2D([], [], ls="", marker=marker, ms=8, color=colour, mec="black",
                              mew=0.6, label=words))
    if delivered:
        entries.append(Line2D([], [], ls="", marker=POINT_MARKERS[0], ms=7, mfc="white",
                              mec="0.3", mew=1.4, label="open marker of the same shape,\n"
                              "joined by a line: what the run\ndelivers to the host"))
    return entries


@styled
def plot_memory_vs_prompt_length(
    df: pd.DataFrame,
    *,
    y: str = "peak_pooling_bytes",
    hardware: Any = None,
    hue: str = "policy",
    async_scheduling: bool | None = None,
    ax: Axes | None = None,
    loglog: bool = True,
    title: str | None = None,
    points: pd.DataFrame | list[dict[str, Any]] | None = None,
) -> Axes:
    """Peak memory against prompt length, one line per retention policy (log–log).

    Args:
        df: a ``tp.sweep(...)`` DataFrame (``prompt_len``, ``policy``, ``async_scheduling``,
            the ``y`` column, optionally ``corrupted``). Marked with vLLM's start-up verdict
            (``tp.sim.mark_startup_refusals``), the points vLLM would refuse to start for get
            open markers and a legend entry saying why in plain words: ○ past the model's
            context (``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` lifts it), □ any other (its KV cache),
            each drawn as if vLLM started; the full refusal is the ``refusal`` column.
        y: a bytes column: ``peak_pooling_bytes`` (default), ``peak_device_bytes``,
            ``copy_bytes``, ``host_bytes``, ...
        hardware: a hardware preset name (``tp.HARDWARE_PRESETS``), a ``Hardware`` or a byte
            count, drawn as a horizontal reference line.
        hue: the column with one line per value (default ``policy``; e.g. a ``model`` column
            added to concatenated sweeps).
        async_scheduling: which rows to draw (default: async when the sweep has both).
        ax: axes to draw into (a new figure when ``None``).
        loglog: log–log axes (zeros, e.g. offload's device bytes, are listed in the legend).
        title: axes title.
        points: single runs drawn over the curves, a DataFrame or a list of dicts, one per
            run: ``prompt_len``, ``label`` (plain words: which model, which workload) and the
            ``y`` column; with ``output_bytes`` (what the run delivers to the host) a second,
            open marker sits there, joined to the first by a thin line: what pooling holds
            against what the user gets. A run's row: ``dict(r.summary(), label="...")``.

    Returns:
        The axes.

    Raises:
        ValueError: a missing column, unknown hardware, no rows for ``async_scheduling``, or
            points without their columns or with bytes a log axis cannot draw.
        TypeError: ``df`` or ``points`` of the wrong type, or a point without a text label.

    Example:
        >>> import tokpool as tp
        >>> cfg = tp.SimConfig(hidden_size=64, max_num_batched_tokens=256)
        >>> r = tp.simulate([2048], cfg, mode="analytic")
        >>> ax = tp.plot_memory_vs_prompt_length(
        ...     tp.sweep([1024, 4096], cfg, progress=False),
        ...     points=[dict(r.summary(), label="one 2K-token prompt")])
        >>> [line.get_gid() for line in ax.lines if line.get_gid()][-1]
        'point: one 2K-token prompt'
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"df must be a tp.sweep(...) DataFrame, got {type(df).__name__}")
    missing = [c for c in ("prompt_len", hue, y) if c not in df.columns]
    if missing:
        raise ValueError(f"df lacks column(s) {missing} (prompt_len, hue={hue!r}, y={y!r}); it "
                         f"has {list(df.columns)}")
    shown_points = None if points is None else _points_frame(points, y, log=loglog)
    df, mode = _select_async(df, async_scheduling)
    ax = new_axes(ax, (9.2, 4.6))
    extra = _plot_lines(df, y, ax, hue=hue, floor_zero=loglog)
    runs = [] if shown_points is None else _draw_points(ax, shown_points, y)
    ref = _hardware_bytes(hardware)
    if ref is not None:
        highest = float(df[y].max()) if len(df) else 0.0
        if ref[1] <= HARDWARE_LINE_RANGE * highest:  # near the curves: draw it
            ax.axhline(ref[1], color="0.2", lw=1.2, ls="--", zorder=1)
            extra.append(Line2D([], [], color="0.2", lw=1.2, ls="--", label=ref[0]))
        else:  # far above: say so instead of stretching the axis to it
            extra.append(Line2D([], [], ls="", label=f"{ref[0]}:\n{ref[1] / max(highest, 1):.0f}× "
                                                     "the top curve, off the chart"))
    if "corrupted" in df.columns and df["corrupted"].any():
        extra.append(Line2D([], [], ls="", marker="x", color="black",
                            label="output corrupted (legacy)"))
    extra += _refusal_legend(df)
    if loglog:
        ax.set_xscale("log")
        ax.set_yscale("log")
        _tokens_axis(ax.xaxis)
        _bytes_axis(ax.yaxis, log=True)
    else:
        _bytes_axis(ax.yaxis, log=False)
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel(BYTE_LABELS.get(y, y.replace("_", " ")))
    handles, _ = ax.get_legend_handles_labels()
    _outside_legend(ax, handles + extra + runs)
    if title is None:
        title = f"{BYTE_LABELS.get(y, y).capitalize()} vs prompt length"
        title += f" ({mode} scheduling)" if mode else ""
    if title:
        ax.set_title(title, loc="left", fontsize=10)
    return ax


@styled
def plot_time_vs_prompt_length(
    df: pd.DataFrame,
    *,
    y: str = "est_pool_s",
    hue: str = "policy",
    async_scheduling: bool | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    forward: bool = False,
) -> Axes:
    """A time ESTIMATE against prompt length, one line per policy (log–log).

    Args:
        df: a ``tp.sweep(...)`` DataFrame.
        y: an ``est_*`` column (seconds): ``est_pool_s`` (pooling copies), ``est_d2h_s``,
            ``est_forward_s``, ``est_total_s``.
        hue: the column with one line per value (default ``policy``).
        async_scheduling: which rows to draw (default: async when the sweep has both).
        ax: axes to draw into (a new figure when ``None``).
        title: axes title (always says "estimate").
        forward: also draw the forward pass's estimate (``est_forward_s``, the same for every
            policy) as a grey reference line, to compare pooling's cost with.

    Returns:
        The axes.
    """
    missing = [c for c in ("prompt_len", hue, y) if c not in df.columns]
    if missing:
        raise ValueError(f"df lacks column(s) {missing}; it has {list(df.columns)}")
    df, mode = _select_async(df, async_scheduling)
    ax = new_axes(ax, (9.2, 4.4))
    extra = _plot_lines(df, y, ax, hue=hue, floor_zero=True, zero_label="0 s (no such copies)")
    if forward:
        if "est_forward_s" not in df.columns:
            raise ValueError("forward=True needs an est_forward_s column (a tp.sweep frame); "
                             f"df has {list(df.columns)}")
        first = df[df[hue] == df[hue].iloc[0]].sort_values("prompt_len")
        ax.plot(first["prompt_len"], first["est_forward_s"], color="0.35", lw=5, alpha=0.35,
                label="forward pass (ESTIMATE)", zorder=1)
    if "corrupted" in df.columns and df["corrupted"].any():
        extra.append(Line2D([], [], ls="", marker="x", color="black",
                            label="output corrupted (legacy)"))
    extra += _refusal_legend(df)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _tokens_axis(ax.xaxis)
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(_format_seconds))
    ax.set_xlabel("prompt length (tokens)")
    what = "time" if forward else f"{y.removeprefix('est_').removesuffix('_s')} time"
    ax.set_ylabel(f"{what}, ESTIMATE (s)")
    handles, _ = ax.get_legend_handles_labels()
    _outside_legend(ax, handles + extra)
    if title is None:
        what = {"est_pool_s": "pooling copies", "est_d2h_s": "device→host copies",
                "est_forward_s": "forward", "est_total_s": "total"}.get(y, y)
        title = f"Estimated {what} time vs prompt length (roofline ESTIMATE"
        title += f", {mode})" if mode else ")"
    if title:
        ax.set_title(title, loc="left", fontsize=10)
    return ax


def _format_seconds(v: float, _: Any = None) -> str:
    if v <= 0:
        return "0"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if v >= scale:
            return f"{v / scale:g} {unit}"
    return f"{v:.0e} s"


@styled
def plot_pooling_share_of_kv(
    df: pd.DataFrame,
    kv_cache_bytes: int,
    *,
    async_scheduling: bool | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Pooling's peak bytes as a share of the memory the KV cache has, per policy.

    The number an operator needs: above 100 % one prompt's pooling outgrows the whole KV cache
    of a rank; any share comes out of what the engine can hold at once if vLLM's activation
    reserve does not cover it (``tokpool.sim.results.kv_share.pooling_takes_kv_from``).

    Args:
        df: a ``tp.sweep(...)`` DataFrame (per-rank bytes).
        kv_cache_bytes: KV-cache memory of one rank (``tokpool.sim.vllm_rules.kv_cache.
            kv_cache_memory_bytes``, or ``config.kv_cache_blocks ×
            config.kv_block_bytes``).
        async_scheduling: which rows to draw (default: async when the sweep has both).
        ax: axes to draw into (a new figure when ``None``).
        title: axes title.

    Returns:
        The axes.

    Raises:
        ValueError: a non-positive ``kv_cache_bytes`` or a sweep without its columns.
    """
    if kv_cache_bytes <= 0:
        raise ValueError(f"kv_cache_bytes must be > 0, got {kv_cache_bytes}")
    missing = [c for c in ("prompt_len", "policy", "peak_pooling_bytes") if c not in df.columns]
    if missing:
        raise ValueError(f"df lacks column(s) {missing}; it has {list(df.columns)}")
    df, mode = _select_async(df, async_scheduling)
    df = df.assign(kv_share=100.0 * df["peak_pooling_bytes"] / kv_cache_bytes)
    ax = new_axes(ax, (9.2, 4.6))
    drawn: list[tuple[str, np.ndarray]] = []
    for policy, g in df.groupby("policy", sort=False):
        g = g.sort_values("prompt_len")
        share = g["kv_share"].to_numpy(dtype=float)
        colour = POLICY_COLOURS.get(policy)
        if not (share > 0).any():
            # nothing held on the device (offload): a log axis cannot draw 0, so say it
            ax.plot([], [], color=colour, lw=2, label=f"{policy}: 0 % (holds nothing on the "
                                                          "device)")
            continue
        same = [name for name, seen in drawn if np.array_equal(seen, share)]
        # an identical curve is drawn dashed and thinner on top, so both stay visible
        shown = np.where(share > 0, share, np.nan)
        ax.plot(g["prompt_len"], shown,
                label=str(policy) + (f" (= {', '.join(same)})" if same else ""),
                color=colour, lw=2 if not same else 1.6, ls="--" if same else "-",
                zorder=2 + len(drawn))
        _mark_refused(ax, g, shown, colour)
        drawn.append((str(policy), share))
    ax.axhline(100, color="0.2", lw=1.2, ls="--", label="the whole KV cache of a rank")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _tokens_axis(ax.xaxis)
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g} %"))
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("pooling peak / KV-cache memory")
    handles, _ = ax.get_legend_handles_labels()
    _outside_legend(ax, handles + _refusal_legend(df))
    ax.set_title(title if title is not None else
                 f"Pooling's share of the memory left for the KV cache ({mode})",
                 loc="left", fontsize=10)
    return ax
