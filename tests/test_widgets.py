"""Explorers: pure render functions, and widgets that redraw when a control changes."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib as mpl
import numpy as np
import pytest
import torch

import tokpool as tp
from tokpool import widgets

mpl.use("Agg")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _no_figure_leak():
    import matplotlib.pyplot as plt

    before = len(plt.get_fignums())
    yield
    assert len(plt.get_fignums()) == before, "a render function left a figure open"


# --- tokens -----------------------------------------------------------------------------------


def test_token_metric_values() -> None:
    h = torch.tensor([[3.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(widgets.token_metric(h, "relative norm"), [3.0, 1.0, 1.0])
    np.testing.assert_allclose(widgets.token_metric(h, "cosine to previous token"), [0, 1, 0])
    with pytest.raises(ValueError, match="unknown metric 'x'"):
        widgets.token_metric(h, "x")  # type: ignore[arg-type]


def test_render_tokens_returns_escaped_html_and_png() -> None:
    view = widgets.render_tokens(["<s>", " a", "\n"], torch.randn(3, 8), metric="relative norm")
    assert view.png.startswith(PNG_MAGIC)
    assert "&lt;s&gt;" in view.html and "<s>" not in view.html.replace("<span", "")
    assert view.data["values"].shape == (3,)


@pytest.fixture(scope="module")
def tiny_decoder():
    return tp.load_model("tiny-decoder")


def test_token_explorer_layer_slider_redraws(tiny_decoder) -> None:
    ex = tp.token_explorer(tiny_decoder, "hello world, hello tokens")
    assert ex.layer.value == tiny_decoder.num_layers and not ex.layer.continuous_update
    first_png, first_values = ex.image.value, ex.view.data["values"]
    ex.layer.value = 0
    assert ex.image.value != first_png
    assert not np.allclose(ex.view.data["values"], first_values)
    ex.metric.value = "cosine to previous token"
    assert ex.view.data["values"][0] == 0.0
    assert "cosine to previous token" in ex.html.value


# --- step rewards -----------------------------------------------------------------------------


def test_render_step_rewards_reports_first_errors() -> None:
    view = widgets.render_step_rewards(["2+2=4", "4*3=13 <oops>", "done"], [0.9, 0.2, 0.7],
                                       threshold=0.5, true_first_error=1)
    assert view.data["predicted_first_error"] == 1
    assert "predicted first error: step 1" in view.html and "✓ match" in view.html
    assert "&lt;oops&gt;" in view.html
    assert view.png.startswith(PNG_MAGIC)
    with pytest.raises(ValueError, match="2 steps but 3 rewards"):
        widgets.render_step_rewards(["a", "b"], [0.1, 0.2, 0.3])


@dataclass
class _Scores:
    rewards: torch.Tensor


class _StubPRM:
    """Reward = 0.1 for a step containing 'wrong', else 0.9; counts calls."""

    threshold = 0.5

    def __init__(self) -> None:
        self.calls = 0

    def score(self, problem, steps):
        self.calls += 1
        return _Scores(torch.tensor([0.1 if "wrong" in s else 0.9 for s in steps]))


def test_step_reward_explorer_threshold_and_edits() -> None:
    prm = _StubPRM()
    ex = tp.step_reward_explorer(prm, "Q?", ["ok", "wrong", "ok"], true_first_error=1)
    assert ex.view.data["predicted_first_error"] == 1 and "✓ match" in ex.html.value
    ex.threshold.value = 0.95  # every step is now below the cut; no new model call
    assert ex.view.data["predicted_first_error"] == 0 and prm.calls == 1
    ex.threshold.value = 0.5
    ex.steps.value = "ok\nok\nwrong"  # edited steps are re-scored; labels no longer apply
    assert ex.view.data["predicted_first_error"] == 2 and prm.calls == 2
    assert "labelled" not in ex.html.value
    ex.steps.value = "   "
    assert "at least one step" in ex._errors.value
