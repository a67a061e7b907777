"""The token-classification adapter as vLLM 0.33.0 builds it (``vllm_rules.classifier``).

An adapted ``*ForTokenClassification`` (vLLM's ``as_seq_cls_model``: the classifier runs in
``TokenClassifierPoolerHead``) pools ``hidden_size``-wide rows, and the head makes
``[T, num_labels]`` logits in the head dtype; a score head inside the model (PRMs, vLLM's
native token classifiers) pools ``num_labels``-wide rows. In the ledger, the closed forms and
both modes, to the byte. vLLM's own registry and classes: ``tests/test_parity_classifier.py``.
"""

from __future__ import annotations

import json

import pytest

import tokpool as tp
from tokpool.sim.vllm_rules.classifier import classifier_runs_in, head_allocations

#: The engine layer's PRM folder: SmolLM2-135M's backbone (17 layers), a 2-label score head,
#: saved as LlamaForTokenClassification (tokpool/engine/).
PRM = {"architectures": ["LlamaForTokenClassification"], "model_type": "llama",
       "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 17,
       "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
       "max_position_embeddings": 8192, "rope_theta": 100000.0, "rms_norm_eps": 1e-5,
       "tie_word_embeddings": True, "torch_dtype": "float32", "num_labels": 2}
COLS = list(tp.sim.STEP_COLUMNS)


def prm_line(folder, budget: int = 256, dtype: str = "float32") -> str:
    return (f"VLLM_CPU_KVCACHE_SPACE=1 vllm serve {folder} --runner pooling "
            f"--pooler-config.task token_classify --max-num-batched-tokens {budget} "
            f"--max-model-len 8192 --enforce-eager --no-enable-prefix-caching --dtype {dtype}")


@pytest.fixture
def prm_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(PRM))
    return tmp_path


def test_the_shipped_prm_served_as_token_classification_caches_hidden_rows(prm_folder):
    """At 4,096 tokens, budget 256: 3,840 rows x 576 x 4 bytes cached before the last chunk,
    8,847,360 B (a num_labels-wide cache would be 30,720 B: 288x too small)."""
    cfg = tp.SimConfig.from_vllm_args(prm_line(prm_folder), hardware="CPU")
    assert (cfg.classifier, cfg.width, cfg.rows_from) == ("pooler_head", 576, "backbone")
    for mode in ("analytic", "tensor"):
        r = tp.simulate([4096], cfg, mode=mode)
        assert r.steps["pool_cache_bytes"].max() == 3840 * 576 * 4 == 8_847_360
        assert r.requests["output_bytes"].tolist() == [4096 * 2 * 4]  # [T, 2] float32
        assert not r.corrupted
    model_head = cfg.replace(classifier="model")
    assert tp.simulate([4096], model_head, mode="analytic").steps[
        "pool_cache_bytes"].max() == 3840 * 2 * 4 == 30_720


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_analytic_equals_tensor_and_the_closed_form(prm_folder, dtype):
    cfg = tp.SimConfig.from_vllm_args(prm_line(prm_folder, budget=64, dtype=dtype),
                                      hardware="CPU")
    lens = [300, 64, 7, 129]
    a = tp.simulate(lens, cfg, mode="analytic")
    t = tp.simulate(lens, cfg, mode="tensor")
    assert a.steps[COLS].equals(t.steps[COLS])
    assert a.requests["output_bytes"].tolist() == t.requests["output_bytes"].tolist() == [
        n * 2 * 4 for n in lens]
    assert not t.corrupted
    for n in (300, 129, 7):
        one = tp.simulate([n], cfg, mode="analytic")
        closed = tp.sweep([n], cfg, policies=["clone"], async_scheduling=(False,),
                          progress=False).iloc[0]
        assert closed["peak_pooling_bytes"] == one.steps["pool_peak_bytes"].max()
        assert closed["copy_bytes"] == one.steps["copy_bytes"].sum()
        assert closed["output_bytes"] == n * 2 * 4


def test_the_head_allocates_cast_logits_activation_all_alive(prm_folder):
    """bfloat16 hidden states: the float32 cast [T, 576], the classifier's [T, 2], the
    softmax's [T, 2] (TokenClassifierPoolerHead.forward_chunk's locals, alive together)."""
    cfg = tp.SimConfig.from_vllm_args(prm_line(prm_folder, budget=8192, dtype="bfloat16"),
                                      hardware="CPU")
    assert head_allocations(cfg, 100, cfg.width) == [(100, 576), (100, 2), (100, 2)]
    r = tp.simulate([100], cfg, mode="tensor")
    pooled = 100 * 576 * 2  # the one-shot view's clone? no: sync, a view (not counted)
    head = 100 * 576 * 4 + 2 * (100 * 2 * 4)
    assert r.steps["pool_peak_bytes"].max() == head
    assert r.steps["copy_bytes"].sum() == head and pooled  # what the head wrote


def test_on_a_gpu_with_graph_memory(prm_folder):
    cfg = tp.SimConfig.from_hf_config(prm_folder, hardware="H200", max_num_batched_tokens=96,
                                      async_scheduling=True, dtype="bfloat16")
    assert cfg.classifier == "pooler_head" and cfg.capture_sizes
    lens = [200, 90, 3]
    a = tp.simulate(lens, cfg, mode="analytic")
    t = tp.simulate(lens, cfg, mode="tensor")
    assert a.steps[COLS].equals(t.steps[COLS]) and not t.corrupted


def test_score_heads_in_the_model_stay_num_labels_wide():
    prm = tp.SimConfig.for_model("Qwen2.5-Math-PRM-7B", step_tag_every=40)
    assert prm.classifier == "model" and prm.width == 2
    assert classifier_runs_in("Qwen2ForProcessRewardModel", "none") == "model"
    assert classifier_runs_in("BertForTokenClassification", "none") == "model"
    assert classifier_runs_in("LlamaForTokenClassification", "classify") == "pooler_head"
    assert classifier_runs_in("Qwen3ForCausalLM", "embed") == "model"
    with pytest.raises(ValueError, match="unknown classifier"):
        tp.SimConfig(task="token_classify", classifier="head")


def test_sequence_classify_with_the_adapter(prm_folder):
    cfg = tp.SimConfig.from_hf_config(prm_folder, task="classify", hardware="H200",
                                      convert="classify")
    a = tp.simulate([50, 9], cfg, mode="analytic")
    t = tp.simulate([50, 9], cfg, mode="tensor")
    assert a.steps[COLS].equals(t.steps[COLS])
    assert a.requests["output_bytes"].tolist() == [2 * 4, 2 * 4]
