"""Token-classification parity: where the score head runs (``vllm_rules.classifier``) against
vLLM 0.33.0's own registry and the model classes it builds (on the ``meta`` device, no
weights: ``tokpool.sim.vllm_run.kv_spec.vllm_classifier_facts``).

- the table of native score-head classes equals vLLM's registry (``_TOKEN_CLASSIFICATION_MODELS``
  and ``_REWARD_MODELS``);
- an adapted ``*ForTokenClassification`` (``LlamaForTokenClassification``, the engine layer's
  PRM folder) or a ``--convert classify`` decoder is vLLM's ``as_seq_cls_model`` class, whose
  pooler head's ``classifier`` is its ``score`` (``[hidden, num_labels]`` in the head dtype):
  tokpool says ``"pooler_head"`` and pools ``hidden_size``-wide rows;
- ``Qwen2ForProcessRewardModel``'s pooler head has no classifier (its ``forward`` runs
  ``score``): tokpool says ``"model"`` and pools ``num_labels``-wide rows.

Needs ``make vllm``; skips otherwise.
"""

from __future__ import annotations

import json

import pytest

import tokpool as tp
from tokpool.sim.vllm_rules.classifier import NATIVE_SCORE_HEAD_CLASSES
from tokpool.sim.vllm_run import vllm_scheduler_unavailable_reason

pytestmark = pytest.mark.parity

_reason = vllm_scheduler_unavailable_reason()
if _reason is not None:
    pytest.skip(f"classifier parity skipped: {_reason}", allow_module_level=True)

from tokpool.sim.vllm_run.kv_spec import vllm_classifier_facts  # noqa: E402

BASE = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "vocab_size": 1000, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
CASES = {
    # name: (config.json changes, --convert, tokpool's answer)
    "llama-token-cls": ({"architectures": ["LlamaForTokenClassification"],
                         "model_type": "llama", "num_labels": 2}, "auto", "pooler_head"),
    "qwen2-token-cls-3": ({"architectures": ["Qwen2ForTokenClassification"],
                           "model_type": "qwen2", "num_labels": 3}, "auto", "pooler_head"),
    "qwen3-convert-classify": ({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                "num_labels": 5}, "classify", "pooler_head"),
    "qwen2-prm": ({"architectures": ["Qwen2ForProcessRewardModel"], "model_type": "qwen2"},
                  "auto", "model"),
}


def test_the_native_table_is_vllms_registry():
    from vllm.model_executor.models.registry import (
        _REWARD_MODELS,
        _TOKEN_CLASSIFICATION_MODELS,
    )

    assert set(_TOKEN_CLASSIFICATION_MODELS) | set(_REWARD_MODELS) == NATIVE_SCORE_HEAD_CLASSES


@pytest.mark.parametrize("name", sorted(CASES))
def test_where_the_score_head_runs_matches_vllm(tmp_path, name):
    changes, convert, ours = CASES[name]
    (tmp_path / "config.json").write_text(json.dumps({**BASE, **changes}))
    vllm = vllm_classifier_facts(tmp_path, convert=convert)
    cfg = tp.SimConfig.from_hf_config(tmp_path, convert=convert, task="token_classify")
    assert cfg.classifier == ours
    assert vllm["classifier_in_pooler_head"] is (ours == "pooler_head")
    if ours == "pooler_head":
        assert vllm["classifier_is_score"]
        assert vllm["classifier_shape"] == (cfg.hidden_size, cfg.num_labels)
        assert vllm["classifier_dtype"] == vllm["head_dtype"] == str(
            cfg.head_dtype).removeprefix("torch.")
        assert cfg.width == cfg.hidden_size and cfg.rows_from == "backbone"
    else:
        assert cfg.width == cfg.num_labels and cfg.rows_from == "score_head"
