"""The explorers' shared base: ``Explorer`` (thin ipywidgets wiring around a pure
``render_*`` function) and ``MultiToggle``. Each explorer sits beside its render function
(``tokens.py``, ``rewards.py``, ``ownership.py``, ``memory.py``, ``buffer.py``,
``late_interaction.py``).

Each explorer *is* an ``ipywidgets.VBox`` (it displays itself when it ends a cell) and keeps its
controls and outputs as attributes, so code and tests can drive it::

    ex = tp.ownership_explorer()
    ex.async_scheduling.value = True   # the schedule and the memory table redraw
    ex.view                            # the last rendered View (html, png, table)
    ex.view.save("schedule.png")       # export: .png (figure), .csv (table), .html (all)

Controls that recompute use ``continuous_update=False``: work happens when a slider is released.
Values the browser sends while a redraw is pending join it (``coalesce.py``): an arrow key
pressed five times quickly draws once or twice, not five times.
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

import html as _html
import math
import uuid
from collections.abc import Sequence
from typing import Any

import ipywidgets as W
import traitlets

from .coalesce import RedrawQueue
from .guards import guard_controls, label_of, show_tooltip
from .view import View

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
        self._redraws = RedrawQueue(self.update)  # a burst of browser values: one redraw
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
        self._redraws.ask(change)

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
