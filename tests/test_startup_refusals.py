"""Every plotted point vLLM would refuse to start for is marked, by the start-up checks every
other path runs (``tokpool.sim.startup``; ``vllm_rules.engine_checks``)."""

from __future__ import annotations

import pytest

import tokpool as tp
from tokpool.sim.startup import CONTEXT_CHECK

KV_CHECK = "kv_cache_planning._check_enough_kv_cache_memory"


@pytest.fixture(scope="module")
def as_if_config() -> tp.SimConfig:
    """Notebook 05's: Qwen3-Embedding-8B on one H100, swept as if to a million tokens."""
    return tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H100 SXM", dtype="bfloat16",
                                  head_dtype=None, use_activation=False,
                                  max_model_len=1 << 20, as_if=True)


def test_a_million_tokens_on_one_h100_is_refused_as_vllm_serve_refuses_it(as_if_config):
    refusals = tp.sim.startup_refusal(as_if_config, 1 << 20)
    assert [r.follows for r in refusals] == [CONTEXT_CHECK, KV_CHECK]
    # the same refusal, word for word, as the config vLLM would be started with
    with pytest.raises(tp.sim.EngineRefusal) as err:
        as_if_config.replace(max_model_len=1 << 20, as_if=False, allow_long_max_model_len=True,
                             gpu_memory_utilization=0.92)
    assert err.value.follows == KV_CHECK and str(err.value) == str(refusals[1])
    assert "144.0 GiB KV cache is needed" in str(err.value)
    assert "available KV cache memory (57.25 GiB)" in str(err.value)  # `vllm serve`
    # ... and as the `vllm serve` line (the API server's defaults) refuses it
    with pytest.raises(tp.sim.EngineRefusal) as line:
        tp.SimConfig.from_vllm_args(
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve Qwen/Qwen3-Embedding-8B "
            "--max-model-len 1048576", hardware="H100 SXM")
    assert line.value.follows == KV_CHECK


def test_each_point_agrees_with_building_its_config(as_if_config):
    lens = tp.viz.prompt_grid(1024, 1 << 20, points_per_doubling=1)
    verdict = tp.sim.startup_refusals(as_if_config, lens)
    assert verdict["prompt_len"].tolist() == sorted(int(n) for n in lens)
    for n, starts, by in verdict[["prompt_len", "vllm_starts", "refused_by"]].itertuples(
            index=False):
        serving = dict(max_model_len=n, as_if=False, gpu_memory_utilization=0.92)
        try:
            as_if_config.replace(**serving)
            first = None
        except tp.sim.EngineRefusal as err:
            first = err.follows
        assert starts == (first is None), n
        if not starts and by != CONTEXT_CHECK:  # the context one lifted, the next decides
            with pytest.raises(tp.sim.EngineRefusal) as err:
                as_if_config.replace(**serving, allow_long_max_model_len=True)
            assert err.value.follows == by
    context = tp.MODEL_PRESETS["Qwen3-Embedding-8B"].max_model_len
    assert (verdict["past_context"] == (verdict["prompt_len"] > context)).all()
    kv = verdict.loc[verdict["refused_by"] == KV_CHECK, "prompt_len"]
    assert kv.min() == 524_288 and (verdict["prompt_len"] >= kv.min()).sum() == len(kv)


def test_a_config_without_refusals_marks_nothing():
    cfg = tp.SimConfig(hidden_size=64, max_num_batched_tokens=512)  # no model: no context
    verdict = tp.sim.startup_refusals(cfg, [100, 10_000])
    assert verdict["vllm_starts"].all() and verdict["refused_by"].isna().all()
    assert tp.sim.refusal_summary(verdict) == [
        "vLLM starts for every prompt here (up to 10,000 tokens)."]


def test_mark_keeps_rows_and_plots_mark_the_refused_points(as_if_config):
    lens = [16_384, 65_536, 1 << 20]
    df = tp.sweep(lens, as_if_config, async_scheduling=[True])
    marked = tp.sim.mark_startup_refusals(df, as_if_config)
    assert marked.drop(columns=list(tp.sim.startup.REFUSAL_COLUMNS)).equals(df)
    assert marked.groupby("prompt_len")["refused_by"].first().tolist() == [
        None, CONTEXT_CHECK, KV_CHECK]
    ax = tp.plot_memory_vs_prompt_length(marked, hardware="H100 SXM")
    labels = ax.get_legend().get_texts()
    text = [t.get_text() for t in labels]
    # plain words in the legend; the env var that lifts it and vLLM's message are in the table
    assert any("past the model's context" in t and "drawn as if" in t for t in text)
    assert any("vLLM refuses to start" in t and "KV cache" in t for t in text)
    assert not any(CONTEXT_CHECK in t or KV_CHECK.rsplit(".", 1)[-1] in t.replace("\n", "")
                   for t in text)
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in " ".join(tp.sim.refusal_summary(marked))
    # one open marker per refused point on each drawn curve (offload draws none: 0 B)
    drawn = marked[marked["peak_pooling_bytes"] > 0]
    refused = (~drawn["vllm_starts"]).sum()
    offsets = sum(len(c.get_offsets()) for c in ax.collections)
    assert offsets == refused
    unmarked = tp.plot_memory_vs_prompt_length(df, hardware="H100 SXM")
    assert not any("drawn as if" in t.get_text() for t in unmarked.get_legend().get_texts())


def test_the_memory_explorer_marks_its_curve():
    view = tp.viz.render_memory(prompt_len=(1024, 1 << 20), points_per_doubling=1,
                                policies=("clone",))
    table = view.table
    assert {"vllm_starts", "refused_by"} <= set(table.columns)
    assert table.loc[table["prompt_len"] == 1 << 20, "refused_by"].item() == KV_CHECK
    assert "From 524,288 tokens vLLM refuses to start: its KV cache" in view.html
    inside = tp.viz.render_memory(policies=("clone",))  # 1K to the context: vLLM starts
    assert inside.table["vllm_starts"].all() and "refuses" not in inside.html


def test_bad_input_says_what_to_pass():
    with pytest.raises(TypeError, match=r"tp\.SimConfig"):
        tp.sim.startup_refusal({"hidden_size": 8}, 100)
    with pytest.raises(ValueError, match="whole number >= 1"):
        tp.sim.startup_refusal(tp.SimConfig(hidden_size=8), 0)
    with pytest.raises(ValueError, match="prompt_len column"):
        tp.sim.mark_startup_refusals(tp.sweep([10], tp.SimConfig(hidden_size=8)).drop(
            columns="prompt_len"), tp.SimConfig(hidden_size=8))
