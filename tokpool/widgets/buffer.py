"""The reused buffer, one engine step at a time: ``render_buffer_reuse`` and its step slider.

``render_buffer_reuse(result, step)`` is the pure part (a ``View``: the panel as PNG, one
sentence per view in HTML); ``buffer_reuse_explorer(result)`` is a slider over the run's engine
steps, so a class can walk the run step by step.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import ipywidgets as W

from .._args import whole
from .._text import format_range
from ..plots import figure_png
from ..plots._style import styled
from ..plots.buffer_reuse import buffer_reuse_panels, plot_buffer_reuse
from .base import Explorer
from .view import View

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..sim import SimResult

__all__ = ["BufferReuseExplorer", "buffer_reuse_explorer", "render_buffer_reuse"]


def _sentences(result: SimResult, step: int) -> list[str]:
    """What the panel shows, in words: one sentence per view kept during ``step``."""
    panel = buffer_reuse_panels(result)[step]
    out = []
    for v in panel.views:
        what = (f"request {v.request}'s view of tokens {format_range(v.token0, v.token1)} "
                f"(rows {format_range(v.row0, v.row1)}, kept in step {v.kept_step})")
        if v.rewritten_now:
            rows = ", ".join(format_range(a, b) for a, b, *_ in v.rewritten_now)
            what += f": step {step} wrote other tokens into rows {rows}, and it still points there"
        elif v.rewritten_before:
            what += f": its rows were rewritten in step {v.rewritten_before[0][4]}"
        else:
            what += ": its rows are still intact"
        if v.read_step == step:
            what += (" — read now, so the output is corrupted" if v.corrupted_at_read
                     else " — read now, intact by luck (no write reached its rows)")
        out.append(what + ".")
    return out


@styled
def render_buffer_reuse(result: SimResult, step: int) -> View:
    """One engine step of ``plot_buffer_reuse`` as a ``View``.

    Args:
        result: a ``tp.simulate(...)`` result (tensor or analytic mode).
        step: the engine step to show.

    Returns:
        ``View``: ``png`` = the panel; ``html`` = one sentence per kept view;
        ``data['panel']`` = the ``BufferPanel`` drawn.

    Raises:
        TypeError, ValueError: as ``plot_buffer_reuse``.
    """
    panels = buffer_reuse_panels(result)
    whole("step", step, minimum=0, maximum=len(panels) - 1,
          why=f" (the run has engine steps 0 to {len(panels) - 1})")

    def draw() -> Figure:
        return plot_buffer_reuse(result, step=step).figure

    png = figure_png(draw())
    sentences = _sentences(result, step) or ["pooling keeps no view of the buffer in this step."]
    body = "".join(f"<li>{html.escape(s, quote=False)}</li>" for s in sentences)
    text = (f'<div style="font-family:sans-serif"><b>Engine step {step} of '
            f"{len(panels) - 1}</b> (one pass of the engine's loop: schedule, write the buffer, "
            f'pool, copy out)<ul style="margin:4px 0">{body}</ul></div>')
    return View(html=text, png=png, redraw=draw, data={"panel": panels[step]},
                settings={"step": step, "policy": result.config.policy,
                          "async_scheduling": result.config.async_scheduling})


class BufferReuseExplorer(Explorer):
    """A step slider over one run's buffer: walk the reuse step by step.

    Attributes:
        step: ``IntSlider`` over the run's engine steps.
        result: the ``SimResult`` shown.
        view: the last ``View``.
    """

    def __init__(self, result: SimResult, *, step: int = 0) -> None:
        n = len(buffer_reuse_panels(result))  # refuses what is not a stepped SimResult
        whole("step", step, minimum=0, maximum=n - 1,
              why=f" (the run has engine steps 0 to {n - 1})")
        self.result = result
        self.step = W.IntSlider(value=step, min=0, max=n - 1, continuous_update=False,
                                description="engine step", style={"description_width":
                                                                  "initial"},
                                tooltip=f"the engine step shown, 0 to {n - 1} (one pass of "
                                        "the engine's loop)")
        super().__init__([self.step])
        self._watch(self.step)
        self.update()

    def render(self) -> View:
        return render_buffer_reuse(self.result, self.step.value)


def buffer_reuse_explorer(result: SimResult, *, step: int = 0) -> BufferReuseExplorer:
    """Walk a run's reused buffer one engine step at a time (a slider over its steps).

    Args:
        result: a ``tp.simulate(...)`` result (tensor or analytic mode).
        step: the step shown first.

    Returns:
        The explorer; ``ex.step.value = 2`` shows step 2.

    Example:
        >>> cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=8, policy="legacy")
        >>> ex = tp.viz.buffer_reuse_explorer(tp.simulate([20], cfg))
        >>> ex.step.value = 2
        >>> "step 2 wrote other tokens into rows 0–3" in ex.html.value
        True
    """
    return BufferReuseExplorer(result, step=step)
