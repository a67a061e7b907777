"""Parameter counts from config.json, family by family (``tokpool.sim.vllm_rules.hf_families``).

Three witnesses: the published totals (``tests/data/published_hf_configs.json``, also the table
in ``docs/PARAMETER_COUNTS.md``), transformers' own model built from the same config on the meta
device (no weights; small configs of every family, so each layout term is exercised), and the
refusals: a family tokpool cannot count is refused by name, never counted as a dense llama.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

import tokpool as tp
from tokpool.sim.vllm_rules.hf_config import estimate_num_parameters, preset_from_hf_config
from tokpool.sim.vllm_rules.hf_families import FAMILIES

PUBLISHED = json.loads(
    (Path(__file__).parent / "data" / "published_hf_configs.json").read_text())["models"]


@pytest.mark.parametrize("entry", [e for e in PUBLISHED if e["published"] is not None],
                         ids=lambda e: e["id"])
def test_count_equals_the_published_total(entry):
    assert estimate_num_parameters(entry["config"], include_lm_head=entry.get(
        "include_lm_head")) == entry["published"]


def test_gemma3_counts_its_geglu_mlp_as_gated():
    gemma3 = next(e for e in PUBLISHED if e["config"]["model_type"] == "gemma3_text")
    count = estimate_num_parameters(gemma3["config"])
    # Gemma 3 technical report, Table 1: 3,209M non-embedding parameters for the 4B model
    embedding = 262208 * 2560
    assert round((count - embedding) / 1e6) == 3209


def test_every_accepted_family_has_a_published_checkpoint_in_the_table():
    covered = {e["config"]["model_type"] for e in PUBLISHED}
    # gemma3 (the multimodal wrapper's text part) is counted as gemma3_text
    assert set(FAMILIES) - covered <= {"gemma3", "roberta"}


def _small(model_type: str, arch: str, **extra) -> dict:
    return {"architectures": [arch], "model_type": model_type, "hidden_size": 64,
            "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 50400, "max_position_embeddings": 128,
            **extra}


SMALL = {
    "llama-biases": _small("llama", "LlamaForCausalLM", attention_bias=True, mlp_bias=True,
                           tie_word_embeddings=False),
    "llama-tied": _small("llama", "LlamaForCausalLM", tie_word_embeddings=True),
    "mistral": _small("mistral", "MistralForCausalLM", tie_word_embeddings=False),
    "mixtral": _small("mixtral", "MixtralForCausalLM", num_local_experts=4,
                      num_experts_per_tok=2, tie_word_embeddings=False),
    "qwen2": _small("qwen2", "Qwen2ForCausalLM", tie_word_embeddings=False),
    "qwen2_moe-shared-sparse-step": _small(
        "qwen2_moe", "Qwen2MoeForCausalLM", num_experts=6, num_experts_per_tok=2,
        moe_intermediate_size=24, shared_expert_intermediate_size=80, decoder_sparse_step=2,
        mlp_only_layers=[2], tie_word_embeddings=False),
    "qwen3": _small("qwen3", "Qwen3ForCausalLM", head_dim=32, tie_word_embeddings=True),
    "qwen3_moe": _small("qwen3_moe", "Qwen3MoeForCausalLM", head_dim=16, num_experts=8,
                        num_experts_per_tok=2, moe_intermediate_size=32,
                        tie_word_embeddings=False),
    "gemma": _small("gemma", "GemmaForCausalLM", head_dim=32),
    "gemma2": _small("gemma2", "Gemma2ForCausalLM", head_dim=32),
    "gemma3_text": _small("gemma3_text", "Gemma3ForCausalLM", head_dim=32),
    "phi3": _small("phi3", "Phi3ForCausalLM", tie_word_embeddings=False),
    "olmo": _small("olmo", "OlmoForCausalLM", tie_word_embeddings=False),
    "olmo2": _small("olmo2", "Olmo2ForCausalLM", tie_word_embeddings=False),
    "bert": _small("bert", "BertModel", num_key_value_heads=None, type_vocab_size=2),
    "roberta": _small("roberta", "RobertaModel", num_key_value_heads=None, type_vocab_size=1),
    "xlm-roberta": _small("xlm-roberta", "XLMRobertaModel", num_key_value_heads=None,
                          type_vocab_size=1),
    "modernbert": _small("modernbert", "ModernBertModel", num_key_value_heads=None),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_count_equals_transformers_model_on_the_meta_device(name):
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    cfg = {k: v for k, v in SMALL[name].items() if v is not None}
    config = AutoConfig.for_model(**cfg)
    cls = AutoModelForCausalLM if cfg["architectures"][0].endswith("CausalLM") else AutoModel
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = cls.from_config(config)
    assert estimate_num_parameters(cfg) == sum(p.numel() for p in model.parameters())
    # the same from the PretrainedConfig (transformers 5 renames some keys in to_dict)
    assert estimate_num_parameters(config.to_dict()) == estimate_num_parameters(cfg)


@pytest.mark.parametrize(("cfg", "match"), [
    (_small("deepseek_v3", "DeepseekV3ForCausalLM", n_routed_experts=64,
            moe_intermediate_size=32), r"model_type 'deepseek_v3' \(DeepseekV3ForCausalLM\) "
                                       r"is not a family tokpool can count.*ModelPreset"),
    (_small("gpt2", "GPT2LMHeadModel"), r"model_type 'gpt2'.*counts \['bert'"),
    (_small("llama", "LlamaForCausalLM", num_local_experts=8),
     r"mixture-of-experts keys \{'num_local_experts': 8\}.*as dense"),
    ({**_small("gemma3_text", "Gemma3ForConditionalGeneration"), "hidden_size": None,
      "text_config": _small("gemma3_text", "x"), "vision_config": {"hidden_size": 8}},
     r"Gemma3ForConditionalGeneration carries a vision tower.*text_config"),
    (_small("qwen3_moe", "Qwen3MoeForCausalLM", num_experts=8),
     r"config key 'moe_intermediate_size' is missing"),
])
def test_a_family_it_cannot_count_is_refused_by_name(cfg, match):
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(ValueError, match=match):
        preset_from_hf_config(cfg)


def test_mixtral_is_sized_with_its_experts_and_does_not_fit_one_h100():
    mixtral = next(e for e in PUBLISHED if e["config"]["model_type"] == "mixtral")["config"]
    preset = preset_from_hf_config(mixtral)
    # served as a pooling model: the checkpoint less its LM head (vLLM's pooling adapters)
    assert preset.num_parameters == 46_702_792_704 - 32_000 * 4096
    with pytest.raises(ValueError, match=r"no available memory for the KV cache.*"
                                         r"93,143,441,408 B weights per rank.*tensor_parallel"):
        tp.SimConfig.from_hf_config(mixtral, gpu_memory_utilization=0.92)
    # eight GPUs hold it: about 11.7 GB of weights per rank
    cfg = tp.SimConfig.from_hf_config(mixtral, gpu_memory_utilization=0.92,
                                      tensor_parallel_size=8)
    assert cfg.kv_cache_blocks > 0


def test_count_equals_the_shipped_minilm_weight_file():
    from safetensors import safe_open

    from tokpool.models.registry import builtin_files

    try:
        directory = Path(builtin_files("minilm-l6"))
    except FileNotFoundError as err:
        pytest.skip(str(err))
    with safe_open(directory / "model.safetensors", "pt") as f:
        stored = sum(torch.Size(f.get_slice(k).get_shape()).numel()
                     for k in f.keys()  # noqa: SIM118 (a safetensors handle)
                     if not k.endswith("position_ids"))  # position_ids: a buffer
    assert preset_from_hf_config(directory).num_parameters == stored == 22_713_216
