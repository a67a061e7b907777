"""Step rewards of a process reward model: one bar per step, threshold, first errors."""

from __future__ import annotations

import io
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
    ax = new_axes(ax, chart_size(n))
    many = n > 16
    colours = mpl.colormaps[cmap](np.clip(r, 0.0, 1.0))
    x = np.arange(n)
    ax.bar(x, r, color=colours, width=0.7, zorder=2)
    ax.axhline(threshold, color="0.35", ls=":", lw=1.2, zorder=3, gid=THRESHOLD_GID)
    ax.axvline(max(pred, 0), color=PRED_COLOUR, ls="--", lw=1.6, zorder=4, visible=pred >= 0,
               gid=PREDICTED_GID)
    if true_first_error is not None and true_first_error >= 0:
        ax.bar([true_first_error], [1.0], width=0.86, fill=False, edgecolor=TRUE_COLOUR,
               lw=1.8, zorder=5, gid=TRUE_GID)
    if step_labels is not None:
        for i, ok in enumerate(step_labels):
            if ok is None:  # a step without a label (edited since it was labelled)
                continue
            ax.text(i, 1.03, "✓" if ok else "✗", ha="center", va="bottom",
                    fontsize=8 if many else 11,
                    color=OKABE_ITO[2] if ok else OKABE_ITO[3], fontweight="bold")
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
    _legend(ax, threshold, pred, true_first_error=true_first_error,
            labelled=step_labels is not None, n_steps=n)
    if title:
        ax.set_title(title)
    return ax


#: ``gid`` of the artists a threshold moves (``StepRewardChart`` finds them by it).
THRESHOLD_GID, PREDICTED_GID, TRUE_GID = ("tokpool-threshold", "tokpool-predicted",
                                          "tokpool-true-first-error")


def chart_size(n_steps: int) -> tuple[float, float]:
    """Figure size (inches) of the step-reward chart of ``n_steps`` steps."""
    return (min(MAX_WIDTH_IN, max(7.0, 0.75 * n_steps + 4.2)), 3.8)


def _legend(ax: Axes, threshold: float, pred: int, *, true_first_error: int | None,
            labelled: bool, n_steps: int) -> Any:
    """The chart's legend for ``threshold`` and the predicted first error ``pred``."""
    handles: list[Any] = [Line2D([], [], color="0.35", ls=":", label=f"threshold {threshold:g}")]
    handles.append(Line2D([], [], color=PRED_COLOUR, ls="--",
                          label=f"predicted first error: step {pred}" if pred >= 0
                          else "predicted first error: none (−1)"))
    if true_first_error is not None:
        label = (f"true first error: step {true_first_error}" if true_first_error >= 0
                 else "true first error: none (−1)")
        handles.append(Patch(fill=False, edgecolor=TRUE_COLOUR, lw=1.8, label=label))
    if labelled:
        handles.append(Line2D([], [], ls="", label="✓ / ✗: step labelled correct / wrong"))
    if n_steps > 16:  # below the bars: the width goes to the steps
        return ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.18),
                         ncol=2)
    return ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0))


class StepRewardChart:
    """``plot_step_rewards`` of one solution, drawn once; a new threshold repaints only the
    threshold line, the predicted first error and the legend.

    The bars, labels and ticks do not depend on the threshold, and drawing them is most of the
    chart's time. The first ``png`` lays the chart out (with the widest legend it can have),
    draws it without the threshold's artists and keeps those pixels (matplotlib's blitting);
    each ``png`` restores them and draws the threshold's artists over them, the labelled
    first error's outline on top, as ``plot_step_rewards`` stacks them.

    Args:
        rewards: ``[n_steps]`` rewards in ``[0, 1]``.
        true_first_error, step_labels, step_texts, title: as for ``plot_step_rewards``.

    Example:
        >>> chart = StepRewardChart([0.9, 0.2, 0.7], true_first_error=1)
        >>> chart.png(0.5)[1:4] == b"PNG" and chart.predicted(0.5) == 1
        True
    """

    def __init__(self, rewards: Any, *, true_first_error: int | None = None,
                 step_labels: Sequence[bool | int | None] | None = None,
                 step_texts: Sequence[str] | None = None,
                 title: str | None = "Step rewards") -> None:
        self.rewards = as_numpy(rewards, name="rewards", ndim=1, finite=True, empty=False)
        self._kw = {"true_first_error": true_first_error, "step_labels": step_labels,
                    "step_texts": step_texts, "title": title}
        self._fig: Any = None
        self._background: Any = None

    def predicted(self, threshold: float) -> int:
        """The predicted first error at ``threshold`` (``-1``: every step passes)."""
        return first_below(self.rewards, threshold)

    def figure(self, threshold: float) -> Any:
        """A fresh matplotlib figure of the chart at ``threshold`` (for vector export)."""
        return plot_step_rewards(self.rewards, threshold=threshold, **self._kw).figure

    def _prepare(self) -> Any:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=chart_size(len(self.rewards)), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        # laid out with the longest legend ("none (−1)"; 1/3 is "0.333333", the longest a
        # threshold is written), then frozen
        plot_step_rewards(self.rewards, threshold=1 / 3, predicted_first_error=-1, ax=ax,
                          **self._kw)
        fig.set_dpi(200)
        fig.canvas.draw()
        fig.set_layout_engine("none")
        for artist in self._moving(ax):
            artist.set_visible(False)
        fig.canvas.draw()
        self._background = fig.canvas.copy_from_bbox(fig.bbox)
        self._fig = fig
        return fig

    @staticmethod
    def _moving(ax: Axes) -> list[Any]:
        lines = [a for a in ax.lines if a.get_gid() in (THRESHOLD_GID, PREDICTED_GID)]
        outline = [a for a in ax.patches if a.get_gid() == TRUE_GID]
        return [*lines, *outline, *([ax.get_legend()] if ax.get_legend() else [])]

    @styled
    def png(self, threshold: float) -> bytes:
        """PNG bytes (200 dpi) of the chart at ``threshold``."""
        from PIL import Image  # on use: only the explorer's repaint encodes the canvas itself

        number("threshold", threshold)
        fig = self._prepare() if self._fig is None else self._fig
        ax = fig.axes[0]
        pred = self.predicted(threshold)
        canvas = fig.canvas
        canvas.restore_region(self._background)
        legend = ax.get_legend()
        if legend is not None:
            legend.remove()
        _legend(ax, threshold, pred, true_first_error=self._kw["true_first_error"],
                labelled=self._kw["step_labels"] is not None, n_steps=len(self.rewards))
        for artist in self._moving(ax):
            gid = artist.get_gid()
            if gid == THRESHOLD_GID:
                artist.set_ydata([threshold, threshold])
            elif gid == PREDICTED_GID:
                artist.set_xdata([max(pred, 0)] * 2)
                artist.set_visible(pred >= 0)
                if pred < 0:
                    continue
            artist.set_visible(True)
        for artist in sorted(self._moving(ax), key=lambda a: a.get_zorder()):
            if artist.get_visible():
                ax.draw_artist(artist)
        width, height = canvas.get_width_height()
        buf = io.BytesIO()
        Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0,
                         1).save(buf, format="png", dpi=(fig.dpi, fig.dpi))
        return buf.getvalue()
