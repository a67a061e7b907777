"""What sliding-window attention changes, as vLLM 0.33.0 runs it: prompts longer than the cache
are served, sliding-window embedders start where full attention would not, and the cache holds
more long requests. Each case quotes the vLLM function it follows; the ``parity`` tests at the
end run the same cases through vLLM's own planning functions and scheduler.
"""

from __future__ import annotations

import json

import pytest
from test_kv_spec import E5_MISTRAL, GEMMA2_9B, GEMMA3_27B

import tokpool as tp

#: e5-mistral-7b-instruct on an L4 with 72 % of its memory: full attention could not hold one
#: 16,384-token request; the 4,096-token window can. Its config.json alone (a MistralModel, which
#: vLLM's registry maps to MistralForCausalLM) is a generative model under --runner auto; the
#: real folder's sentence-transformers files make it a pooling one: here --runner pooling.
L4_LINE = ("vllm serve ./e5-mistral-7b-instruct --runner pooling --max-model-len 16384 "
           "--gpu-memory-utilization 0.72")


def _as_full_attention(cfg: dict) -> dict:
    """The same model with every layer attending fully (what tokpool assumed before)."""
    if cfg["model_type"] == "gemma3_text":
        return cfg | {"sliding_window_pattern": 1}
    return cfg | {"sliding_window": None}


def test_a_16000_token_prompt_is_served_with_a_4096_window():
    """SlidingWindowSpec.max_admission_blocks_per_request: the request is admitted with
    ceil((4095 + 2048) / 16) + 1 = 385 blocks (SlidingWindowManager.remove_skipped_blocks frees
    those before the window as it goes); full attention would need all 1,000."""
    cfg = tp.SimConfig.from_vllm_args(L4_LINE, model=E5_MISTRAL, hardware="L4")
    assert cfg.kv_group_windows == (4096,) and cfg.max_num_batched_tokens == 2048
    assert cfg.kv_cache_blocks * cfg.block_size < 16_000  # the cache holds fewer tokens
    result = tp.simulate([16_000], cfg, mode="analytic")
    assert result.requests["finish_step"].tolist() == [7]  # 8 chunks of 2,048 tokens
    assert int(result.steps["kv_bytes"].max()) <= 385 * cfg.kv_block_bytes
    with pytest.raises(ValueError, match="vLLM refuses to start"):
        tp.SimConfig.from_vllm_args(L4_LINE, model=_as_full_attention(E5_MISTRAL),
                                    hardware="L4")


def test_a_sliding_window_embedder_starts_where_vllm_starts():
    """get_kv_cache_configs -> _check_enough_kv_cache_memory with the sliding group's
    max_memory_usage_bytes (385 blocks at max_model_len 16,384), not all 1,024."""
    cfg = tp.SimConfig.from_vllm_args(L4_LINE, model=E5_MISTRAL, hardware="L4")
    spec = cfg.kv_spec
    flight = {"max_model_len": 16_384, "max_in_flight_tokens": cfg.max_in_flight_tokens}
    assert spec.max_memory_blocks(**flight) == 385 < cfg.kv_cache_blocks - 1 < 1024


@pytest.mark.parametrize("model, usage, ratio", [
    (E5_MISTRAL, "server", 2.66), (E5_MISTRAL, "llm", 1.60),
    (GEMMA2_9B, "server", 1.45), (GEMMA2_9B, "llm", 1.23),
    (GEMMA3_27B, "server", 2.30), (GEMMA3_27B, "llm", 1.48),
])
def test_the_cache_holds_more_32k_requests(model, usage, ratio):
    """get_max_concurrency_for_kv_cache_config at 32K tokens on an H100: blocks over one
    request's blocks in every group (a pool block holds the largest group's layers), against
    the same memory with every layer attending fully. The ratio falls with the budget: the
    window keeps the tokens of the steps in flight too."""
    kw = {"hardware": "H100 SXM", "usage": usage, "gpu_memory_utilization": 0.92,
          "max_model_len": 32_768, "allow_long_max_model_len": True,  # Gemma-2's is 8,192
          "task": "embed"}
    concurrency = []
    for cfg in (tp.SimConfig.from_hf_config(model, **kw),
                tp.SimConfig.from_hf_config(_as_full_attention(model), **kw)):
        concurrency.append(cfg.kv_spec.max_concurrency(
            cfg.kv_cache_blocks, max_model_len=32_768,
            max_in_flight_tokens=cfg.max_in_flight_tokens))
    assert round(concurrency[0] / concurrency[1], 2) == ratio


# --- against vLLM itself ----------------------------------------------------------------------

@pytest.mark.parity
def test_vllm_plans_these_caches_the_same(tmp_path, parity_count):
    """The three cases through vLLM's own layers and planning functions
    (``vllm_run.kv_spec.vllm_kv_cache_facts``) with the same memory."""
    from tokpool.sim.vllm_run import vllm_scheduler_unavailable_reason

    reason = vllm_scheduler_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    from tokpool.sim.vllm_run.kv_spec import vllm_kv_cache_facts

    cfg = tp.SimConfig.from_vllm_args(L4_LINE, model=E5_MISTRAL, hardware="L4")
    available = cfg.kv_cache_blocks * cfg.kv_block_bytes
    case = {"available_bytes": available, "max_model_len": 16_384,
            "max_num_batched_tokens": cfg.max_num_batched_tokens}
    for model, starts in ((E5_MISTRAL, True), (_as_full_attention(E5_MISTRAL), False)):
        folder = tmp_path / f"e5-{starts}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(model))
        (facts,) = vllm_kv_cache_facts(folder, [case])
        assert (facts["error"] is None) is starts
        if starts:
            assert facts["num_blocks"] == cfg.kv_cache_blocks
        parity_count("sliding-window start-up cases (vLLM's planning)")
    for name, model in (("e5", E5_MISTRAL), ("gemma2", GEMMA2_9B), ("gemma3", GEMMA3_27B)):
        ours = tp.SimConfig.from_hf_config(model, hardware="H100 SXM", usage="server",
                                           gpu_memory_utilization=0.92, max_model_len=32_768,
                                           allow_long_max_model_len=True, task="embed")
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(model))
        (facts,) = vllm_kv_cache_facts(folder, [{
            "available_bytes": ours.kv_cache_blocks * ours.kv_block_bytes,
            "max_model_len": 32_768, "max_num_batched_tokens": ours.max_num_batched_tokens}])
        assert facts["num_blocks"] == ours.kv_cache_blocks
        assert facts["max_concurrency"] == ours.kv_spec.max_concurrency(
            ours.kv_cache_blocks, max_model_len=32_768,
            max_in_flight_tokens=ours.max_in_flight_tokens)
        parity_count("sliding-window 32K concurrency cases (vLLM's planning)")


@pytest.mark.parity
def test_vllms_scheduler_serves_the_16000_token_prompt_the_same_way():
    from tokpool.sim.vllm_run import vllm_scheduler_unavailable_reason

    reason = vllm_scheduler_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    cfg = tp.SimConfig.from_vllm_args(L4_LINE, model=E5_MISTRAL, hardware="L4")
    ours = tp.simulate([16_000, 9_000], cfg, mode="analytic")
    theirs = tp.simulate([16_000, 9_000], cfg, mode="analytic", scheduler="vllm")
    assert ours.schedule == theirs.schedule
    assert ours.steps.equals(theirs.steps)
