"""One redraw per burst of slider values from the browser (issue 48: the memory explorer's
chunk-budget drag). ipywidgets sends one message per committed value; the kernel drew each in
turn. Values from the browser now share one pending redraw (``tokpool/widgets/coalesce.py``);
values set from code still redraw at once. ``benchmarks/explorer_drag.py`` measures the same in
a real kernel."""

from __future__ import annotations

import asyncio

import ipywidgets as W
import pytest

import tokpool as tp
from tokpool.widgets.coalesce import SETTLE_S

EXPLORERS = {
    "memory": lambda: tp.memory_explorer(),
    "rerank": lambda: tp.rerank_explorer(documents=10, doc_len=256),
    "ownership": lambda: tp.ownership_explorer([20, 6, 9], budget=16),
}
SLIDERS = (W.IntSlider, W.FloatSlider, W.SelectionSlider, W.SelectionRangeSlider)


def _sliders(ex) -> list:
    return [c for c in ex._controls if isinstance(c, SLIDERS)]


def _counted(ex) -> list:
    drawn: list = []
    render = ex.render

    def counted():
        drawn.append(1)
        return render()

    ex.render = counted
    return drawn


def _states(slider) -> list[dict]:
    """Five values the browser could send for ``slider``, each different from the last."""
    if isinstance(slider, W.SelectionRangeSlider):
        low = min(slider.index[0], len(slider.options) - 4)
        return [{"index": (low, low + 1 + k % 3)} for k in range(5)]
    if isinstance(slider, W.SelectionSlider):
        n = len(slider.options)
        return [{"index": (slider.index + 1 + k) % n} for k in range(5)]
    low = slider.min + 1 if slider.value == slider.min else slider.min
    return [{"value": low + k % 2} for k in range(5)]


async def _send(slider, states: list[dict]) -> None:
    for state in states:  # as ipywidgets applies a message from the browser
        slider.set_state(state)
    await asyncio.sleep(SETTLE_S * 4)


@pytest.mark.parametrize("name", sorted(EXPLORERS))
def test_sliders_send_a_value_only_on_release(name):
    ex = EXPLORERS[name]()
    assert _sliders(ex)
    for slider in _sliders(ex):
        assert slider.continuous_update is False, (name, slider.description)


@pytest.mark.parametrize("name", sorted(EXPLORERS))
def test_a_burst_of_browser_values_redraws_once(name):
    ex = EXPLORERS[name]()
    drawn = _counted(ex)
    for slider in _sliders(ex):
        states = _states(slider)
        drawn.clear()
        asyncio.run(_send(slider, states[:1]))
        assert len(drawn) == 1, (name, slider.description, "one value", len(drawn))
        drawn.clear()
        asyncio.run(_send(slider, states))
        assert len(drawn) == 1, (name, slider.description, "five values", len(drawn))
        assert ex.error is None, ex.error
        key, value = next(iter(states[-1].items()))
        assert getattr(slider, key) == value  # the redraw drew the last value


def test_a_value_from_code_redraws_at_once():
    ex = tp.rerank_explorer(documents=10, doc_len=256)
    drawn = _counted(ex)
    ex.documents.value = 12
    assert len(drawn) == 1 and ex.view.settings["documents"] == 12
