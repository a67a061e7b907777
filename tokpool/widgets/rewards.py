"""Step-reward view: a PRM's reward per step as bars and as coloured step text."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..plots._style import as_numpy
from ..plots.rewards import StepRewardChart, first_below
from ..plots.token_text import _legend_html, _text_colour, colour_scale
from .view import View

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _same(a: str, b: str) -> bool:
    return a.split() == b.split()  # whitespace does not change a step


def carry_labels(original: Sequence[str], steps: Sequence[str], *,
                 true_first_error: int | None, step_labels: Sequence[bool] | None
                 ) -> tuple[int | None, list[bool | None] | None, str]:
    """The labels of ``original`` carried over to an edited solution ``steps``.

    A step's label follows its text: an unchanged step keeps its label wherever it now is, an
    edited or new one has none (``None``). The labelled first error stays (the outline) while
    it and every step before it are unchanged — edits after it do not move it; an edit at or
    before it, or an edit to a correct solution (other than dropping its last steps), drops
    it, and the note says why.

    Returns:
        ``(true_first_error, step_labels, note)`` for ``steps``; ``note`` is "" when nothing
        was dropped.

    Example:
        >>> carry_labels(["a", "b", "c"], ["a", "b", "c edited"], true_first_error=1,
        ...              step_labels=[True, False, False])
        (1, [True, False, None], 'step 2 was edited: it has no label')
    """
    labels: list[bool | None] | None = None
    notes: list[str] = []
    if step_labels is not None:
        free = list(range(len(original)))
        labels = []
        for step in steps:
            match = next((i for i in free if _same(original[i], step)), None)
            if match is not None:
                free.remove(match)
            labels.append(None if match is None else bool(step_labels[match]))
        unlabelled = [j for j, v in enumerate(labels) if v is None]
        if unlabelled:
            which = ", ".join(str(j) for j in unlabelled[:6]) + (" …" if len(unlabelled) > 6
                                                                  else "")
            notes.append(f"step{'s' if len(unlabelled) > 1 else ''} {which} "
                         f"{'were' if len(unlabelled) > 1 else 'was'} edited: "
                         f"{'they have' if len(unlabelled) > 1 else 'it has'} no label")
    truth = true_first_error
    if truth is not None:
        if truth >= 0:
            kept = (len(steps) > truth
                    and all(_same(a, b) for a, b in zip(original[:truth + 1],
                                                        steps[:truth + 1], strict=True)))
            if not kept:
                notes.insert(0, f"the labelled first error (step {truth}) no longer applies: "
                                "it or a step before it was edited")
                truth = None
        else:
            kept = len(steps) <= len(original) and all(
                _same(a, b) for a, b in zip(original, steps, strict=False))
            if not kept:
                notes.insert(0, "the solution was labelled correct (−1); an edited one may "
                                "not be")
                truth = None
    return truth, labels, "; ".join(notes)


def render_step_rewards(
    steps: Sequence[str],
    rewards: Any,
    *,
    threshold: float = 0.5,
    problem: str | None = None,
    true_first_error: int | None = None,
    step_labels: Sequence[bool | int | None] | None = None,
    note: str = "",
    chart: StepRewardChart | None = None,
) -> View:
    """Bars of the step rewards plus the solution's steps coloured by reward.

    Args:
        steps: the step texts, ``n`` of them.
        rewards: ``[n]`` rewards in ``[0, 1]``.
        threshold: rewards below it count as errors (the predicted first error is the first).
        problem: the question, shown above the steps.
        true_first_error: the labelled first error (``-1``: the solution is correct), if known.
        step_labels: per-step correctness labels, if known (``None`` for a step without one).
        note: a sentence shown under the verdict (e.g. what an edit did to the labels).
        chart: the ``StepRewardChart`` of these rewards and labels, if the caller keeps one
            (a new threshold then repaints only its lines and legend; the explorer does).

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
    if chart is None:
        chart = step_reward_chart(r, true_first_error=true_first_error, step_labels=step_labels)
    elif not np.array_equal(chart.rewards, r):
        raise ValueError("chart was drawn for other rewards; pass the chart of these rewards "
                         "(step_reward_chart(rewards, ...)) or none")

    def draw() -> Figure:
        return chart.figure(threshold)

    png = chart.png(threshold)
    parts = []
    if problem:
        parts.append(
            '<div style="font-family:sans-serif;margin-bottom:6px"><b>Problem.</b> '
            f"{html.escape(problem)}</div>"
        )
    parts.append(steps_html(steps, r))
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
    if note:
        parts.append('<div class="tokpool-note" style="font-family:sans-serif;color:#0057a0;'
                     f'font-size:12px">ⓘ {html.escape(note)}</div>')
    table = pd.DataFrame({"step": range(len(steps)), "text": list(steps), "reward": r})
    if step_labels is not None:
        table["label"] = list(step_labels)
    settings = {"threshold": threshold, "steps": len(steps),
                "true_first_error": true_first_error, "problem": problem}
    return View(html="".join(parts), png=png, table=table, settings=settings, redraw=draw,
                data={"rewards": r, "predicted_first_error": predicted})


def step_reward_chart(rewards: Any, *, true_first_error: int | None = None,
                      step_labels: Sequence[bool | int | None] | None = None
                      ) -> StepRewardChart:
    """The chart ``render_step_rewards`` draws, to keep while only the threshold moves."""
    return StepRewardChart(rewards, true_first_error=true_first_error, step_labels=step_labels,
                           title="Step rewards (probability correct)")


def steps_html(steps: Sequence[str], rewards: Any) -> str:
    """The steps as numbered lines of plain text, each on a background coloured by its reward.

    Unlike ``token_html`` (which marks every space and newline so that a token of whitespace
    shows), a step is prose: its whitespace stays as it is, long steps wrap.

    Args:
        steps: ``n`` step texts.
        rewards: ``[n]`` rewards in ``[0, 1]`` (``viridis``, fixed from 0 to 1).

    Returns:
        Self-contained HTML (inline CSS, every step escaped) with a colour legend.
    """
    r = as_numpy(rewards, name="rewards", ndim=1)
    scale = colour_scale(r, vmin=0.0, vmax=1.0)
    rows = []
    for i, (step, value, colour) in enumerate(zip(steps, r, scale.rgba(r), strict=True)):
        hexc = "#{:02x}{:02x}{:02x}".format(*(round(255 * c) for c in colour[:3]))
        rows.append(
            '<div style="display:flex;gap:8px;align-items:baseline;margin:2px 0">'
            f'<span style="font-family:sans-serif;color:#555;min-width:5.5em">step {i} · '
            f"{value:.2f}</span>"
            f'<span style="background:{hexc};color:{_text_colour(colour)};padding:1px 6px;'
            'border-radius:3px;white-space:pre-wrap;overflow-wrap:anywhere;font-family:'
            f'sans-serif">{html.escape(" ".join(step.split()))}</span></div>'
        )
    return ('<div class="tokpool-steps" style="max-width:100%">' + "".join(rows)
            + _legend_html(scale, "reward") + "</div>")
