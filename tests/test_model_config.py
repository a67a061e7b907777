"""``preset_from_hf_config`` / ``simconfig_fields_from_hf``: shipped configs and hand-written ones.

Hand-written dicts hold the values of the models' published config.json files as recalled, not
read here (no hub access): Qwen3-Embedding-8B's ``max_position_embeddings`` (32768 here, as the
preset) and ModernBERT-base's parameter total are the numbers not checked against the files.
Parameter counts are checked against sums written out term by term.
"""

from __future__ import annotations

import json

import pytest

from tokpool.models.gguf_cache import convert_gguf
from tokpool.models.registry import builtin_files
from tokpool.sim.config import SimConfig
from tokpool.sim.vllm_rules.hf_config import (
    estimate_num_parameters,
    preset_from_hf_config,
    simconfig_fields_from_hf,
)
from tokpool.sim.vllm_rules.models import MODEL_PRESETS

QWEN3_EMBEDDING_8B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
    "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 32768,
    "vocab_size": 151665, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "hidden_act": "silu",
}
QWEN25_MATH_PRM_7B = {
    "architectures": ["Qwen2ForProcessRewardModel"], "model_type": "qwen2", "hidden_size": 3584,
    "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "max_position_embeddings": 4096, "vocab_size": 152064,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu",
}
BERT_BASE = {
    "architectures": ["BertModel"], "model_type": "bert", "hidden_size": 768,
    "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
    "max_position_embeddings": 512, "type_vocab_size": 2, "vocab_size": 30522,
    "torch_dtype": "float32",
}
MODERNBERT_BASE = {
    "architectures": ["ModernBertForMaskedLM"], "model_type": "modernbert", "hidden_size": 768,
    "intermediate_size": 1152, "num_hidden_layers": 22, "num_attention_heads": 12,
    "max_position_embeddings": 8192, "vocab_size": 50368, "torch_dtype": "float32",
}


@pytest.fixture(scope="module")
def smollm2_dir():
    try:
        gguf = builtin_files("smollm2-135m")
    except FileNotFoundError as err:
        pytest.skip(str(err))
    directory, _ = convert_gguf(gguf, name="smollm2-135m")  # the cache tp.load_model uses
    return directory


@pytest.fixture(scope="module")
def minilm_dir():
    try:
        return builtin_files("minilm-l6")
    except FileNotFoundError as err:
        pytest.skip(str(err))


def test_smollm2_from_its_cached_config(smollm2_dir):
    p = preset_from_hf_config(smollm2_dir)
    ref = MODEL_PRESETS["SmolLM2-135M"]
    assert (p.hidden_size, p.num_layers, p.num_attention_heads, p.head_dim, p.vocab_size,
            p.max_model_len) == (ref.hidden_size, ref.num_layers, ref.num_attention_heads,
                                 ref.head_dim, ref.vocab_size, ref.max_model_len)
    # embeddings 49152*576 + 30 x (q 576*576 + k,v 2*576*192 + o 576*576
    # + gated MLP 3*576*1536 + 2 norms 576) + final norm 576; embeddings tied
    layer = 576 * 576 + 2 * 576 * 192 + 576 * 576 + 3 * 576 * 1536 + 2 * 576
    assert p.num_parameters == 49152 * 576 + 30 * layer + 576 == 134_515_008
    assert p.num_kv_heads == 3
    # the dequantized cache is float32: vLLM serves a float32 pooling model in float16
    assert p.torch_dtype == "float32" and p.served_dtype == "float16"
    assert p.kv_bytes_per_token() == 2 * 30 * 3 * 64 * 2 == 23_040
    assert (p.attn_type, p.seq_pooling_type, p.tok_pooling_type) == ("decoder", "LAST", "ALL")
    # the same from the config.json path, and from a transformers PretrainedConfig
    assert preset_from_hf_config(smollm2_dir / "config.json") == p
    from transformers import AutoConfig

    assert preset_from_hf_config(AutoConfig.from_pretrained(smollm2_dir)).num_parameters == (
        134_515_008)


def test_minilm_from_its_package_directory(minilm_dir):
    p = preset_from_hf_config(minilm_dir)
    assert (p.hidden_size, p.num_layers, p.num_attention_heads, p.head_dim) == (384, 6, 12, 32)
    # vllm/config/model.py, _get_and_verify_max_len: sentence_bert_config.json's max_seq_length
    # (256) replaces max_position_embeddings (512)
    assert p.max_model_len == 256 and p.vocab_size == 30522
    # BertModel with its pooler: the published 22,713,216
    emb = (30522 + 512 + 2) * 384 + 2 * 384
    layer = 4 * (384 * 384 + 384) + (384 * 1536 + 1536) + (1536 * 384 + 384) + 4 * 384
    assert p.num_parameters == emb + 6 * layer + 384 * 384 + 384 == 22_713_216
    # vLLM's BertModel default is CLS (so encoder_only); modules.json says MEAN
    assert (p.attn_type, p.seq_pooling_type) == ("encoder_only", "MEAN")
    assert p.kv_bytes_per_token() == 0  # encoder-only attention keeps no KV cache
    cfg = SimConfig(**simconfig_fields_from_hf(minilm_dir))
    assert cfg.task == "embed" and cfg.enable_chunked_prefill is False
    assert cfg.max_model_len == 256 and str(cfg.dtype) == "torch.float16"


def test_qwen3_embedding_8b():
    p = preset_from_hf_config(QWEN3_EMBEDDING_8B)
    layer = (4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096  # q, k, v, o
             + 2 * 128                                    # q_norm, k_norm
             + 3 * 4096 * 12288 + 2 * 4096)               # gated MLP, 2 norms
    backbone = 151665 * 4096 + 36 * layer + 4096
    assert backbone == MODEL_PRESETS["Qwen3-Embedding-8B"].num_parameters == 7_567_295_488
    # Qwen3ForCausalLM served as a pooling model: vLLM's adapters load no LM head
    # (vllm/model_executor/models/adapters.py, _create_pooling_model_cls)
    assert p.num_parameters == backbone
    assert preset_from_hf_config(QWEN3_EMBEDDING_8B, include_lm_head=True).num_parameters == (
        backbone + 151665 * 4096)
    assert p.kv_bytes_per_token() == 2 * 36 * 8 * 128 * 2 == 147_456
    assert p.kv_bytes_per_token(1) == 73_728  # fp8 KV cache
    assert (p.default_task, p.attn_type, p.max_model_len) == ("token_embed", "decoder", 32768)
    cfg = SimConfig(**simconfig_fields_from_hf(QWEN3_EMBEDDING_8B, max_num_batched_tokens=8192))
    assert cfg.enable_chunked_prefill is True and cfg.max_num_batched_tokens == 8192
    assert str(cfg.dtype) == "torch.bfloat16"


def test_qwen25_math_prm_7b():
    p = preset_from_hf_config(QWEN25_MATH_PRM_7B, step_tag_id=151651)
    layer = ((3584 * 3584 + 3584) + 2 * (3584 * 512 + 512) + 3584 * 3584  # q, k, v (bias), o
             + 3 * 3584 * 18944 + 2 * 3584)                                # MLP, norms
    head = 3584 * 3584 + 3584 + 3584 * 2 + 2  # score: Linear(h, h), ReLU, Linear(h, 2)
    assert p.num_parameters == 152064 * 3584 + 28 * layer + 3584 + head == 7_083_474_946
    assert p.kv_bytes_per_token() == 2 * 28 * 4 * 128 * 2 == 57_344
    assert (p.default_task, p.num_labels, p.tok_pooling_type) == ("token_classify", 2, "STEP")
    cfg = SimConfig(**simconfig_fields_from_hf(QWEN25_MATH_PRM_7B, step_tag_id=151651))
    assert (cfg.pooling_method, cfg.step_tag_id, cfg.width) == ("STEP", 151651, 2)
    assert cfg.enable_chunked_prefill is False  # STEP pooling does not chunk (vLLM's rule)
    assert cfg.max_model_len == 4096


def test_bert_base():
    p = preset_from_hf_config(BERT_BASE)
    emb = (30522 + 512 + 2) * 768 + 2 * 768
    layer = 4 * (768 * 768 + 768) + (768 * 3072 + 3072) + (3072 * 768 + 768) + 4 * 768
    assert p.num_parameters == emb + 12 * layer + 768 * 768 + 768 == 109_482_240
    assert (p.attn_type, p.seq_pooling_type, p.default_task) == ("encoder_only", "CLS", "embed")


def test_modernbert_base():
    p = preset_from_hf_config(MODERNBERT_BASE)
    layer = 768 * 3 * 768 + 768 * 768 + 768 * 2 * 1152 + 1152 * 768 + 2 * 768
    # layer 0 has no attn_norm; embeddings + their norm; final norm
    assert p.num_parameters == 50368 * 768 + 768 + 22 * layer - 768 + 768 == 149_014_272
    assert (p.attn_type, p.seq_pooling_type, p.max_model_len) == ("encoder_only", "CLS", 8192)


def test_token_classification_is_all_pooling_and_labels_from_id2label():
    cfg = {**QWEN3_EMBEDDING_8B, "architectures": ["Qwen3ForTokenClassification"],
           "id2label": {"0": "O", "1": "B", "2": "I"}}
    p = preset_from_hf_config(cfg)
    assert (p.default_task, p.num_labels, p.tok_pooling_type) == ("token_classify", 3, "ALL")
    assert estimate_num_parameters(cfg) == estimate_num_parameters(
        {**cfg, "architectures": ["Qwen3Model"]}) + 4096 * 3


def test_missing_keys_and_bad_sources(tmp_path):
    with pytest.raises(ValueError, match=r"\['num_hidden_layers', 'vocab_size'\]"):
        preset_from_hf_config({"hidden_size": 8, "num_attention_heads": 2})
    with pytest.raises(ValueError, match=r"no config\.json"):
        preset_from_hf_config(tmp_path)
    (tmp_path / "config.json").write_text("{nope")
    with pytest.raises(ValueError, match="not valid JSON"):
        preset_from_hf_config(tmp_path)
    with pytest.raises(TypeError, match="model directory"):
        preset_from_hf_config(42)
    with pytest.raises(TypeError, match="architectures"):
        preset_from_hf_config({**BERT_BASE, "architectures": "BertModel"})


def test_directory_with_modules_json_overrides_pooling(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(BERT_BASE))
    (tmp_path / "modules.json").write_text(json.dumps([
        {"type": "sentence_transformers.models.Transformer", "path": ""},
        {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}]))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "mean"}))
    assert preset_from_hf_config(tmp_path).seq_pooling_type == "MEAN"
    assert preset_from_hf_config(BERT_BASE).seq_pooling_type == "CLS"
