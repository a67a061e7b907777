"""Step rewards of a process reward model: one bar per step, threshold, first errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .._args import items, number, whole
from ._style import OKABE_ITO, as_numpy, check_cmap, new_axes, styled

PRED_COLOUR = OKABE_ITO[3]  # vermillion
#: Widest step-reward chart (inches); more steps get narrower bars, not a wider strip.
MAX_WIDTH_IN = 12.0
TRUE_COLOUR = "#111111"


def first_below(rewards: Sequence[float] | np.ndarray, threshold: float) -> int:
    """Index of the first reward below ``threshold``; ``-1`` when every step passes."""
    below = np.flatnonzero(np.asarray(rewards, dtype=float) < threshold)
    return int(below[0]) if below.size else -1


def _wrap(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


@styled
def plot_step_rewards(
    rewards: Any,
    *,
    threshold: float = 0.5,
    predicted_first_error: int | None = None,
    true_first_error: int | None = None,
    step_labels: Sequence[bool | int | None] | None = None,
    step_texts: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = "Step rewards",
    cmap: str = "viridis",
) -> Axes:
    """One bar per reasoning step, with the threshold and the first errors marked.

    Rewards are probabilities, so bars are coloured with ``viridis`` on a fixed ``[0, 1]``.
    The predicted first error (first reward below the threshold) is a dashed vermillion line;
    the true first error is a black outline; ``-1`` ("no error") is written in the legend.

    Args:
        rewards: ``[n_steps]`` rewards in ``[0, 1]``.
        threshold: rewards below it count as errors.
        predicted_first_error: override the predicted index (default: first reward below
            ``threshold``, ``-1`` if none).
        true_first_error: the labelled first error (``-1`` for a correct solution), if known.
        step_labels: per-step correctness (truthy = correct), drawn as ✓/✗ above the bars;
            ``None`` for a step without a label.
        step_texts: step strings, shortened into the tick labels.
        ax: axes to draw into (a new figure when ``None``).
        title: axes title.
        cmap: colormap for the bars.

    Returns:
        The axes.

    Raises:
        ValueError: ``step_labels``/``step_texts`` do not have one entry per step.
    """
    r = as_numpy(rewards, name="rewards", ndim=1, finite=True, empty=False)
    n = r.shape[0]
    if ((r < 0) | (r > 1)).any():
        raise ValueError(f"rewards must be probabilities in [0, 1], got {r[(r < 0) | (r > 1)][:3]}"
                         " (pass the rewards, not the logits)")
    number("threshold", threshold)
    for name, seq in (("step_labels", step_labels), ("step_texts", step_texts)):
        if seq is not None:
            seq = items(name, seq, what="a list, one entry per step")
            if len(seq) != n:
                raise ValueError(f"{name} has {len(seq)} entries for {n} rewards; pass one per "
                                 "step")
    for name, step in (("predicted_first_error", predicted_first_error),
                       ("true_first_error", true_first_error)):
        whole(name, step, minimum=-1, maximum=n - 1, optional=True,
              why=f" (-1: no error; else one of the {n} steps)")
    check_cmap(cmap)
    pred = first_below(r, threshold) if predicted_first_error is None else predicted_first_error
    # wide enough for a bar per step, capped: 40 steps stay a readable chart, not a strip
    ax = new_axes(ax, (min(MAX_WIDTH_IN, max(7.0, 0.75 * n + 4.2)), 3.8))
    many = n > 16
    colours = mpl.colormaps[cmap](np.clip(r, 0.0, 1.0))
    x = np.arange(n)
    ax.bar(x, r, color=colours, width=0.7, zorder=2)
    ax.axhline(threshold, color="0.35", ls=":", lw=1.2, zorder=3)
    handles: list[Any] = [Line2D([], [], color="0.35", ls=":", label=f"threshold {threshold:g}")]
    if pred >= 0:
        ax.axvline(pred, color=PRED_COLOUR, ls="--", lw=1.6, zorder=4)
        handles.append(
            Line2D([], [], color=PRED_COLOUR, ls="--", label=f"predicted first error: step {pred}")
        )
    else:
        handles.append(Line2D([], [], color=PRED_COLOUR, ls="--",
                              label="predicted first error: none (−1)"))
    if true_first_error is not None:
        if true_first_error >= 0:
            ax.bar([true_first_error], [1.0], width=0.86, fill=False, edgecolor=TRUE_COLOUR,
                   lw=1.8, zorder=5)
            label = f"true first error: step {true_first_error}"
        else:
            label = "true first error: none (−1)"
        handles.append(Patch(fill=False, edgecolor=TRUE_COLOUR, lw=1.8, label=label))
    if step_labels is not None:
        for i, ok in enumerate(step_labels):
            if ok is None:  # a step without a label (edited since it was labelled)
                continue
            ax.text(i, 1.03, "✓" if ok else "✗", ha="center", va="bottom",
                    fontsize=8 if many else 11,
                    color=OKABE_ITO[2] if ok else OKABE_ITO[3], fontweight="bold")
        handles.append(Line2D([], [], ls="", label="✓ / ✗: step labelled correct / wrong"))
    ax.set_ylim(0, 1.12 if step_labels is not None else 1.02)
    ax.set_xlim(-0.6, n - 0.4)
    ticks = [f"{i}" for i in range(n)]
    if step_texts is not None:
        ticks = [f"{i}: {_wrap(t, 24)}" for i, t in enumerate(step_texts)]
        ax.set_xticks(x, ticks, rotation=30 if not many else 90, ha="right", fontsize=7.5,
                      rotation_mode="anchor")
    elif n > 30:  # two-digit labels closer than they are wide: every other one
        ax.set_xticks(x, minor=True)
        ax.set_xticks(x[::2], ticks[::2])
    else:
        ax.set_xticks(x, ticks)
    ax.set_xlabel("step")
    ax.set_ylabel("reward (P(step correct))")
    ax.grid(axis="x", visible=False)
    if many:  # below the bars: the width goes to the steps
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2)
    else:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if title:
        ax.set_title(title)
    return ax
