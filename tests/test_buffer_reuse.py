"""The buffer-reuse picture marks what the simulator says, and the stories say why."""

from __future__ import annotations

import matplotlib as mpl
import pytest

import tokpool as tp

mpl.use("Agg")

IDENTITY = {"head_dtype": None, "use_activation": False}  # what pooling itself delivers


def _config(**kw) -> tp.SimConfig:
    return tp.SimConfig(hidden_size=8, max_num_batched_tokens=8, **IDENTITY).replace(**kw)


WORKLOADS = [
    ([20], {"policy": "legacy"}),
    ([5, 12, 3], {"policy": "legacy", "async_scheduling": True}),
    ([20, 6, 9], {"policy": "legacy", "max_num_batched_tokens": 16}),
    ([20, 6, 9], {"policy": "legacy", "max_num_batched_tokens": 16, "async_scheduling": True}),
    ([5, 12, 3], {"policy": "clone", "async_scheduling": True}),
]


def _marked(axes) -> set[tuple[int, int, int, int]]:
    """(step, request, row) of every row the figure cross-hatches as rewritten this step."""
    out = set()
    for ax in axes:
        for patch in ax.patches:
            gid = patch.get_gid() or ""
            if gid.startswith("rewritten:"):
                _, step, request, r0, r1 = gid.split(":")
                y0, h = patch.get_y(), patch.get_height()
                assert (int(r0), int(r1)) == (round(y0), round(y0 + h))  # drawn where it says
                out |= {(int(step), int(request), r) for r in range(int(r0), int(r1))}
    return out


@pytest.mark.parametrize(("lens", "kw"), WORKLOADS)
def test_picture_marks_exactly_the_rows_rewritten_under_a_kept_view(lens, kw) -> None:
    result = tp.simulate(lens, _config(**kw))
    axes = tp.viz.plot_buffer_reuse(result)
    assert len(axes) == len(result.steps)
    expected = {(int(o.step), int(o.request), r) for o in result.overwrites.itertuples()
                for r in range(o.buffer_row_start, o.buffer_row_end)}
    assert _marked(axes) == expected
    # and one sentence under the buffer for each overwrite, naming the tokens still pointed at
    texts = [t.get_text() for ax in axes for t in ax.texts]
    for o in result.overwrites.itertuples():
        rows = tp.viz.format_range(o.buffer_row_start, o.buffer_row_end)
        tokens = tp.viz.format_range(o.token_start, o.token_end)
        assert (f"✗ step {o.step} wrote rows {rows}: req {o.request} tok {tokens} still points "
                "here") in texts
    mpl.pyplot.close("all")


def test_overwrites_agree_with_the_corruption_verdict() -> None:
    # a request is corrupted exactly when a delivered row was rewritten under its view (ALL)
    for lens, kw in WORKLOADS:
        result = tp.simulate(lens, _config(**kw))
        assert sorted(set(result.overwrites["request"])) == result.corrupted
        chunks = result.chunks
        for c in chunks[chunks["overwritten_rows"] > 0].itertuples():
            mine = result.overwrites[(result.overwrites["request"] == c.request)
                                     & (result.overwrites["kept_step"] == c.step)]
            assert int((mine["buffer_row_end"] - mine["buffer_row_start"]).sum()) == \
                c.overwritten_rows
            assert int(mine["step"].min()) == c.overwritten_at_step


def test_analytic_mode_draws_the_same_panels() -> None:
    cfg = _config(policy="legacy", async_scheduling=True)
    tensor = tp.viz.buffer_reuse_panels(tp.simulate([5, 12, 3], cfg))
    analytic = tp.viz.buffer_reuse_panels(tp.simulate([5, 12, 3], cfg, mode="analytic"))
    assert tensor == analytic


def test_panels_hold_what_each_step_wrote() -> None:
    panels = tp.viz.buffer_reuse_panels(tp.simulate([20], _config(policy="legacy")))
    last = panels[2]  # wrote tokens 16-19 into rows 0-3; rows 4-7 still hold 12-15
    assert [(s.row0, s.row1, s.token0, s.token1, s.step) for s in last.contents] == [
        (0, 4, 16, 20, 2), (4, 8, 12, 16, 1)]
    views = {(v.token0, v.token1): v for v in last.views}
    assert views[8, 16].rewritten_now == ((0, 4, 8, 12),)
    assert views[0, 8].rewritten_before == ((0, 8, 0, 8, 1),)
    # each view has the clone the clone policy keeps instead beside it
    assert {(c.token0, c.token1) for c in last.clones if c.instead_of_view} == {(0, 8), (8, 16)}
    # the clone policy keeps no view past its step: only its own clones, none rewritten
    clone = tp.viz.buffer_reuse_panels(tp.simulate([20], _config()))
    assert all(not p.views for p in clone)
    assert [(c.token0, c.token1, c.kind) for c in clone[1].clones] == [(0, 8, "clone"),
                                                                        (8, 16, "clone")]


def test_one_step_and_bad_arguments() -> None:
    result = tp.simulate([20], _config(policy="legacy"))
    ax = tp.viz.plot_buffer_reuse(result, step=2)
    assert ax.get_title(loc="left") == "step 2: writes rows 0–3"
    with pytest.raises(ValueError, match="engine steps 0 to 2"):
        tp.viz.plot_buffer_reuse(result, step=3)
    with pytest.raises(TypeError, match="SimResult"):
        tp.viz.plot_buffer_reuse([20])
    with pytest.raises(ValueError, match="closed form, which has no engine steps"):
        tp.viz.plot_buffer_reuse(tp.simulate([20], _config(), mode="closed_form"))
    long = tp.simulate([60], _config(policy="legacy", max_num_batched_tokens=2))
    with pytest.raises(ValueError, match="Pass step= for one of them"):
        tp.viz.plot_buffer_reuse(long)
    assert tp.viz.plot_buffer_reuse(long, step=29).get_title(loc="left") == (
        "step 29: writes rows 0–1")
    with pytest.raises(TypeError, match="sequence of Axes"):
        tp.viz.plot_buffer_reuse(result, ax=ax)
    mpl.pyplot.close("all")


@pytest.mark.parametrize(("lens", "kw"), WORKLOADS)
def test_intact_by_luck_exactly_when_every_later_write_stopped_short(lens, kw) -> None:
    result = tp.simulate(lens, _config(**kw))
    lucky = tp.sim.lucky_requests(result)
    chunks = result.chunks
    read = chunks["read_at_step"].fillna(-1)
    kept = chunks[~chunks["owned"] & ~chunks["eager"] & (read > chunks["step"])]
    for r in range(len(lens)):
        mine = kept[kept["request"] == r]
        rows_end = mine["buffer_row_start"] + mine["token_end"] - mine["token_start"]
        short = len(mine) > 0 and bool(((mine["widest_write"].fillna(0) < rows_end)
                                        & (mine["overwritten_rows"] == 0)).all())
        assert (r in lucky) == (short and r not in result.corrupted), r
    story = result.explain()
    for r, why in lucky.items():
        assert f"→ intact by luck ({why};" in story[r]
    for r in set(range(len(lens))) - set(lucky):
        assert "by luck" not in story[r]


def test_intact_by_luck_names_the_short_write() -> None:
    result = tp.simulate([20, 6, 9], _config(policy="legacy", max_num_batched_tokens=16))
    assert tp.sim.lucky_requests(result) == {2: "step 2 wrote only rows 0–3"}
    late = tp.simulate([5, 12, 3], _config(policy="legacy", async_scheduling=True))
    assert tp.sim.lucky_requests(late) == {2: "nothing wrote the buffer before step 3 read it"}
    assert tp.sim.lucky_requests(tp.simulate([5, 12, 3], _config())) == {}


def test_step_slider_walks_the_run() -> None:
    result = tp.simulate([20], _config(policy="legacy"))
    ex = tp.viz.buffer_reuse_explorer(result)
    assert (ex.step.min, ex.step.max, ex.step.continuous_update) == (0, 2, False)
    first = ex.image.value
    assert "its rows are still intact" in ex.html.value
    ex.step.value = 1
    assert ex.image.value != first
    assert ("request 0's view of tokens 0–7 (rows 0–7, kept in step 0): step 1 wrote other "
            "tokens into rows 0–7") in ex.html.value
    ex.step.value = 2
    assert ex.view.data["panel"] == tp.viz.buffer_reuse_panels(result)[2]
    assert "read now, so the output is corrupted" in ex.html.value
    with pytest.raises(ValueError, match="engine steps 0 to 2"):
        tp.viz.buffer_reuse_explorer(result, step=5)
    mpl.pyplot.close("all")


def test_the_whole_run_reads_at_a_notebooks_width() -> None:
    """Issue 48: the three steps side by side were 17.4 in wide (3,503 px saved), shrunk to a
    notebook's width: about 5 px text. Stacked, the figure is at most 9 in wide and no text is
    under 7.5 pt, so shown 880 px wide (a notebook, GitHub's README) text is at least 9 px."""
    from tokpool.plots.buffer_reuse import FIGURE_WIDTH, MIN_FONT

    axes = tp.viz.plot_buffer_reuse(tp.simulate([20], _config(policy="legacy")))
    fig = axes[0].figure
    width_in = fig.get_size_inches()[0]
    assert width_in <= FIGURE_WIDTH <= 9.2
    texts = [t for a in axes for t in a.texts] + fig.legends[0].get_texts()
    smallest = min(t.get_fontsize() for t in texts)
    assert smallest >= MIN_FONT
    shown_px_per_in = min(100.0, 880 / width_in)  # the notebook's 100 dpi, or shrunk to fit
    assert smallest / 72 * shown_px_per_in >= 9
    mpl.pyplot.close("all")


def test_arrows_land_on_their_rows_and_clones_are_rows() -> None:
    """Each view's arrow ends on the buffer's edge, level with a row the view points at (not
    on a bracket beside it); each clone is drawn as rows of its own, one row a token."""
    from tokpool.plots.buffer_reuse import _BUFFER

    result = tp.simulate([20], _config(policy="legacy"))
    axes = tp.viz.plot_buffer_reuse(result)
    arrows = clones = 0
    for ax in axes:
        for child in ax.texts:
            gid = child.get_gid() or ""
            if gid.startswith("arrow:"):
                _, _, _, r0, r1 = gid.split(":")
                x, y = child.xy
                assert x == _BUFFER[0] and int(r0) < y < int(r1)
                arrows += 1
        for patch in ax.patches:
            gid = patch.get_gid() or ""
            if gid.startswith("clone:"):
                _, _, t0, t1 = gid.split(":")
                assert patch.get_height() == int(t1) - int(t0)
                clones += 1
    panels = tp.viz.buffer_reuse_panels(result)
    assert arrows == sum(len(p.views) for p in panels) > 0
    assert clones == sum(len(p.clones) for p in panels) > 0
    mpl.pyplot.close("all")
