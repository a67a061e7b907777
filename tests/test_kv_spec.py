"""vLLM 0.33.0's KV-cache spec per layer, its groups and its blocks, by hand-worked numbers.

Each test quotes the vLLM function it follows; ``tests/test_parity_kv_spec.py`` checks the same
rules against those functions run on the CPU.
"""

from __future__ import annotations

import pytest

import tokpool as tp
from tokpool.sim.vllm_rules.engine_checks import check_kv_cache_holds_one_sequence
from tokpool.sim.vllm_rules.kv_cache import kv_cache_spec
from tokpool.sim.vllm_rules.kv_spec import (
    KVCacheSpec,
    kv_cache_groups,
    kv_head_bytes,
    layer_sliding_windows,
    max_in_flight_tokens,
)

#: e5-mistral-7b-instruct's config.json (Mistral 7B: every layer slides over 4,096 tokens).
E5_MISTRAL = {
    "architectures": ["MistralModel"], "model_type": "mistral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
    "sliding_window": 4096, "torch_dtype": "float16",
}
#: Gemma-2-9B's text config (sliding and full layers alternate).
GEMMA2_9B = {
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 3584,
    "intermediate_size": 14336, "num_hidden_layers": 42, "num_attention_heads": 16,
    "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
    "max_position_embeddings": 8192, "sliding_window": 4096, "torch_dtype": "bfloat16",
}
#: Gemma-3-27B's text config (5 sliding layers of 1,024 tokens, then a full one).
GEMMA3_27B = {
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 5376,
    "intermediate_size": 21504, "num_hidden_layers": 62, "num_attention_heads": 32,
    "num_key_value_heads": 16, "head_dim": 128, "vocab_size": 262208,
    "max_position_embeddings": 131072, "sliding_window": 1024, "torch_dtype": "bfloat16",
}


# --- one layer's bytes ---------------------------------------------------------------------

@pytest.mark.parametrize("head_dim, low", [(128, 0.030), (64, 0.059)])
def test_per_token_head_dtypes_store_a_scale_per_head(head_dim, low):
    """TritonAttentionBackend.customize_spec: ``(head_size + head_size_v) x 1 byte + 2 x 4-byte
    float32 scales`` per head; without the scales tokpool was 3.0 % / 5.9 % low."""
    for dtype in ("int8_per_token_head", "fp8_per_token_head"):
        assert kv_head_bytes(head_dim, dtype) == 2 * head_dim + 8
        assert round(1 - 2 * head_dim / kv_head_bytes(head_dim, dtype), 3) == low
    assert kv_head_bytes(head_dim, "int4_per_token_head") == head_dim + 8  # two per byte
    assert kv_head_bytes(head_dim, "fp8") == 2 * head_dim  # per-tensor scale: not in the page
    cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B", kv_cache_dtype="int8_per_token_head")
    assert cfg.kv_bytes_per_token == 36 * 8 * (2 * 128 + 8)  # layers x KV heads x head bytes


def test_float32_is_not_a_kv_cache_dtype_of_vllm():
    """vllm/config/cache.py ``CacheDType`` has no "float32" ("auto" stores the model dtype)."""
    with pytest.raises(ValueError, match="'float32' is not one"):
        kv_head_bytes(64, "float32")


# --- which layers slide --------------------------------------------------------------------

@pytest.mark.parametrize("cfg, windows", [
    # MistralConfig's default sliding_window is 4096 (transformers), a null one is none
    ({"model_type": "mistral", "num_hidden_layers": 2}, (4096, 4096)),
    ({"model_type": "mistral", "num_hidden_layers": 2, "sliding_window": None}, (None, None)),
    # ModelConfig.__post_init__: a window of 0 is "no sliding window"
    ({"model_type": "mistral", "num_hidden_layers": 2, "sliding_window": 0}, (None, None)),
    # Qwen2Config: the window only with use_sliding_window, from layer max_window_layers on
    ({"model_type": "qwen2", "num_hidden_layers": 3, "sliding_window": 64}, (None,) * 3),
    ({"model_type": "qwen3", "num_hidden_layers": 3, "use_sliding_window": True,
      "sliding_window": 64, "max_window_layers": 0}, (64,) * 3),
    # Qwen2-MoE's mixed layers: its model file takes CacheConfig.sliding_window, which
    # EngineArgs.create_engine_config sets for all-sliding models only
    ({"model_type": "qwen2_moe", "num_hidden_layers": 4, "use_sliding_window": True,
      "sliding_window": 64, "max_window_layers": 4}, (None,) * 4),
    # gemma2.py: layer_types per layer; Gemma2Config alternates sliding / full
    ({"model_type": "gemma2", "num_hidden_layers": 4, "sliding_window": 128},
     (128, None, 128, None)),
    # gemma3.py: Gemma3TextConfig slides on 5 of every sliding_window_pattern (6) layers
    ({"model_type": "gemma3_text", "num_hidden_layers": 7, "sliding_window": 512},
     (512,) * 5 + (None, 512)),
    ({"model_type": "gemma3_text", "num_hidden_layers": 3, "sliding_window": 512,
      "sliding_window_pattern": 2}, (512, None, 512)),
    # llama.py reads layer_types too; without them CacheConfig.sliding_window (all layers)
    ({"model_type": "llama", "num_hidden_layers": 2, "sliding_window": 100,
      "layer_types": ["sliding_attention", "full_attention"]}, (100, None)),
    ({"model_type": "phi3", "num_hidden_layers": 2, "sliding_window": 2047}, (2047, 2047)),
])
def test_layer_windows_as_vllm_builds_the_layers(cfg, windows):
    assert layer_sliding_windows(cfg) == windows


def test_gemma3_bidirectional_halves_its_window():
    """Gemma3TextConfig.__post_init__: ``use_bidirectional_attention`` -> ``window // 2 + 1``."""
    cfg = {"model_type": "gemma3_text", "num_hidden_layers": 1, "sliding_window": 512,
           "use_bidirectional_attention": True}
    assert layer_sliding_windows(cfg) == (257,)


def test_qwen2_some_but_not_all_sliding_is_refused_as_vllm_refuses():
    """qwen2.py, Qwen2Model: "Sliding window for some but all layers is not supported"."""
    cfg = {"model_type": "qwen2", "num_hidden_layers": 4, "use_sliding_window": True,
           "sliding_window": 64, "max_window_layers": 2}
    with pytest.raises(ValueError, match="Sliding window for some but all layers"):
        layer_sliding_windows(cfg)


@pytest.mark.parametrize("extra, layout", [
    ({"kv_lora_rank": 512, "model_type": "deepseek_v3"}, "multi-head latent attention"),
    ({"ssm_state_size": 16}, "Mamba / linear-attention"),
    ({"attention_chunk_size": 8192}, "chunked local attention"),
    ({"layer_types": ["linear_attention"]}, r"layer_types \['linear_attention'\]"),
    ({"is_encoder_decoder": True}, "encoder-decoder"),
])
def test_kv_layouts_tokpool_does_not_model_are_refused_by_name(extra, layout):
    cfg = {"architectures": ["SomeForCausalLM"], "model_type": "llama", "hidden_size": 64,
           "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100, **extra}
    with pytest.raises(ValueError, match=layout):
        tp.SimConfig.from_hf_config(cfg)


# --- groups ----------------------------------------------------------------------------------

def test_groups_follow_vllms_layer_pattern():
    """kv_cache_planning._get_kv_cache_groups_uniform_page_size: the smallest bucket sets the
    group size; a bucket of n layers is split into ceil(n / size) groups of layers[i::groups]."""
    gemma3 = kv_cache_groups(layer_sliding_windows(GEMMA3_27B))  # 52 sliding, 10 full layers
    assert [(g.sliding_window, len(g.layers)) for g in gemma3] == [(1024, 9)] * 4 + [
        (1024, 8)] * 2 + [(None, 10)]
    assert gemma3[0].layers[:3] == (0, 7, 14)  # layers[0::6] of the sliding bucket
    gemma2 = kv_cache_groups(layer_sliding_windows(GEMMA2_9B))
    assert [(g.sliding_window, len(g.layers)) for g in gemma2] == [(4096, 21), (None, 21)]
    # under 1.5x the smallest bucket: the largest one sets the size (12 sliding + 13 full)
    assert [len(g.layers) for g in kv_cache_groups([64] * 12 + [None] * 13)] == [12, 13]
    # one type of spec: one group of every layer (is_kv_cache_spec_uniform)
    assert [len(g.layers) for g in kv_cache_groups(layer_sliding_windows(E5_MISTRAL))] == [32]


def test_a_pool_block_holds_the_largest_group():
    """_get_kv_cache_bytes_per_block: a pool block holds a page of every layer of the largest
    group on the rank; each group draws its blocks from that pool."""
    cfg = tp.SimConfig.from_hf_config(GEMMA3_27B)
    page = 16 * 16 * 2 * 128 * 2  # block x KV heads x (K, V) x head_dim x bf16
    assert cfg.kv_block_bytes == 10 * page
    assert cfg.kv_bytes_per_token == 62 * 16 * 2 * 128 * 2  # every layer, if all held it
    assert cfg.kv_group_windows == (1024,) * 6 + (None,)


# --- blocks per request, the start-up check ----------------------------------------------------

def test_a_sliding_group_plans_its_window_plus_the_tokens_in_flight():
    """SlidingWindowSpec.max_admission_blocks_per_request / max_memory_usage_bytes:
    ceil(min(window - 1 + in-flight tokens, max_model_len) / block) + 1; in flight: one budget
    per concurrent batch (VllmConfig.max_in_flight_tokens)."""
    spec = KVCacheSpec.build([4096], num_kv_heads=1, head_bytes=1, block_size=16)
    sync = max_in_flight_tokens(8192, async_scheduling=False)
    assert sync == 8192 and max_in_flight_tokens(8192, async_scheduling=True) == 16384
    assert spec.max_memory_blocks(max_model_len=32768, max_in_flight_tokens=sync) == (
        -(-(4095 + 8192) // 16) + 1) == 769
    # shorter than the window: capped at max_model_len, the extra block still counted
    assert spec.max_memory_blocks(max_model_len=100, max_in_flight_tokens=sync) == 7 + 1
    full = KVCacheSpec.build([None], num_kv_heads=1, head_bytes=1, block_size=16)
    assert full.max_memory_blocks(max_model_len=32768, max_in_flight_tokens=sync) == 2048


def test_the_start_up_check_holds_the_null_block_back():
    """get_kv_cache_configs reserves the null block before _check_enough_kv_cache_memory: a
    cache of exactly one max_model_len request's blocks does not start."""
    spec = KVCacheSpec.build([None] * 2, num_kv_heads=1, head_bytes=4, block_size=16)
    flight = {"max_model_len": 1024, "max_in_flight_tokens": 256}
    assert not spec.fits_one_sequence(64, **flight) and spec.fits_one_sequence(65, **flight)
    with pytest.raises(ValueError, match=r"max seq len \(1024\).*estimated maximum model "
                                         r"length is 1008.*null block"):
        check_kv_cache_holds_one_sequence(name="m", spec=spec, kv_cache_blocks=64, **flight)
    check_kv_cache_holds_one_sequence(name="m", spec=spec, kv_cache_blocks=65, **flight)


def test_sliding_window_block_sizes_other_than_multiples_of_16_are_refused():
    """Attention.get_kv_cache_spec sizes a sliding layer's block from the backend
    (_largest_kernel_block_within: MultipleOf(16) on FLASH_ATTN / TRITON_ATTN)."""
    with pytest.raises(ValueError, match="block_size=8 with sliding-window layers"):
        tp.SimConfig.from_hf_config(E5_MISTRAL, block_size=8)
    kv_cache_spec(tp.sim.MODEL_PRESETS["SmolLM2-135M"], block_size=8)  # full attention: fine
