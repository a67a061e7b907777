"""Controls that refuse a value they cannot take, in the explorer's panel, instead of raising
ipywidgets' ``TraitError`` (which names neither the value nor the choices) or clamping it.

``guard_controls(controls, refuse)`` makes every control of an explorer check a value set from
code (``ex.hardware.value = "TPU"``, ``ex.layer.value = 10**9``) before ipywidgets sees it:

- a menu (``Dropdown``, ``ToggleButtons``, ``SelectionSlider``): one of its options;
- a range (``SelectionRangeSlider``): two of its options, the lower one first;
- a slider (``IntSlider``, ``FloatSlider``): a whole / finite number in ``[min, max]`` (the
  slider would clamp ``10**9`` to its max and cast ``1.5`` to 1 without a word);
- a toggle (``ToggleButton``, ``Checkbox``): ``True`` or ``False``;
- a text box (``Text``, ``Textarea``): a string;
- a ``MultiToggle``: a tuple of its options.

A refused value leaves the control as it was and calls ``refuse(message)`` (the explorer's
``fail``: the output is cleared, the message names the control, its value and what it takes).
Values set by the browser (a click, a drag) come through ``set_state``, never out of range,
and are not checked twice.

How: each control's class is swapped, once, for a subclass with the check in ``__setattr__``
(``ipywidgets`` validates the type of a value before any validator could see it, so a
``@validate`` hook would come too late). The subclass keeps its base's name and widget model.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as W

from .._args import as_whole

__all__ = ["guard_controls", "label_of", "show_tooltip", "value_problem"]

_GUARDED: dict[type, type] = {}


def label_of(widget: Any) -> str:
    """A control's description as plain text (``show_tooltip`` wraps it in a titled span)."""
    text = getattr(widget, "description", "") or ""
    if "<" in text:
        text = html.unescape(re.sub(r"<[^>]*>", "", text))
    return text


def _label(widget: Any) -> str:
    return label_of(widget) or type(widget).__name__


def show_tooltip(widget: Any) -> None:
    """Make a described control's tooltip appear in the browser.

    ipywidgets 8 shows ``tooltip`` only on a control without a description (its Text,
    Dropdown and Checkbox views set the title only then), so a described control's tooltip
    was never seen. Its description becomes the same words inside a ``<span title=...>``
    (``description_allow_html``; ipywidgets' sanitizer keeps ``title``); ``label_of`` reads
    the plain words back.
    """
    tip, text = getattr(widget, "tooltip", None), getattr(widget, "description", "")
    if not tip or not text or "<span title=" in text:
        return
    widget.description_allow_html = True
    widget.description = (f'<span title="{html.escape(tip, quote=True)}">{html.escape(text)}'
                          "</span>")


def _options(widget: Any) -> tuple[list[Any], list[str]]:
    values = list(getattr(widget, "_options_values", ()) or ())
    labels = [str(x) for x in getattr(widget, "_options_labels", values) or values]
    return values, labels


def _is_option(value: Any, values: Sequence[Any]) -> bool:
    try:
        return any(value == v and type(value) is not bool for v in values) or (
            isinstance(value, bool) and any(v is value for v in values))
    except (TypeError, ValueError):  # an unhashable or array-like value
        return False


def value_problem(widget: Any, value: Any) -> str | None:
    """Why ``widget`` cannot take ``value`` (a sentence naming the control, the value and what
    it takes), or ``None`` when it can."""
    name = _label(widget)
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    if isinstance(widget, W.SelectionRangeSlider):
        values, labels = _options(widget)
        ok = (isinstance(value, tuple | list) and len(value) == 2
              and all(_is_option(v, values) for v in value)
              and values.index(value[0]) <= values.index(value[1]))
        return None if ok else (f"{name}: {shown} is not a range of two of its lengths "
                                f"(lower first); it takes ({labels[0]}, {labels[-1]}) or any "
                                f"two of {labels}")
    if isinstance(widget, W.widgets.widget_selection._Selection):
        values, labels = _options(widget)
        return None if _is_option(value, values) else (
            f"{name}: {shown} is not one of its choices {labels}")
    if isinstance(widget, W.IntSlider | W.FloatSlider):
        integer = isinstance(widget, W.IntSlider)
        kind = "a whole number" if integer else "a number"
        span = (f"{widget.min} to {widget.max}" if integer
                else f"{widget.min:g} to {widget.max:g}")
        number = as_whole(value) if integer else (
            float(value) if isinstance(value, int | float) and not isinstance(value, bool)
            else None)
        if number is None or (not integer and not math.isfinite(number)):
            return f"{name}: {shown} is not {kind}; it takes {kind} from {span}"
        if not widget.min <= number <= widget.max:
            return (f"{name} must be from {span}; {shown} is out of range (the slider would "
                    "clamp it)")
        return None
    if isinstance(widget, W.ToggleButton | W.Checkbox):
        return None if isinstance(value, bool) else (
            f"{name}: {shown} is not True or False (a string such as 'no' would be truthy)")
    if isinstance(widget, W.Text | W.Textarea):
        return None if isinstance(value, str) else f"{name}: {shown} is not text (a str)"
    options = getattr(widget, "options", None)
    if options is not None and isinstance(getattr(widget, "value", None), tuple):  # MultiToggle
        ok = isinstance(value, tuple | list) and all(_is_option(v, options) for v in value)
        return None if ok else (f"{name}: {shown} is not a tuple of its options "
                                f"{list(options)} (e.g. ('clone',))")
    return None


def _guarded_class(base: type) -> type:
    """``base`` with ``value_problem`` checked on every ``value`` set from code."""
    if base not in _GUARDED:
        def __setattr__(self, name: str, value: Any) -> None:
            refuse = self.__dict__.get("_tokpool_refuse")
            if name == "value" and refuse is not None:
                problem = value_problem(self, value)
                if problem is not None:
                    refuse(problem)
                    return
            base.__setattr__(self, name, value)

        _GUARDED[base] = type(base.__name__, (base,), {
            "__setattr__": __setattr__, "__module__": base.__module__,
            "__doc__": base.__doc__})
    return _GUARDED[base]


def guard_controls(controls: Sequence[Any], refuse: Callable[[str], None]) -> None:
    """Make each control refuse, through ``refuse(message)``, a value it cannot take (see the
    module docstring). Controls of other kinds are left as they are."""
    for control in controls:
        if not isinstance(control, W.ValueWidget | W.Box) or not hasattr(control, "value"):
            continue
        if not isinstance(control, tuple(_GUARDED.values())):
            control.__class__ = _guarded_class(type(control))
        control.__dict__["_tokpool_refuse"] = refuse
