"""Issue 37: first-load messages and progress are plain output, the live PRM sample has the
test split's mix, and the two model explorers redraw without running the model again.

The cold-cache test executes notebook 03's first cells in a real kernel with ``TOKPOOL_CACHE``
pointed at an empty folder, so the GGUF conversion happens in that run whatever ran before
(the shared test session may have warmed the default cache).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import nbformat
import numpy as np
import pytest
from notebook_numbers import NOTEBOOK_DIR, run_notebook

import tokpool as tp
from tokpool.plots.rewards import StepRewardChart
from tokpool.widgets import tokens as token_widgets

WIDGET = "application/vnd.jupyter.widget-view+json"


def _stderr(nb: nbformat.NotebookNode) -> list[tuple[int, str]]:
    return [(i, out.get("text", "")[:300]) for i, cell in enumerate(nb.cells)
            for out in cell.get("outputs", [])
            if out["output_type"] == "stream" and out.get("name") == "stderr"]


@pytest.mark.notebook
def test_notebook_03_first_cells_on_a_cold_cache_show_one_plain_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbconvert.preprocessors import ExecutePreprocessor

    cache = tmp_path / "cold-cache"
    monkeypatch.setenv("TOKPOOL_CACHE", str(cache))  # the kernel inherits it: nothing cached
    monkeypatch.setenv("TOKPOOL_QUICK", "1")
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.read(NOTEBOOK_DIR / "03_token_embeddings.ipynb", as_version=4)
    nb.cells = nb.cells[:4]  # title, imports + load_model, prose, the first encode
    ExecutePreprocessor(timeout=600, kernel_name="python3").preprocess(
        nb, {"metadata": {"path": str(NOTEBOOK_DIR)}})
    assert any((cache / "models").iterdir()), "the model was not converted in this run"
    assert _stderr(nb) == []
    widgets = [i for i, c in enumerate(nb.cells) for o in c.get("outputs", [])
               if WIDGET in o.get("data", {})]
    assert widgets == []
    stdout = "".join(o.get("text", "") for o in nb.cells[1].outputs
                     if o["output_type"] == "stream")
    lines = [line for line in stdout.splitlines() if "tokpool:" in line]
    assert len(lines) == 1, stdout
    assert "first load of smollm2-135m" in lines[0] and " done in " in lines[0]
    assert "\r" not in stdout  # one line, written once: nothing to redraw after reopening


@pytest.mark.notebook
@pytest.mark.parametrize("name", ["01_task_gate", "03_token_embeddings",
                                  "04_prm_step_rewards"])
def test_notebooks_show_nothing_from_stderr(name: str) -> None:
    nb, _ = run_notebook(NOTEBOOK_DIR / f"{name}.ipynb")
    assert _stderr(nb) == []
    if name == "04_prm_step_rewards":  # the scoring bar: one stdout line, redrawn in place
        cells = [c for c in nb.cells if any("scoring (" in o.get("text", "")
                                            for o in c.get("outputs", []))]
        assert len(cells) == 1
        text = "".join(o.get("text", "") for o in cells[0].outputs
                       if o["output_type"] == "stream")
        # what a reader sees: consecutive stream outputs joined, each carriage return going
        # back to the start of its line (JupyterLab does both, live and when reopened)
        shown = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]
        bars = [line for line in shown if "scoring (" in line]
        assert len(bars) == 1 and "100%" in bars[0], shown


def test_the_live_sample_has_the_test_splits_mix() -> None:
    test = tp.load_prm_dataset("test")
    for n in (8, 32, 100):
        sample = tp.prm.stratified_sample(test, n)
        assert len(sample) == n and len({r["id"] for r in sample}) == n
        erroneous = sum(r["first_error"] >= 0 for r in sample)
        share = sum(r["first_error"] >= 0 for r in test) / len(test)
        assert erroneous == round(share * n)  # the label balance of the split
        counts = Counter(r["error_type"] or "correct" for r in sample)
        whole = Counter(r["error_type"] or "correct" for r in test)
        for kind, total in whole.items():  # every kind within one of its exact share
            assert abs(counts[kind] - n * total / len(test)) < 1, (n, kind)
        order = [int(r["id"].split("-")[1]) for r in sample]
        assert order == sorted(order)
    assert tp.prm.stratified_sample(test, 32) == tp.prm.stratified_sample(test, 32)
    with pytest.raises(ValueError, match="from 1 to 400"):
        tp.prm.stratified_sample(test, 0)


@pytest.mark.real_model
def test_threshold_moves_call_neither_the_model_nor_redraw_the_bars(monkeypatch) -> None:
    prm = tp.load_prm()
    example = next(r for r in tp.load_prm_dataset("test") if r["first_error"] >= 0)
    forwards = []
    base = prm.model.base_model
    hook = base.register_forward_hook(lambda *a: forwards.append(1))
    try:
        ex = tp.step_reward_explorer(prm, example["prompt"], example["completions"],
                                     true_first_error=example["first_error"],
                                     step_labels=example["labels"])
        assert forwards, "the explorer's first view runs the model"
        forwards.clear()
        prepared = []
        real = StepRewardChart._prepare
        monkeypatch.setattr(StepRewardChart, "_prepare",
                            lambda self: prepared.append(1) or real(self))
        for value in (0.1, 0.37, 0.9, 0.37):
            ex.threshold.value = value
            assert ex.error is None
            fresh = StepRewardChart(ex.scores.rewards, true_first_error=example["first_error"],
                                    step_labels=example["labels"],
                                    title="Step rewards (probability correct)").png(value)
            assert _pixels(ex.view.png) == _pixels(fresh)  # the repaint is the full drawing
        assert forwards == []  # no threshold ran the model
        assert len(prepared) == 4  # only the fresh charts above drew their bars
    finally:
        hook.remove()


def test_token_explorer_layers_repaint_without_the_model(monkeypatch) -> None:
    model = tp.load_model("tiny-decoder")
    text = "hello world, hello tokens and more tokens"
    ex = tp.token_explorer(model, text, layer=0)
    forwards = []
    hook = model.base_model.register_forward_hook(lambda *a: forwards.append(1))
    try:
        for layer in range(1, model.num_layers + 1):
            ex.layer.value = layer
            assert forwards == [] and ex.error is None  # every layer came from one forward
            label = f"layer {layer} of {model.num_layers}" + (
                " (final, after norm)" if layer == model.num_layers else "")
            (ids,) = model.token_ids([text])
            hidden = token_widgets.all_hidden_states(model, ids)[layer]
            forwards.clear()
            fresh = token_widgets.render_token_heatmap(ex.tokens, hidden, layer_label=label)
            assert _pixels(ex.view.png) == _pixels(fresh)
        ex.metric.value = "cosine to previous token"
        assert forwards == []
    finally:
        hook.remove()


def _pixels(png: bytes) -> bytes:
    import io

    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA")).tobytes()
