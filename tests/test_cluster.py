"""Parallelism and KV cache per rank (``tokpool.sim.vllm_rules.kv_cache``), by hand."""

from __future__ import annotations

import pytest

from tokpool.sim import pooling_share_of_kv
from tokpool.sim.vllm_rules.devices import GiB
from tokpool.sim.vllm_rules.hf_config import preset_from_hf_config
from tokpool.sim.vllm_rules.kv_cache import (
    data_parallel_split,
    kv_bytes_per_token_per_rank,
    kv_cache_capacity_tokens,
    kv_cache_dtype_bytes,
    kv_cache_memory_bytes,
    kv_heads_per_rank,
    pipeline_layers,
    pooler_ranks,
    weight_bytes_per_rank,
)
from tokpool.sim.vllm_rules.models import MODEL_PRESETS

QWEN3_8B = preset_from_hf_config({
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
    "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 32768,
    "vocab_size": 151665, "torch_dtype": "bfloat16",
}, include_lm_head=False)  # 7,567,295,488 parameters


def test_pooler_runs_on_every_tp_rank_of_the_last_stage():
    assert pooler_ranks() == (0,)
    assert pooler_ranks(tp=4) == (0, 1, 2, 3)
    assert pooler_ranks(tp=2, pp=3) == (4, 5)  # ranks 0-1 stage 0, 2-3 stage 1, 4-5 stage 2
    # the first of them is vLLM's output rank: world - tp
    assert pooler_ranks(tp=8, pp=4)[0] == 32 - 8


def test_data_parallel_round_robin():
    assert data_parallel_split(7, 3) == [[0, 3, 6], [1, 4], [2, 5]]
    assert data_parallel_split(2, 4) == [[0], [1], [], []]


def test_pipeline_layers_as_get_pp_indices():
    assert pipeline_layers(36, 4) == (9, 9, 9, 9)
    assert pipeline_layers(30, 4) == (7, 8, 8, 7)  # remainder 2 to stages -2, -3
    assert pipeline_layers(7, 2) == (4, 3)
    assert pipeline_layers(28, 1) == (28,)
    with pytest.raises(ValueError, match="exceeds"):
        pipeline_layers(2, 3)


def test_kv_heads_split_then_replicate():
    assert [kv_heads_per_rank(8, tp) for tp in (1, 2, 4, 8, 16)] == [8, 4, 2, 1, 1]


def test_kv_and_weight_bytes_per_rank():
    # 2 (K, V) x 36 layers x 8/4 = 2 heads x 128 x 2 bytes
    assert kv_bytes_per_token_per_rank(QWEN3_8B, tp=4) == 2 * 36 * 2 * 128 * 2 == 36_864
    # pp=4: 9 layers a stage
    assert kv_bytes_per_token_per_rank(QWEN3_8B, tp=4, pp=4) == 2 * 9 * 2 * 128 * 2
    assert kv_bytes_per_token_per_rank(QWEN3_8B, kv_cache_dtype="fp8") == 2 * 36 * 8 * 128
    assert weight_bytes_per_rank(QWEN3_8B, tp=4) == 7_567_295_488 * 2 // 4 == 3_783_647_744
    # a plain ModelPreset (no KV heads): all attention heads, bf16
    # the preset carries SmolLM2's 3 KV heads (grouped-query attention)
    assert kv_bytes_per_token_per_rank(MODEL_PRESETS["SmolLM2-135M"]) == 2 * 30 * 3 * 64 * 2
    with pytest.raises(ValueError, match="not sized"):
        kv_cache_dtype_bytes("nvfp4", 2)


def test_kv_capacity_hand_computed():
    # H100 80 GiB, default utilization 0.92, tp=4, 2 GiB activation peak
    requested = 79_027_398_247  # ceil(85_899_345_920 * 0.92)
    available = requested - 3_783_647_744 - 2 * GiB
    assert available == 73_096_266_855
    assert kv_cache_memory_bytes(QWEN3_8B, gpu_memory_bytes=80 * GiB, tp=4,
                                 activation_peak_bytes=2 * GiB) == available
    blocks = available // (16 * 36_864)  # 589,824 bytes a block
    assert blocks == 123_928
    assert kv_cache_capacity_tokens(QWEN3_8B, gpu_memory_bytes=80 * GiB, tp=4,
                                    activation_peak_bytes=2 * GiB) == blocks * 16 == 1_982_848
    # block_size 32: whole blocks of 32 tokens
    assert kv_cache_capacity_tokens(QWEN3_8B, gpu_memory_bytes=80 * GiB, tp=4,
                                    activation_peak_bytes=2 * GiB, block_size=32) == (
        available // (32 * 36_864) * 32)


def test_no_memory_and_encoder_only_are_refused():
    with pytest.raises(ValueError, match="no available memory for the KV cache"):
        kv_cache_capacity_tokens(QWEN3_8B, gpu_memory_bytes=8 * GiB)
    minilm = preset_from_hf_config({
        "architectures": ["BertModel"], "model_type": "bert", "hidden_size": 384,
        "num_hidden_layers": 6, "num_attention_heads": 12, "vocab_size": 30522})
    with pytest.raises(ValueError, match="encoder-only"):
        kv_cache_capacity_tokens(minilm, gpu_memory_bytes=80 * GiB)


def test_pooling_share_of_kv():
    # a 32k-token token_embed request, 4096 float32 columns, pooled on each TP rank
    pooled = 32_768 * 4096 * 4
    assert pooling_share_of_kv(pooled, 73_096_266_855) == pytest.approx(0.00734, abs=1e-5)
    assert pooling_share_of_kv([0, 73_096_266_855], 73_096_266_855) == [0.0, 1.0]
    with pytest.raises(ValueError):
        pooling_share_of_kv(1, 0)
