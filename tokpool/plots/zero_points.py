"""Zeros on a log axis: drawn on the lower edge and said in the legend, never dropped.

A sweep's curve on log–log axes cannot show 0 B, and a prompt length whose value is 0 would
vanish: with the head off, a prompt that fits one step under sync scheduling is a one-shot
output, a view of the step's hidden states that pooling does not own (0 B), so the curve
would start at the first chunked length while the range reads from the shortest. Here each
zero point is a marker on the axes' lower edge, in the series' colour, and the legend says
once what it means.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

__all__ = ["ZERO_WORDS", "draw_zero_points", "zero_legend_entry"]

#: What a 0 B point means, in the legend's words.
ZERO_WORDS = ("0 B (▼ on the lower edge): a one-shot\noutput (the prompt fits one step,\n"
              "sync) is a view pooling does not own")


def draw_zero_points(ax: Axes, prompt_lens: np.ndarray, values: np.ndarray, colour: Any,
                     name: str) -> bool:
    """Mark the prompt lengths whose value is 0 on the lower edge of ``ax``.

    Args:
        ax: log–log axes the series is drawn on.
        prompt_lens: ``[n]`` prompt lengths of the series.
        values: ``[n]`` its values (bytes or seconds).
        colour: the series' colour.
        name: the series' name (the markers' label, kept out of legends, is
            ``"_zero: <name>"``).

    Returns:
        Whether any point was marked (then the caller adds ``ZERO_WORDS`` to the legend).
    """
    zero = np.asarray(values, dtype=float) <= 0
    if not zero.any() or zero.all():
        return False
    ax.plot(np.asarray(prompt_lens, dtype=float)[zero], np.zeros(int(zero.sum())),
            transform=ax.get_xaxis_transform(), ls="", marker="v", ms=7, color=colour,
            mec="black", mew=0.5, clip_on=False, zorder=5, label=f"_zero: {name}")
    return True


def zero_legend_entry(colour: Any) -> Line2D:
    """The legend entry that says what the lower edge's markers are (in one series' colour)."""
    return Line2D([], [], ls="", marker="v", ms=7, color=colour, mec="black", mew=0.5,
                  label=ZERO_WORDS)
