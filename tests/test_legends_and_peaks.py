"""Every peak a figure draws is drawn by its parts, each part in the legend under its own name,
and no legend is empty or names what the axes do not hold (issue 48)."""

from __future__ import annotations

import matplotlib
import pytest

import tokpool as tp
from tokpool.plots.score_memory import score_peak_parts

matplotlib.use("Agg")

JINA = {"architectures": ["JinaForRanking"], "model_type": "qwen3", "hidden_size": 1024,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151936,
        "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}


def _rgb(value) -> list[tuple]:
    """A colour, or an array of colours, as rounded RGB tuples."""
    import numpy as np
    from matplotlib.colors import to_rgba

    if isinstance(value, str) or np.ndim(value) == 1:
        return [tuple(round(c, 3) for c in to_rgba(value)[:3])]
    return [tuple(round(c, 3) for c in to_rgba(v)[:3]) for v in value]


def _colours(ax) -> set[tuple]:
    """The colours of every artist the axes hold (faces, edges, lines)."""
    out: set[tuple] = set()
    for artist in [*ax.patches, *ax.collections, *ax.lines]:
        for getter in ("get_facecolor", "get_edgecolor", "get_color"):
            if hasattr(artist, getter):
                out.update(_rgb(getattr(artist, getter)()))
    return out


def assert_legend_attached(ax) -> list[str]:
    """The legend exists, is not empty, and each entry's colour is drawn in the axes."""
    from matplotlib.patches import Patch

    legend = ax.get_legend() or (ax.figure.legends[0] if ax.figure.legends else None)
    assert legend is not None, "no legend"
    labels = [t.get_text() for t in legend.texts]
    assert labels and all(labels), labels
    drawn = _colours(ax)
    for handle, label in zip(legend.legend_handles, labels, strict=True):
        if "0 B on the device" in label or "off the chart" in label:
            continue  # said, not drawn: a series of zeros, a line far above the curves
        colour = handle.get_facecolor() if isinstance(handle, Patch) else handle.get_color()
        assert _rgb(colour)[0] in drawn, (label, colour)
    return labels


def _bars(ax) -> dict[float, dict[str, int]]:
    out: dict[float, dict[str, int]] = {}
    for p in ax.patches:
        gid = p.get_gid() or ""
        if gid.startswith("peak part: "):
            x = round(p.get_x() + p.get_width() / 2, 3)
            out.setdefault(x, {})[gid.removeprefix("peak part: ")] = round(p.get_height())
    return out


@pytest.fixture(scope="module")
def rerank():
    cfg = tp.SimConfig.for_model("SmolLM2-135M", hardware="H100", task="token_embed")
    two = tp.simulate_score([32], [512] * 100, cfg, mode="analytic")
    one = tp.simulate_score([32], [512] * 100, cfg, mode="analytic",
                            flash_late_interaction=False)
    jina = tp.simulate_score([135], [190] * 64, tp.SimConfig.from_hf_config(
        JINA, hardware="H100"), mode="analytic", template_tokens=12850 - 64 * 191 - 136)
    return {"two": two, "one": one, "jina": jina}


@pytest.mark.parametrize("name", ["two", "one", "jina"])
def test_score_memory_draws_every_peak_by_its_parts(rerank, name):
    import matplotlib.pyplot as plt

    result = rerank[name]
    ax = tp.viz.plot_score_memory(result)
    labels = assert_legend_attached(ax)
    assert any(label.startswith("peak during the step") for label in labels)
    assert any(label.startswith("host memory") for label in labels)
    assert len(labels) == len(set(labels)) and sum(
        label.startswith("peak during") for label in labels) == 1, labels
    bars = _bars(ax)
    steps = result.steps
    for row in range(len(steps)):
        step = steps.iloc[row]
        end = int(step["pool_bytes"])
        peak = int(step["pool_peak_bytes"])
        if peak > end:
            parts = bars[float(step["step"])]
            assert sum(parts.values()) == peak, (name, row, parts, peak)
            assert parts == score_peak_parts(result, row)
    if name == "two":  # the MaxSim scratch is a part of the peak, named in the legend
        assert any("MaxSim scratch" in label for label in labels)
    if name == "jina":  # no query cache in a listwise prompt: not in the legend
        assert not any("query cache" in label for label in labels), labels
        assert any(label.startswith("chunk cache") for label in labels)
    plt.close("all")


def test_notebook_02_section_5_legend_names_what_its_panels_draw():
    """Notebook 02 §5: three timelines under one figure legend built from the axes' own
    artists (it was an empty box: proxy handles the axes never held)."""
    import matplotlib.pyplot as plt
    import nbformat
    from test_one_number import NOTEBOOKS

    nb = nbformat.read(NOTEBOOKS / "02_chunked_prefill_ownership.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code"
               and '("clone", "prealloc", "offload")' in c.source and "fig.legend" in c.source]
    namespace = {"tp": tp, "plt": plt, "config": tp.SimConfig(
        hidden_size=576, max_num_batched_tokens=8, head_dtype=None, use_activation=False)}
    exec(compile(cell.source, "02", "exec"), namespace)
    (legend,) = namespace["fig"].legends
    labels = [t.get_text() for t in legend.texts]
    assert len(labels) >= 3 and all(labels), labels
    for words in ("chunk cache", "peak during the step", "host memory"):
        assert any(label.startswith(words) for label in labels), (words, labels)
    plt.close("all")


def test_memory_timeline_peak_parts_are_artists_the_legend_names():
    import matplotlib.pyplot as plt

    run = tp.simulate([32_768], tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H200"),
                      mode="analytic")
    ax = tp.plot_memory_timeline(run)
    labels = assert_legend_attached(ax)
    held = ax.get_legend_handles_labels()[1]
    for part in tp.sim.peak_parts(run):
        assert any(label.startswith(part) for label in labels), (part, labels)
        assert any(label.startswith(part) for label in held), (part, held)
    assert sum(_bars(ax)[float(run.steps["pool_peak_bytes"].idxmax())].values()) == \
        run.peak_pooling_bytes
    plt.close("all")


def test_rerank_cost_legend_tells_solid_from_dashed():
    import matplotlib.pyplot as plt

    from tokpool.late_interaction.rerank_cost import rerank_sweep

    cfg = tp.SimConfig.for_model("SmolLM2-135M", hardware="H100", task="token_embed")
    ax = tp.viz.plot_rerank_cost(rerank_sweep([1, 4, 16], [512], cfg, query_len=32))
    assert_legend_attached(ax)
    legend = ax.get_legend()
    assert legend.handlelength >= 4
    styles = {h.get_label().split(": ", 1)[1]: (h.get_linestyle(), h.get_markerfacecolor())
              for h in ax.get_lines()}
    assert len(set(styles.values())) == len(styles) == 2, styles  # no two series look alike
    plt.close("all")


def test_memory_explorer_head_off_draws_and_says_its_zero_points():
    """With the head off, lengths that fit one step own 0 B under sync scheduling: drawn on
    the lower edge and said in the legend, not dropped from a log axis."""
    import matplotlib.pyplot as plt

    from tokpool.plots.zero_points import ZERO_WORDS

    cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H100 SXM", head_dtype=None,
                                 use_activation=False)
    df = tp.sweep(tp.viz.prompt_grid(1024, 1 << 15), cfg, async_scheduling=[False])
    ax = tp.plot_memory_vs_prompt_length(df)
    labels = assert_legend_attached(ax)
    assert ZERO_WORDS in labels
    zero = df[(df["policy"] == "clone") & (df["peak_pooling_bytes"] == 0)]["prompt_len"]
    assert len(zero) and int(zero.max()) <= cfg.max_num_batched_tokens
    (marks,) = [line for line in ax.lines if line.get_label() == "_zero: clone"]
    assert sorted(marks.get_xdata()) == sorted(zero.astype(float))
    plt.close("all")


def test_rerank_explorer_offers_the_context_and_refuses_in_its_controls_words():
    from tokpool.widgets.late_interaction import max_prompt_len

    ex = tp.rerank_explorer()
    assert ex.doc_len.max == max_prompt_len(None) == 8192  # SmolLM2-135M's context
    with pytest.raises(ValueError) as err:
        tp.viz.render_rerank(documents=2, doc_len=9000)
    assert "as_if" not in str(err.value) and "max_model_len >=" not in str(err.value)
    assert "at most 8,192 tokens" in str(err.value)
