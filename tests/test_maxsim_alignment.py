"""tp.viz.plot_maxsim_alignment and the alignment it draws: the per-query-token contributions add up
to tp.late_interaction.maxsim's score bit for bit, each query token's maximum is the one boxed, the
tokens are the
tick labels; bad tokens and colour ranges are refused in words."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.patches import Rectangle

import tokpool as tp
from tokpool.late_interaction import maxsim_alignment


def _pair(seed: int, lq: int = 4, ld: int = 9, dim: int = 16):
    g = torch.Generator().manual_seed(seed)
    unit = torch.nn.functional.normalize
    return unit(torch.randn(lq, dim, generator=g), dim=-1), unit(torch.randn(ld, dim,
                                                                           generator=g), dim=-1)


@pytest.mark.parametrize("seed", range(8))
def test_contributions_sum_to_the_maxsim_score_bit_for_bit(seed):
    q, d = _pair(seed, lq=3 + seed, ld=5 + 3 * seed)
    a = maxsim_alignment(q, d)
    assert torch.equal(a.contributions.sum(), tp.late_interaction.maxsim(q, d))
    assert torch.equal(a.score, tp.late_interaction.maxsim(q, d))
    assert torch.equal(a.best, (q @ d.T).argmax(dim=-1))
    assert torch.equal(a.contributions, a.similarity.amax(dim=-1))
    # and vLLM's batched path gives the same score for the pair
    assert torch.equal(tp.late_interaction.maxsim_batched([q], [d])[0], a.score)


def test_half_precision_rows_are_compared_in_float32_as_maxsim_does():
    q, d = _pair(1)
    a = maxsim_alignment(q.half(), d.bfloat16())
    assert a.similarity.dtype == torch.float32
    assert torch.equal(a.score, tp.late_interaction.maxsim(q.half(), d.bfloat16()))


def test_plot_boxes_each_query_tokens_maximum_and_labels_the_tokens():
    q, d = _pair(2)
    q_tok, d_tok = ["what", "is", "a", "cat"], [f"t{j}" for j in range(9)]
    ax = tp.viz.plot_maxsim_alignment(q, d, q_tok, d_tok)
    try:
        a = maxsim_alignment(q, d)
        boxes = [p for p in ax.patches if isinstance(p, Rectangle)]
        cells = sorted({(round(p.get_y() + 0.5), round(p.get_x() + 0.5)) for p in boxes})
        assert cells == sorted(enumerate(a.best.tolist()))
        assert [t.get_text() for t in ax.get_yticklabels()] == q_tok
        assert [t.get_text() for t in ax.get_xticklabels()] == d_tok
        assert f"{float(a.score):.4g}" in ax.get_title()
        widths = [b.get_width() for b in ax.maxsim_bars.patches]
        assert widths == pytest.approx(a.contributions.tolist())
        image = ax.get_images()[0]
        assert image.get_clim() == (-1.0, 1.0)  # unit rows: the cosine range
    finally:
        plt.close(ax.figure)


def test_plot_draws_into_a_given_axes_with_a_fixed_range():
    q, d = _pair(3)
    fig, given = plt.subplots()
    try:
        ax = tp.viz.plot_maxsim_alignment(q * 2, d, list("abcd"), list("abcdefghi"), ax=given,
                                      vmax=3.0, title="mine", colorbar=False)
        assert ax is given and ax.get_title() == "mine"
        assert ax.get_images()[0].get_clim() == (-3.0, 3.0)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"q_tokens": ["a"]}, ValueError, "got 1 q_tokens for 4 query rows"),
    ({"d_tokens": "abcdefghi"}, TypeError, "d_tokens must be a list of document token strings"),
    ({"q_tokens": [1, 2, 3, 4]}, TypeError, "q_tokens[0] must be a str"),
    ({"vmax": 0}, ValueError, "vmax must be above 0"),
    ({"vmax": float("nan")}, ValueError, "vmax must be a finite number"),
    ({"cmap": "nope"}, ValueError, "is not a matplotlib colormap"),
    ({"ax": 5}, TypeError, "ax must be a matplotlib Axes"),
])
def test_bad_arguments_are_refused_in_words(kwargs, error, words):
    q, d = _pair(4)
    args = {"q_tokens": list("abcd"), "d_tokens": list("abcdefghi"), **kwargs}
    with pytest.raises(error) as info:
        tp.viz.plot_maxsim_alignment(q, d, **args)
    assert words in str(info.value)
    plt.close("all")


def test_mismatched_embeddings_are_refused_by_maxsim_in_its_words():
    with pytest.raises(ValueError):
        tp.viz.plot_maxsim_alignment(torch.ones(2, 4), torch.ones(3, 5), ["a", "b"], list("xyz"))
    with pytest.raises(ValueError):
        tp.viz.plot_maxsim_alignment(torch.ones(2, 4), torch.ones(0, 4), ["a", "b"], [])


def test_figure_fits_a_screen_for_a_long_query():
    """Notebook 06 opened on a 41-token query in a 1,013 px tall figure: never on screen whole.
    A long query now fits 600 px (100 dpi), its whole saved image included."""
    import io

    from PIL import Image

    q, d = _pair(3, lq=41, ld=48)
    ax = tp.viz.plot_maxsim_alignment(q, d, [f"query{i}" for i in range(41)],
                                      [f"documenttoken{j}" for j in range(48)])
    try:
        buf = io.BytesIO()
        ax.figure.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        assert Image.open(buf).size[1] <= 600
    finally:
        plt.close(ax.figure)
