"""Prefix caching as vLLM 0.33.0 decides it and runs it, in tokpool's scheduler and results.

Hand-derived cases, each quoting the vLLM function it follows; the same workloads run through
vLLM's own scheduler in ``tests/test_parity_schedule.py``.
"""

from __future__ import annotations

import pytest
import torch

import tokpool as tp
from tokpool.sim import ModelPreset
from tokpool.sim.schedule.given import check_schedule
from tokpool.sim.schedule.scheduler import ScheduledStep, schedule

#: Two 128-token prompts, 32 tokens each a step (the threshold), 10 usable blocks: request 1
#: is preempted in step 2 and resumes in step 4 (shared with test_parity_schedule.py).
PREEMPTED = {"prompt_lens": [128, 128], "max_num_batched_tokens": 64, "max_num_seqs": 4,
             "enable_chunked_prefill": True, "kv_cache_blocks": 11, "block_size": 16,
             "long_prefill_token_threshold": 32, "enable_prefix_caching": True}


def _table(steps):
    return [{r: (a, b) for r, a, b in s.chunks} for s in steps]


# --- the default and the flags ---------------------------------------------------------------

def test_on_by_default_where_vllm_supports_it():
    """ModelConfig.is_prefix_caching_supported: causal pooling models with LAST/ALL pooling;
    EngineArgs._set_default_chunked_prefill_and_prefix_caching_args applies it when the flag
    is not given."""
    assert tp.SimConfig(hidden_size=8).enable_prefix_caching
    assert tp.SimConfig.for_model("Qwen3-Embedding-8B", task="embed").enable_prefix_caching
    assert not tp.SimConfig.for_model("Qwen2.5-Math-PRM-7B").enable_prefix_caching  # STEP
    mean = ModelPreset("mean-decoder", "", 64, 2, 4, 16, 10_000, 100, seq_pooling_type="MEAN")
    assert not tp.SimConfig(model=mean, task="embed").enable_prefix_caching
    minilm = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 384,
              "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536,
              "vocab_size": 30522, "max_position_embeddings": 512}
    assert not tp.SimConfig.from_hf_config(minilm).enable_prefix_caching  # encoder-only
    assert not tp.SimConfig(hidden_size=8, enable_prefix_caching=False).enable_prefix_caching


def test_the_serve_line_flags_are_vllms():
    """--enable-prefix-caching / --no-enable-prefix-caching (CacheConfig, BooleanOptional):
    forced on for a model that does not support it, vLLM only warns."""
    off = tp.SimConfig.from_vllm_args("vllm serve Qwen/Qwen3-Embedding-8B "
                                      "--no-enable-prefix-caching")
    assert off.enable_prefix_caching is False
    assert tp.SimConfig.from_vllm_args("vllm serve Qwen/Qwen3-Embedding-8B").enable_prefix_caching
    prm = tp.SimConfig.from_vllm_args("vllm serve Qwen/Qwen2.5-Math-PRM-7B "
                                      "--enable-prefix-caching")
    assert prm.enable_prefix_caching is True
    with pytest.raises(TypeError, match="enable_prefix_caching must be True or False"):
        tp.SimConfig(hidden_size=8, enable_prefix_caching="yes")


# --- what the scheduler does with it --------------------------------------------------------

def test_a_preempted_embed_request_resumes_from_its_cached_blocks():
    """Scheduler.schedule -> KVCacheManager.get_computed_blocks: a preempted request's blocks
    stay in the prefix cache (BlockPool.free_blocks: tail blocks are evicted first), so it
    resumes after the ones not yet evicted; token tasks skip reading the cache
    (PoolingParams._merge_default_parameters) and restart from token 0."""
    embed = schedule(task="embed", **PREEMPTED)
    assert _table(embed) == [{0: (0, 32), 1: (0, 32)}, {0: (32, 64), 1: (32, 64)},
                             {0: (64, 96)}, {0: (96, 128)}, {1: (32, 96)}, {1: (96, 128)}]
    assert embed[2].preempted == (1,) and embed[4].cached == ((1, 32),)
    token = schedule(task="token_embed", **PREEMPTED)
    assert token[4].chunks == ((1, 0, 64),) and token[4].cached == ()
    off = schedule(task="embed", **(PREEMPTED | {"enable_prefix_caching": False}))
    assert off[4].chunks == ((1, 0, 64),)


def test_prompts_given_as_token_ids_share_whole_blocks():
    """Blocks are cached when allocated (allocate_slots -> cache_blocks), so a prompt admitted
    after another in the same step already hits its blocks; a hit stops one token short of the
    prompt (max_cache_hit_length = num_tokens - 1) and at whole blocks."""
    ids = [list(range(40)), list(range(40)), list(range(32)) + [99] * 8]
    steps = schedule([40, 40, 40], max_num_batched_tokens=64, max_num_seqs=4,
                     enable_chunked_prefill=True, enable_prefix_caching=True, task="embed",
                     prompt_token_ids=ids)
    assert steps[0].cached == ((1, 32), (2, 32))
    assert _table(steps)[0] == {1: (32, 40), 2: (32, 40), 0: (0, 40)}
    same = schedule([16, 16], max_num_batched_tokens=64, max_num_seqs=4,
                    enable_chunked_prefill=True, enable_prefix_caching=True, task="embed",
                    prompt_token_ids=[[5] * 16, [5] * 16])
    assert same[0].cached == ()  # one block: a hit would leave no token to compute


def test_simulate_reports_tokens_from_the_cache_in_the_ledger_and_explain():
    cfg = tp.SimConfig(hidden_size=8, task="embed", max_num_batched_tokens=64, block_size=16)
    prompts = [list(range(100)), list(range(80)) + [7] * 20]
    tensor = tp.simulate(prompts, cfg, mode="tensor")
    analytic = tp.simulate(prompts, cfg, mode="analytic")
    assert tensor.corrupted == [] and analytic.steps.equals(tensor.steps)
    assert tensor.requests["num_cached_tokens"].tolist() == [0, 80]
    assert int(tensor.steps["num_cached_tokens"].sum()) == 80
    assert "80 of its prompt tokens came from the prefix cache" in tensor.explain()[1]
    token = tp.simulate(prompts, cfg.replace(task="token_embed"), mode="analytic")
    assert token.requests["num_cached_tokens"].tolist() == [0, 0]
    assert "skips reading the prefix cache for token tasks" in token.explain()[1]
    by_length = tp.simulate([100, 100], cfg, mode="analytic")  # tokens of their own
    assert by_length.requests["num_cached_tokens"].tolist() == [0, 0]


def test_a_resumed_request_is_explained():
    cfg = tp.SimConfig(hidden_size=4, task="embed", **{
        k: v for k, v in PREEMPTED.items() if k != "prompt_lens"})
    result = tp.simulate(PREEMPTED["prompt_lens"], cfg, mode="tensor")
    assert result.corrupted == [] and result.requests["num_cached_tokens"].tolist() == [0, 32]
    assert "restarted after the blocks the prefix cache still held" in result.explain()[1]


def test_prompts_are_lengths_or_token_ids_not_a_mix():
    cfg = tp.SimConfig(hidden_size=4)
    with pytest.raises(TypeError, match="not a mix"):
        tp.simulate([[1, 2, 3], 5], cfg, mode="analytic")
    with pytest.raises(TypeError, match=r"prompt_token_ids\[0\] holds \[-1\]"):
        tp.simulate([[-1, 2]], cfg, mode="analytic")
    with pytest.raises(ValueError, match="at least one token"):
        tp.simulate([[], [1]], cfg, mode="analytic")


def test_a_given_schedule_with_cache_hits_is_checked():
    """check_schedule: a hit only starts a prefill, and never for a token task."""
    step = ScheduledStep(0, ((0, 16, 40),), (0,), cached=((0, 16),))
    check_schedule([step], [40], max_num_batched_tokens=64, enable_chunked_prefill=True)
    with pytest.raises(ValueError, match="reads no prefix cache"):
        check_schedule([step], [40], max_num_batched_tokens=64, enable_chunked_prefill=True,
                       reads_prefix_cache=False)
    with pytest.raises(ValueError, match="must start at 16"):
        check_schedule([ScheduledStep(0, ((0, 0, 40),), (0,), cached=((0, 16),))], [40],
                       max_num_batched_tokens=64, enable_chunked_prefill=True)
    cfg = tp.SimConfig(hidden_size=4, max_num_batched_tokens=64)  # token_embed
    with pytest.raises(ValueError, match="reads no prefix cache"):
        tp.simulate([40], cfg, mode="analytic", schedule=[step])


def test_a_real_models_cache_hit_delivers_what_a_full_prefill_delivers():
    """A ModelSource computes the cached prefix's KV (skip_cached) and the chunk after it: the
    embedding of a prompt that hits another's blocks equals its full prefill's (float32)."""
    model = tp.load_model("tiny-decoder")
    shared = [1024 + i for i in range(32)]
    prompts = [[*shared, 2000, 2001], [*shared, 3000, 3001, 3002]]
    source = tp.ModelSource(model, prompts)  # hidden rows; the engine pools the last one
    cfg = tp.SimConfig(hidden_size=model.hidden_size, dtype="float32", task="embed",
                       max_num_batched_tokens=64, block_size=16)
    result = tp.simulate(prompts, cfg, mode="tensor", source=source)
    assert result.requests["num_cached_tokens"].tolist() == [0, 32]
    assert result.corrupted == []  # the oracle: the rows the source produced
    alone = model.encode([prompts[1]], task="embed")[0]
    assert torch.allclose(result.outputs[1], alone, atol=1e-5)
