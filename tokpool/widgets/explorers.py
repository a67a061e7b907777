"""Thin ipywidgets wiring around the pure ``render_*`` functions.

Each explorer *is* an ``ipywidgets.VBox`` (it displays itself when it ends a cell) and keeps its
controls and outputs as attributes, so code and tests can drive it::

    ex = tp.ownership_explorer()
    ex.async_scheduling.value = True   # the schedule and the memory table redraw
    ex.view                            # the last rendered View (html, png, table)

Controls that recompute use ``continuous_update=False``: work happens when a slider is released.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ipywidgets as W

from ..plots import token_strings
from .memory import render_memory
from .ownership import parse_prompt_lens, render_ownership
from .rewards import render_step_rewards
from .tokens import TOKEN_METRICS, TokenMetric, hidden_states, render_tokens
from .view import View

if TYPE_CHECKING:
    from ..models import PoolingModel
    from ..prm import ProcessRewardModel


def _image() -> W.Image:
    # flex children stretch by default; keep the figure at its own size (shrinking if narrow)
    return W.Image(format="png", layout=W.Layout(align_self="flex-start", max_width="100%",
                                                 width="auto", height="auto"))


class Explorer(W.VBox):
    """Base: a header row of controls, an HTML pane, an image pane; ``update()`` re-renders."""

    def __init__(self, controls: list[W.Widget], **kwargs: Any) -> None:
        self.html = W.HTML()
        self.image = _image()
        self.view: View | None = None
        self._errors = W.HTML()
        super().__init__(
            [W.HBox(controls, layout=W.Layout(flex_flow="row wrap")), self._errors, self.html,
             self.image],
            **kwargs,
        )

    def _watch(self, *widgets: W.Widget) -> None:
        for widget in widgets:
            widget.observe(self._on_change, names="value")

    def _on_change(self, change: dict[str, Any] | None = None) -> None:
        self.update()

    def render(self) -> View:  # pragma: no cover - abstract
        raise NotImplementedError

    def update(self) -> View | None:
        """Re-render from the current control values and show the result.

        A ``ValueError`` from the render (e.g. an impossible combination of settings) is shown
        in the explorer instead of raising inside the widget callback.
        """
        try:
            view = self.render()
        except ValueError as err:
            import html

            self._errors.value = (
                f'<div style="color:#b00020;font-family:sans-serif">{html.escape(str(err))}</div>'
            )
            return None
        self._errors.value = ""
        self.view = view
        self.html.value = view.html
        if view.png is not None:
            self.image.value = view.png
        self.image.layout.display = None if view.png is not None else "none"
        return view


class TokenExplorer(Explorer):
    """Per-token values and token × token similarity of ``model``'s hidden states of ``text``.

    Attributes:
        layer: ``IntSlider`` over ``0..model.num_layers`` (0 = embeddings, the last = final
            hidden states after the final norm, what an engine pools).
        metric: ``Dropdown`` of ``TOKEN_METRICS``.
        tokens: the token strings.
    """

    def __init__(self, model: PoolingModel, text: str, *, layer: int = -1,
                 metric: TokenMetric = "relative norm") -> None:
        if metric not in TOKEN_METRICS:
            raise ValueError(f"unknown metric {metric!r}; choose one of {list(TOKEN_METRICS)}")
        self.model, self.text = model, text
        (ids,) = model.token_ids([text])
        self.tokens = token_strings(model.tokenizer, ids)
        n = model.num_layers
        self.layer = W.IntSlider(value=layer % (n + 1), min=0, max=n, continuous_update=False,
                                 description="layer", style={"description_width": "initial"})
        self.metric = W.Dropdown(options=list(TOKEN_METRICS), value=metric,
                                 description="metric")
        self._cache: dict[int, Any] = {}
        super().__init__([self.layer, self.metric])
        self._watch(self.layer, self.metric)
        self.update()

    def render(self) -> View:
        layer = self.layer.value
        if layer not in self._cache:
            self._cache[layer] = hidden_states(self.model, self.text, layer=layer)
        n = self.model.num_layers
        label = f"layer {layer} of {n}" + (" (final, after norm)" if layer == n else "")
        return render_tokens(self.tokens, self._cache[layer], metric=self.metric.value,
                             layer_label=label)


def token_explorer(model: PoolingModel, text: str, *, layer: int = -1,
                   metric: TokenMetric = "relative norm") -> TokenExplorer:
    """Explore a model's per-token hidden states of ``text``: layer slider, metric menu.

    Args:
        model: a ``tp.PoolingModel`` (``tp.load_model(...)``).
        text: the text to encode.
        layer: initial layer (``-1`` = final hidden states).
        metric: initial metric (see ``TOKEN_METRICS``).

    Returns:
        The explorer widget; set ``ex.layer.value`` / ``ex.metric.value`` to drive it.
    """
    return TokenExplorer(model, text, layer=layer, metric=metric)




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
        self.prm = prm
        self._original = (problem, tuple(steps))
        self._truth = (true_first_error, step_labels)
        self._cache: dict[tuple[str, tuple[str, ...]], Any] = {}
        self.threshold = W.FloatSlider(value=float(getattr(prm, "threshold", 0.5)), min=0.0,
                                       max=1.0, step=0.01, continuous_update=False,
                                       description="threshold")
        area = {"continuous_update": False, "layout": W.Layout(width="48%", height="7em")}
        self.problem = W.Textarea(value=problem, description="problem", **area)
        self.steps = W.Textarea(value="\n".join(steps), description="steps", **area)
        self.scores: Any = None
        super().__init__([self.threshold, self.problem, self.steps])
        self._watch(self.threshold, self.problem, self.steps)
        self.update()

    def render(self) -> View:
        steps = tuple(s for s in self.steps.value.splitlines() if s.strip())
        if not steps:
            raise ValueError("write at least one step (one per line)")
        key = (self.problem.value, steps)
        if key not in self._cache:
            self._cache[key] = self.prm.score(self.problem.value, list(steps))
        self.scores = self._cache[key]
        # labels describe the original solution only
        truth, labels = self._truth if key == self._original else (None, None)
        return render_step_rewards(list(steps), self.scores.rewards,
                                   threshold=self.threshold.value, problem=self.problem.value,
                                   true_first_error=truth, step_labels=labels)


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


class OwnershipExplorer(Explorer):
    """A small workload through the simulated engine: schedule, corruption and memory.

    Attributes:
        prompt_len: ``IntSlider``, request 0's prompt length.
        more_requests: ``Text``, the other requests' prompt lengths (``"6, 9"``; may be empty).
        budget: ``IntSlider``, ``max_num_batched_tokens`` (tokens per step = buffer rows).
        async_scheduling: ``ToggleButton``.
        policy: ``ToggleButtons`` over ``tp.RETENTION_POLICIES``.
        chunked: ``Checkbox``, ``enable_chunked_prefill``.
        view: the last ``View``; ``view.data['result']`` is the ``SimResult``.
    """

    def __init__(self, prompt_lens: list[int] | None = None, *, budget: int = 16,
                 async_scheduling: bool = False, policy: str = "clone",
                 enable_chunked_prefill: bool = True, hidden_size: int = 576) -> None:
        from ..pooling import RETENTION_POLICIES

        lens = [20, 6, 9] if prompt_lens is None else list(prompt_lens)
        if not lens:
            raise ValueError("give at least one prompt length")
        self.hidden_size = hidden_size
        wide = {"description_width": "initial"}
        self.prompt_len = W.IntSlider(value=lens[0], min=1, max=96, continuous_update=False,
                                      description="request 0 tokens", style=wide)
        self.more_requests = W.Text(value=", ".join(str(n) for n in lens[1:]),
                                    continuous_update=False, description="other requests",
                                    placeholder="e.g. 6, 9", style=wide)
        self.budget = W.IntSlider(value=budget, min=2, max=64, continuous_update=False,
                                  description="tokens per step", style=wide)
        self.async_scheduling = W.ToggleButton(value=async_scheduling,
                                               description="async scheduling", icon="bolt")
        self.chunked = W.Checkbox(value=enable_chunked_prefill, description="chunked prefill",
                                  indent=False)
        self.policy = W.ToggleButtons(options=list(RETENTION_POLICIES), value=policy,
                                      description="policy")
        super().__init__([self.prompt_len, self.more_requests, self.budget,
                          self.async_scheduling, self.chunked, self.policy])
        self._watch(self.prompt_len, self.more_requests, self.budget, self.async_scheduling,
                    self.chunked, self.policy)
        self.update()

    @property
    def prompt_lens(self) -> list[int]:
        """The workload the controls describe."""
        return [self.prompt_len.value, *parse_prompt_lens(self.more_requests.value)]

    def render(self) -> View:
        return render_ownership(
            self.prompt_lens, max_num_batched_tokens=self.budget.value,
            async_scheduling=self.async_scheduling.value, policy=self.policy.value,
            enable_chunked_prefill=self.chunked.value, hidden_size=self.hidden_size,
        )


def ownership_explorer(prompt_lens: list[int] | None = None, *, budget: int = 16,
                       async_scheduling: bool = False, policy: str = "clone",
                       enable_chunked_prefill: bool = True,
                       hidden_size: int = 576) -> OwnershipExplorer:
    """Explore chunked-prefill ownership: which chunks are cloned or viewed, what gets corrupted.

    Args:
        prompt_lens: the initial workload (default ``[20, 6, 9]``).
        budget: tokens per step (``max_num_batched_tokens``).
        async_scheduling: start with async scheduling on.
        policy: initial retention policy.
        enable_chunked_prefill: start with chunked prefill on.
        hidden_size: width of the simulated hidden states (bytes scale with it).

    Returns:
        The explorer widget; e.g. ``ex.async_scheduling.value = True`` redraws it.
    """
    return OwnershipExplorer(prompt_lens, budget=budget, async_scheduling=async_scheduling,
                             policy=policy, enable_chunked_prefill=enable_chunked_prefill,
                             hidden_size=hidden_size)


class MemoryExplorer(Explorer):
    """Peak pooling memory vs prompt length for model and hardware presets.

    Attributes:
        model: ``Dropdown`` of ``tp.MODEL_PRESETS``.
        hardware: ``Dropdown`` of ``tp.HARDWARE_PRESETS``.
        task: ``Dropdown`` (``token_embed``, ``token_classify``, ``embed``; "preset default").
        dtype: ``Dropdown`` of hidden-state dtypes.
        head_dtype: ``Dropdown`` ("same as dtype" or ``float32``).
        prompt_len: ``SelectionRangeSlider`` over 256 … 1M tokens (value: ``(low, high)``).
        policies: ``SelectMultiple`` over the retention policies.
        async_scheduling: ``ToggleButton``.
    """

    def __init__(self, *, model: str = "Qwen3-Embedding-8B", hardware: str = "H100 SXM",
                 prompt_len: tuple[int, int] = (1024, 1 << 20)) -> None:
        from ..pooling import RETENTION_POLICIES
        from ..sim import HARDWARE_PRESETS, MODEL_PRESETS

        wide = {"description_width": "initial"}
        self.model = W.Dropdown(options=list(MODEL_PRESETS), value=model, description="model")
        self.hardware = W.Dropdown(options=list(HARDWARE_PRESETS), value=hardware,
                                   description="hardware")
        self.task = W.Dropdown(options=[("preset default", None), "token_embed",
                                        "token_classify", "embed"], value=None,
                               description="task")
        self.dtype = W.Dropdown(options=["bfloat16", "float16", "float32"], value="bfloat16",
                                description="dtype")
        self.head_dtype = W.Dropdown(options=[("same as dtype", None), "float32"], value=None,
                                     description="head dtype", style=wide)
        lengths = [1 << k for k in range(8, 21)]
        self.prompt_len = W.SelectionRangeSlider(
            options=[(f"{n // 1024}K" if n >= 1024 else str(n), n) for n in lengths],
            value=prompt_len, description="prompt length", continuous_update=False,
            style=wide, layout=W.Layout(width="420px"),
        )
        self.policies = W.SelectMultiple(options=list(RETENTION_POLICIES),
                                         value=tuple(RETENTION_POLICIES), rows=4,
                                         description="policies")
        self.async_scheduling = W.ToggleButton(value=True, description="async scheduling",
                                               icon="bolt")
        super().__init__([self.model, self.hardware, self.task, self.dtype, self.head_dtype,
                          self.prompt_len, self.policies, self.async_scheduling])
        self._watch(self.model, self.hardware, self.task, self.dtype, self.head_dtype,
                    self.prompt_len, self.policies, self.async_scheduling)
        self.update()

    def render(self) -> View:
        return render_memory(
            model=self.model.value, hardware=self.hardware.value, task=self.task.value,
            dtype=self.dtype.value, head_dtype=self.head_dtype.value,
            prompt_len=self.prompt_len.value, policies=self.policies.value,
            async_scheduling=self.async_scheduling.value,
        )


def memory_explorer(*, model: str = "Qwen3-Embedding-8B", hardware: str = "H100 SXM",
                    prompt_len: tuple[int, int] = (1024, 1 << 20)) -> MemoryExplorer:
    """Explore peak pooling memory against prompt length for model and hardware presets.

    Args:
        model: initial model preset (``tp.MODEL_PRESETS``).
        hardware: initial hardware preset (``tp.HARDWARE_PRESETS``).
        prompt_len: initial ``(shortest, longest)`` prompt; powers of two from 256 to 1M.

    Returns:
        The explorer widget; e.g. ``ex.prompt_len.value = (1024, 65536)`` redraws it.
    """
    return MemoryExplorer(model=model, hardware=hardware, prompt_len=prompt_len)
