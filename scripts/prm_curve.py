"""Collect learning-curve runs into ``data/prm/smollm2-prm/curve.json`` and ``curve.png``.

``python scripts/prm_curve.py RUN_DIR [RUN_DIR ...]`` where each ``RUN_DIR`` is the ``--out`` of
a ``scripts/train_prm.py`` run (its ``training.json``). Each run gives two points: the shipped
recipe (LoRA + head, its best dev point) and the head alone (the logistic-regression head the
run starts from) — the variation of what is trained. Every point carries its dev bootstrap 95 %
intervals and the run's wall times. ``--head-only RUN`` takes a run stopped at step 0
(``train_prm.py --max-steps 0``) for its head-only point alone; ``--rescore FOLDER`` scores an
adapter trained before dev intervals were recorded (the PRM shipped before, 800 problems) on
``dev`` through ``tp.load_prm``. The shipped curve::

    python scripts/prm_curve.py RUNS/n3200 --head-only RUNS/n800 --rescore RUNS/before

The model card shows ``curve.png``; notebook 04 redraws it with
``tp.prm.plot_learning_curve(tp.prm.read_curve())``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tokpool.prm.curve import VARIANTS, curve_point, plot_learning_curve
from tokpool.prm.dataset import default_data_dir


def rescored_point(folder: Path, *, threads: int) -> dict[str, Any]:
    """The LoRA point of an adapter whose training recorded no dev intervals: its dev rewards
    through the serving path (``tp.load_prm``, batches of 8), the F1-maximising dev threshold,
    bootstrap intervals as ``train_prm.py`` computes them; kept in ``rescored_dev.json`` beside
    the adapter (delete it to rescore)."""
    import torch

    import tokpool as tp
    from tokpool.prm.evaluation import choose_threshold, evaluate

    cached = folder / "rescored_dev.json"  # scoring 200 problems is minutes on a busy CPU
    if cached.is_file():
        return json.loads(cached.read_text())
    torch.set_num_threads(threads)
    training = json.loads((folder / "training.json").read_text())
    prm = tp.load_prm(folder / "adapter.safetensors")
    dev = tp.load_prm_dataset("dev")
    rewards = [s.rewards.numpy() for s in prm.score_records(dev, batch_size=8, progress=True)]
    threshold, _ = choose_threshold(rewards, dev)
    metrics = evaluate(rewards, dev, threshold, n_bootstrap=1000)
    settings = {**training["settings"], "best_step": None}
    point = curve_point({"settings": settings, "dev": metrics,
                         "seconds": training.get("seconds", {})}, "lora")
    point = {**point, "rescored": True, "adapter_threshold": prm.threshold}
    cached.write_text(json.dumps(point, indent=1) + "\n")
    return point


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", help="train_prm.py --out folders")
    parser.add_argument("--rescore", nargs="*", default=[],
                        help="folders of adapters trained before dev points were recorded "
                             "(adapter.safetensors + training.json): scored on dev through "
                             "tp.load_prm, one LoRA point each")
    parser.add_argument("--head-only", nargs="*", default=[],
                        help="train_prm.py --out folders of runs stopped at step 0 "
                             "(--max-steps 0): their head-only point only")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="default data/prm/smollm2-prm")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else default_data_dir() / "prm" / "smollm2-prm"
    points, runs = [], []
    for folder in args.rescore:
        points.append(rescored_point(Path(folder), threads=args.threads))
        runs.append({"train_examples": points[-1]["train_examples"], "rescored": str(folder),
                     "seconds": points[-1]["seconds"]})
    for run, variants in [(r, list(VARIANTS)) for r in args.runs] + [
            (r, ["head_only"]) for r in args.head_only]:
        training = json.loads((Path(run) / "training.json").read_text())
        points += [curve_point(training, v) for v in variants]
        runs.append({"train_examples": training["settings"]["train_examples"],
                     "best_step": training["settings"]["best_step"],
                     "stopped_early": training["stopped_early"],
                     "dev_curve": training["dev_curve"], "seconds": training["seconds"],
                     "threads": training["threads"]})
    curve = {"points": points, "runs": runs,
             "metric_note": "dev split (200 problems), threshold chosen on dev, bootstrap 95 % "
                            "intervals over problems (1,000 resamples, seed 0)"}
    (out / "curve.json").write_text(json.dumps(curve, indent=1, sort_keys=True) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    axes = plot_learning_curve(curve)
    axes[0].figure.savefig(out / "curve.png", dpi=150)
    print(json.dumps([{k: p[k] for k in ("variant", "train_examples", "processbench_f1",
                                           "step_auroc_up_to_first_error", "ci95")}
                      for p in points], indent=1))
    return curve


if __name__ == "__main__":
    main()
