"""Step-reward view: a PRM's reward per step as bars and as coloured step text."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from ..plots import figure_png, plot_step_rewards, token_html
from ..plots._style import as_numpy
from ..plots.rewards import first_below
from .view import View


def render_step_rewards(
    steps: Sequence[str],
    rewards: Any,
    *,
    threshold: float = 0.5,
    problem: str | None = None,
    true_first_error: int | None = None,
    step_labels: Sequence[bool | int] | None = None,
) -> View:
    """Bars of the step rewards plus the solution's steps coloured by reward.

    Args:
        steps: the step texts, ``n`` of them.
        rewards: ``[n]`` rewards in ``[0, 1]``.
        threshold: rewards below it count as errors (the predicted first error is the first).
        problem: the question, shown above the steps.
        true_first_error: the labelled first error (``-1``: the solution is correct), if known.
        step_labels: per-step correctness labels, if known.

    Returns:
        ``View`` with ``html`` (problem, coloured steps, verdict), ``png`` (the bar chart) and
        ``data`` (``rewards``, ``predicted_first_error``).

    Raises:
        ValueError: ``steps`` and ``rewards`` differ in length.
    """
    r = as_numpy(rewards, name="rewards", ndim=1)
    if len(steps) != r.shape[0]:
        raise ValueError(f"got {len(steps)} steps but {r.shape[0]} rewards; one reward per step")
    predicted = first_below(r, threshold)
    ax = plot_step_rewards(r, threshold=threshold, true_first_error=true_first_error,
                           step_labels=step_labels, title="Step rewards (probability correct)")
    png = figure_png(ax.figure)
    shown = [f"[{i}] {s.strip()}\n" for i, s in enumerate(steps)]
    parts = []
    if problem:
        parts.append(
            '<div style="font-family:sans-serif;margin-bottom:6px"><b>Problem.</b> '
            f"{html.escape(problem)}</div>"
        )
    parts.append(token_html(shown, r, vmin=0.0, vmax=1.0, label="reward", legend=True))
    verdict = (f"predicted first error: step {predicted}" if predicted >= 0
               else "predicted: every step passes (−1)")
    if true_first_error is not None:
        truth = (f"labelled first error: step {true_first_error}" if true_first_error >= 0
                 else "labelled: correct solution (−1)")
        mark = "✓ match" if predicted == true_first_error else "✗ mismatch"
        verdict += f" · {truth} · {mark}"
    parts.append(
        f'<div style="font-family:sans-serif;margin-top:4px">{html.escape(verdict)} '
        f"(threshold {threshold:.2f})</div>"
    )
    return View(html="".join(parts), png=png,
                data={"rewards": r, "predicted_first_error": predicted})
