"""Step-reward view: a PRM's reward per step as bars and as coloured step text.

``render_step_rewards`` is pure (rewards in, ``View`` out); ``step_reward_explorer`` wires a
threshold slider and editable problem and steps to it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import ipywidgets as W
import numpy as np
import pandas as pd

from .. import _args as checks
from ..plots._style import as_numpy
from ..plots.rewards import StepRewardChart, first_below
from ..plots.token_text import _legend_html, _text_colour, colour_scale
from .base import Explorer, _slider_layout
from .view import View

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..prm import ProcessRewardModel


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


#: The step-reward explorer scores at most this many steps ...
MAX_STEPS = 40
#: ... and this many characters of problem and steps together (one PRM forward pass).
MAX_SOLUTION_CHARS = 12_000


def _check_reward_inputs(prm: Any, problem: Any, steps: Any, true_first_error: Any,
                         step_labels: Any) -> None:
    """``step_reward_explorer``'s arguments, each named with what it must be."""
    if not callable(getattr(prm, "score", None)):
        hint = (f"; load it first: tp.step_reward_explorer(tp.load_prm({prm!r}), ...)"
                if isinstance(prm, str) else "")
        raise TypeError(f"prm must be a process reward model with score(problem, steps) "
                        f"(tp.load_prm(...)), got {type(prm).__name__} {prm!r:.60}{hint}")
    checks.number("prm.threshold (the threshold slider's start)",
                  getattr(prm, "threshold", 0.5), low=0.0, high=1.0)
    checks.text("problem", problem)
    if isinstance(steps, str):
        raise TypeError("steps must be a list of strings, one per step, not one string (split "
                        "it: steps=text.splitlines())")
    given = checks.items("steps", steps, what="a list of strings, one per step")
    checks.each("steps", given, checks.text)
    if true_first_error is not None:
        checks.whole("true_first_error", true_first_error, minimum=-1, maximum=len(given) - 1,
                     why=f" (-1: no error; else a step index of the {len(given)} steps)")
    if step_labels is not None:
        labels = checks.items("step_labels", step_labels, what="a list of True/False, one "
                              "per step")
        if len(labels) != len(given):
            raise ValueError(f"step_labels has {len(labels)} labels for {len(given)} steps; "
                             "give one per step")
        checks.each("step_labels", labels, checks.flag)


#: Characters a 48 %-wide text box shows per line in a ~900 px notebook cell (monospace).
_AREA_CHARS_PER_LINE = 40


def _text_rows(texts: Sequence[str], *, most: int = 14) -> int:
    """Lines the problem box or the steps box needs (the larger), at least 4, at most
    ``most`` (beyond that the box scrolls). ``texts[0]`` is the problem, the rest are steps,
    one line each, wrapped at ``_AREA_CHARS_PER_LINE``."""
    def lines(text: str) -> int:
        return max(1, -(-len(text) // _AREA_CHARS_PER_LINE))

    problem, steps = texts[0], texts[1:]
    return max(4, min(most, max(lines(problem), sum(lines(s) for s in steps)) + 1))


class StepRewardExplorer(Explorer):
    """A process reward model's step rewards for one solution; edit the steps, move the cut.

    Attributes:
        threshold: ``FloatSlider``; rewards below it count as errors (redraw only).
        problem: ``Textarea`` with the question (re-scores when edited).
        steps: ``Textarea``, one step per line (re-scores when edited).
        scores: the last ``StepScores`` from ``prm.score``.
    """
    def __init__(self, prm: ProcessRewardModel, problem: str, steps: list[str], *,
                 true_first_error: int | None = None,
                 step_labels: list[bool] | None = None) -> None:
        _check_reward_inputs(prm, problem, steps, true_first_error, step_labels)
        self.prm = prm
        self._original = (problem, tuple(steps))
        self._truth = (true_first_error, step_labels)
        self._cache: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._chart: tuple[Any, StepRewardChart] | None = None  # (what it drew, the chart)
        self.threshold = W.FloatSlider(value=float(getattr(prm, "threshold", 0.5)), min=0.0,
                                       max=1.0, step=0.01, continuous_update=False,
                                       description="threshold", layout=_slider_layout(),
                                       tooltip="rewards below it count as errors (0 to 1)")
        # tall enough for the whole problem and every step as they open (a box that cut the
        # problem's last line hid part of the question); longer texts scroll
        height = f"{_text_rows([problem, *steps]) * 1.45 + 0.9:.1f}em"
        area = {"continuous_update": False, "layout": W.Layout(width="48%", height=height)}
        self.problem = W.Textarea(value=problem, description="problem", **area,
                                  tooltip="the question the steps solve (edit it and leave "
                                          "the box to score again)")
        self.steps = W.Textarea(value="\n".join(steps), description="steps", **area,
                                tooltip="the solution, one step per line (edit it and leave "
                                        "the box to score again)")
        self.scores: Any = None
        super().__init__([self.threshold, self.problem, self.steps])
        self._watch(self.threshold, self.problem, self.steps)
        self.update()

    def render(self) -> View:
        steps = tuple(s for s in self.steps.value.splitlines() if s.strip())
        if not self.problem.value.strip():
            raise ValueError("problem: write the problem the steps solve (the PRM scores each "
                             "step against it)")
        if not steps:
            raise ValueError("steps: write at least one step (one per line)")
        if len(steps) > MAX_STEPS:
            raise ValueError(f"steps: {len(steps)} steps; the explorer scores at most "
                             f"{MAX_STEPS}. Remove steps, or call prm.score(problem, steps) in "
                             "a cell")
        chars = len(self.problem.value) + sum(len(s) for s in steps)
        if chars > MAX_SOLUTION_CHARS:
            raise ValueError(f"the problem and steps have {chars:,} characters; the explorer "
                             f"scores at most {MAX_SOLUTION_CHARS:,}. Shorten them, or call "
                             "prm.score(problem, steps) in a cell")
        key = (self.problem.value, steps)
        if key not in self._cache:
            self._cache[key] = self.prm.score(self.problem.value, list(steps))
        self.scores = self._cache[key]
        # the labels follow the steps they were given for (carry_labels): the outline of the
        # labelled first error stays while it and the steps before it are unchanged
        truth, labels, note = carry_labels(self._original[1], steps,
                                           true_first_error=self._truth[0],
                                           step_labels=self._truth[1])
        edited_problem = self.problem.value.split() != self._original[0].split()
        if self._truth != (None, None) and edited_problem:
            note = "; ".join(filter(None, ["the labels are those of the original problem",
                                           note]))
        # the bars are drawn once per solution: a threshold repaints only its lines
        drawn = (key, truth, None if labels is None else tuple(labels))
        if self._chart is None or self._chart[0] != drawn:
            self._chart = (drawn, step_reward_chart(self.scores.rewards, true_first_error=truth,
                                                    step_labels=labels))
        return render_step_rewards(list(steps), self.scores.rewards,
                                   threshold=self.threshold.value, problem=self.problem.value,
                                   true_first_error=truth, step_labels=labels, note=note,
                                   chart=self._chart[1])

    def settings(self) -> list[tuple[str, str]]:
        n = len([s for s in self.steps.value.splitlines() if s.strip()])
        return [("threshold", f"{self.threshold.value:.2f}"), ("steps", str(n))]


def step_reward_explorer(prm: ProcessRewardModel, problem: str, steps: list[str], *,
                         true_first_error: int | None = None,
                         step_labels: list[bool] | None = None) -> StepRewardExplorer:
    """Explore a PRM's rewards for one solution: threshold slider, editable problem and steps.

    Args:
        prm: a process reward model with ``score(problem, steps)`` (``tp.load_prm()``).
        problem: the question.
        steps: the solution, one string per step.
        true_first_error: the labelled first error (``-1`` if correct), shown while the steps
            are unedited.
        step_labels: per-step correctness labels, shown while the steps are unedited.

    Returns:
        The explorer widget; set ``ex.threshold.value`` or ``ex.steps.value`` to drive it.
    """
    return StepRewardExplorer(prm, problem, steps, true_first_error=true_first_error,
                              step_labels=step_labels)
