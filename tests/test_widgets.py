"""Explorers: pure render functions, and widgets that redraw when a control changes."""

from __future__ import annotations

from dataclasses import dataclass

import ipywidgets as W
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
    assert "labelled first error: step" not in ex.html.value
    assert "the labelled first error (step 1) no longer applies" in ex.html.value
    ex.steps.value = "   "
    assert "at least one step" in ex._errors.value


# --- ownership --------------------------------------------------------------------------------


def test_render_ownership_reports_corruption_and_why() -> None:
    view = widgets.render_ownership([5, 12, 3], max_num_batched_tokens=8, policy="legacy",
                                    async_scheduling=True, hidden_size=8)
    assert view.data["corrupted"] == [0, 1] == view.data["result"].corrupted
    assert "2 of 3 outputs corrupted" in view.html
    assert ("request 0 (5 tokens, 1 chunk in step 0): view; tokens 0–4 (1 chunk) were kept as "
            "views and rewritten from step 1 before its host copy read them") in view.html
    assert view.png.startswith(PNG_MAGIC)
    assert list(view.table["corrupted"]) == [True, True, False]


def test_ownership_explorer_controls_redraw() -> None:
    ex = tp.ownership_explorer([5, 12, 3], budget=8, policy="legacy", hidden_size=8)
    assert ex.view.data["corrupted"] == [1]
    for slider in (ex.prompt_len, ex.budget):
        assert slider.continuous_update is False
    png = ex.image.value
    ex.async_scheduling.value = True
    assert ex.view.data["corrupted"] == [0, 1] and ex.image.value != png
    ex.policy.value = "clone"
    assert ex.view.data["corrupted"] == [] and "all 3 outputs intact" in ex.html.value
    ex.prompt_len.value = 30
    assert ex.prompt_lens == [30, 12, 3]
    assert ex.view.data["result"].prompt_lens == [30, 12, 3]


def test_ownership_explorer_shows_bad_settings_instead_of_raising() -> None:
    ex = tp.ownership_explorer([5], budget=8, hidden_size=8)
    ex.chunked.value = False
    ex.prompt_len.value = 20  # longer than the budget without chunked prefill
    assert "so no step can hold it" in ex._errors.value
    ex.more_requests.value = "3, x"
    assert "positive integers" in ex._errors.value
    ex.more_requests.value = ""
    ex.prompt_len.value = 5
    assert ex._errors.value == "" and ex.view.data["result"].prompt_lens == [5]


def test_corruption_table_traces_rows_to_their_tokens() -> None:
    identity = {"head_dtype": None, "use_activation": False}  # what pooling itself delivers
    result = tp.simulate([20], tp.SimConfig(hidden_size=8, max_num_batched_tokens=8,
                                            policy="legacy", **identity))
    table = tp.sim.corruption_table(result, 0)
    # the final step wrote tokens 16-19 into rows 0-3; rows 4-7 still hold tokens 12-15
    found = [16, 17, 18, 19, 12, 13, 14, 15]
    assert table["found_token"].tolist()[:8] == found
    assert table["reads"].tolist()[:8] == [f"expected token {p}, found token {t}"
                                           for p, t in enumerate(found)]
    assert table["reads"].iloc[16] == "token 16 ✓"
    assert table["ok"].tolist() == [False] * 12 + [True] * 8
    # the wrong rows are exactly those the simulator reports rewritten under a kept view
    over = result.overwrites
    rewritten = {p for o in over.itertuples() for p in range(o.token_start, o.token_end)}
    assert set(table.loc[~table["ok"], "position"]) == rewritten
    assert "expected_value" not in table  # the raw numbers only on request
    raw = tp.sim.corruption_table(result, 0, values=True)
    assert raw["holds"].tolist()[:2] == ["r0 t16", "r0 t17"] and "delivered_value" in raw
    # another request's rows are named with their request
    mixed = tp.simulate([5, 12, 3], tp.SimConfig(hidden_size=8, max_num_batched_tokens=8,
                                                 policy="legacy", async_scheduling=True,
                                                 **identity))
    row = tp.sim.corruption_table(mixed, 0).iloc[0]
    assert (row["found_request"], row["found_token"]) == (1, 6)
    assert row["reads"] == "expected token 0, found request 1's token 6"
    clean = tp.simulate([20], tp.SimConfig(hidden_size=8, max_num_batched_tokens=8, **identity))
    assert tp.sim.corruption_table(clean, 0)["ok"].all()
    with pytest.raises(ValueError, match="tensor-mode"):
        tp.sim.corruption_table(tp.simulate([20], mode="analytic"), 0)


# --- memory -----------------------------------------------------------------------------------


def test_prompt_grid_is_log_spaced_and_bounded() -> None:
    grid = widgets.prompt_grid(1024, 1 << 20)
    assert grid[0] == 1024 and grid[-1] == 1 << 20 and np.all(np.diff(grid) > 0)
    assert len(grid) == 21
    with pytest.raises(ValueError, match="low <= high"):
        widgets.prompt_grid(10, 5)


def test_render_memory_table_of_peaks() -> None:
    view = widgets.render_memory(model="Qwen3-Embedding-8B", hardware="H100 SXM",
                                 prompt_len=(1024, 1 << 20))
    peaks = view.data["peaks"]
    assert list(peaks.index) == ["legacy", "clone", "prealloc", "offload"]
    # vLLM's defaults: prealloc's T·W·2 buffer, then the float32 cast and the activation's
    # output, T·W·4 each, alive together: T·W·10 (bf16 hidden 4096)
    assert peaks.loc["prealloc", 1 << 20] == (1 << 20) * 4096 * (2 + 4 + 4)
    assert (peaks.loc["offload"] == 0).all()
    assert "1M tokens" in view.html
    assert "40 GiB (50.0%)" in view.html  # prealloc at 1M tokens: 40 GiB of the H100's 80 GiB
    # 1M tokens is past Qwen3-Embedding-8B's 32,768-token context: said, not hidden
    assert "--max-model-len 1,048,576" in view.html
    assert set(view.table["prompt_len"]) >= {1024, 1 << 20}


def test_memory_explorer_controls_redraw() -> None:
    ex = tp.memory_explorer(prompt_len=(1024, 1 << 16))
    assert ex.prompt_len.continuous_update is False
    assert ex.view.table["prompt_len"].max() == 1 << 16
    png = ex.image.value
    ex.prompt_len.value = (1024, 1 << 20)
    assert ex.view.table["prompt_len"].max() == 1 << 20 and ex.image.value != png
    ex.model.value = "Qwen2.5-Math-PRM-7B"
    assert ex.view.data["config"].task == "token_classify"
    ex.policies.value = ("clone",)
    assert list(ex.view.data["peaks"].index) == ["clone"]
    ex.policies.value = ()
    assert "at least one policy" in ex._errors.value


# --- error states, static fallback, export ------------------------------------------------------


def test_bad_settings_clear_the_stale_output() -> None:
    ex = tp.ownership_explorer([5], budget=8, hidden_size=8)
    assert ex._output.layout.display is None and ex.view is not None
    ex.chunked.value = False
    ex.prompt_len.value = 20  # impossible: no output may remain from the previous settings
    assert ex.view is None and "so no step can hold it" in (ex.error or "")
    assert ex._output.layout.display == "none" and ex.html.value == ""
    assert "so no step can hold it" in ex.static_html()
    ex.chunked.value = True  # valid again: the output comes back
    assert ex.error is None and ex._output.layout.display is None
    assert ex.view.data["result"].prompt_lens == [20]


def test_static_fallback_shows_settings_figure_and_table(monkeypatch) -> None:
    import IPython.display

    shown: list[tuple[dict, dict]] = []

    class Handle:
        def update(self, obj, **kwargs):
            shown.append((obj, {"update": True, **kwargs}))

    def fake_display(obj, **kwargs):
        shown.append((obj, kwargs))
        return Handle() if kwargs.get("display_id") else None

    monkeypatch.setattr(IPython.display, "display", fake_display)
    ex = tp.ownership_explorer([5, 12, 3], budget=8, policy="legacy", hidden_size=8)
    ex._ipython_display_()
    (widget, _), (fallback, kwargs) = shown
    assert "application/vnd.jupyter.widget-view+json" in widget  # the live widget ...
    assert "text/html" not in widget  # (one snapshot only, below)
    assert widget["text/plain"].startswith("OwnershipExplorer(") and "HBox" not in widget[
        "text/plain"]
    page = fallback["text/html"]  # ... and a snapshot as its own output, kept by nbconvert
    assert kwargs == {"raw": True, "display_id": True}
    assert f'class="tokpool-fallback-{ex._uid}"' in page
    assert 'data-explorer="OwnershipExplorer"' in page
    assert "policy: <b>legacy</b>" in page and "tokens per step: <b>8</b>" in page
    assert page.count("data:image/png;base64,") == 1 and "<table" in page
    # the live widget's CSS hides exactly this snapshot; without the widget it stays visible
    assert f".tokpool-fallback-{ex._uid}{{display:none}}" in ex.children[0].value
    ex.policy.value = "clone"  # the snapshot follows the controls
    update, kwargs = shown[-1]
    assert kwargs.get("update") and "policy: <b>clone</b>" in update["text/html"]
    ex.typed["tokens per step"].value = "100000"  # refused: the snapshot says so, no figure
    update, _ = shown[-1]
    assert "out of range" in update["text/html"] and "base64" not in update["text/html"]


def test_view_png_is_retina_and_shown_at_half_size() -> None:
    view = widgets.render_ownership([5], max_num_batched_tokens=8, hidden_size=8)
    width, _ = widgets.png_size(view.png)
    assert view.display_width == round(width / 2)
    assert f'width="{view.display_width}"' in view.img_html()
    ex = tp.ownership_explorer([5], budget=8, hidden_size=8)
    assert ex.image.layout.width == f"{ex.view.display_width}px"


def test_view_save_writes_png_csv_and_html(tmp_path) -> None:
    view = widgets.render_ownership([5, 12], max_num_batched_tokens=8, hidden_size=8)
    assert view.save(tmp_path / "a.png").read_bytes() == view.png
    csv = (tmp_path / "a.csv")
    view.save(csv)
    assert csv.read_text().splitlines()[0].startswith("request,")
    page = view.save(tmp_path / "a.html").read_text()
    assert page.startswith("<!doctype html>") and "data:image/png;base64," in page
    with pytest.raises(ValueError, match=r"\.png, \.svg, \.pdf, \.csv or \.html"):
        view.save(tmp_path / "a.jpg")
    with pytest.raises(ValueError, match="no table"):
        widgets.View(html="x").save(tmp_path / "b.csv")


def test_table_html_prints_counts_as_integers_and_no_nan() -> None:
    import pandas as pd

    frame = pd.DataFrame({"n": [400.0, 3.0], "x": [0.5, float("nan")]})
    text = widgets.table_html(frame)
    assert ">400<" in text and "400.0" not in text and "NaN" not in text and "—" in text


# --- memory explorer controls -------------------------------------------------------------------


def test_memory_explorer_defaults_are_visible_and_budget_is_a_control() -> None:
    ex = tp.memory_explorer(prompt_len=(1024, 1 << 16), policies=("clone", "prealloc"))
    assert ex.task.label == "default (token_embed)" and ex.task.value == "default"
    assert ex.head_dtype.label == "default: float32 (vLLM's)"
    assert ex.prompt_len.label == ("1K", "64K")
    ex.prompt_len.value = (1024, 1 << 20)
    assert ex.prompt_len.label[1] == "1M"
    peaks = ex.view.data["peaks"]
    budget = ex.budget.value
    assert ex.view.data["config"].max_num_batched_tokens == budget
    ex.budget.value = 256  # clone's (2T - L) peak follows the chunk budget; prealloc's T does not
    assert ex.view.data["config"].max_num_batched_tokens == 256
    # (past both budgets: shorter prompts are one step, whose output is a view under sync)
    long = [1 << 17, 1 << 20]
    assert ex.view.data["peaks"].loc["prealloc", long].equals(peaks.loc["prealloc", long])
    ex.head_dtype.value = "float32"
    assert ex.view.data["config"].head_casts
    ex.model.value = "Qwen2.5-Math-PRM-7B"  # labels name the new preset's defaults
    assert ex.task.label == "default (token_classify)" and ex.head_dtype.value == "float32"
    with pytest.raises(ValueError, match="powers of two"):
        tp.memory_explorer(prompt_len=(1000, 1 << 20))


def test_memory_explorer_opens_with_vllms_defaults_as_tp_simulate_gives_them() -> None:
    # a researcher's first number: 32K tokens of token_embed on Qwen3-Embedding-8B, vLLM's
    # defaults (sync for a pooling model, float32 head and its activation, vLLM's budget)
    ex = tp.memory_explorer()
    cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H100 SXM")
    assert ex.async_scheduling.value is False is cfg.async_scheduling
    assert ex.budget.value == cfg.max_num_batched_tokens
    shown = ex.view.data["config"]
    assert (shown.async_scheduling, shown.head_dtype, shown.use_activation,
            shown.max_num_batched_tokens) == (cfg.async_scheduling, cfg.head_dtype,
                                              cfg.use_activation, cfg.max_num_batched_tokens)
    longest = ex.prompt_len.value[1]
    assert longest == 32_768
    for policy in ex.policies.value:
        run = tp.simulate([longest], cfg.replace(policy=policy), mode="analytic")
        assert ex.view.data["peaks"].loc[policy, longest] == run.peak_pooling_bytes
    clone = tp.simulate([longest], cfg, mode="analytic")
    assert clone.peak_pooling_bytes == 5 * 2**28  # 1.25 GiB, the README's number
    assert ex.view.data["peak_parts"] == tp.sim.peak_parts(clone)
    assert ex.view.settings["vllm_defaults"] == dict.fromkeys(
        ("async_scheduling", "head_dtype", "use_activation", "max_num_batched_tokens"), True)
    assert "sync scheduling (vLLM&#x27;s default)" in ex.html.value
    assert "What sets the peak" in ex.html.value and "the head sets it" in ex.html.value


def test_memory_explorer_says_why_the_budget_changes_nothing_under_vllms_head() -> None:
    ex = tp.memory_explorer(policies=("clone",))
    peaks = ex.view.data["peaks"].copy()
    ex.budget.value = 1024  # the head's cast and activation set the peak: the budget is hidden
    assert ex.view.data["peaks"][32_768].equals(peaks[32_768])
    assert "the chunk budget moves" in ex.html.value and "changes nothing" in ex.html.value
    ex.activation.value = "off"
    ex.head_dtype.value = "same"  # neither is vLLM's default, and the readout says so
    assert "activation off (not vLLM&#x27;s default)" in ex.html.value
    assert not ex.view.data["config"].use_activation and not ex.view.data["config"].head_casts
    small = ex.view.data["peaks"].loc["clone"].iloc[-1]
    ex.budget.value = 8192  # now the chunk cache and the cat set the peak: the budget moves it
    assert ex.view.data["peaks"].loc["clone"].iloc[-1] != small
    assert set(ex.view.data["peak_parts"]) == {"chunk cache", "pooled output"}
    assert sum(ex.view.data["peak_parts"].values()) == ex.view.data["peaks"].loc["clone"].iloc[-1]


def test_memory_explorer_readouts_keep_a_gap_before_the_next_label() -> None:
    ex = tp.memory_explorer()
    row = ex.children[1].children
    import ipywidgets as W

    boxes = [b for b in row if isinstance(b, W.HBox)
             and any(isinstance(c, W.SelectionSlider) for c in b.children)]
    assert boxes and all(b.layout.margin == "0 18px 0 0" for b in boxes)


def test_memory_policies_are_toggle_buttons() -> None:
    ex = tp.memory_explorer(prompt_len=(1024, 1 << 14))
    assert ex.policies.value == ("legacy", "clone", "prealloc", "offload")
    ex.policies.buttons["legacy"].value = False  # a click, as in the browser
    assert ex.policies.value == ("clone", "prealloc", "offload")
    assert list(ex.view.data["peaks"].index) == ["clone", "prealloc", "offload"]
    ex.policies.value = ("offload",)
    assert [b.value for b in ex.policies.buttons.values()] == [False, False, False, True]
    ex.policies.value = ("nope",)  # refused in the panel, naming the control and its options
    assert ex.policies.value == ("offload",) and ex.view is None
    assert "policies: ('nope',) is not a tuple of its options" in ex.error


def test_token_explorer_takes_your_own_text(tiny_decoder) -> None:
    ex = tp.token_explorer(tiny_decoder, "hello world")
    n = len(ex.tokens)
    ex.text_input.value = "a different, longer text with more tokens in it"
    assert len(ex.tokens) > n and ex.view.data["values"].shape == (len(ex.tokens),)
    ex.text_input.value = "   "
    assert "write some text" in ex.error and ex.view is None
    with pytest.raises(ValueError, match="non-empty text"):
        tp.token_explorer(tiny_decoder, "")


def test_ownership_figure_width_is_capped_as_steps_grow() -> None:
    from tokpool.widgets.ownership import MAX_FIGURE_WIDTH

    many = widgets.render_ownership([96, 40], max_num_batched_tokens=2, hidden_size=8)
    assert len(many.data["result"].steps) > 60
    assert many.display_width <= MAX_FIGURE_WIDTH * 100 + 40  # 100 CSS px per inch, + margin
    few = widgets.render_ownership([20], max_num_batched_tokens=8, hidden_size=8)
    assert few.display_width < many.display_width


def test_memory_explorer_takes_your_model_and_tensor_parallel_size() -> None:
    import json

    own = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
           "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151665,
           "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}
    ex = tp.memory_explorer(prompt_len=(1024, 1 << 15))
    ex.your_model.value = json.dumps(own)
    one_gpu = ex.view.data["kv_cache_bytes"]
    ex.tensor_parallel_size.value = 4
    config = ex.view.data["config"]
    assert ex.error is None and config.tensor_parallel_size == 4 and config.hidden_size == 4096
    assert ex.view.data["kv_cache_bytes"] > one_gpu  # a quarter of the weights per GPU
    assert "of KV" in ex.view.html and "tensor-parallel size 4" in ex.view.html
    ex.your_model.value = "/nonexistent/config.json"
    assert ex.view is None and "no config.json" in ex.error


# --- issue 30: no traps, readable figures, exports ----------------------------------------------

OWN_MODEL = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
             "intermediate_size": 3072, "num_hidden_layers": 4, "num_attention_heads": 8,
             "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 1000,
             "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}


def test_memory_explorer_offers_no_cpu_and_a_cpu_render_gives_no_share() -> None:
    from tokpool.widgets.memory import MEMORY_HARDWARE

    ex = tp.memory_explorer(prompt_len=(1024, 4096))
    assert "CPU" in tp.HARDWARE_PRESETS and "CPU" not in ex.hardware.options
    assert list(ex.hardware.options) == list(MEMORY_HARDWARE) and len(MEMORY_HARDWARE) >= 8
    ex.hardware.value = "CPU"  # refused in the panel, naming the choices
    assert "hardware: 'CPU' is not one of its choices" in ex.error
    with pytest.raises(ValueError, match="CPU's RAM"):
        tp.memory_explorer(hardware="CPU")
    view = widgets.render_memory(hardware="CPU", prompt_len=(1024, 4096))
    assert "%" not in view.html and "host memory" in view.html
    assert "1 B" not in view.html and view.data["share"] is False
    gpu = widgets.render_memory(hardware="H100 SXM", prompt_len=(1024, 4096))
    assert "%" in gpu.html and gpu.data["share"] is True


def test_memory_task_menu_offers_only_declared_tasks() -> None:
    from tokpool.sim.vllm_rules.serve_line import declared_tasks

    ex = tp.memory_explorer(prompt_len=(1024, 4096))
    for name, preset in tp.MODEL_PRESETS.items():
        ex.model.value = name
        offered = [v for _, v in ex.task.options if v != "default"]
        declared = declared_tasks(preset.default_task, "auto")
        assert offered == [t for t in declared if t in ("token_embed", "token_classify",
                                                        "embed")], name
        assert ex.task.options[0][0] == f"default ({preset.default_task})"
    ex.model.value = "Qwen2.5-Math-PRM-7B"
    assert [v for _, v in ex.task.options] == ["default", "token_classify"]
    ex.task.value = "token_embed"  # not declared: refused with the reason
    assert "declares ['token_classify']" in ex.error and "vLLM refuses" in ex.error
    ex.task.value = "token_classify"
    assert ex.error is None
    ex.model.value = "Qwen3-Embedding-8B"  # the chosen task is not declared there: default
    assert ex.task.value == "default" and ex.error is None
    assert "not one the model declares" in ex.view.html


def test_memory_explorer_model_takes_what_the_box_takes(tmp_path) -> None:
    import json

    import transformers

    (tmp_path / "config.json").write_text(json.dumps(OWN_MODEL))
    given = {"path": tmp_path / "config.json", "folder": tmp_path, "text path":
             str(tmp_path / "config.json"), "dict": OWN_MODEL,
             "config": transformers.Qwen3Config(**{k: v for k, v in OWN_MODEL.items()
                                                   if k not in ("model_type",)})}
    for kind, model in given.items():
        ex = tp.memory_explorer(model=model)
        assert ex.error is None, (kind, ex.error)
        assert ex.your_model.value, kind
        assert ex.view.data["config"].hidden_size == 1024, kind
        assert ex.prompt_len.value == (1024, 8192), kind  # the model's own context
        assert ex.declared_tasks() == ("embed", "token_embed"), kind
    with pytest.raises(ValueError, match="neither a preset"):
        tp.memory_explorer(model="no-such-model")
    with pytest.raises(ValueError, match="model: "):
        tp.memory_explorer(model={"model_type": "qwen3"})
    with pytest.raises(TypeError, match=r"preset name, a config\.json path"):
        tp.memory_explorer(model=42)


def test_toggle_states_are_unmistakable() -> None:
    ex = tp.memory_explorer(prompt_len=(1024, 4096), policies=("clone",))
    on, off = ex.policies.buttons["clone"], ex.policies.buttons["offload"]
    assert (on.button_style, on.icon) == ("info", "check") and "shown" in on.tooltip
    assert (off.button_style, off.icon) == ("", "") and "hidden" in off.tooltip
    on.value = False
    assert (on.button_style, on.icon) == ("", "") and "hidden" in on.tooltip

def test_ownership_switches_share_one_style() -> None:
    own = tp.ownership_explorer([5], budget=8, hidden_size=8)
    switches = (own.async_scheduling, own.chunked, own.vllm_head)
    assert all(isinstance(w, W.Checkbox) for w in switches)  # one style for every switch
    assert all(w.tooltip for w in switches)
    own.async_scheduling.value = True
    assert own.view.settings["async_scheduling"] is True


def _controls_with_tips(ex) -> list:
    controls = []
    for control in ex._controls:
        controls += list(getattr(control, "buttons", {}).values()) or [control]
    return controls + list(ex.typed.values())


def test_every_control_has_a_tooltip_in_words(tiny_decoder) -> None:
    explorers = [tp.ownership_explorer([5], budget=8, hidden_size=8),
                 tp.memory_explorer(prompt_len=(1024, 4096)),
                 tp.token_explorer(tiny_decoder, "hello world"),
                 tp.step_reward_explorer(_StubPRM(), "Q?", ["ok"])]
    for ex in explorers:
        for control in _controls_with_tips(ex):
            tip = getattr(control, "tooltip", None)
            name = f"{type(ex).__name__}.{getattr(control, 'description', control)}"
            assert isinstance(tip, str) and len(tip.split()) >= 3, (name, tip)
            described = getattr(control, "description", "")
            if described and isinstance(control, widgets.base.W.Text
                                        | widgets.base.W.Textarea
                                        | widgets.base.W.Dropdown
                                        | widgets.base.W.Checkbox):
                # ipywidgets 8 shows a described control's tooltip nowhere: on its label
                assert described.startswith('<span title="') and control.description_allow_html
                assert "<" not in widgets.guards.label_of(control)
        tips = getattr(ex, "policy", None)
        if isinstance(tips, widgets.base.W.ToggleButtons):
            assert all(len(t.split()) >= 3 for t in tips.tooltips)


def test_ownership_messages_name_the_panels_controls() -> None:
    ex = tp.ownership_explorer([20, 6, 9], budget=16)
    ex.chunked.value = False
    assert "tokens per step is 16" in ex.error and "Tick chunked prefill" in ex.error
    assert "request 0 tokens: 20 tokens" in ex.error
    for flag in ("max_num_batched_tokens", "--enable", "enable_chunked_prefill"):
        assert flag not in ex.error
    ex.chunked.value = True
    assert ex.error is None
    ex.prompt_len.value = 10
    ex.more_requests.value = "6, 30"
    ex.chunked.value = False
    assert "other requests (request 2): 30 tokens" in ex.error
    assert "raise tokens per step to at least 30, or shorten it" in ex.error


def test_typed_numbers_get_a_range_message() -> None:
    ex = tp.ownership_explorer([20], budget=16)
    box = ex.typed["request 0 tokens"]
    box.value = "1e12"
    assert "must be from 1 to 96; 1e12 (1,000,000,000,000) is out of range" in ex.error
    assert "not a whole number" not in ex.error
    box.value = "2.5"
    assert "'2.5' is not a whole number" in ex.error
    box.value = "inf"
    assert "is not a whole number" in ex.error
    box.value = "24.0"
    assert ex.error is None and ex.prompt_len.value == 24


def test_ownership_figure_keeps_its_size_and_says_what_it_cut() -> None:
    ex = tp.ownership_explorer([20, 6, 9], budget=16)
    assert ex.image.layout.min_width == ex.image.layout.width  # never shrunk to fit
    assert ex.image.layout.max_width == "none"
    assert "tokpool-caption" not in ex.view.html
    ex.budget.value = 2
    ex.more_requests.value = "96, 96"
    assert ex.error is None and len(ex.view.data["result"].steps) > 100
    assert "steps are labelled every 5th" in ex.view.html
    assert "too narrow for their token ranges" in ex.view.html
    assert ex.image.layout.min_width == f"{ex.view.display_width}px"


def test_heatmap_caption_when_the_view_is_cut() -> None:
    tokens = [f" t{i}" for i in range(150)]
    view = widgets.render_tokens(tokens, torch.randn(150, 8))
    assert "first 96 of 150 tokens" in view.html
    short = widgets.render_tokens(tokens[:20], torch.randn(20, 8))
    assert "first 96" not in short.html and "tokpool-caption" not in short.html


def test_cjk_and_emoji_labels_have_glyphs(caplog) -> None:
    import logging

    from tokpool.plots import _fonts

    assert _fonts.missing_glyphs(["東京", "北京欢迎你", "🎉", "😀"]) == []
    family = _fonts.font_family(["東京"])
    assert isinstance(family, list) and "Noto Sans CJK SC" in family
    assert _fonts.font_family(["plain ascii ·↵"]) == "monospace"  # the fast path
    assert "\ue000" in _fonts.box_note(["\ue000"]) and "boxes" in _fonts.box_note(["\ue000"])
    with caplog.at_level(logging.WARNING, logger="matplotlib.font_manager"):
        view = widgets.render_tokens(["東", "京", " 🎉", " ok"], torch.randn(4, 8))
    assert not [r for r in caplog.records if "findfont" in r.getMessage()]
    assert view.png.startswith(PNG_MAGIC)


def test_token_chips_wrap_between_words() -> None:
    from tokpool.plots import word_spans

    tokens = ["Token", "-level", " pool", "ing", " keeps", " one", "\n", "vector"]
    assert word_spans(tokens) == [(0, 2), (2, 4), (4, 5), (5, 6), (6, 7), (7, 8)]
    assert word_spans(["a"] * 30, max_tokens=12) == [(0, 12), (12, 24), (24, 30)]
    html = tp.viz.token_html(tokens, np.arange(len(tokens), dtype=float))
    words = html.split('<span class="tokpool-word" style="white-space:nowrap">')[1:]
    assert len(words) == 6 and "Token" in words[0] and "-level" in words[0]
    assert "overflow-wrap:anywhere" not in html  # no break inside a word


def test_reward_chart_stays_readable_at_40_steps() -> None:
    from tokpool.plots.rewards import MAX_WIDTH_IN

    r = np.linspace(0.95, 0.05, 40)
    ax = tp.plot_step_rewards(r, true_first_error=20, step_labels=[i < 20 for i in range(40)])
    width, height = ax.figure.get_size_inches()
    assert width <= MAX_WIDTH_IN and height / width >= 0.3  # a chart, not a strip
    labels = [t for t in ax.get_xticklabels() if t.get_text()]
    assert 15 <= len(labels) <= 25 and all(t.get_fontsize() >= 7 for t in labels)
    import matplotlib.pyplot as plt

    plt.close(ax.figure)


def test_true_error_outline_survives_an_edit_after_it() -> None:
    prm = _StubPRM()
    steps = ["ok", "wrong", "ok", "ok"]
    ex = tp.step_reward_explorer(prm, "Q?", steps, true_first_error=1,
                                 step_labels=[True, False, False, False])
    assert "labelled first error: step 1" in ex.html.value
    ex.steps.value = "ok\nwrong\nok, edited\nok"  # an edit after the labelled error
    assert "labelled first error: step 1" in ex.html.value and "✓ match" in ex.html.value
    assert "step 2 was edited: it has no label" in ex.html.value
    ex.problem.value = "Q, reworded?"  # the labels stay, said to be the original problem's
    assert "labelled first error: step 1" in ex.html.value
    assert "the labels are those of the original problem" in ex.html.value
    ex.steps.value = "ok\nright now\nok"  # the labelled step itself edited: dropped, said why
    assert "labelled first error: step" not in ex.html.value
    assert "no longer applies" in ex.html.value


def test_view_saves_svg_pdf_and_every_table_carries_its_settings(tmp_path, tiny_decoder
                                                                  ) -> None:
    import json

    import pandas as pd

    views = {"ownership": tp.ownership_explorer([5, 12], budget=8, hidden_size=8).view,
             "memory": tp.memory_explorer(prompt_len=(1024, 4096)).view,
             "token": tp.token_explorer(tiny_decoder, "hello world").view,
             "rewards": tp.step_reward_explorer(_StubPRM(), "Q?", ["ok", "wrong"]).view}
    for name, view in views.items():
        assert view.settings, name
        svg = view.save(tmp_path / f"{name}.svg").read_text()
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "tokpool" in svg, name
        assert view.save(tmp_path / f"{name}.pdf").read_bytes().startswith(b"%PDF"), name
        if view.table is None:
            continue
        csv = view.save(tmp_path / f"{name}.csv")
        assert pd.read_csv(csv).shape == view.table.shape, name  # the table is plain CSV
        record = json.loads((tmp_path / f"{name}.settings.json").read_text())
        assert record["table"] == f"{name}.csv" and record["settings"], name
        assert record["versions"]["tokpool"] == tp.__version__
        assert record["versions"]["vllm_rules"] == "0.33.0"
        assert "vllm_installed" in record["versions"] and record["saved"]
    memory = json.loads((tmp_path / "memory.settings.json").read_text())["settings"]
    assert memory["model"] == "Qwen3-Embedding-8B" and memory["hardware"] == "H100 SXM"
    assert {"task", "dtype", "async_scheduling", "max_num_batched_tokens"} <= set(memory)
    own = json.loads((tmp_path / "ownership.settings.json").read_text())["settings"]
    assert own["prompt_lens"] == [5, 12] and own["policy"] == "clone"
    page = views["memory"].save(tmp_path / "m.html").read_text()
    assert "tokpool-settings" in page and "vllm_rules 0.33.0" in page
    with pytest.raises(ValueError, match="only as a PNG"):
        widgets.View(html="x", png=views["memory"].png).save(tmp_path / "x.svg")


def test_ownership_explorer_says_intact_by_luck_and_reuses_views() -> None:
    ex = tp.ownership_explorer([20, 6, 9], budget=16, policy="legacy", hidden_size=8)
    assert ex.view.data["lucky"] == [2]
    assert "request 2 intact only by luck" in ex.html.value
    assert "intact by luck (step 2 wrote only rows 0–3;" in ex.html.value
    assert "request 1 (6 tokens, 1 chunk in step 1): view → intact." in ex.html.value
    first = ex.view
    ex.budget.value = 12
    ex.budget.value = 16  # back: the same settings show the same view, not a redraw
    assert ex.view is first
    ex.policy.value = "clone"
    assert ex.view.data["lucky"] == [] and "by luck" not in ex.html.value
