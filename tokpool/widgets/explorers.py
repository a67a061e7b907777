"""Thin ipywidgets wiring around the pure ``render_*`` functions.

Each explorer *is* an ``ipywidgets.VBox`` (it displays itself when it ends a cell) and keeps its
controls and outputs as attributes, so code and tests can drive it::

    ex = tp.ownership_explorer()
    ex.async_scheduling.value = True   # the schedule and the memory table redraw
    ex.view                            # the last rendered View (html, png, table)
    ex.view.save("schedule.png")       # export: .png (figure), .csv (table), .html (all)

Controls that recompute use ``continuous_update=False``: work happens when a slider is released.
A slider's value is typed into the box beside it; a value it cannot take is refused, not
clamped. A value set from code that a control cannot take (a menu value it does not offer, a
slider value out of range) is refused the same way (``guards.py``): the control keeps its
value and the panel names it, the value and what it takes. Each explorer bounds its input
before any work (too many steps, tokens, characters), and whatever the render raises clears
the output and shows the message: no stale figure.

Displayed, an explorer emits two outputs: the live widget, and a static snapshot of its current
state (settings, text, figure, table) as plain HTML, updated as the controls move. The live
widget hides the snapshot with CSS; where the widget cannot render (``jupyter nbconvert --to
html`` opened offline, ``tokpool report``, a viewer without the widget manager, a notebook
reopened without its kernel) the snapshot shows what the explorer showed.
"""

from __future__ import annotations

import dataclasses
import html as _html
import json
import math
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ipywidgets as W
import traitlets

from .. import _args as checks
from .._args import as_whole
from ..guard import ensure_fits
from ..plots import format_tokens, token_strings
from ..pooler.pooling import RETENTION_POLICIES
from ..sim import HARDWARE_PRESETS, MODEL_PRESETS, SimConfig
from ..sim.vllm_rules.serve_line import declared_tasks
from .guards import guard_controls, label_of, show_tooltip
from .memory import memory_share_applies, render_memory
from .ownership import check_workload, parse_prompt_lens, render_ownership
from .rewards import StepRewardChart, carry_labels, render_step_rewards, step_reward_chart
from .tokens import (
    TOKEN_METRICS,
    TokenHeatmap,
    TokenMetric,
    all_hidden_states,
    render_tokens,
)
from .view import View

if TYPE_CHECKING:
    from ..models import PoolingModel
    from ..prm import ProcessRewardModel

#: Width of every slider (room for the track, not just the label).
SLIDER_WIDTH = "380px"
#: CSS of the explorers: the output greys out while it recomputes.
_STYLE = ("<style>.tokpool-busy{opacity:.35;transition:opacity .15s}"
          ".tokpool-figure{overflow-x:auto;max-width:100%}</style>")
_WIDE = {"description_width": "initial"}


def _image() -> W.Image:
    # never shrunk to the output's width (its text would shrink with it, to ~5 px on a long
    # run): a figure is shown at its own size and its box scrolls sideways instead
    return W.Image(format="png", layout=W.Layout(align_self="flex-start", max_width="none",
                                                 height="auto"))


def _slider_layout() -> W.Layout:
    return W.Layout(width=SLIDER_WIDTH)


class MultiToggle(W.HBox):
    """A row of toggle buttons, one per option; ``value`` is the tuple of those pressed.

    Set ``value`` from code (``ex.policies.value = ("clone",)``) or click the buttons. A shown
    option is a filled blue button with a tick; a hidden one is a plain grey button without
    one, and each button's tooltip says which it is and what a click does.
    """
    value = traitlets.Tuple()

    def __init__(self, options: Sequence[str], value: Sequence[str], *, description: str = ""
                 ) -> None:
        self.options = tuple(options)
        self.description = description
        self.buttons = {
            o: W.ToggleButton(value=o in value, description=o, layout=W.Layout(width="auto"))
            for o in self.options
        }
        for button in self.buttons.values():
            button.add_class("tokpool-option")
            _mark_toggle(button, on=f"{button.description} is shown: click to hide it",
                         off=f"{button.description} is hidden: click to show it")
        label = [W.Label(description)] if description else []
        super().__init__([*label, *self.buttons.values()])
        self.value = tuple(o for o in self.options if o in value)
        for button in self.buttons.values():
            button.observe(self._from_buttons, names="value")
        self.observe(self._to_buttons, names="value")

    def _from_buttons(self, _: Any = None) -> None:
        self.value = tuple(o for o, b in self.buttons.items() if b.value)

    def _to_buttons(self, change: dict[str, Any]) -> None:
        unknown = [v for v in change["new"] if v not in self.options]
        if unknown:
            raise ValueError(f"unknown option(s) {unknown}; choose from {list(self.options)}")
        for o, b in self.buttons.items():
            b.value = o in change["new"]


def _mark_toggle(button: W.ToggleButton, *, on: str, off: str) -> None:
    """Make a toggle's two states unmistakable: pressed = filled blue with a tick, released =
    plain grey; the tooltip says the state and what a click does (JupyterLab's own pressed
    look is a slightly darker grey, and a released button that keeps the focus looks alike)."""
    def show(_: Any = None) -> None:
        pressed = bool(button.value)
        button.button_style = "info" if pressed else ""
        button.icon = "check" if pressed else ""
        button.tooltip = on if pressed else off

    show()
    button.observe(show, names="value")


def _settings(widgets: Sequence[W.Widget]) -> list[tuple[str, str]]:
    """``(label, value)`` of each control, for the static snapshot."""
    out: list[tuple[str, str]] = []
    for w in widgets:
        if isinstance(w, MultiToggle):
            out.append((w.description or "options", ", ".join(w.value) or "none"))
        elif hasattr(w, "value"):
            label = label_of(w) or type(w).__name__
            value = w.value
            if hasattr(w, "label") and isinstance(getattr(w, "label", None), str):
                value = w.label  # Dropdown / SelectionSlider: what the user sees
            elif hasattr(w, "label") and isinstance(getattr(w, "label", None), tuple):
                value = " … ".join(w.label)
            text = str(value)
            out.append((label, text if len(text) <= 80 else text[:77] + "…"))
    return out


def _typed_number(text: str, *, integer: bool) -> float | None:
    """The number typed into a slider's box, or ``None`` when it is not one the box takes.

    A whole-number box takes what reads as a whole number: ``"24"``, ``"1e12"``, ``"24.0"``,
    ``"1_000"`` (a range check follows); ``"2.5"``, ``"inf"``, ``"nan"``, ``"lots"`` are not.
    """
    cleaned = text.strip().replace("_", "")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    if integer:
        if value != int(value):
            return None
        return int(value)
    return value


class Explorer(W.VBox):
    """Base: a row of controls, an error line, then the rendered text and figure.

    Every ``IntSlider``/``FloatSlider`` among the controls gets a typed box beside it instead of
    the slider's own editable readout (which clamps what you type without a word): a number in
    range moves the slider, anything else is refused with a message saying the allowed range.

    Attributes:
        view: the last rendered ``View`` (``None`` while the settings are invalid).
        error: the message of the last rejected settings, ``None`` when the view is current.
        html, image: the widgets showing ``view.html`` and ``view.png``.
        typed: the typed box of each slider, by the slider's description
            (``ex.typed["tokens per step"].value = "100000"`` types into it).
    """
    def __init__(self, controls: list[W.Widget], **kwargs: Any) -> None:
        self.html = W.HTML()
        self.image = _image()
        self.view: View | None = None
        self.error: str | None = None
        self._controls = controls
        self._errors = W.HTML()
        self._uid = uuid.uuid4().hex[:12]
        self._fallback: Any = None  # the display handle of the static snapshot, once shown
        self._syncing = False
        self.typed: dict[str, W.Text] = {}
        row: list[W.Widget] = []
        for control in controls:
            if isinstance(control, W.IntSlider | W.FloatSlider):
                box = self._typed_box(control)
                self.typed[label_of(control) or type(control).__name__] = box
                row.append(W.HBox([control, box], layout=W.Layout(align_items="center")))
            elif isinstance(control, W.SelectionSlider | W.SelectionRangeSlider):
                row.append(W.HBox([control, self._shown_label(control)],
                                  layout=W.Layout(align_items="center")))
            else:
                row.append(control)
        figure = W.Box([self.image])
        figure.add_class("tokpool-figure")
        self._output = W.VBox([self.html, figure])
        # The live widget hides the static snapshot displayed under it (see _ipython_display_);
        # where the widget cannot render (nbconvert HTML offline), the snapshot stays visible.
        hide = (f".tokpool-fallback-{self._uid}{{display:none}}"
                f".jp-OutputArea-child:has(.tokpool-fallback-{self._uid}){{display:none}}")
        super().__init__(
            [W.HTML(_STYLE.replace("</style>", hide + "</style>")),
             W.HBox(row, layout=W.Layout(flex_flow="row wrap", align_items="center")),
             self._errors, self._output],
            **kwargs,
        )
        guard_controls(controls, self.fail)  # a value set from code that a control cannot take
        for control in controls:  # described text boxes, menus, checkboxes: seen on hover
            if isinstance(control, W.Text | W.Textarea | W.Dropdown | W.Checkbox):
                show_tooltip(control)

    # --- typed values ---------------------------------------------------------------------

    def _typed_box(self, slider: W.IntSlider | W.FloatSlider) -> W.Text:
        slider.readout = False
        box = W.Text(value=self._format(slider, slider.value), continuous_update=False,
                     layout=W.Layout(width="72px"),
                     tooltip=f"type a value from {slider.min} to {slider.max}")
        box.add_class("tokpool-typed")

        def from_slider(change: dict[str, Any]) -> None:
            self._syncing = True
            try:
                box.value = self._format(slider, change["new"])
            finally:
                self._syncing = False

        slider.observe(from_slider, names="value")
        box.observe(lambda change: self._on_typed(slider, box, change["new"]), names="value")
        return box

    @staticmethod
    def _shown_label(slider: W.SelectionSlider | W.SelectionRangeSlider) -> W.Label:
        """A read-only readout: the selection slider's own one is editable, and text typed
        into it blanked it. Drag the handles (or use the arrow keys) to choose."""
        slider.readout = False

        def text() -> str:
            label = slider.label
            return " – ".join(label) if isinstance(label, tuple) else str(label)

        shown = W.Label(text(), tooltip=f"{label_of(slider)}: the chosen value (drag the "
                                        "slider, or focus it and use the arrow keys)")
        shown.add_class("tokpool-readout")
        slider.observe(lambda _: setattr(shown, "value", text()), names="value")
        return shown

    @staticmethod
    def _format(slider: W.Widget, value: float) -> str:
        return f"{value:.2f}" if isinstance(slider, W.FloatSlider) else str(int(value))

    def _on_typed(self, slider: W.IntSlider | W.FloatSlider, box: W.Text, text: str) -> None:
        if self._syncing:
            return
        label = label_of(slider) or "value"
        integer = isinstance(slider, W.IntSlider)
        kind = "a whole number" if integer else "a number"
        allowed = (f"{slider.min} to {slider.max}" if integer
                   else f"{slider.min:g} to {slider.max:g}")
        value = _typed_number(text, integer=integer)
        typed = text.strip()[:40]
        if value is None:
            self.fail(f"{label}: {typed!r} is not {kind}; type {kind} from {allowed}, or drag "
                      "the slider")
            return
        if not slider.min <= value <= slider.max:
            spelled = (f" ({value:,.0f})" if integer and abs(value) >= 10_000
                       and typed.replace(",", "").replace("_", "") != str(int(value)) else "")
            self.fail(f"{label} must be from {allowed}; {typed}{spelled} is out of range. "
                      f"Type a value from {allowed}, or drag the slider")
            return
        if value == slider.value:
            self.update()  # clears a message left by an earlier bad value
        else:
            slider.value = value

    def _sync_boxes(self) -> None:
        self._syncing = True
        try:
            for control in self._controls:
                if isinstance(control, W.IntSlider | W.FloatSlider):
                    box = self.typed[label_of(control) or type(control).__name__]
                    box.value = self._format(control, control.value)
        finally:
            self._syncing = False

    # --- rendering ------------------------------------------------------------------------

    def _watch(self, *widgets: W.Widget) -> None:
        for widget in widgets:
            widget.observe(self._on_change, names="value")

    def _on_change(self, change: dict[str, Any] | None = None) -> None:
        self.update()

    def render(self) -> View:  # pragma: no cover - abstract
        raise NotImplementedError

    def fail(self, message: str) -> None:
        """Clear the output and show ``message`` instead (no stale figure stays up)."""
        self.view, self.error = None, message
        self._errors.value = (
            '<div class="tokpool-error" style="color:#b00020;font-family:sans-serif;'
            f'padding:4px 0">⚠ {_html.escape(message)} (nothing is shown until the settings '
            "are valid)</div>"
        )
        self.html.value = ""
        self._output.layout.display = "none"
        self._output.remove_class("tokpool-busy")
        self._refresh_fallback()

    def update(self) -> View | None:
        """Re-render from the current control values and show the result.

        Any exception from the render — a ``ValueError`` for an impossible combination of
        settings, but also a ``MemoryError`` or a bug — clears the output and shows the message
        instead of raising inside the widget callback, so no stale figure is left standing.
        """
        self._output.add_class("tokpool-busy")
        try:
            view = self.render()
        except Exception as err:
            message = str(err) or type(err).__name__
            if not isinstance(err, ValueError | TypeError):
                message = f"{type(err).__name__}: {message}"
            self.fail(message)
            return None
        finally:
            self._output.remove_class("tokpool-busy")
        self.view, self.error = view, None
        self._errors.value = ""
        self._sync_boxes()
        self._output.layout.display = None
        self.html.value = view.html
        if view.png is not None:
            self.image.value = view.png
            self.image.layout.width = f"{view.display_width}px"
            self.image.layout.min_width = f"{view.display_width}px"
        self.image.layout.display = None if view.png is not None else "none"
        self._refresh_fallback()
        return view

    # --- outside a live kernel ------------------------------------------------------------

    def settings(self) -> list[tuple[str, str]]:
        """The controls' current values as ``(label, value)`` pairs."""
        return _settings(self._controls)

    def static_html(self) -> str:
        """A self-contained snapshot of the current state: settings, then text, figure, table."""
        settings = " · ".join(f"{_html.escape(k)}: <b>{_html.escape(v)}</b>"
                              for k, v in self.settings())
        head = (f'<div class="tokpool-static" data-explorer="{type(self).__name__}" '
                'style="font-family:sans-serif;font-size:12px;color:#444;border-left:3px solid '
                '#0072B2;padding:2px 8px;margin:4px 0">'
                f"<b>{type(self).__name__}</b> (static snapshot; run the notebook to use the "
                f"controls) · {settings}</div>")
        if self.view is None:
            body = (f'<div style="color:#b00020;font-family:sans-serif">⚠ '
                    f"{_html.escape(self.error or 'nothing rendered yet')}</div>")
        else:
            body = self.view.to_html()
        return head + body

    def _fallback_bundle(self) -> dict[str, str]:
        return {"text/html": f'<div class="tokpool-fallback-{self._uid}">{self.static_html()}'
                             "</div>"}

    def _refresh_fallback(self) -> None:
        if self._fallback is not None:  # the snapshot follows the controls
            self._fallback.update(self._fallback_bundle(), raw=True)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(super()._repr_mimebundle_(**kwargs) or {})
        state = ", ".join(f"{k}={v}" for k, v in self.settings())
        bundle["text/plain"] = f"{type(self).__name__}({state})"
        return bundle

    def _ipython_display_(self) -> None:
        """Display the live widget, then its static snapshot as a second output.

        The snapshot is plain HTML (settings, text, figure, table), kept up to date as the
        controls move. The live widget hides it with CSS; where the widget cannot render —
        ``jupyter nbconvert --to html`` opened offline, a viewer without the widget manager, a
        notebook reopened without its kernel — the snapshot shows what the explorer showed.
        """
        from IPython.display import display

        display(self._repr_mimebundle_(), raw=True)
        self._fallback = display(self._fallback_bundle(), raw=True, display_id=True)


#: The token explorer refuses texts longer than this (characters, checked before tokenizing).
MAX_TEXT_CHARS = 20_000
#: ... and longer than this (tokens): one forward pass keeps every layer of every token.
MAX_TEXT_TOKENS = 1_024


def _check_model(model: Any) -> None:
    """A ``PoolingModel`` (``tp.load_model(...)``), not its name or path."""
    from ..models.source import require_pooling_model  # tokpool.models: transformers

    require_pooling_model(model)


class TokenExplorer(Explorer):
    """Per-token values and token × token similarity of ``model``'s hidden states of a text.

    One forward pass per text keeps every layer's hidden states (``all_hidden_states``), and
    each layer's heatmap is drawn once: moving the layer slider back, or changing the metric,
    only recolours the tokens.

    Attributes:
        text_input: ``Textarea`` with the text (edit it and leave the box to re-encode).
        layer: ``IntSlider`` over ``0..model.num_layers`` (0 = embeddings, the last = final
            hidden states after the final norm, what an engine pools).
        metric: ``Dropdown`` of ``TOKEN_METRICS``.
        tokens: the token strings of the current text.
    """
    def __init__(self, model: PoolingModel, text: str, *, layer: int = -1,
                 metric: TokenMetric = "relative norm") -> None:
        if metric not in TOKEN_METRICS:
            raise ValueError(f"unknown metric {metric!r}; choose one of {list(TOKEN_METRICS)}")
        if not isinstance(text, str) or not text.strip():
            raise ValueError("token_explorer needs a non-empty text string")
        _check_model(model)
        n = model.num_layers
        layer = checks.whole("layer", layer, minimum=-(n + 1), maximum=n,
                             why=f" (0 = embeddings, {n} = the last of the model's {n} layers; "
                                 "negative counts from the end)")
        self.model = model
        self.text_input = W.Textarea(value=text, continuous_update=False, description="text",
                                     placeholder="your own text",
                                     tooltip="the text to encode (edit it and leave the box "
                                             "to encode it)",
                                     layout=W.Layout(width="100%", height="4.5em"))
        self.layer = W.IntSlider(value=layer % (n + 1), min=0, max=n, continuous_update=False,
                                 description="layer", style=_WIDE, layout=_slider_layout(),
                                 tooltip=f"0 = the embeddings, {n} = the final hidden states "
                                         "(after the final norm, what an engine pools)")
        self.metric = W.Dropdown(options=list(TOKEN_METRICS), value=metric,
                                 description="metric",
                                 tooltip="the number each token is coloured by")
        self._states: dict[str, Any] = {}  # text -> [num_layers + 1, n, hidden], last few texts
        self._heatmaps: dict[tuple[str, int], bytes] = {}
        self._canvases: dict[str, TokenHeatmap] = {}  # text -> its heatmap, labels drawn
        self._tokens: dict[str, list[str]] = {}
        super().__init__([self.text_input, self.layer, self.metric])
        self._watch(self.text_input, self.layer, self.metric)
        self.update()

    @property
    def text(self) -> str:
        """The text being explored (``text_input.value``)."""
        return self.text_input.value

    @property
    def tokens(self) -> list[str]:
        """The token strings of ``text``."""
        self._encode(self.text)
        return self._tokens[self.text]

    def _encode(self, text: str) -> Any:
        """``[num_layers + 1, n, hidden]`` of ``text``, after checking it is small enough."""
        if text in self._states:
            return self._states[text]
        if len(text) > MAX_TEXT_CHARS:
            raise ValueError(f"the text has {len(text):,} characters; the explorer takes at "
                             f"most {MAX_TEXT_CHARS:,}. Shorten it, or call model.encode(...) "
                             "in a cell for long texts")
        try:
            (ids,) = self.model.token_ids([text])
        except ValueError as err:  # longer than the model takes, ...
            raise ValueError(f"text: {err}") from err
        n = int(ids.numel())
        if n > MAX_TEXT_TOKENS:
            raise ValueError(f"the text has {n:,} tokens; the explorer takes at most "
                             f"{MAX_TEXT_TOKENS:,} (its heatmap shows the first 96). Shorten "
                             "it, or call model.encode(...) in a cell for long texts")

        layers = self.model.num_layers + 1
        ensure_fits(layers * n * self.model.hidden_size * 4 * 2,  # kept + transformers' copy
                    what=f"every layer of {n:,} tokens", cheaper="a shorter text")
        states = all_hidden_states(self.model, ids)  # [layers, n, hidden]
        if len(self._states) >= 4:  # keep the last few texts only
            old = next(iter(self._states))
            self._states.pop(old)
            self._heatmaps = {k: v for k, v in self._heatmaps.items() if k[0] != old}
            self._canvases.pop(old, None)
        self._states[text] = states
        self._tokens[text] = token_strings(self.model.tokenizer, ids)
        return states

    def render(self) -> View:
        text, layer = self.text, self.layer.value
        if not text.strip():
            raise ValueError("write some text to encode")
        hidden = self._encode(text)[layer]  # [n, hidden]
        n = self.model.num_layers
        label = f"layer {layer} of {n}" + (" (final, after norm)" if layer == n else "")
        tokens = self._tokens[text]
        if (text, layer) not in self._heatmaps:  # the labels are drawn once per text
            if text not in self._canvases:
                self._canvases[text] = TokenHeatmap(tokens)
            self._heatmaps[text, layer] = self._canvases[text].png(hidden, layer_label=label)
        return render_tokens(tokens, hidden, metric=self.metric.value, layer_label=label,
                             heatmap=self._heatmaps[text, layer],
                             settings={"model": getattr(self.model, "name", None)
                                       or type(self.model).__name__, "text": text})

    def settings(self) -> list[tuple[str, str]]:
        text = self.text if len(self.text) <= 60 else self.text[:57] + "…"
        return [("model", type(self.model).__name__), ("text", text),
                ("layer", str(self.layer.value)), ("metric", self.metric.value)]


def token_explorer(model: PoolingModel, text: str, *, layer: int = -1,
                   metric: TokenMetric = "relative norm") -> TokenExplorer:
    """Explore a model's per-token hidden states of a text: your text, layer slider, metric.

    Args:
        model: a ``tp.PoolingModel`` (``tp.load_model(...)``: a built-in name or a local
            directory with a transformers checkpoint).
        text: the initial text; edit it in the explorer's text box.
        layer: initial layer (``-1`` = final hidden states).
        metric: initial metric (see ``TOKEN_METRICS``).

    Returns:
        The explorer widget; set ``ex.text_input.value`` / ``ex.layer.value`` /
        ``ex.metric.value`` to drive it.

    Raises:
        ValueError: an unknown metric or an empty text.
    """
    return TokenExplorer(model, text, layer=layer, metric=metric)


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


#: Widest hidden states the ownership view simulates (it runs real tensors).
MAX_OWNERSHIP_WIDTH = 65_536


class OwnershipExplorer(Explorer):
    """A small workload through the simulated engine: schedule, corruption and memory.

    Attributes:
        prompt_len: ``IntSlider``, request 0's prompt length.
        more_requests: ``Text``, the other requests' prompt lengths (``"6, 9"``; may be empty).
        budget: ``IntSlider``, ``max_num_batched_tokens`` (tokens per step = buffer rows).
        async_scheduling: ``Checkbox``, ``async_scheduling``.
        policy: ``ToggleButtons`` over ``tp.RETENTION_POLICIES``.
        chunked: ``Checkbox``, ``enable_chunked_prefill``.
        vllm_head: ``Checkbox``, run vLLM's default head after pooling.
        view: the last ``View``; ``view.data['result']`` is the ``SimResult``.
    """
    def __init__(self, prompt_lens: list[int] | None = None, *, budget: int = 16,
                 async_scheduling: bool = False, policy: str = "clone",
                 enable_chunked_prefill: bool = True, hidden_size: int = 576) -> None:

        lens = [20, 6, 9] if prompt_lens is None else checks.items(
            "prompt_lens", prompt_lens, what="a list of prompt lengths")
        lens = checks.each("prompt_lens", lens, lambda name, n: checks.whole(name, n, minimum=1))
        if not 1 <= lens[0] <= 96:
            raise ValueError(f"prompt_lens[0] = {lens[0]:,}: the request 0 tokens slider takes "
                             "1 to 96")
        checks.whole("budget", budget, minimum=2, maximum=64,
                     why=" (the tokens per step slider)")
        checks.flag("async_scheduling", async_scheduling)
        checks.flag("enable_chunked_prefill", enable_chunked_prefill)
        checks.choice("policy", policy, RETENTION_POLICIES)
        checks.whole("hidden_size", hidden_size, minimum=1, maximum=MAX_OWNERSHIP_WIDTH,
                     why=" (the view simulates real tensors of that width)")
        check_workload(lens, budget)  # a workload the view can draw, before any work
        self.hidden_size = hidden_size
        self._views: dict[tuple, View] = {}  # see CACHED_VIEWS
        self.prompt_len = W.IntSlider(value=lens[0], min=1, max=96, continuous_update=False,
                                      description="request 0 tokens", style=_WIDE,
                                      tooltip="request 0's prompt length in tokens (1 to 96)",
                                      layout=_slider_layout())
        self.more_requests = W.Text(value=", ".join(str(n) for n in lens[1:]),
                                    continuous_update=False, description="other requests",
                                    tooltip="the other requests' prompt lengths, e.g. 6, 9 "
                                            "(may be empty)",
                                    placeholder="e.g. 6, 9", style=_WIDE)
        self.budget = W.IntSlider(value=budget, min=2, max=64, continuous_update=False,
                                  description="tokens per step", style=_WIDE,
                                  tooltip="tokens the engine computes per step (vLLM's "
                                          "max_num_batched_tokens), 2 to 64",
                                  layout=_slider_layout())
        # on/off settings are all checkboxes, one style (async, chunked prefill, vLLM's head)
        self.async_scheduling = W.Checkbox(
            value=async_scheduling, description="async scheduling", indent=False,
            layout=W.Layout(width="auto"),
            tooltip="async scheduling: the engine starts step N+1 before step N's output is "
                    "copied to the host (vLLM's async_scheduling); off: each step's output is "
                    "copied before the next step starts")
        self.chunked = W.Checkbox(value=enable_chunked_prefill, description="chunked prefill",
                                  tooltip="split a prompt longer than tokens per step over "
                                          "several steps (vLLM's enable_chunked_prefill)",
                                  indent=False, layout=W.Layout(width="auto"))
        self.policy = W.ToggleButtons(
            options=list(RETENTION_POLICIES), value=policy, description="policy",
            tooltips=[POLICY_TIPS[p] for p in RETENTION_POLICIES],
            tooltip="how pooling keeps a request's chunks between steps")
        self.vllm_head = W.Checkbox(value=False, indent=False, layout=W.Layout(width="auto"),
                                    tooltip="run vLLM's default head after pooling: a float32 "
                                            "cast, then the activation",
                                    description="vLLM's head (float32 cast + activation)")
        super().__init__([self.prompt_len, self.more_requests, self.budget,
                          self.async_scheduling, self.chunked, self.policy, self.vllm_head])
        self._watch(self.prompt_len, self.more_requests, self.budget, self.async_scheduling,
                    self.chunked, self.policy, self.vllm_head)
        self.update()

    @property
    def prompt_lens(self) -> list[int]:
        """The workload the controls describe."""
        try:
            others = parse_prompt_lens(self.more_requests.value)
        except ValueError as err:
            raise ValueError(f"other requests: {err}") from err
        return [self.prompt_len.value, *others]

    #: Views kept per explorer (settings -> View): a setting revisited while a slider is
    #: dragged back and forth, or a toggle flipped twice, is shown without redrawing.
    CACHED_VIEWS = 32

    def render(self) -> View:
        lens = self.prompt_lens
        if not self.chunked.value:
            self._check_unchunked(lens)
        key = (tuple(lens), self.budget.value, self.async_scheduling.value, self.policy.value,
               self.chunked.value, self.hidden_size, self.vllm_head.value)
        cache = self._views
        view = cache.pop(key, None)  # popped and put back: the most recent is last
        if view is None:
            view = render_ownership(
                lens, max_num_batched_tokens=self.budget.value,
                async_scheduling=self.async_scheduling.value, policy=self.policy.value,
                enable_chunked_prefill=self.chunked.value, hidden_size=self.hidden_size,
                vllm_head=self.vllm_head.value,
            )
        cache[key] = view
        while len(cache) > self.CACHED_VIEWS:
            del cache[next(iter(cache))]  # the least recently shown
        return view


    def _check_unchunked(self, lens: list[int]) -> None:
        """vLLM's refusal of a prompt longer than the budget with chunking off
        (``engine_checks.check_unchunked_prompts_schedulable``), said with this panel's
        controls instead of the engine's flags."""
        # the rules room only when a panel is checked: opening an explorer stays light
        from ..sim.vllm_rules.engine_checks import (
            EngineRefusal,
            check_unchunked_prompts_schedulable,
        )

        budget = self.budget.value
        try:
            check_unchunked_prompts_schedulable(lens, budget, enable_chunked_prefill=False)
        except EngineRefusal as err:
            long = [(i, n) for i, n in enumerate(lens) if n > budget]
            i, n = long[0]
            where = "request 0 tokens" if i == 0 else f"other requests (request {i})"
            more = (f", nor {len(long) - 1} more request{'s' if len(long) > 2 else ''}"
                    if len(long) > 1 else "")
            raise ValueError(
                f"{where}: {n} tokens, but tokens per step is {budget} and chunked prefill is "
                f"off, so no step can hold it{more} (vLLM refuses to start, "
                f"{err.follows}). Tick chunked prefill, raise tokens per step to at least "
                f"{max(n for _, n in long)}, or shorten {'those requests' if more else 'it'}"
            ) from None


#: What each retention policy keeps between steps (the ownership explorer's button tooltips).
POLICY_TIPS: dict[str, str] = {
    "legacy": "legacy (before PR #50931): keeps views into the reused buffer",
    "clone": "clone (PR #50931, vLLM's): clones each unfinished chunk, joins them at the end",
    "prealloc": "prealloc: one owned buffer per request, each chunk copied in once",
    "offload": "offload: each chunk copied to host memory as it is produced",
}


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


#: Tasks the memory view draws (a model's declared tasks among these are offered).
MEMORY_TASKS: tuple[str, ...] = ("token_embed", "token_classify", "embed")
#: Devices the memory explorer offers: those whose memory a share makes sense of (GPUs).
MEMORY_HARDWARE: tuple[str, ...] = tuple(n for n, h in HARDWARE_PRESETS.items()
                                         if memory_share_applies(h))


def _own_source(text: str) -> Any:
    """What the "your model" box holds, as ``SimConfig.from_hf_config`` takes it: a config
    pasted as JSON, else a path."""
    if text.startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"your model: the text is not valid JSON ({err}); paste a "
                             "config.json's contents, or give a path") from None
    return text


def _memory_model(model: Any) -> tuple[str, str]:
    """``memory_explorer(model=...)`` as ``(preset, your-model text)``: a preset name, or what
    the "your model" box takes — a config.json path, a model directory, a config dict or a
    transformers config — checked now, so a mistake is named before any widget is built."""
    if isinstance(model, str) and model in MODEL_PRESETS:
        return model, ""
    if isinstance(model, str | os.PathLike):
        text = os.fspath(model)
        if not text.strip():
            raise ValueError(f"model is empty; give a preset ({list(MODEL_PRESETS)}), a "
                             "config.json path, a model directory or a config dict")
        if not Path(text).expanduser().exists() and not text.lstrip().startswith("{"):
            raise ValueError(f"model {text!r} is neither a preset ({list(MODEL_PRESETS)}) nor "
                             "a config.json path or model directory that exists; give one of "
                             "those, or a config dict")
        text = str(Path(text).expanduser()) if not text.lstrip().startswith("{") else text
    elif isinstance(model, Mapping) or callable(getattr(model, "to_dict", None)):
        config = dict(model) if isinstance(model, Mapping) else model.to_dict()
        try:
            text = json.dumps(config, default=str)
        except (TypeError, ValueError) as err:
            raise TypeError(f"model: the config cannot be written as JSON for the 'your model' "
                            f"box ({err}); save it as a config.json and pass its path") from None
    else:
        raise TypeError(f"model must be a preset name, a config.json path, a model directory, "
                        f"a config dict or a transformers config, got {type(model).__name__}")
    try:
        SimConfig.from_hf_config(_own_source(text))
    except (ValueError, TypeError) as err:
        raise ValueError(f"model: {err}") from err
    return next(iter(MODEL_PRESETS)), text


#: Prompt lengths the memory explorer's range slider offers: powers of two, 256 … 1M.
MEMORY_LENGTHS: tuple[int, ...] = tuple(1 << k for k in range(8, 21))
#: Chunk budgets (``max_num_batched_tokens``) the memory explorer offers.
MEMORY_BUDGETS: tuple[int, ...] = tuple(1 << k for k in range(8, 15))


def context_range(max_model_len: int | None) -> tuple[int, int]:
    """The memory explorer's opening range: 1K up to the longest offered length that fits the
    model's context (``max_model_len``; 1M when unknown), at least 1K–2K."""
    context = max_model_len or MEMORY_LENGTHS[-1]
    fits = [n for n in MEMORY_LENGTHS if n <= context]
    high = max(fits[-1] if fits else 2048, 2048)
    return (1024, high)


def _dtype_name(dtype: Any) -> str:
    return "no cast" if dtype is None else str(dtype).removeprefix("torch.")


class MemoryExplorer(Explorer):
    """Peak pooling memory vs prompt length for model and hardware presets.

    Attributes:
        model: ``Dropdown`` of ``tp.MODEL_PRESETS``.
        hardware: ``Dropdown`` of the GPUs in ``tp.HARDWARE_PRESETS`` (``MEMORY_HARDWARE``).
        task: ``Dropdown``: ``"default"`` (the model's task, named in the label), then the
            tasks the model declares (``declared_tasks()``; vLLM refuses any other).
        dtype: ``Dropdown`` of hidden-state dtypes.
        head_dtype: ``Dropdown``: ``"default"`` (vLLM's, named in the label), ``"same"`` (no
            cast: the head runs in ``dtype``) or ``"float32"``.
        activation: ``Dropdown``: ``"default"`` (vLLM's: on) or ``"off"``: the head's
            activation (normalise / softmax), whose float32 output is alive with the cast.
        budget: ``SelectionSlider``, the chunk budget (``max_num_batched_tokens``; starts at
            vLLM's for the model and GPU), which sets the clone policy's (2T − L) peak — unless
            the head sets the peak, as under vLLM's float32 head and activation: the "What sets
            the peak" line above the table says which part does.
        prompt_len: ``SelectionRangeSlider`` over 256 … 1M tokens (value: ``(low, high)``).
        policies: ``MultiToggle`` of the retention policies (value: a tuple of names).
        async_scheduling: ``ToggleButton`` (starts off: vLLM's default for a pooling model).
        your_model: ``Text``: a config.json path, a model directory or a config as JSON; when
            set it replaces the ``model`` preset (``SimConfig.from_hf_config``).
        tensor_parallel_size: ``IntSlider`` 1 … 8, GPUs the model is split over (weights and
            KV heads split; each GPU pools the whole width; the table's "of KV" share).
    """
    def __init__(self, *, model: Any = "Qwen3-Embedding-8B", hardware: str = "H100 SXM",
                 prompt_len: tuple[int, int] | None = None, budget: int | None = None,
                 policies: Sequence[str] | None = None,
                 async_scheduling: bool | None = None) -> None:

        preset, own = _memory_model(model)  # a preset name, or what "your model" takes
        if hardware not in MEMORY_HARDWARE:
            checks.choice("hardware", hardware, HARDWARE_PRESETS)
            raise ValueError(f"hardware {hardware!r}: the memory explorer gives pooling's share "
                             "of a device's memory, which a CPU's RAM (the host's, shared with "
                             f"everything) has not; choose one of {list(MEMORY_HARDWARE)}, or "
                             "call tp.viz.render_memory(hardware='CPU') for the bytes alone")
        if async_scheduling is None:
            # (imported here: only this explorer asks; the file's imports are shared)
            from ..sim.vllm_rules.defaults import default_async_scheduling

            # vLLM's default for a pooling model: off (vllm/config/vllm.py,
            # VllmConfig.__post_init__: "Disabling asynchronous scheduling by default for
            # pooling model"), as tokpool's rule room says (defaults.default_async_scheduling)
            async_scheduling = default_async_scheduling("pooling")
        checks.flag("async_scheduling", async_scheduling)
        if policies is not None:
            checks.each("policies", checks.items("policies", policies, what="a list of "
                        "retention policies"), lambda n, v: checks.choice(n, v,
                                                                          RETENTION_POLICIES))
        if prompt_len is None:
            context = (SimConfig.from_hf_config(_own_source(own)).max_model_len if own
                       else MODEL_PRESETS[preset].max_model_len)
            prompt_len = context_range(context)
        self._note = ""
        bounds = checks.items("prompt_len", prompt_len, what="a (shortest, longest) pair")
        if len(bounds) != 2:
            raise ValueError(f"prompt_len must be a (shortest, longest) pair of prompt "
                             f"lengths, got {prompt_len!r}")
        for value in bounds:
            if as_whole(value) not in MEMORY_LENGTHS:
                raise ValueError(f"prompt_len bounds must be powers of two from 256 to 1M "
                                 f"({format_tokens(1 << 20)}); got {value!r}")
        if bounds[0] > bounds[1]:
            raise ValueError(f"prompt_len runs backwards: {prompt_len!r}; give (shortest, "
                             "longest)")
        prompt_len = (int(bounds[0]), int(bounds[1]))
        if budget is None:  # vLLM's budget for the model and GPU (LLM class), where offered
            default = SimConfig.for_model(preset, hardware=hardware).max_num_batched_tokens
            budget = default if default in MEMORY_BUDGETS else SimConfig().max_num_batched_tokens
        if as_whole(budget) not in MEMORY_BUDGETS:
            raise ValueError(f"budget must be one of {list(MEMORY_BUDGETS)}; got {budget!r}")
        self.model = W.Dropdown(options=list(MODEL_PRESETS), value=preset, description="model",
                                tooltip="a model preset (the 'your model' box, when filled, "
                                        "replaces it)")
        self.hardware = W.Dropdown(options=list(MEMORY_HARDWARE), value=hardware,
                                   description="hardware",
                                   tooltip="the GPU: its memory is the reference line and the "
                                           "table's shares (GPUs only: a CPU's RAM is the "
                                           "host's)")
        self.your_model = W.Text(value=own, continuous_update=False, description="your model",
                                 placeholder="config.json path, model directory or JSON",
                                 tooltip="a config.json path, a model directory or a config "
                                         "pasted as JSON; empty: the model preset",
                                 style=_WIDE, layout=W.Layout(width="440px"))
        self.task = W.Dropdown(options=self._task_options(), value="default",
                               description="task",
                               tooltip="the pooling task: only the tasks the model declares "
                                       "(vLLM refuses any other)")
        self.dtype = W.Dropdown(options=["bfloat16", "float16", "float32"], value="bfloat16",
                                description="dtype", tooltip="the hidden states' dtype")
        self.head_dtype = W.Dropdown(options=self._head_options(preset), value="default",
                                     description="head dtype", style=_WIDE,
                                     tooltip="the pooling head's dtype (vLLM's pooling heads: "
                                             "float32)")
        self.activation = W.Dropdown(options=[("default: on (vLLM's)", "default"),
                                              ("off (not vLLM's default)", "off")],
                                     value="default", description="activation", style=_WIDE,
                                     tooltip="the head's activation (normalise / softmax): "
                                             "its float32 output is alive with the cast, so "
                                             "with it the head sets the peak")
        self.budget = W.SelectionSlider(
            options=[(format_tokens(n), n) for n in MEMORY_BUDGETS], value=budget,
            description="chunk budget (tokens/step)", continuous_update=False, style=_WIDE,
            tooltip="max_num_batched_tokens: tokens per engine step (drag, or the arrow keys)",
            layout=_slider_layout())
        self.prompt_len = W.SelectionRangeSlider(
            options=[(format_tokens(n), n) for n in MEMORY_LENGTHS],
            value=prompt_len, description="prompt length", continuous_update=False,
            tooltip="the shortest and longest prompt drawn (drag the handles, or the arrow keys)",
            style=_WIDE, layout=W.Layout(width="440px"),
        )
        chosen = tuple(RETENTION_POLICIES) if policies is None else tuple(policies)
        self.policies = MultiToggle(RETENTION_POLICIES, chosen, description="policies")
        self.async_scheduling = W.ToggleButton(value=async_scheduling,
                                               description="async scheduling", icon="bolt",
                                               layout=W.Layout(width="auto"))
        _mark_toggle(self.async_scheduling,
                     on="async scheduling is on (not vLLM's default for a pooling model): "
                        "click for sync scheduling",
                     off="async scheduling is off (sync: vLLM's default for a pooling model): "
                         "click to turn it on")
        self.tensor_parallel_size = W.IntSlider(value=1, min=1, max=8, continuous_update=False,
                                                description="tensor-parallel GPUs", style=_WIDE,
                                                tooltip="GPUs the model is split over (1 to 8)",
                                                layout=_slider_layout())
        super().__init__([self.model, self.hardware, self.task, self.dtype, self.head_dtype,
                          self.activation, self.budget, self.prompt_len, self.policies,
                          self.async_scheduling, self.your_model, self.tensor_parallel_size])
        self._space_readouts()
        self.task.__dict__["_tokpool_refuse"] = self._refuse_task  # says why, not only what
        self.model.observe(self._relabel, names="value")
        self.your_model.observe(self._relabel, names="value")
        self.prompt_len.observe(self._widen, names="value")
        self._watch(self.model, self.hardware, self.task, self.dtype, self.head_dtype,
                    self.activation, self.budget, self.prompt_len, self.policies,
                    self.async_scheduling, self.your_model, self.tensor_parallel_size)
        self.update()

    def _space_readouts(self) -> None:
        """A slider's readout ("16K") and the next control's label ("prompt length") ran into
        each other ("16Kprompt length"): each slider row keeps a gap after its readout."""
        row = self.children[1]
        for box in row.children:
            if isinstance(box, W.HBox) and any(isinstance(c, W.SelectionSlider |
                                                          W.SelectionRangeSlider)
                                               for c in box.children):
                box.layout.margin = "0 18px 0 0"
                for label in box.children:
                    if isinstance(label, W.Label):
                        label.layout.margin = "0 0 0 6px"

    def _own_config(self) -> SimConfig | None:
        """The "your model" box's config as the simulator reads it (``None``: empty, or not
        readable; the render says why)."""
        own = self.your_model.value.strip()
        if not own:
            return None
        try:
            return SimConfig.from_hf_config(_own_source(own))
        except (ValueError, TypeError):
            return None

    def declared_tasks(self) -> tuple[str, ...]:
        """The tasks the shown model declares as vLLM serves it, which the view can draw
        (``hf_config.declared_tasks``, as ``vllm serve`` resolves them); the task menu offers
        these only."""
        own = self._own_config()
        if own is not None:
            declared = own.model.declared_tasks
        else:
            declared = declared_tasks(MODEL_PRESETS[self.model.value].default_task, "auto")
        return tuple(t for t in declared if t in MEMORY_TASKS)

    def _refuse_task(self, message: str) -> None:
        own = self._own_config()
        name = own.model.name if own is not None else self.model.value
        self.fail(f"{message}: {name} declares {list(self.declared_tasks())} as vLLM serves it, "
                  "and vLLM refuses any other task (check_configured_task); pick another "
                  "model for that task")

    def _task_options(self) -> list[tuple[str, str]]:
        own = self._own_config()
        default = own.task if own is not None else MODEL_PRESETS[self.model.value].default_task
        return [(f"default ({default})", "default"), *((t, t) for t in self.declared_tasks())]

    @staticmethod
    def _head_options(model: str) -> list[tuple[str, str]]:

        default = _dtype_name(SimConfig.for_model(model).head_dtype)
        return [(f"default: {default} (vLLM's)", "default"),
                ("same as dtype, no cast (not vLLM's default)", "same"),
                ("float32", "float32")]

    def _relabel(self, change: dict[str, Any]) -> None:
        # the labels name the new model's defaults and its declared tasks; a task it does
        # not declare goes back to its default (said above the figure), else values stay
        with self.hold_trait_notifications():
            task, head = self.task.value, self.head_dtype.value
            self.task.unobserve(self._on_change, names="value")
            self.head_dtype.unobserve(self._on_change, names="value")
            try:
                options = self._task_options()
                if task not in [v for _, v in options]:
                    self._note = (f"task {task} is not one the model declares (vLLM would "
                                  f"refuse it): back to its default, {options[0][0]}")
                    task = "default"
                self.task.options = options
                self.head_dtype.options = self._head_options(self.model.value)
                self.task.value, self.head_dtype.value = task, head
            finally:
                self._watch(self.task, self.head_dtype)

    def _widen(self, change: dict[str, Any]) -> None:
        """A range collapsed to one length (both handles on 8K) is widened by one step, so
        there is a curve to draw and the two handles can be told apart again."""
        low, high = change["new"]
        if low != high:
            return
        i = MEMORY_LENGTHS.index(low)
        widened = ((low, MEMORY_LENGTHS[i + 1]) if i + 1 < len(MEMORY_LENGTHS)
                   else (MEMORY_LENGTHS[i - 1], high))
        self._note = (f"a range needs two lengths: {format_tokens(low)}–{format_tokens(high)} "
                      f"was widened to {format_tokens(widened[0])}–{format_tokens(widened[1])}")
        self.prompt_len.value = widened

    def _on_change(self, change: dict[str, Any] | None = None) -> None:
        if change is not None and change.get("owner") is self.prompt_len:
            low, high = change["new"]
            if low == high:
                return  # _widen moves the handles apart; that change redraws
        self.update()

    def render(self) -> View:
        view = self._render()
        if self._note:
            note, self._note = self._note, ""
            view = dataclasses.replace(view, html=(
                '<div class="tokpool-note" style="font-family:sans-serif;color:#0057a0;'
                f'padding:2px 0">ⓘ {_html.escape(note)}</div>' + view.html))
        return view

    def _render(self) -> View:
        task = None if self.task.value == "default" else self.task.value
        head: str | None = {"default": "default", "same": self.dtype.value}.get(
            self.head_dtype.value, self.head_dtype.value)
        own = self.your_model.value.strip()
        model: Any = self.model.value
        if own:
            model = _own_source(own)
            try:
                return self._render_memory(model, task, head)
            except (ValueError, TypeError) as err:  # the config.json the box names
                raise ValueError(f"your model: {err}") from err
        return self._render_memory(model, task, head)

    def _render_memory(self, model: Any, task: str | None, head: str | None) -> View:
        return render_memory(
            model=model, hardware=self.hardware.value, task=task,
            tensor_parallel_size=self.tensor_parallel_size.value,
            dtype=self.dtype.value, head_dtype=head, prompt_len=self.prompt_len.value,
            policies=self.policies.value, async_scheduling=self.async_scheduling.value,
            max_num_batched_tokens=self.budget.value,
            use_activation=None if self.activation.value == "default" else False,
        )


def memory_explorer(*, model: Any = "Qwen3-Embedding-8B", hardware: str = "H100 SXM",
                    prompt_len: tuple[int, int] | None = None, budget: int | None = None,
                    policies: Sequence[str] | None = None,
                    async_scheduling: bool | None = None) -> MemoryExplorer:
    """Explore peak pooling memory against prompt length for model and hardware presets.

    Args:
        model: a model preset (``tp.MODEL_PRESETS``), or what the explorer's "your model" box
            takes: a config.json path, a model directory, a config dict or a transformers
            config (it fills that box).
        hardware: initial device (``tp.HARDWARE_PRESETS``, GPUs: a share of a CPU's RAM,
            the host's, means nothing).
        prompt_len: initial ``(shortest, longest)`` prompt; powers of two from 256 to 1M
            (default: 1K up to the model's context, ``context_range``).
        budget: initial chunk budget (a power of two, 256 … 16K; default: vLLM's for the
            model and GPU).
        policies: the retention policies shown at first (default: all four).
        async_scheduling: start with async scheduling on or off (default: off, vLLM's default
            for a pooling model).

    The explorer opens with vLLM 0.33.0's defaults (sync scheduling, float32 head with its
    activation, vLLM's chunk budget): its first table is what ``tp.simulate`` gives for
    ``SimConfig.for_model(model, hardware=hardware)``.

    Returns:
        The explorer widget; e.g. ``ex.prompt_len.value = (1024, 65536)`` redraws it.

    Raises:
        ValueError: a range bound or budget the controls do not offer; a model that is neither
            a preset nor a readable config (the reason is named).

    Example:
        >>> ex = tp.memory_explorer(model={"architectures": ["Qwen3ForCausalLM"],
        ...     "model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 4,
        ...     "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000,
        ...     "max_position_embeddings": 8192})
        >>> ex.your_model.value[:16], ex.declared_tasks()
        ('{"architectures"', ('embed', 'token_embed'))
    """
    return MemoryExplorer(model=model, hardware=hardware, prompt_len=prompt_len, budget=budget,
                          policies=policies, async_scheduling=async_scheduling)
