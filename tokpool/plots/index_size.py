"""Late-interaction storage and quality: index bytes against corpus size, and what pooling
keeps of retrieval quality for the bytes it saves."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.axes import Axes

from ._style import OKABE_ITO, at_least_ticks, format_bytes, format_tokens, new_axes, styled

__all__ = ["plot_index_bytes", "plot_pooling_tradeoff"]


def _frame(df: Any, name: str, columns: tuple[str, ...]) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{name} must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing or df.empty:
        raise ValueError(f"{name} needs the columns {list(columns)} and at least one row "
                         f"(missing {missing}, {len(df)} rows)")
    return df


def _bytes_axis(axis: Any) -> None:
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: format_bytes(v)))
    at_least_ticks(axis, ticker.LogLocator(base=4, numticks=30), log=True, unit=1024)


@styled
def plot_index_bytes(table: pd.DataFrame, *, ax: Axes | None = None,
                     title: str | None = "Index bytes against corpus size") -> Axes:
    """Index bytes against corpus tokens, one line per storage option (log–log).

    Args:
        table: ``tp.late_interaction.index_bytes_table(...)`` (columns ``corpus_tokens``,
            ``option``, ``total_bytes``).
        ax: axes to draw into (a new figure when ``None``).
        title: axes title.

    Returns:
        The axes.

    Example:
        >>> t = tp.late_interaction.index_bytes_table([10**5, 10**6, 10**7], 128, 128)
        >>> len(tp.viz.plot_index_bytes(t).get_lines())   # 6 options and the dense line
        7
    """
    df = _frame(table, "table", ("corpus_tokens", "option", "total_bytes"))
    ax = new_axes(ax, (7.2, 4.4))
    for i, (option, part) in enumerate(df.groupby("option", sort=False)):
        dense = option.startswith("dense")
        last = part.iloc[-1]
        ax.plot(part["corpus_tokens"], part["total_bytes"], marker="o", markersize=3,
                color="0.35" if dense else OKABE_ITO[i % len(OKABE_ITO)],
                linestyle="--" if dense else "-",
                label=f"{option}: {format_bytes(last['total_bytes'])} at "
                      f"{format_tokens(last['corpus_tokens'])} tokens")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: format_tokens(v)))
    at_least_ticks(ax.xaxis, ticker.LogLocator(base=4, numticks=30), log=True, unit=1024)
    _bytes_axis(ax.yaxis)
    ax.set_xlabel("corpus tokens")
    ax.set_ylabel("index bytes")
    ax.legend(loc="upper left")
    if title:
        ax.set_title(title)
    return ax


@styled
def plot_pooling_tradeoff(table: pd.DataFrame, *, metric: str = "mrr@10",
                          bytes_column: str = "bytes_fp16", ax: Axes | None = None,
                          title: str | None = "Retrieval quality against index bytes") -> Axes:
    """Each method's quality (with its confidence interval) against the bytes it stores.

    Args:
        table: ``tp.late_interaction.retrieval_quality(...)`` (``method``, the metric and its
            ``_low`` / ``_high``, ``bytes_column``).
        metric: the quality column (``"mrr@10"``, ``"recall@5"``, ...).
        bytes_column: ``"bytes_fp16"`` or ``"bytes_plaid"``.
        ax: axes to draw into; title: axes title.

    Returns:
        The axes (log bytes on x; the bars are the bootstrap intervals).
    """
    df = _frame(table, "table", ("method", metric, f"{metric}_low", f"{metric}_high",
                                 bytes_column))
    df = df[df[bytes_column].notna()]
    if df.empty:
        raise ValueError(f"no method has {bytes_column!r} (the dense row has no PLAID index); "
                         "use bytes_column='bytes_fp16'")
    ax = new_axes(ax, (6.8, 4.2))
    x = df[bytes_column].to_numpy(dtype=float)
    y = df[metric].to_numpy(dtype=float)
    err = np.vstack([y - df[f"{metric}_low"].to_numpy(dtype=float),
                     df[f"{metric}_high"].to_numpy(dtype=float) - y])
    ax.errorbar(x, y, yerr=err, fmt="none", ecolor="0.55", elinewidth=1, capsize=3)
    late = ~df["method"].str.startswith("dense").to_numpy()
    ax.plot(x[late], y[late], color=OKABE_ITO[0], marker="o", label="MaxSim (pooled)")
    if (~late).any():
        ax.plot(x[~late], y[~late], color=OKABE_ITO[1], marker="s", linestyle="none",
                markersize=7, label="dense, one vector per document")
    names = df["method"].to_numpy()
    for k, i in enumerate(np.argsort(x)):  # alternate above / below along x: neighbours overlap
        ax.annotate(f"{names[i]}\n{format_bytes(x[i])}", (x[i], y[i]),
                    xytext=(6, 6 if k % 2 else -22), textcoords="offset points", fontsize=7)
    ax.set_xscale("log")
    _bytes_axis(ax.xaxis)
    ax.set_xlim(x.min() / 2, x.max() * 4)
    ax.set_xlabel(f"index bytes ({bytes_column.removeprefix('bytes_')})")
    ax.set_ylabel(f"{metric} (bootstrap 95 % CI)")
    ax.legend(loc="upper left")
    if title:
        ax.set_title(title)
    return ax
