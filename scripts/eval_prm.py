"""Evaluate the fine-tuned PRM, the probe and the trivial baselines: ``python scripts/eval_prm.py``.

For the ``test`` split (the train distribution) and the ``hard`` split (error types that
``train`` never contains: ``wrong_operand``, ``skipped_step``) it writes, to
``data/prm/smollm2-prm/metrics.json``:

- per PRM (``smollm2-prm``, ``probe``, ``always_correct``, ``step_position``): ProcessBench F1,
  its two accuracies, first-error accuracy, step AUROC (up to the first error; all steps),
  first errors found by error type, each with a bootstrap 95 % CI over examples (1,000
  resamples, seed 0); the thresholds are the PRMs' own (fine-tuned: chosen on ``dev``; probe:
  on out-of-fold train predictions; step position: on ``dev``);
- ``smollm2-prm`` minus ``probe`` with a paired bootstrap CI;
- ``before`` (with ``--before OLD/metrics.json``; kept on reruns): the test/hard results of the
  PRM this one replaced, for the before/after tables;
- ``fixed_sample``: the fine-tuned PRM's rewards and metrics on the first 24 test examples,
  scored in batches of 8, which ``tests/test_prm_finetuned.py`` reproduces.

Both PRMs score through ``ProcessRewardModel.score_records`` (padded batches of 8; the probe
stops at its layer 16). Rewards are cached under ``<tp.models.model_cache_dir()>/prm/`` keyed by the
PRM file's digest, so ``--only probe`` can run while the PRM trains. Timings go to stdout only,
so ``metrics.json`` is identical on a rerun.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import tokpool as tp
from tokpool.prm.dataset import default_data_dir
from tokpool.prm.evaluation import (
    baseline_rewards,
    choose_threshold,
    evaluate,
    metrics_frame,
    paired_difference,
)

SPLITS = ("test", "hard")
FIXED_SAMPLE = 24
FIXED_BATCH = 8


def rewards_of(prm, name: str, split: str, records, *, batch_size: int, cache: Path):
    """Per-example rewards of ``prm`` on ``records``, cached by the PRM file's digest."""
    digest = hashlib.sha256(Path(prm.info["file"]).read_bytes()).hexdigest()[:16]
    key = hashlib.sha256(json.dumps([r["id"] for r in records]).encode()).hexdigest()[:8]
    file = cache / f"rewards-{name}-{digest}-{split}-{key}-b{batch_size}.json"
    if file.is_file():
        return json.loads(file.read_text())
    scored = prm.score_records(records, batch_size=batch_size, progress=True)
    rewards = [s.rewards.tolist() for s in scored]
    cache.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(rewards))
    return rewards


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adapter", default=None,
                        help="adapter.safetensors (default: the shipped smollm2-prm)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="first N of each split")
    parser.add_argument("--out", default=None, help="metrics.json (default: next to adapter)")
    parser.add_argument("--before", default=None,
                        help="the metrics.json of the PRM this one replaces: its test/hard "
                             "results are kept under 'before' (before/after tables)")
    parser.add_argument("--only", choices=("probe",), default=None,
                        help="only cache the probe's rewards (no metrics.json)")
    args = parser.parse_args(argv)
    from tokpool.models import model_cache_dir

    cache = model_cache_dir() / "prm"
    torch.set_num_threads(args.threads)
    adapter = (Path(args.adapter) if args.adapter else
               default_data_dir() / "prm" / tp.prm.SHIPPED_PRMS["smollm2-prm"])
    out = Path(args.out) if args.out else adapter.parent / "metrics.json"
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    probe = tp.load_prm("probe")
    if args.only == "probe":
        for split in SPLITS:
            records = tp.load_prm_dataset(split)[: args.limit]
            rewards_of(probe, "probe", split, records, batch_size=args.batch_size, cache=cache)
        print(f"probe rewards cached in {cache} ({time.perf_counter() - t0:.0f} s)")
        return {}
    prm = tp.load_prm(adapter)
    seconds["load"] = time.perf_counter() - t0

    dev = tp.load_prm_dataset("dev")
    position_cut, _ = choose_threshold(baseline_rewards(dev, "step_position"), dev)
    report: dict[str, Any] = {
        "prm": {k: v for k, v in prm.info.items() if k not in ("file", "metrics")},
        "thresholds": {"smollm2-prm": prm.threshold, "probe": probe.threshold,
                       "step_position": position_cut, "always_correct": 0.5},
    }
    for split in SPLITS:
        records = tp.load_prm_dataset(split)[: args.limit]
        t = time.perf_counter()
        ours = rewards_of(prm, "smollm2-prm", split, records, batch_size=args.batch_size,
                          cache=cache)
        theirs = rewards_of(probe, "probe", split, records, batch_size=args.batch_size,
                            cache=cache)
        seconds[f"score_{split}"] = time.perf_counter() - t
        t = time.perf_counter()
        rewards = {"smollm2-prm": ours, "probe": theirs,
                   "always_correct": baseline_rewards(records, "always_correct"),
                   "step_position": baseline_rewards(records, "step_position")}
        report[split] = {name: evaluate(r, records, report["thresholds"][name])
                         for name, r in rewards.items()}
        report[split]["smollm2-prm_minus_probe"] = paired_difference(
            ours, prm.threshold, theirs, probe.threshold, records)
        seconds[f"metrics_{split}"] = time.perf_counter() - t

    if args.before:
        old = json.loads(Path(args.before).read_text())
        report["before"] = {"prm": old["prm"], "threshold": old["thresholds"]["smollm2-prm"],
                            **{split: old[split]["smollm2-prm"] for split in SPLITS}}
    elif out.is_file() and "before" in json.loads(out.read_text()):
        report["before"] = json.loads(out.read_text())["before"]  # a rerun keeps it
    test = tp.load_prm_dataset("test")[:FIXED_SAMPLE]
    scored = prm.score_records(test, batch_size=FIXED_BATCH)
    sample_rewards = [s.rewards.tolist() for s in scored]
    margin = min(abs(x - prm.threshold) for r in sample_rewards for x in r)
    report["fixed_sample"] = {
        "ids": [r["id"] for r in test], "batch_size": FIXED_BATCH,
        "rewards": sample_rewards,
        "metrics": {k: v for k, v in evaluate(sample_rewards, test, prm.threshold,
                                              n_bootstrap=0).items() if k != "ci95"},
        "closest_reward_to_threshold": margin,
    }
    out.write_text(json.dumps(_clean(report), indent=1, sort_keys=True) + "\n")
    seconds["total"] = time.perf_counter() - t0
    print(table(report))
    print("seconds:", {k: round(v, 1) for k, v in seconds.items()})
    return report


def table(report: dict[str, Any]) -> str:
    """The model card's markdown tables: metric [95 % CI] per PRM, per split."""
    names = ["smollm2-prm", "probe", "always_correct", "step_position"]
    blocks = []
    for split in SPLITS:
        frame = metrics_frame(_clean(report), split, names=names)
        lines = [f"| {frame.index.name} | " + " | ".join(frame.columns) + " |",
                 "|---" * (len(frame.columns) + 1) + "|"]
        lines += [f"| {label} | " + " | ".join(row) + " |" for label, row in
                  zip(frame.index, frame.to_numpy().tolist(), strict=True)]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _clean(value: Any) -> Any:
    """JSON-able copy: numpy scalars to Python, NaN to ``None`` (strict JSON has no NaN)."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


if __name__ == "__main__":
    main()
