"""Train the shipped probe PRM: ``python scripts/train_probe.py`` (or ``python -m tokpool.prm
train-probe`` from a checkout).

1. Format every example of ``data/prm/{train,test}.jsonl`` with ``format_steps`` (SmolLM2's
   chat template, ``<file_sep>`` after each step) and run it through
   ``tp.load_model("smollm2-135m").encode(task="token_embed", layer=LAYER)``; keep the hidden
   states at the tag rows (STEP pooling). Features are cached under
   ``<tp.models.model_cache_dir()>/prm/`` (keyed by model, layer, layout and data), not in git.
2. Fit a ``ProbeHead`` (standardise → linear → 2 logits) on the train steps *up to and
   including the first error*: a later step is labelled wrong only because it builds on a wrong
   value, which its own text does not show, so the probe learns ProcessBench's question, "is
   this the step that goes wrong?". Full-batch L-BFGS on the class-balanced cross-entropy with
   an L2 penalty chosen by 5-fold cross-validation grouped by problem (AUROC on those steps).
   Then pick the ``first_error`` threshold that maximises ProcessBench F1 on the out-of-fold
   train predictions.
3. Evaluate once on the test split: step AUROC and ProcessBench F1, against the trivial
   baseline that calls every step correct.
4. Write ``data/prm/probe/probe.safetensors`` (weights + settings) and ``metrics.json``; both
   are byte-for-byte identical on a rerun.

Everything is seeded; the test split is never used for a choice.
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

from tokpool.prm.dataset import default_data_dir, load_prm_dataset
from tokpool.prm.metrics import processbench_scores, step_auroc
from tokpool.prm.probe import PROBE_FILE, ProbeHead, save_probe
from tokpool.prm.steps import first_error_from_rewards, format_steps, step_rewards

BASE_MODEL = "smollm2-135m"
#: Hidden states of this layer (0 = embeddings, 30 = final). Chosen during development by the
#: grouped cross-validation below on the train split (see data/README.md); ``--layer`` changes it.
LAYER = 16
L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1)
SEED = 0


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def extract_features(model, records: list[dict], *, layer: int, cache_dir: Path | None = None,
                     tag: str | None = None, progress: bool = True) -> dict[str, np.ndarray]:
    """Hidden states at the tag rows of every step of ``records``.

    Returns:
        ``{"X": [n_steps, hidden] float32, "y": [n_steps] bool, "example": [n_steps] int,
        "step": [n_steps] int}``, loaded from the cache when it holds the same inputs.
    """
    key = _digest(model.name, layer, tag, [(r["prompt"], r["completions"]) for r in records])
    file = None if cache_dir is None else Path(cache_dir) / f"features-{key}.npz"
    if file is not None and file.is_file():
        with np.load(file) as cached:
            return dict(cached)
    xs, ys, examples, steps = [], [], [], []
    start = time.perf_counter()
    for i, record in enumerate(records):
        formatted = format_steps(record["prompt"], record["completions"],
                                 tokenizer=model.tokenizer, tag=tag)
        (hidden,) = model.encode([formatted.token_ids], task="token_embed", layer=layer,
                                 use_activation=False)  # [n_tokens, hidden]
        xs.append(hidden[formatted.tag_positions].numpy())  # [n_steps, hidden]
        ys += record["labels"]
        examples += [i] * formatted.num_steps
        steps += list(range(formatted.num_steps))
        if progress and (i + 1) % 100 == 0:
            print(f"  {i + 1}/{len(records)} examples, {time.perf_counter() - start:.0f} s",
                  flush=True)
    features = {"X": np.concatenate(xs).astype(np.float32), "y": np.array(ys, dtype=bool),
                "example": np.array(examples), "step": np.array(steps)}
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
        np.savez(file, **features)
    return features


def fit_head(x: np.ndarray, y: np.ndarray, *, l2: float, seed: int = SEED) -> ProbeHead:
    """Standardise, then logistic regression to 2 logits (L-BFGS, L2 penalty ``l2``)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        features = torch.from_numpy(x).float()
        target = torch.from_numpy(y.astype(np.int64))
        head = ProbeHead(features.shape[1], num_labels=2)
        head.mean.copy_(features.mean(0))
        head.scale.copy_(features.std(0).clamp_min(1e-6))
        linear = head.net[0]
        torch.nn.init.zeros_(linear.weight)  # a convex problem: start at the origin
        torch.nn.init.zeros_(linear.bias)
        # why class weights: wrong steps are the minority; balance them so the probe does not
        # settle for "everything is correct".
        counts = torch.bincount(target, minlength=2).float()
        weights = counts.sum() / (2 * counts.clamp_min(1))
        optimizer = torch.optim.LBFGS(linear.parameters(), max_iter=300,
                                      line_search_fn="strong_wolfe")

        def closure():
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(head(features), target, weight=weights)
            loss = loss + l2 * linear.weight.square().sum()
            loss.backward()
            return loss

        optimizer.step(closure)
    return head.eval()


def _rewards(head: ProbeHead, x: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        logits = head(torch.from_numpy(x))  # [n_steps, 2] at the tag rows
    return torch.softmax(logits, dim=-1)[:, 1].numpy()


def up_to_first_error(features: dict[str, np.ndarray], records: list[dict]) -> np.ndarray:
    """``[n_steps]`` bool: the step is at or before its example's first error (all steps of a
    correct example)."""
    true = np.array([r["first_error"] for r in records])[features["example"]]
    return (true < 0) | (features["step"] <= true)


def cross_validate(features: dict[str, np.ndarray], fit_mask: np.ndarray, *, folds: int = 5,
                   seed: int = SEED) -> dict[float, np.ndarray]:
    """Out-of-fold rewards of every step, per L2 value; folds group steps by problem, and each
    fold's probe is fitted on the ``fit_mask`` steps of the other folds."""
    examples = np.unique(features["example"])
    order = np.random.default_rng(seed).permutation(examples)
    fold_of = {int(e): k % folds for k, e in enumerate(order)}
    fold = np.array([fold_of[int(e)] for e in features["example"]])
    results = {}
    for l2 in L2_GRID:
        oof = np.zeros(len(fold))
        for k in range(folds):
            train, held = (fold != k) & fit_mask, fold == k
            head = fit_head(features["X"][train], features["y"][train], l2=l2, seed=seed)
            oof[held] = _rewards(head, features["X"][held])
        results[l2] = oof
    return results


def first_errors(rewards: np.ndarray, features: dict[str, np.ndarray], threshold: float):
    """Predicted first-error index per example (``first_error_from_rewards``)."""
    return [
        first_error_from_rewards(rewards[features["example"] == e].tolist(), threshold)
        for e in np.unique(features["example"])
    ]


def choose_threshold(rewards: np.ndarray, features, records) -> tuple[float, float]:
    """The cut in [0.02, 0.98] that maximises ProcessBench F1 on these (out-of-fold) rewards."""
    true = [r["first_error"] for r in records]
    best = (0.5, -1.0)
    for cut in np.round(np.arange(0.02, 0.99, 0.01), 2):
        f1 = processbench_scores(first_errors(rewards, features, float(cut)), true).f1
        if f1 > best[1] + 1e-12:
            best = (float(cut), f1)
    return best


def _running_min(rewards: np.ndarray, features) -> np.ndarray:
    out = rewards.copy()
    for e in np.unique(features["example"]):
        rows = np.flatnonzero(features["example"] == e)
        out[rows] = np.minimum.accumulate(rewards[rows])
    return out


def evaluate(rewards: np.ndarray, features, records, threshold: float) -> dict[str, Any]:
    """Step AUROC and ProcessBench F1 of ``rewards``, next to trivial baselines.

    AUROC is reported on the steps up to the first error (is this the step that goes wrong?)
    and on all steps under the dataset's labels (later steps wrong), raw and as a running
    minimum (a step is only as good as the worst step before it)."""
    true = [r["first_error"] for r in records]
    y, position = features["y"], -features["step"].astype(float)
    upto = up_to_first_error(features, records)
    predicted = first_errors(rewards, features, threshold)
    pb = processbench_scores(predicted, true)
    always = processbench_scores([-1] * len(true), true)
    by_type: dict[str, float] = {}
    for kind in sorted({r["error_type"] for r in records if r["error_type"]}):
        rows = [i for i, r in enumerate(records) if r["error_type"] == kind]
        by_type[kind] = float(np.mean([predicted[i] == true[i] for i in rows]))
    return {
        "step_auroc_up_to_first_error": step_auroc(rewards[upto], y[upto]),
        "step_auroc_all_steps": step_auroc(rewards, y),
        "step_auroc_all_steps_running_min": step_auroc(_running_min(rewards, features), y),
        "processbench_f1": pb.f1,
        "error_accuracy": pb.error_accuracy,
        "correct_accuracy": pb.correct_accuracy,
        "error_accuracy_by_type": by_type,
        "threshold": threshold,
        "baseline_always_correct": {
            "processbench_f1": always.f1,
            "error_accuracy": always.error_accuracy,
            "correct_accuracy": always.correct_accuracy,
            "step_auroc": 0.5,  # one constant score: every pair is a tie
        },
        "baseline_step_position": {  # score = -step index: later steps look worse
            "step_auroc_up_to_first_error": step_auroc(position[upto], y[upto]),
            "step_auroc_all_steps": step_auroc(position, y),
        },
        "n_examples": len(records),
        "n_erroneous_examples": pb.n_error,
        "n_steps": len(y),
        "n_wrong_steps": int((~y).sum()),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from tokpool.models import load_model, model_cache_dir

    parser = argparse.ArgumentParser(prog="scripts/train_probe.py",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layer", type=int, default=LAYER)
    parser.add_argument("--out", default=None, help="output folder (default data/prm/probe)")
    parser.add_argument("--cache-dir", default=None,
                        help="feature cache (default <tp.models.model_cache_dir()>/prm)")
    parser.add_argument("--limit", type=int, default=None,
                        help="use only the first N examples of each split (quick runs)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else default_data_dir() / "prm" / "probe"
    cache = Path(args.cache_dir) if args.cache_dir else model_cache_dir() / "prm"

    records = {s: load_prm_dataset(s)[: args.limit] for s in ("train", "test")}
    model = load_model(BASE_MODEL)
    features, seconds = {}, {}
    for split, recs in records.items():
        print(f"{split}: features of {len(recs)} examples at layer {args.layer}", flush=True)
        start = time.perf_counter()
        features[split] = extract_features(model, recs, layer=args.layer, cache_dir=cache)
        seconds[f"features_{split}"] = time.perf_counter() - start

    start = time.perf_counter()
    # why one thread: small L-BFGS problems run faster without thread hand-offs (7x on 2 busy
    # cores), and results do not depend on the machine's thread count.
    torch.set_num_threads(1)
    train = features["train"]
    fit_mask = up_to_first_error(train, records["train"])
    oof = cross_validate(train, fit_mask)
    cv_auroc = {l2: step_auroc(r[fit_mask], train["y"][fit_mask]) for l2, r in oof.items()}
    l2 = max(cv_auroc, key=lambda k: (cv_auroc[k], k))  # ties: the stronger penalty
    threshold, cv_f1 = choose_threshold(oof[l2], train, records["train"])
    head = fit_head(train["X"][fit_mask], train["y"][fit_mask], l2=l2)
    seconds["fit"] = time.perf_counter() - start

    test = features["test"]
    metrics = evaluate(_rewards(head, test["X"]), test, records["test"], threshold)
    # the shipped path (format → encode → head → StepPool → softmax) must give the same rewards
    check = records["test"][0]
    formatted = format_steps(check["prompt"], check["completions"], tokenizer=model.tokenizer)
    (hidden,) = model.encode([formatted.token_ids], task="token_embed", layer=args.layer,
                             use_activation=False)
    with torch.inference_mode():
        served = step_rewards(head(hidden), formatted.token_ids,
                              step_tag_id=formatted.step_tag_id, convention="two_class")
    cached = _rewards(head, test["X"][test["example"] == 0])
    if not np.allclose(served.numpy(), cached, atol=1e-4):
        raise RuntimeError(f"served rewards {served.tolist()} differ from the cached-feature "
                           f"rewards {cached.tolist()}: the feature cache is stale; delete "
                           f"{cache}")

    settings = {
        "base_model": BASE_MODEL, "layer": args.layer, "convention": "two_class",
        "tag": formatted.tag, "separator": "\n", "chat": True, "system": None,
        "threshold": threshold, "l2": l2, "seed": SEED,
        "trained_on": "train split, steps up to and including the first error",
        "train_examples": len(records["train"]), "train_steps": int(fit_mask.sum()),
    }
    save_probe(out / PROBE_FILE, head, settings)
    report = {
        "settings": settings,
        "cross_validation": {
            "step_auroc_up_to_first_error_by_l2": {str(k): v for k, v in cv_auroc.items()},
            "processbench_f1_at_threshold": cv_f1,
        },
        "test": metrics,
    }
    # why no timings in the file: metrics.json must be identical on every rerun
    (out / "metrics.json").write_text(json.dumps(report, indent=2, default=_jsonable) + "\n")
    print(json.dumps(report, indent=2, default=_jsonable))
    print("seconds:", {k: round(v, 1) for k, v in seconds.items()})
    return {**report, "seconds": seconds}


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(type(value).__name__)


if __name__ == "__main__":
    main()
