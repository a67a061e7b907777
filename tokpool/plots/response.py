"""The answer's memory: what vLLM's API process holds to build each encoding format's response,
against prompt length, next to the device's pooling peak (``tp.sim.response_sweep``)."""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.axes import Axes

from ._style import OKABE_ITO, new_axes, styled
from .memory import _bytes_axis, _tokens_axis


@styled
def plot_response_memory(frame: pd.DataFrame, *, device: Any = None, ax: Axes | None = None,
                         title: str | None = None) -> Axes:
    """The API process's peak host bytes per encoding format against prompt length (log–log),
    an estimate's stated error as a band, and the device's pooling peak (dashed) when given.

    Args:
        frame: ``tp.sim.response_sweep(...)``'s frame (``prompt_len``, ``encoding_format``,
            ``peak_host_bytes``, ``relative_error``).
        device: the device's pooling peak per prompt length (a ``pandas.Series`` indexed by
            prompt length, or a dict), drawn for comparison.
        ax: axes to draw into (a new figure when ``None``).
        title: axes title.

    Returns:
        The axes.

    Raises:
        ValueError: a frame without those columns.
    """
    need = {"prompt_len", "encoding_format", "peak_host_bytes", "relative_error"}
    if not isinstance(frame, pd.DataFrame) or not need <= set(frame.columns):
        raise ValueError(f"frame must be tp.sim.response_sweep's DataFrame with columns "
                         f"{sorted(need)}")
    ax = new_axes(ax, (7.0, 4.2))
    for i, (fmt, part) in enumerate(frame.groupby("encoding_format", sort=False)):
        part = part.sort_values("prompt_len")
        colour = OKABE_ITO[i % len(OKABE_ITO)]
        x, y, err = part["prompt_len"], part["peak_host_bytes"], part["relative_error"]
        label = f"{fmt}" + (" (ESTIMATE, band: stated error)" if err.max() > 0 else " (exact)")
        ax.plot(x, y, marker="o", ms=3, color=colour, label=label)
        if err.max() > 0:
            ax.fill_between(x, y * (1 - err), y * (1 + err), color=colour, alpha=0.15, lw=0)
    if device is not None:
        dev = pd.Series(device).sort_index()
        ax.plot(dev.index, dev.values, ls="--", color="black", label="device: pooling peak")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _tokens_axis(ax.xaxis)
    _bytes_axis(ax.yaxis, log=True)
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("API process peak (host bytes)")
    ax.legend(fontsize="small")
    if title is not None:
        ax.set_title(title)
    return ax
