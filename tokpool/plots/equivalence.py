"""Chunked prefill vs the full forward: per-token error by position, one line per dtype."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from ._style import OKABE_ITO, new_axes, styled

_METRIC_LABELS = {
    "max_abs_err": "max |chunked − full| per token",
    "max_abs_error": "max |chunked − full| per token",
    "rel_rms": "relative RMS error per token",
    "rel_rms_error": "relative RMS error per token",
    "cosine": "cosine similarity, chunked vs full",
    "cos_sim": "cosine similarity, chunked vs full",
    "one_minus_cosine": "1 − cosine similarity",
}


@styled
def plot_chunked_error(
    df: pd.DataFrame,
    *,
    metric: str = "max_abs_err",
    x: str = "position",
    hue: str = "dtype",
    chunk_size: int | None = None,
    ax: Axes | None = None,
    logy: bool | None = None,
    title: str | None = "Chunked prefill vs full forward, per token",
) -> Axes:
    """Per-token difference between chunked and full forward, by position, one line per dtype.

    Args:
        df: ``pandas.DataFrame`` with one row per token (and dtype, chunk size), e.g. from
            ``tp.models.compare_chunked``; needs columns ``x``, ``hue`` and ``metric``.
        metric: column to plot (an error, or a cosine similarity).
        x: position column.
        hue: column giving one line each (the dtype).
        chunk_size: keep rows with this ``chunk_size`` (when the column exists) and draw the
            chunk boundaries as faint vertical lines.
        ax: axes to draw into (a new figure when ``None``).
        logy: log y axis (default: on for positive errors, off for cosine similarity).
        title: axes title.

    Returns:
        The axes.

    Raises:
        ValueError: a needed column is missing (the message lists the columns there are).
    """
    missing = [c for c in (x, hue, metric) if c not in df.columns]
    if missing:
        raise ValueError(f"df lacks column(s) {missing}; it has {list(df.columns)}")
    if chunk_size is not None and "chunk_size" in df.columns:
        df = df[df["chunk_size"] == chunk_size]
        if df.empty:
            raise ValueError(f"no rows with chunk_size == {chunk_size}")
    ax = new_axes(ax, (7.0, 3.6))
    is_cos = "cos" in metric and "minus" not in metric
    log = logy if logy is not None else not is_cos
    values = df[metric].to_numpy(dtype=float)
    positive = values[values > 0]
    all_zero = not is_cos and bool(values.size) and not (values != 0).any()
    if all_zero:
        log = False  # nothing to put on a log axis: draw the zeros as they are, and say so
    # Exact zeros (e.g. the first chunk, computed identically) would vanish on a log axis: draw
    # them on a floor a decade below the smallest non-zero error and say so.
    floor = 10 ** (np.floor(np.log10(positive.min())) - 1) if positive.size else 1e-12
    for i, (name, group) in enumerate(df.groupby(hue, sort=True)):
        g = group.sort_values(x)
        y = g[metric].to_numpy(dtype=float)
        if log:
            y = np.maximum(y, floor)
        ax.plot(g[x], y, marker="o", ms=2.5, lw=1.1, color=OKABE_ITO[i % len(OKABE_ITO)],
                label=str(name))
    if log and (values <= 0).any():
        ax.axhline(floor, color="0.5", lw=0.6)
        ax.annotate("exactly 0", (0, floor), xycoords=("axes fraction", "data"),
                    xytext=(2, 3), textcoords="offset points", fontsize=7.5, color="0.4")
    if chunk_size:
        top = df[x].max()
        for b in range(chunk_size, int(top) + 1, chunk_size):
            ax.axvline(b - 0.5, color="0.6", lw=0.6, ls=":", zorder=0)
        ax.plot([], [], color="0.6", lw=0.6, ls=":", label=f"chunk boundary (every {chunk_size})")
    if log:
        ax.set_yscale("log")
    if all_zero:
        ax.set_ylim(-1.0, 1.0)
        ax.text(0.5, 0.62, "every token identical, bit for bit: the difference is exactly 0\n"
                "(chunked prefill computes the same numbers as the full forward here)",
                transform=ax.transAxes, ha="center", va="center", fontsize=9, color="0.25")
    ax.set_xlabel("token position")
    ax.set_ylabel(_METRIC_LABELS.get(metric, metric))
    ax.legend(title=hue, loc="best")
    if title:
        ax.set_title(title)
    return ax
