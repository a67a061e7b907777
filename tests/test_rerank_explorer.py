"""The rerank explorer and its render: both paths' bytes are simulate_score's, bad values are
refused in words before any work, vLLM's refusal (a document past the context) is shown, and the
controls redraw the view."""

from __future__ import annotations

import pytest

import tokpool as tp
from tokpool.late_interaction.rerank_cost import rerank_sweep


def test_render_tables_both_paths_as_simulate_score_gives_them():
    v = tp.viz.render_rerank(documents=20, doc_len=128, query_len=16)
    cfg = tp.SimConfig.for_model("SmolLM2-135M", hardware="H100", task="token_embed",
                                 usage="server")
    for column, flag in (("two stages", True), ("one stage", False)):
        s = tp.simulate_score([16], [128] * 20, cfg, mode="analytic",
                              flash_late_interaction=flag).summary()
        assert v.table.loc["bytes to the host", column] == s["host_bytes"]
        assert v.table.loc["peak device bytes of pooling", column] == s["peak_pooling_bytes"]
        assert v.table.loc["query cache (cloned rows)", column] == s["peak_query_cache_bytes"]
    assert v.table.loc["bytes to the host", "two stages"] == 4 * 21
    assert v.png[:4] == b"\x89PNG" and "two stages" in v.html


def test_output_width_narrows_what_is_cached_and_delivered():
    wide = tp.viz.render_rerank(documents=5, doc_len=64, stages="one")
    narrow = tp.viz.render_rerank(documents=5, doc_len=64, output_width=128, stages="one")
    assert narrow.table.loc["bytes to the host", "one stage"] == (16 * 0 + 32 + 5 * 64) * 128 * 4
    assert wide.table.loc["bytes to the host", "one stage"] == (32 + 5 * 64) * 576 * 4


@pytest.mark.parametrize("kwargs, words", [
    ({"documents": 0}, "documents must be a whole number from 1 to 1,000, got 0"),
    ({"doc_len": 1.5}, "document length must be a whole number from 1 to 32,768"),
    ({"query_len": True}, "query length must be a whole number"),
    ({"output_width": -3}, "output width must be a whole number from 1 to 8,192"),
    ({"stages": "three"}, "stages must be 'two' or 'one'"),
    ({"doc_len": 9000}, "longer than SmolLM2-135M's max_model_len=8192"),
])
def test_bad_values_are_refused_in_words(kwargs, words):
    with pytest.raises(ValueError) as info:
        tp.viz.render_rerank(**kwargs)
    assert words in str(info.value)


def test_explorer_redraws_and_shows_refusals_in_its_panel():
    ex = tp.rerank_explorer(documents=8, doc_len=128)
    assert ex.error is None and ex.view.settings["documents"] == 8
    ex.documents.value = 16
    assert ex.view.settings["documents"] == 16
    ex.doc_len.value = 9000  # past SmolLM2's context: the slider ends there (issue 48)
    assert ex.view is None and "document length must be from 1 to 8192" in ex.error
    ex.doc_len.value = 256
    assert ex.error is None
    ex.typed["query length"].value = "0"
    assert "query length must be from 1 to 2048" in ex.error
    ex.stages.value = "one"
    ex.typed["query length"].value = "32"
    assert ex.error is None and ex.view.settings["stages"] == "one"
    assert "RerankExplorer" in ex.static_html()


def test_sweep_marks_refused_calls_and_keeps_the_others():
    cfg = tp.SimConfig.for_model("SmolLM2-135M", task="token_embed")
    t = rerank_sweep([1, 2], [512, 9000], cfg, stages=("two",))
    assert list(t["refused"]) == [False, False, True, True]
    assert (t.loc[t["refused"], "host_bytes"] == 0).all()
    assert t.loc[~t["refused"], "host_bytes"].tolist() == [8, 12]
    with pytest.raises(ValueError, match="stages must hold 'two' and/or 'one'"):
        rerank_sweep([1], [8], cfg, stages=("both",))


@pytest.mark.parametrize("kwargs, error, words", [
    ({"documents": 0}, ValueError, "documents must be a whole number from 1 to 1,000"),
    ({"output_width": None}, ValueError, "output width must be a whole number from 0"),
    ({"config": "SmolLM2"}, TypeError, "config must be a tp.SimConfig"),
])
def test_explorer_constructor_refuses_bad_values_in_words(kwargs, error, words):
    with pytest.raises(error) as info:
        tp.rerank_explorer(**kwargs)
    assert words in str(info.value)
