"""A Hugging Face Hub cache folder built by the tests (the layout ``huggingface_hub`` reads:
``models--org--name/snapshots/<commit>/...`` and ``refs/main``), holding the small config files
of the models a researcher names first. No test touches the network: they point
``HF_HUB_CACHE`` here and set ``HF_HUB_OFFLINE=1``.

The files are written from what the models publish (``config.json`` keys that matter to vLLM
and tokpool, the sentence-transformers files where the model has them), kept small; no weights.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

_ST_LAST = {
    "modules.json": [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"},
    ],
    "1_Pooling/config.json": {"word_embedding_dimension": 1024, "pooling_mode_cls_token": False,
                              "pooling_mode_mean_tokens": False,
                              "pooling_mode_lasttoken": True, "include_prompt": True},
    "config_sentence_transformers.json": {"prompts": {"query": "Instruct: Given a web search "
                                                      "query, retrieve relevant passages "
                                                      "that answer the query\nQuery:",
                                                      "document": ""},
                                          "default_prompt_name": None,
                                          "similarity_fn_name": "cosine"},
}
_QWEN3 = {"model_type": "qwen3", "head_dim": 128, "torch_dtype": "bfloat16",
          "rms_norm_eps": 1e-6, "rope_theta": 1000000, "hidden_act": "silu"}

#: repo id -> {path in the repo: JSON content}
MODELS: dict[str, dict[str, object]] = {
    "Qwen/Qwen3-Embedding-8B": {
        "config.json": {**_QWEN3, "architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096,
                        "intermediate_size": 12288, "num_hidden_layers": 36,
                        "num_attention_heads": 32, "num_key_value_heads": 8,
                        "vocab_size": 151665, "max_position_embeddings": 40960,
                        "tie_word_embeddings": False},
        **_ST_LAST,
        "1_Pooling/config.json": {**_ST_LAST["1_Pooling/config.json"],
                                  "word_embedding_dimension": 4096},
    },
    # the sentence-transformers model whose max_seq_length sets vLLM's max_model_len (8,192,
    # where config.json's max_position_embeddings says 32,768)
    "Qwen/Qwen3-Embedding-0.6B": {
        "config.json": {**_QWEN3, "architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024,
                        "intermediate_size": 3072, "num_hidden_layers": 28,
                        "num_attention_heads": 16, "num_key_value_heads": 8,
                        "vocab_size": 151669, "max_position_embeddings": 32768,
                        "tie_word_embeddings": True},
        **_ST_LAST,
        "sentence_bert_config.json": {"max_seq_length": 8192, "do_lower_case": False},
        "tokenizer_config.json": {"model_max_length": 131072},
    },
    "BAAI/bge-m3": {
        "config.json": {"architectures": ["XLMRobertaModel"], "model_type": "xlm-roberta",
                        "hidden_size": 1024, "num_hidden_layers": 24,
                        "num_attention_heads": 16, "intermediate_size": 4096,
                        "vocab_size": 250002, "max_position_embeddings": 8194,
                        "type_vocab_size": 1, "pad_token_id": 1, "bos_token_id": 0,
                        "position_embedding_type": "absolute", "torch_dtype": "float32"},
        "modules.json": [
            {"idx": 0, "name": "0", "path": "",
             "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize",
             "type": "sentence_transformers.models.Normalize"},
        ],
        "1_Pooling/config.json": {"word_embedding_dimension": 1024,
                                  "pooling_mode_cls_token": True,
                                  "pooling_mode_mean_tokens": False},
        "sentence_bert_config.json": {"max_seq_length": 8192, "do_lower_case": False},
        "tokenizer_config.json": {"model_max_length": 8192},
    },
    "jinaai/jina-reranker-v3": {
        "config.json": {**_QWEN3, "architectures": ["JinaForRanking"], "hidden_size": 1024,
                        "num_hidden_layers": 28, "num_attention_heads": 16,
                        "num_key_value_heads": 8, "intermediate_size": 3072,
                        "vocab_size": 151936, "max_position_embeddings": 131072,
                        "tie_word_embeddings": True},
    },
    "Qwen/Qwen2.5-Math-PRM-7B": {
        "config.json": {"architectures": ["Qwen2ForProcessRewardModel"], "model_type": "qwen2",
                        "hidden_size": 3584, "intermediate_size": 18944,
                        "num_hidden_layers": 28, "num_attention_heads": 28,
                        "num_key_value_heads": 4, "vocab_size": 152064,
                        "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
                        "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
                        "tie_word_embeddings": False},
    },
    "colbert-ir/colbertv2.0": {
        "config.json": {"architectures": ["HF_ColBERT"], "model_type": "bert",
                        "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                        "intermediate_size": 3072, "vocab_size": 30522,
                        "max_position_embeddings": 512, "type_vocab_size": 2,
                        "torch_dtype": "float32"},
    },
}


def commit_of(repo_id: str, revision: str = "main") -> str:
    """A fixed 40-hex commit for a repo and revision (the folder name under snapshots/)."""
    return hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()


def build_hub_cache(root: Path, models: dict[str, dict[str, object]] | None = None, *,
                    revision: str = "main") -> Path:
    """Write ``models`` (default ``MODELS``) into a Hub cache folder under ``root``.

    Returns:
        The cache folder (what ``HF_HUB_CACHE`` points at).
    """
    cache = Path(root)
    for repo_id, files in (MODELS if models is None else models).items():
        repo = cache / ("models--" + repo_id.replace("/", "--"))
        commit = commit_of(repo_id, revision)
        snapshot = repo / "snapshots" / commit
        for path, content in files.items():
            file = snapshot / path
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(json.dumps(content))
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / revision).write_text(commit)
    return cache


def local_folder(root: Path, repo_id: str) -> Path:
    """The same files as a plain local folder (no Hub layout)."""
    folder = Path(root) / repo_id.replace("/", "__")
    for path, content in MODELS[repo_id].items():
        file = folder / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(content))
    return folder
