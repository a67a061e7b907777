"""Explorers never hang and never leave a stale figure; readable tokens, steps and plots.

Hostile values are refused before any work, with the number and what to change; any exception
from a render (not only ``ValueError``) clears the output and shows the message; a value typed
into a slider's box that the slider cannot take is refused, not clamped.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import ipywidgets as widgets_module
import matplotlib as mpl
import numpy as np
import pytest
import torch

import tokpool as tp
from tokpool import widgets
from tokpool.plots.token_text import CONTINUATION, _byte_decoder, split_characters
from tokpool.widgets.memory import context_range
from tokpool.widgets.ownership import MAX_STEPS, check_workload
from tokpool.widgets.rewards import steps_html
from tokpool.widgets.tokens import MAX_TEXT_CHARS, all_hidden_states, hidden_states

mpl.use("Agg")


def _cleared(ex) -> bool:
    return ex.view is None and ex._output.layout.display == "none" and ex.html.value == ""


# --- bounded before work ----------------------------------------------------------------------


@pytest.mark.parametrize("others", ["100000000", "5000", "9" * 40])
def test_ownership_refuses_huge_workloads_before_simulating(others, monkeypatch) -> None:
    ex = tp.ownership_explorer([20, 6, 9], budget=16, hidden_size=8)
    import tokpool.sim

    def no_simulation(*args, **kwargs):  # the refusal must come before any work
        raise AssertionError("simulate was called for a workload that must be refused")

    monkeypatch.setattr(tokpool.sim, "simulate", no_simulation)
    start = time.monotonic()
    ex.more_requests.value = others
    assert time.monotonic() - start < 5  # a generous bound: refused without work
    assert _cleared(ex) and ex.error
    assert ("engine steps" in ex.error and f"at most {MAX_STEPS}" in ex.error) or (
        "digits" in ex.error)
    assert "tokens per step" in ex.error or "digits" in ex.error


def test_check_workload_counts_steps_and_requests() -> None:
    assert check_workload([20, 6, 9], 16) == 3
    with pytest.raises(ValueError, match=r"at least 6,250,001 engine steps \(100,000,015 tokens"):
        check_workload([100_000_000, 6, 9], 16)
    with pytest.raises(ValueError, match="17 requests"):
        check_workload([1] * 17, 16)


def test_typed_slider_values_out_of_range_are_refused_not_clamped() -> None:
    ex = tp.ownership_explorer([20, 6, 9], budget=16, hidden_size=8)
    assert ex.budget.readout is False  # the editable readout that clamped silently is gone
    box = ex.typed["tokens per step"]
    box.value = "100000"
    assert _cleared(ex) and "from 2 to 64; 100000 is out of range" in ex.error
    assert ex.budget.value == 16  # not clamped to 64 behind the user's back
    box.value = "abc"
    assert "'abc' is not a whole number" in ex.error
    ex.typed["request 0 tokens"].value = "0"
    assert "request 0 tokens must be from 1 to 96" in ex.error
    box.value = "12"  # a valid value moves the slider and brings the figure back
    assert ex.error is None and ex.budget.value == 12 and ex.view is not None
    ex.budget.value = 20  # the slider writes its value into the box
    assert box.value == "20"


def test_any_exception_clears_the_output_and_is_shown(monkeypatch) -> None:
    ex = tp.ownership_explorer([5], budget=8, hidden_size=8)
    assert ex.view is not None

    def out_of_memory(*args, **kwargs):
        raise MemoryError("cannot allocate 22.7 GB")

    monkeypatch.setattr(type(ex), "render", out_of_memory)
    ex.async_scheduling.value = True  # must not raise inside the widget callback
    assert _cleared(ex) and ex.error == "MemoryError: cannot allocate 22.7 GB"
    assert "MemoryError" in ex._errors.value


def test_token_explorer_refuses_long_text_before_tokenizing(monkeypatch) -> None:
    model = tp.load_model("tiny-decoder")
    ex = tp.token_explorer(model, "hello world")
    monkeypatch.setattr(model, "token_ids", lambda *a, **k: pytest.fail("tokenized"))
    ex.text_input.value = "x" * (MAX_TEXT_CHARS + 1)
    assert _cleared(ex) and f"at most {MAX_TEXT_CHARS:,}" in ex.error


def test_all_layers_from_one_forward_equal_each_layer(monkeypatch) -> None:
    model = tp.load_model("tiny-decoder")
    (ids,) = model.token_ids(["hello world, hello tokens"])
    every = all_hidden_states(model, ids)  # [layers + 1, n, hidden]
    assert every.shape == (model.num_layers + 1, ids.numel(), model.hidden_size)
    for layer in range(model.num_layers + 1):
        torch.testing.assert_close(every[layer], hidden_states(model, "hello world, hello tokens",
                                                               layer=layer), rtol=0, atol=1e-6)
    ex = tp.token_explorer(model, "hello world, hello tokens")
    calls, prepared = [], []
    real, real_prepare = widgets.tokens.TokenHeatmap.png, widgets.tokens.TokenHeatmap._prepare
    monkeypatch.setattr(widgets.tokens.TokenHeatmap, "png",
                        lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    monkeypatch.setattr(widgets.tokens.TokenHeatmap, "_prepare",
                        lambda self, *a: prepared.append(1) or real_prepare(self, *a))
    ex.metric.value = "cosine to text mean"  # same layer: the heatmap is reused
    ex.layer.value = 0
    ex.layer.value = model.num_layers  # seen before: reused
    assert calls == [1]
    assert prepared == []  # the labels were drawn for the first layer: layer 0 repaints


def test_memory_explorer_opens_within_the_context_and_widens_a_collapsed_range() -> None:
    ex = tp.memory_explorer()  # Qwen3-Embedding-8B: 32K context
    assert ex.prompt_len.value == (1024, 32768) == context_range(32768)
    assert context_range(None) == (1024, 1 << 20) and context_range(1000) == (1024, 2048)
    ex.prompt_len.value = (8192, 8192)
    assert ex.prompt_len.value == (8192, 16384) and ex.error is None
    assert "widened to 8K–16K" in ex.html.value
    ex.prompt_len.value = (1 << 20, 1 << 20)
    assert ex.prompt_len.value == (1 << 19, 1 << 20)
    ex.your_model.value = "{not json"
    assert _cleared(ex) and "not valid JSON" in ex.error
    # the selection sliders' editable readouts (text typed there blanked them) are replaced by
    # read-only labels that follow the handles
    assert ex.budget.readout is False and ex.prompt_len.readout is False
    shown = {box.children[0].description: box.children[1].value
             for box in ex.children[1].children
             if isinstance(box, widgets_module.HBox) and len(box.children) == 2
             and isinstance(box.children[1], widgets_module.Label)}
    assert shown == {"chunk budget (tokens/step)": "8K", "prompt length": "512K – 1M"}


@dataclass
class _Scores:
    rewards: torch.Tensor


class _StubPRM:
    threshold = 0.5

    def score(self, problem, steps):
        return _Scores(torch.tensor([0.1 if "wrong" in s else 0.9 for s in steps]))


def test_step_reward_explorer_refuses_empty_problem_and_thresholds_above_one() -> None:
    ex = tp.step_reward_explorer(_StubPRM(), "Q?", ["ok  fine", "wrong", "ok"])
    assert "ok·" not in ex.html.value and "↵" not in ex.html.value  # steps read as prose
    assert "step 0 · 0.90" in ex.html.value and "ok fine" in ex.html.value
    ex.typed["threshold"].value = "5"
    assert _cleared(ex) and "threshold must be from 0 to 1" in ex.error
    assert ex.threshold.value == 0.5
    ex.typed["threshold"].value = "0.2"
    assert ex.error is None and ex.threshold.value == pytest.approx(0.2)
    ex.problem.value = "  "
    assert _cleared(ex) and "write the problem" in ex.error
    ex.problem.value = "Q?"
    ex.steps.value = "\n".join(["a step"] * 41)
    assert _cleared(ex) and "at most 40" in ex.error


def test_steps_html_escapes_and_keeps_prose() -> None:
    page = steps_html(["<b>1 + 1</b>  = 2", "so 2"], [0.9, 0.2])
    assert "&lt;b&gt;1 + 1&lt;/b&gt; = 2" in page and "1·+" not in page


# --- readable tokens ---------------------------------------------------------------------------


def test_characters_split_across_tokens_are_shown_where_they_start() -> None:
    tokyo = "東京".encode()  # 6 bytes
    pieces = [b" ", "Ü".encode()[:1], "Ü".encode()[1:] + b"n", tokyo[:2], tokyo[2:4], tokyo[4:]]
    assert split_characters(pieces) == [" ", "Ü", "n", "東", "京", CONTINUATION]
    assert split_characters([b"\xff", b"ok"]) == ["\ufffd", "ok"]


def test_byte_level_table_is_gpt2s_reversible_map() -> None:
    class Slow:
        byte_decoder = None
        backend_tokenizer = type("B", (), {"decoder": type("ByteLevel", (), {})()})()

    table = _byte_decoder(Slow())
    assert table is not None and sorted(table.values()) == list(range(256))
    assert table["Ġ"] == ord(" ") and table["Ċ"] == ord("\n") and table["a"] == ord("a")


def test_similarity_labels_fit_the_axes() -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10.5, 5.6), layout="constrained")
    tokens = [f"tok{i}" for i in range(90)]
    ax = tp.plot_similarity(torch.randn(90, 8), tokens=tokens, ax=axes[0])
    labels = [t.get_text() for t in ax.get_yticklabels()]
    fig.canvas.draw()
    boxes = [t.get_window_extent() for t in ax.get_yticklabels()]
    overlaps = sum(a.overlaps(b) for a, b in itertools.pairwise(boxes))
    plt.close(fig)
    assert 2 <= len(labels) < 90 and overlaps == 0


# --- honest plots ------------------------------------------------------------------------------


def test_kv_share_says_offloads_zero_and_keeps_identical_lines_visible() -> None:
    import matplotlib.pyplot as plt
    import pandas as pd

    lens = [1024, 2048, 4096]
    df = pd.DataFrame([{"prompt_len": n, "policy": p, "peak_pooling_bytes": b}
                       for n in lens for p, b in (("legacy", n * 10), ("clone", n * 10),
                                                   ("offload", 0))])
    ax = tp.viz.plot_pooling_share_of_kv(df, 1 << 30)
    lines = {line.get_label(): line for line in ax.get_lines()}
    plt.close(ax.figure)
    offload = next(k for k in lines if k.startswith("offload"))
    assert "0 %" in offload and len(lines[offload].get_xdata()) == 0
    clone = next(k for k in lines if k.startswith("clone"))
    assert "= legacy" in clone and lines[clone].get_linestyle() == "--"
    assert np.nanmin(lines["legacy"].get_ydata()) > 1e-4  # no 1e-06 % floor


def test_chunked_error_of_all_zeros_is_drawn_and_said_plainly() -> None:
    import matplotlib.pyplot as plt
    import pandas as pd

    df = pd.DataFrame({"position": [0, 1, 2] * 2, "dtype": ["float32"] * 3 + ["bfloat16"] * 3,
                       "rel_rms": 0.0})
    ax = tp.viz.plot_chunked_error(df, metric="rel_rms")
    texts = " ".join(t.get_text() for t in ax.texts)
    scale = ax.get_yscale()
    plt.close(ax.figure)
    assert scale == "linear" and "exactly 0" in texts


# --- one redraw per committed value -----------------------------------------------------------


def _another_value(control):
    """A value ``control`` can take other than its current one (``None``: typed controls)."""
    if isinstance(control, widgets_module.SelectionRangeSlider):
        values = list(control._options_values)
        low, high = control.value
        i = values.index(high)
        return (low, values[i - 1] if values[i - 1] > low else values[i + 1])
    if isinstance(control, widgets_module.Dropdown | widgets_module.SelectionSlider
                  | widgets_module.ToggleButtons):
        return next(v for v in control._options_values if v != control.value)
    if isinstance(control, widgets_module.IntSlider):
        return control.value - 1 if control.value > control.min else control.value + 1
    if isinstance(control, widgets_module.Checkbox | widgets_module.ToggleButton):
        return not control.value
    return None


@pytest.mark.parametrize("make", [
    lambda: tp.memory_explorer(model="Qwen3-Embedding-8B", hardware="H100 SXM"),
    lambda: tp.rerank_explorer(),
    lambda: tp.ownership_explorer([20, 6, 9], budget=16, hidden_size=8),
], ids=["memory", "rerank", "ownership"])
def test_each_committed_value_redraws_once(make) -> None:
    """A slider sends its value when released (``continuous_update=False``), and one committed
    value costs one render: no observer that sets another control and draws again (issue 48:
    a chunk-budget drag must not queue redraws behind each other)."""
    ex = make()
    calls = []
    render = ex.render
    ex.render = lambda: calls.append(1) or render()
    moved = 0
    for control in ex._controls:
        if getattr(control, "continuous_update", False):
            raise AssertionError(f"{control.description}: redraws while dragged")
        value = _another_value(control)
        if value is None:
            continue
        calls.clear()
        control.value = value
        assert len(calls) == 1, (control.description, len(calls))
        moved += 1
    assert moved >= 4
