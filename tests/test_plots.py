"""Plots and token HTML: what users rely on (escaping, fixed scales, marks), not pixels."""

from __future__ import annotations

import re
import subprocess
import sys

import matplotlib as mpl
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.axes import Axes

import tokpool as tp
from tokpool import plots

mpl.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


def test_import_tokpool_loads_no_plotting_or_model_libraries() -> None:
    code = (
        "import sys, tokpool; "
        "print([m for m in ('matplotlib', 'ipywidgets', 'transformers') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_plot_names_are_reachable_lazily_from_the_top_level() -> None:
    assert tp.plot_similarity is plots.plot_similarity
    assert tp.viz.token_html is plots.token_html
    assert "plot_similarity" in dir(tp) and "token_html" not in dir(tp)
    with pytest.raises(AttributeError, match="no attribute 'plot_nothing'"):
        tp.plot_nothing  # noqa: B018


def test_rcparams_untouched_by_plotting() -> None:
    before = dict(mpl.rcParams)
    plots.plot_similarity(torch.randn(5, 3))
    after = dict(mpl.rcParams)
    assert {k for k in before if before[k] != after[k]} == set()


# --- token HTML -----------------------------------------------------------------------------


def test_token_html_escapes_every_token_and_has_no_script_or_network() -> None:
    tokens = ["<script>alert('x')</script>", " & ", '"q"', "<b>"]
    out = plots.token_html(tokens, [0.1, 0.2, 0.3, 0.4])
    assert "<script" not in out and "<b>" not in out
    assert "&lt;script&gt;" in out and "&amp;" in out and "&lt;b&gt;" in out
    assert "http" not in out and "require" not in out and "<link" not in out
    assert out.count("<span title=") == len(tokens)


def test_token_html_makes_whitespace_visible_and_breaks_lines() -> None:
    out = plots.token_html(["a", " b", "\n", "\t", "  "], [1, 2, 3, 4, 5])
    assert "·b" in out and "↵" in out and "→" in out and "··" in out
    assert "<br>" in out


def test_token_html_is_an_html_str_for_jupyter() -> None:
    out = plots.token_html(["x"], [1.0])
    assert isinstance(out, str) and out._repr_html_() == str(out)


def test_token_html_fixed_scale_keeps_colours_when_other_values_change() -> None:
    a = plots.token_html(["x", "y"], [0.5, 0.1], vmin=0, vmax=1)
    b = plots.token_html(["x", "y"], [0.5, 0.9], vmin=0, vmax=1)
    colour = lambda s: s.split("background:")[1][:7]  # noqa: E731  first token's colour
    assert colour(a) == colour(b)


def test_token_html_signed_values_use_rdbu_centred_at_zero() -> None:
    scale = plots.colour_scale(np.array([-0.2, 0.5]))
    assert scale.cmap == "RdBu_r" and scale.vmin == -0.5 and scale.vmax == 0.5
    assert plots.colour_scale(np.array([0.0, 3.0])).cmap == "viridis"


def test_token_html_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="2 tokens but 3 values"):
        plots.token_html(["a", "b"], [1, 2, 3])
    with pytest.raises(TypeError, match="sequence of strings"):
        plots.token_html("ab", [1, 2])


def test_token_strings_decodes_each_id_alone() -> None:
    class Tok:
        def decode(self, ids):
            return {1: "Hi", 2: " there", 3: "\n"}[ids[0]]

    assert plots.token_strings(Tok(), torch.tensor([1, 2, 3])) == ["Hi", " there", "\n"]


def test_plot_token_values_draws_one_box_per_token() -> None:
    ax = plots.plot_token_values(["a", " b", "\n", "c"], [0.0, 1.0, 2.0, 3.0], label="norm")
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["a", "·b", "↵", "c"]


# --- embeddings -------------------------------------------------------------------------------


def test_cosine_similarity_matrix_and_heatmap_scale() -> None:
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0]])
    sim = plots.cosine_similarity_matrix(x)
    np.testing.assert_allclose(sim, [[1, 0, -1], [0, 1, 0], [-1, 0, 1]], atol=1e-12)
    ax = plots.plot_similarity(x, tokens=["a", "b", "<c>"])
    image = ax.get_images()[0]
    assert image.get_clim() == (-1.0, 1.0) and image.get_cmap().name == "RdBu_r"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "<c>"]


def test_pca_2d_finds_the_dominant_direction() -> None:
    rng = np.random.default_rng(0)
    x = np.outer(np.arange(20.0), [1.0, 2.0, 0.0]) + 1e-3 * rng.normal(size=(20, 3))
    coords, explained = plots.pca_2d(x)
    assert coords.shape == (20, 2) and explained[0] > 0.99
    assert np.all(np.diff(coords[:, 0]) > 0)  # positions run along PC1, sign fixed


def test_plot_token_pca_colours_by_position() -> None:
    ax = plots.plot_token_pca(torch.randn(12, 8), tokens=[f"t{i}" for i in range(12)])
    scatter = ax.collections[0]
    np.testing.assert_array_equal(scatter.get_array(), np.arange(12))
    assert ax.get_xlabel().startswith("PC1 (")


def test_plots_draw_into_a_given_axes() -> None:
    import matplotlib.pyplot as plt

    _, ax = plt.subplots()
    assert plots.plot_similarity(torch.randn(4, 3), ax=ax) is ax
    with pytest.raises(ValueError, match="2 dimension"):
        plots.plot_similarity(torch.randn(4))


# --- step rewards -----------------------------------------------------------------------------


def _legend_texts(ax: Axes) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_step_rewards_marks_threshold_predicted_and_true_first_error() -> None:
    ax = plots.plot_step_rewards([0.9, 0.7, 0.2, 0.8], threshold=0.5, true_first_error=1)
    labels = _legend_texts(ax)
    assert "threshold 0.5" in labels
    assert "predicted first error: step 2" in labels
    assert "true first error: step 1" in labels
    heights = [p.get_height() for p in ax.patches[:4]]
    np.testing.assert_allclose(heights, [0.9, 0.7, 0.2, 0.8])


def test_step_rewards_all_pass_predicts_minus_one() -> None:
    ax = plots.plot_step_rewards([0.9, 0.8], true_first_error=-1, step_labels=[True, True])
    labels = _legend_texts(ax)
    assert "predicted first error: none (−1)" in labels
    assert "true first error: none (−1)" in labels
    with pytest.raises(ValueError, match="step_labels has 1 entries for 2 rewards"):
        plots.plot_step_rewards([0.9, 0.8], step_labels=[True])


# --- chunked vs full --------------------------------------------------------------------------


def _equivalence_frame() -> pd.DataFrame:
    rows = []
    for dtype, scale in (("float32", 1e-6), ("bfloat16", 1e-2)):
        for pos in range(25):
            err = 0.0 if pos < 10 else scale * (1 + pos % 3)
            rows.append({"dtype": dtype, "chunk_size": 10, "position": pos, "max_abs_err": err})
    return pd.DataFrame(rows)


def test_chunked_error_one_line_per_dtype_with_chunk_boundaries() -> None:
    ax = plots.plot_chunked_error(_equivalence_frame(), chunk_size=10)
    labels = _legend_texts(ax)
    assert labels[:2] == ["bfloat16", "float32"]
    assert "chunk boundary (every 10)" in labels
    assert ax.get_yscale() == "log"
    assert all(np.all(line.get_ydata() > 0) for line in ax.lines[:2])  # zeros drawn on a floor


def test_chunked_error_names_missing_columns() -> None:
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['cosine'\]"):
        plots.plot_chunked_error(_equivalence_frame(), metric="cosine")


def test_task_gate_marks_what_the_pr_opened() -> None:
    codes, kinds, tasks = plots.gate_categories(tp.task_table())
    row = kinds.index("decoder_embedding")
    assert codes[row, tasks.index("token_embed")] == 2  # served only after the PR
    assert codes[row, tasks.index("embed")] == 1
    assert codes[kinds.index("plugin_only"), tasks.index("plugin")] == 3
    ax = plots.plot_task_gate(tp.task_table())
    assert "new" in [t.get_text() for t in ax.texts]


# --- ownership schedule -----------------------------------------------------------------------

# what pooling itself keeps and hands over: an identity head (vLLM's float32 head copies a
# finished output within its step, which hides the async race these plots show)
SMALL = tp.SimConfig(hidden_size=8, max_num_batched_tokens=8, head_dtype=None,
                     use_activation=False)


def test_schedule_frame_one_request_legacy() -> None:
    result = tp.simulate([20], SMALL.replace(policy="legacy"))
    frame = plots.schedule_frame(result)
    assert frame[["step", "start", "stop", "buffer_start", "buffer_stop"]].values.tolist() == [
        [0, 0, 8, 0, 8], [1, 8, 16, 0, 8], [2, 16, 20, 0, 4]]
    assert frame["kind"].tolist() == ["view", "view", "view + cat"]
    assert frame["overwritten_step"].tolist() == [1, 2, -1]


@pytest.mark.parametrize("policy", ["legacy", "clone", "prealloc", "offload"])
@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("chunked", [True, False])
def test_overwrite_marks_match_the_simulators_oracle(policy, async_scheduling, chunked) -> None:
    lens = [20, 6, 9, 3, 12] if chunked else [8, 6, 5, 3, 7]
    config = SMALL.replace(policy=policy, async_scheduling=async_scheduling,
                           enable_chunked_prefill=chunked)
    result = tp.simulate(lens, config)
    assert plots.overwritten_requests(result) == result.corrupted


def _corrupted_labels(ax: Axes) -> list[str]:
    red = mpl.colors.to_rgba(plots.schedule.OVERWRITE_COLOUR)
    return [t.get_text() for t in ax.get_yticklabels() if mpl.colors.to_rgba(t.get_color()) == red]


def test_schedule_plot_marks_the_corrupted_request() -> None:
    result = tp.simulate([5, 12, 3], SMALL.replace(policy="legacy", async_scheduling=True))
    assert result.corrupted == [0, 1]
    ax = plots.plot_ownership_schedule(result)
    assert _corrupted_labels(ax) == ["req 0 · 5 tok", "req 1 · 12 tok"]
    assert [t.get_text() for t in ax.texts].count("corrupted") == 2
    assert "policy='legacy', async" in ax.get_title(loc="left")


def test_schedule_plot_clone_marks_nothing() -> None:
    result = tp.simulate([5, 12, 3], SMALL.replace(async_scheduling=True))
    ax = plots.plot_ownership_schedule(result)
    assert _corrupted_labels(ax) == []
    assert "corrupted" not in [t.get_text() for t in ax.texts]


def test_buffer_rows_draws_one_box_per_chunk() -> None:
    result = tp.simulate([20, 6], SMALL)
    ax = plots.plot_buffer_rows(result)
    assert len(ax.patches) == len(plots.schedule_frame(result))
    assert ax.get_ylim() == (8.0, 0.0)  # row 0 on top, the budget's rows


# --- memory -----------------------------------------------------------------------------------


def _peak_stairs(ax):
    return next(p for p in ax.patches if p.get_gid() == "pool_peak_bytes")


def _peak_bars(ax) -> list[tuple[float, str, int]]:
    """``(step, part, bytes)`` of each drawn segment of a peak's stacked bar."""
    return [(p.get_x() + p.get_width() / 2, p.get_gid().removeprefix("peak part: "),
             int(p.get_height())) for p in ax.patches
            if (p.get_gid() or "").startswith("peak part: ")]


def test_memory_timeline_legend_lists_only_what_is_drawn() -> None:
    result = tp.simulate([20], SMALL.replace(head_dtype="float32"))
    ax = plots.plot_memory_timeline(result)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    drawn = {part for _, part, _ in _peak_bars(ax)}
    assert drawn == {"pooled output", "float32 cast"}  # SMALL: no activation
    assert labels == [
        "chunk cache (clones / prealloc buffer)", "pooled output (model dtype)",
        "float32 cast (head)", "peak during the step (bar: what it is made of)",
        "host memory (outputs, offload)"]
    np.testing.assert_array_equal(_peak_stairs(ax).get_data().values,
                                  result.steps["pool_peak_bytes"])


def test_readme_first_example_draws_the_peak_as_its_parts_to_the_byte() -> None:
    # the README's first example: one 32K token_embed prompt, vLLM's defaults (float32 head
    # and its activation, sync): the 1.25 GiB step is output + float32 cast + activation
    cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H200")
    run = tp.simulate([32_768], cfg, mode="analytic")
    ax = plots.plot_memory_timeline(run)
    bars = _peak_bars(ax)
    assert [part for _, part, _ in bars] == ["pooled output", "float32 cast", "activation"]
    assert sum(n for _, _, n in bars) == run.peak_pooling_bytes == 5 * 2**28  # 1.25 GiB
    assert {step for step, _, _ in bars} == {3.0}  # `vllm serve`: 8K chunks, the 4th step
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "head output (cast / activation)" not in labels  # never drawn: not promised
    assert {"pooled output (model dtype)", "float32 cast (head)",
            "activation (the head's output)"} <= set(labels)


@pytest.mark.parametrize("policy", ["legacy", "clone", "prealloc", "offload"])
@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("head", [True, False])
def test_every_drawn_peak_bar_sums_to_the_ledgers_peak(policy: str, async_scheduling: bool,
                                                       head: bool) -> None:
    cfg = tp.SimConfig.for_model("Qwen3-Embedding-0.6B", max_num_batched_tokens=1024,
                                 policy=policy, async_scheduling=async_scheduling,
                                 **({} if head else {"head_dtype": None,
                                                     "use_activation": False}))
    run = tp.simulate([3000], cfg, mode="analytic")
    ax = plots.plot_memory_timeline(run)
    steps = run.steps.set_index("step")
    totals: dict[float, int] = {}
    for step, part, nbytes in _peak_bars(ax):
        assert part != tp.sim.peak_parts.__globals__["NOT_BROKEN_DOWN"]
        totals[step] = totals.get(step, 0) + nbytes
    for step, total in totals.items():
        assert total == steps.loc[int(step), "pool_peak_bytes"]
    # a bar wherever the peak is above the end-of-step bytes
    above = steps.index[steps["pool_peak_bytes"] > steps["pool_bytes"]]
    assert sorted(totals) == [float(s) for s in above]


def test_prealloc_inset_sits_above_the_data_and_the_peak_label() -> None:
    cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B", head_dtype=None, use_activation=False,
                                 policy="prealloc", async_scheduling=True,
                                 max_model_len=1 << 20, as_if=True)
    run = tp.simulate([1 << 20], cfg, mode="analytic")
    ax = plots.plot_memory_timeline(run)
    inset = ax.child_axes[0]
    box = inset.get_position()  # figure fractions
    top = ax.get_ylim()[1]
    ax_box = ax.get_position()
    inset_bottom_bytes = (box.y0 - ax_box.y0) / ax_box.height * top
    assert run.steps["pool_peak_bytes"].max() < 0.95 * inset_bottom_bytes
    (label,) = [t for t in ax.texts if t.get_text().startswith("peak ")]
    assert label.xy[0] > run.steps["step"].iloc[-1] - 1  # labelled at the right, clear of it


def _sweep() -> pd.DataFrame:
    config = tp.SimConfig(hidden_size=64, max_num_batched_tokens=256, head_dtype=None,
                          use_activation=False)
    return tp.sweep([64, 256, 1024, 4096], config, progress=False)


def test_memory_vs_prompt_length_lines_reference_and_zero_policy() -> None:
    ax = plots.plot_memory_vs_prompt_length(_sweep(), hardware="H100 SXM")
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    drawn = [line.get_label() for line in ax.lines if not line.get_label().startswith("_")]
    assert drawn == ["legacy", "clone", "prealloc"]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "offload: 0 B on the device" in labels
    # 80 GiB is far above these KiB-sized curves: named in the legend, not drawn
    off = [t for t in labels if t.startswith("H100 SXM memory (80 GiB)")]
    assert off and "off the chart" in off[0]
    hbm = tp.HARDWARE_PRESETS["H100 SXM"].hbm_bytes
    assert not any(np.allclose(line.get_ydata(), hbm) for line in ax.lines)
    assert ax.get_ylim()[1] < hbm / 100
    assert "output corrupted (legacy)" in labels
    # a device memory near the curves is drawn as a line
    near = int(_sweep()["peak_pooling_bytes"].max() * 2)
    ax = plots.plot_memory_vs_prompt_length(_sweep(), hardware=near)
    assert any(np.allclose(line.get_ydata(), near) for line in ax.lines)
    _assert_legend_outside(ax)
    with pytest.raises(ValueError, match="unknown hardware"):
        plots.plot_memory_vs_prompt_length(_sweep(), hardware="TPU")


def test_memory_vs_prompt_length_clone_is_twice_prealloc_for_long_prompts() -> None:
    ax = plots.plot_memory_vs_prompt_length(_sweep(), async_scheduling=False)
    lines = {line.get_label(): line.get_ydata() for line in ax.lines}
    # clone peaks at (2T - L)·W·s, prealloc at T·W·s: T=4096, L=256
    assert lines["clone"][-1] / lines["prealloc"][-1] == pytest.approx((2 * 4096 - 256) / 4096)


def _late_chunked_row(prompt_len: int = 2048) -> dict:
    """One run as a point: a late-chunked document on the sweep's config, its summary row."""
    config = tp.SimConfig(hidden_size=64, max_num_batched_tokens=256, head_dtype=None,
                          use_activation=False)
    run = tp.simulate([prompt_len], config, mode="analytic",
                      pooling_params=tp.PoolingParams(late_chunking_size=512))
    return dict(run.summary(), label=f"one {prompt_len:,}-token document, late chunking")


def test_memory_vs_prompt_length_draws_single_runs_held_and_delivered() -> None:
    row = _late_chunked_row()
    assert row["output_bytes"] < row["peak_pooling_bytes"]  # 4 rows delivered, 2,048 held
    plain = plots.plot_memory_vs_prompt_length(_sweep())
    assert not [line for line in plain.lines if str(line.get_gid()).startswith("point")]
    plain_labels = [t.get_text() for t in plain.get_legend().get_texts()]
    ax = plots.plot_memory_vs_prompt_length(_sweep(), points=pd.DataFrame([row]))
    by_gid = {line.get_gid(): line for line in ax.lines if line.get_gid()}
    label = row["label"]
    held, out = by_gid[f"point: {label}"], by_gid[f"point delivered: {label}"]
    assert (held.get_xdata().tolist(), held.get_ydata().tolist()) == (
        [2048], [row["peak_pooling_bytes"]])
    assert (out.get_xdata().tolist(), out.get_ydata().tolist()) == ([2048], [row["output_bytes"]])
    assert out.get_markerfacecolor() == "white" and held.get_marker() == out.get_marker()
    link = by_gid[f"point link: {label}"]
    assert link.get_ydata().tolist() == [row["peak_pooling_bytes"], row["output_bytes"]]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:len(plain_labels)] == plain_labels  # the curves' legend as it was
    mine = [t for t in labels if t.startswith("one 2,048-token document")]
    assert mine and "holds " in mine[0] and "delivers " in mine[0]
    assert any("delivers to the host" in t for t in labels)
    assert not [t for t in labels if PRIVATE_NAME.search(t)]
    # without output_bytes, a list of dicts: the held marker alone
    alone = plots.plot_memory_vs_prompt_length(_sweep(), points=[
        {"prompt_len": 3000, "peak_pooling_bytes": 5000, "label": "a run"}])
    gids = [line.get_gid() for line in alone.lines if line.get_gid()]
    assert gids == ["point: a run"]


@pytest.mark.parametrize(("points", "error", "match"), [
    ({"prompt_len": 1, "peak_pooling_bytes": 1, "label": "x"}, TypeError, r"wrap it in a list"),
    ([("prompt_len", 1)], TypeError, r"every item must be a dict"),
    ("points", TypeError, r"DataFrame or a list of dicts"),
    ([], ValueError, r"points=None"),
    ([{"prompt_len": 9, "peak_pooling_bytes": 9}], ValueError, r"lack column\(s\) \['label'\]"),
    ([{"prompt_len": 9, "peak_pooling_bytes": 0, "label": "x"}], ValueError, r"loglog=False"),
    ([{"prompt_len": 9, "peak_pooling_bytes": 9, "output_bytes": "a", "label": "x"}], ValueError,
     r"output_bytes must be > 0"),
    ([{"prompt_len": 9, "peak_pooling_bytes": 9, "label": 3}], TypeError, r"non-empty string"),
])
def test_memory_vs_prompt_length_refuses_bad_points(points, error, match) -> None:
    with pytest.raises(error, match=match):
        plots.plot_memory_vs_prompt_length(_sweep(), points=points)


def test_time_plot_says_estimate() -> None:
    ax = plots.plot_time_vs_prompt_length(_sweep(), y="est_pool_s")
    assert "ESTIMATE" in ax.get_ylabel() and "ESTIMATE" in ax.get_title(loc="left")


def _assert_legend_outside(ax) -> None:
    fig = ax.figure
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1 - 1, "the legend overlaps the axes"


def test_time_plot_draws_the_forward_estimate_beside_pooling() -> None:
    config = tp.SimConfig.for_model("Qwen3-Embedding-0.6B", hardware="H100 SXM",
                                    max_model_len=65536, as_if=True)  # past its context, on purpose
    df = tp.sweep([1024, 8192, 65536], config, progress=False)
    ax = plots.plot_time_vs_prompt_length(df, y="est_pool_s", forward=True)
    forward = next(line for line in ax.lines if line.get_label() == "forward pass (ESTIMATE)")
    first = df[(df["policy"] == "legacy") & df["async_scheduling"]].sort_values("prompt_len")
    assert first["est_forward_s"].notna().all()
    np.testing.assert_array_equal(forward.get_ydata(), first["est_forward_s"])
    _assert_legend_outside(ax)
    with pytest.raises(ValueError, match="est_forward_s"):
        plots.plot_time_vs_prompt_length(df.drop(columns="est_forward_s"), forward=True)


def test_long_timeline_gets_a_zoom_inset_on_its_last_steps() -> None:
    config = tp.SimConfig(hidden_size=16, max_num_batched_tokens=64, async_scheduling=True)
    long = tp.simulate([64 * 60], config, mode="analytic")  # 60 chunks, then the host copy
    ax = plots.plot_memory_timeline(long)
    (inset,) = ax.child_axes
    lo, hi = inset.get_xlim()
    assert (lo, hi) == (long.steps["step"].iloc[-5] - 0.5, long.steps["step"].iloc[-1] + 0.5)
    np.testing.assert_array_equal(_peak_stairs(inset).get_data().values,
                                  long.steps["pool_peak_bytes"].iloc[-5:])
    short = plots.plot_memory_timeline(tp.simulate([20], SMALL))
    assert short.child_axes == []


def test_ranges_are_written_inclusive_everywhere() -> None:
    assert plots.format_range(0, 8) == "0–7" and plots.format_range(5, 6) == "5"
    with pytest.raises(ValueError, match="empty range"):
        plots.format_range(3, 3)
    result = tp.simulate([20], SMALL)  # budget 8: chunks [0, 8), [8, 16), [16, 20)
    ax = plots.plot_ownership_schedule(result)
    texts = {t.get_text() for t in ax.texts}
    assert {"0–7", "8–15", "16–19"} <= texts and "0–8" not in texts


def test_similarity_labels_every_token_or_every_kth() -> None:
    tokens = [f"t{i}" for i in range(120)]
    ax = plots.plot_similarity(np.random.default_rng(0).normal(size=(120, 8)), tokens=tokens)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    every = int(labels[1].split()[0])  # thinned to what fits at 7 pt, position shown
    assert every >= 2 and labels == [f"{i} t{i}" for i in range(0, 120, every)]
    ax = plots.plot_similarity(np.eye(30), tokens=tokens[:30])
    assert [t.get_text() for t in ax.get_xticklabels()] == tokens[:30]


def test_pooling_share_of_kv_plot() -> None:
    df = _sweep()
    ax = plots.plot_pooling_share_of_kv(df, kv_cache_bytes=10 * 2**20, async_scheduling=False)
    lines = {line.get_label().split(" (")[0]: line.get_ydata() for line in ax.lines}
    peak = df[(df["policy"] == "clone") & ~df["async_scheduling"]].sort_values("prompt_len")
    share = 100.0 * peak["peak_pooling_bytes"] / (10 * 2**20)
    # a 0 cannot sit on a log axis: it is left out (NaN), never drawn at a made-up floor
    np.testing.assert_allclose(lines["clone"], share.where(share > 0))
    assert "the whole KV cache of a rank" in lines
    with pytest.raises(ValueError, match="kv_cache_bytes must be > 0"):
        plots.plot_pooling_share_of_kv(df, kv_cache_bytes=0)


# --- no private vLLM names in a figure's legend --------------------------------------------

#: A private name in code: ``_get_and_verify_max_len``, ``kv_cache_planning._check_...``, a
#: call ``_name(``, or a snake_case identifier of three or more parts (``check_enough_kv``).
PRIVATE_NAME = re.compile(r"_[a-z]+\(|\._|(?<![\w-])_[a-z]\w*|\b[a-z]+(?:_[a-z0-9]+){2,}\b")


def _figure_legend_texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for legend in [ax.get_legend()] if legend
            for t in legend.get_texts()]


def test_the_private_name_pattern_catches_what_the_legends_used_to_say() -> None:
    for old in ("(_get_and_verify_\nmax_len); drawn as if".replace("\n", ""),
                "(_check_enough_kv_cache_memory);", "kv_cache_planning._check_enough"):
        assert PRIVATE_NAME.search(old), old
    for plain in ("past the model's context:\nvLLM refuses it; drawn as if",
                  "Qwen3-Embedding-8B · token_embed", "float32 cast (head)",
                  "H100 SXM memory (80 GiB)", "math-shepherd-mistral-7b-prm · token_classify"):
        assert not PRIVATE_NAME.search(plain), plain


def test_refusal_legends_say_plain_words() -> None:
    config = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H100 SXM",
                                    max_model_len=1 << 20, as_if=True)
    lens = tp.viz.prompt_grid(1024, 1 << 20, points_per_doubling=1)
    swept = tp.sim.mark_startup_refusals(tp.sweep(lens, config, async_scheduling=[False]),
                                         config)
    assert set(swept["refused_by"].dropna()) == {
        tp.sim.startup.CONTEXT_CHECK, tp.sim.startup.KV_CHECK}  # both kinds are drawn
    figures = [plots.plot_memory_vs_prompt_length(swept, hardware="H100 SXM").figure,
               tp.viz.plot_time_vs_prompt_length(swept, forward=True).figure,
               tp.viz.plot_pooling_share_of_kv(swept, 60 * 2**30).figure]
    for fig in figures:
        texts = _figure_legend_texts(fig)
        assert any("vLLM refuses to start" in t for t in texts)
        assert any("past the model's context" in t for t in texts)
        assert not [t for t in texts if PRIVATE_NAME.search(t)]
    assert swept["refusal"].str.contains("_check_enough_kv_cache_memory").any()  # in the table


@pytest.mark.notebook
def test_no_legend_of_notebook_05_names_a_private_function(monkeypatch) -> None:
    """Run notebook 05's code (quick mode, in this process) and walk every legend it drew."""
    import json
    from pathlib import Path

    import matplotlib.pyplot as plt

    path = Path(__file__).resolve().parents[1] / "notebooks" / "05_memory_vs_prompt_length.ipynb"
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    source = "\n".join(line for c in cells for line in "".join(c["source"]).splitlines()
                       if not line.lstrip().startswith("%"))
    monkeypatch.setenv("TOKPOOL_QUICK", "1")
    monkeypatch.chdir(path.parent)
    plt.close("all")
    exec(compile(source, str(path), "exec"), {"__name__": "nb05"})
    figures = [plt.figure(n) for n in plt.get_fignums()]
    assert len(figures) >= 9  # every plot cell drew one
    texts = [t for fig in figures for t in _figure_legend_texts(fig)]
    assert texts and not [t for t in texts if PRIVATE_NAME.search(t)], \
        [t for t in texts if PRIVATE_NAME.search(t)]
    plt.close("all")
