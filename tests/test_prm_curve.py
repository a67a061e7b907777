"""The PRM learning curve: more training problems with no shared text, the bounded feature
cache, the curve's points and figure, and a training run that stops and resumes to the same
adapter bytes as one that never stopped."""

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

import tokpool as tp
from tokpool.prm.adapter import read_adapter
from tokpool.prm.curve import VARIANTS, curve_frame, curve_point, plot_learning_curve
from tokpool.prm.dataset import SPLITS, generate_training_problems

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_generated_training_problems_share_no_text_with_any_split():
    extra = generate_training_problems(600, seed=1)
    texts = [r["prompt"] for r in extra]
    assert len(set(texts)) == len(texts)
    for split in SPLITS:
        assert not set(texts) & {r["prompt"] for r in tp.load_prm_dataset(split)}, split
    assert [r["id"] for r in extra[:2]] == ["gen1-00000", "gen1-00001"]
    assert [r["first_error"] >= 0 for r in extra[:4]] == [False, True, False, True]
    assert {r["error_type"] for r in extra} - {None} == set(tp.prm.ERROR_TYPES)
    # nested: a smaller set is the start of a larger one; another seed, other problems
    assert generate_training_problems(100, seed=1) == extra[:100]
    other = {r["prompt"] for r in generate_training_problems(100, seed=2)}
    assert len(other & set(texts)) < 5
    with pytest.raises(ValueError, match="n must be >= 0"):
        generate_training_problems(-1)


def test_training_set_is_checked_against_the_evaluation_splits():
    train_prm = _script("train_prm")
    records = train_prm.training_records(1000, extra_seed=1)
    assert len(records) == 1000 and records[:800] == tp.load_prm_dataset("train")
    train_prm.check_disjoint(records, {s: tp.load_prm_dataset(s) for s in ("dev", "test")})
    leaked = [*records, tp.load_prm_dataset("hard")[3]]
    with pytest.raises(ValueError, match=r"1 hard problems are also training problems "
                                         r"\(first: hard-00003\)"):
        train_prm.check_disjoint(leaked, {"hard": tp.load_prm_dataset("hard")})


def test_feature_cache_is_pruned_least_recently_used_first(tmp_path):
    train_prm = _script("train_prm")
    files = []
    for i, name in enumerate(["bottom-13-f16-a.pt", "bottom-13-b.pt", "ckpt-c.pt",
                              "bottom-13-f16-d.pt"]):
        f = tmp_path / name
        f.write_bytes(b"x" * 1000)
        os.utime(f, (1_000 + i, 1_000 + i))
        files.append(f)
    other = tmp_path / "rewards-probe.json"  # not a feature file: never touched
    other.write_bytes(b"y" * 5000)
    deleted = train_prm.prune_cache(tmp_path, 2500, keep={files[0]})
    # the oldest (a) is in use, so b and c go; d and a stay within the 2,500-byte bound
    assert deleted == [files[1], files[2]]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bottom-13-f16-a.pt", "bottom-13-f16-d.pt", "rewards-probe.json"]
    assert train_prm.prune_cache(tmp_path, 10_000, keep=set()) == []


def _training_json(n, f1, auroc, head_f1):
    def metrics(f, a):
        return {"processbench_f1": f, "step_auroc_up_to_first_error": a, "threshold": 0.3,
                "ci95": {"processbench_f1": [f - 0.05, f + 0.05],
                         "step_auroc_up_to_first_error": [a - 0.03, a + 0.02]},
                "error_accuracy_by_type": {"arithmetic": 0.1}}

    return {"settings": {"train_examples": n, "best_step": 40}, "dev": metrics(f1, auroc),
            "head_only_dev": metrics(head_f1, auroc - 0.1), "seconds": {"total": 10.0}}


def test_curve_points_frame_and_figure():
    import matplotlib

    matplotlib.use("Agg")
    runs = [_training_json(800, 0.43, 0.75, 0.40), _training_json(3200, 0.5, 0.8, 0.41)]
    curve = {"points": [curve_point(t, v) for t in runs for v in VARIANTS]}
    lora = [p for p in curve["points"] if p["variant"] == "lora"]
    assert [(p["train_examples"], p["processbench_f1"], p["best_step"]) for p in lora] == [
        (800, 0.43, 40), (3200, 0.5, 40)]
    head = [p for p in curve["points"] if p["variant"] == "head_only"]
    assert [p["processbench_f1"] for p in head] == [0.40, 0.41] and head[0]["best_step"] == 0
    frame = curve_frame(curve)
    assert frame.loc[(VARIANTS["lora"], 3200), "ProcessBench F1 (dev)"] == "0.500 [0.450, 0.550]"
    axes = plot_learning_curve(curve)
    assert len(axes) == 2 and len(axes[0].containers) == 2  # one error-bar line per variant
    x, y = axes[1].containers[0].lines[0].get_data()
    assert list(x) == [800, 3200] and list(y) == [0.75, 0.8]
    with pytest.raises(ValueError, match="unknown variant 'full'"):
        curve_point(runs[0], "full")
    with pytest.raises(ValueError, match="rerun it"):
        curve_point({"settings": {}, "dev": {"processbench_f1": 0.4}}, "lora")
    with pytest.raises(ValueError, match="no points"):
        plot_learning_curve({"points": []})


def test_shipped_curve_matches_the_shipped_adapter():
    curve = tp.prm.read_curve()
    training = json.loads((ROOT / "data/prm/smollm2-prm/training.json").read_text())
    shipped = [p for p in curve["points"] if p["variant"] == "lora"
               and p["train_examples"] == training["settings"]["train_examples"]]
    assert len(shipped) == 1
    assert shipped[0]["processbench_f1"] == training["dev"]["processbench_f1"]
    settings = read_adapter(ROOT / "data/prm/smollm2-prm/adapter.safetensors")[1]
    assert shipped[0]["threshold"] == settings["threshold"]
    assert settings["train_examples"] == training["settings"]["train_examples"]
    # the shipped adapter is the best LoRA point of the curve on dev F1
    best = max((p for p in curve["points"] if p["variant"] == "lora"),
               key=lambda p: p["processbench_f1"])
    assert best["train_examples"] == training["settings"]["train_examples"]
    with pytest.raises(FileNotFoundError, match=r"scripts/prm_curve\.py"):
        tp.prm.read_curve(ROOT / "nowhere.json")


@pytest.mark.real_model
@pytest.mark.slow
def test_a_stopped_run_resumes_to_the_same_adapter_bytes(tmp_path):
    """A small run (2 of SmolLM2's layers frozen, 1 trained, 12 problems) three ways: straight
    through; stopped by a step budget and resumed; and again from scratch (only the cached
    features kept) — all three write the same adapter bytes."""
    train_prm = _script("train_prm")
    common = ["--limit", "12", "--num-layers", "3", "--first-layer", "2", "--rank", "2",
              "--epochs", "2", "--batch-size", "4", "--eval-every", "2", "--patience", "9",
              "--threads", "1"]
    a = train_prm.main([*common, "--out", str(tmp_path / "a"), "--cache-dir",
                        str(tmp_path / "ca")])
    stopped = train_prm.main([*common, "--out", str(tmp_path / "b"), "--cache-dir",
                              str(tmp_path / "cb"), "--max-steps", "3"])
    assert [(e["step"], e.get("budget_stop")) for e in stopped["dev_curve"]] == [
        (0, None), (2, None), (3, True)]
    resumed = train_prm.main([*common, "--out", str(tmp_path / "c"), "--cache-dir",
                              str(tmp_path / "cb")])
    assert [e["step"] for e in resumed["dev_curve"]] == [0, 2, 4, 6]  # no budget point
    assert [e["step"] for e in a["dev_curve"]] == [0, 2, 4, 6]
    adapter = (tmp_path / "a" / "adapter.safetensors").read_bytes()
    assert (tmp_path / "c" / "adapter.safetensors").read_bytes() == adapter
    for ckpt in (tmp_path / "ca").glob("ckpt-*.pt"):
        ckpt.unlink()
    train_prm.main([*common, "--out", str(tmp_path / "d"), "--cache-dir", str(tmp_path / "ca")])
    assert (tmp_path / "d" / "adapter.safetensors").read_bytes() == adapter
    assert a["dev"]["ci95"]["processbench_f1"][0] <= a["dev"]["processbench_f1"]
