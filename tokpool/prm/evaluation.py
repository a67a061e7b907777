"""Evaluating a PRM on step-labelled records: metrics, trivial baselines, bootstrap CIs.

Everything here works on *per-example reward lists* (what ``ProcessRewardModel.score_records``
returns as ``StepScores.rewards``), so the probe, the fine-tuned PRM and any baseline are
measured by the same code:

- ``up_to_first_error(records)``: which steps decide ProcessBench's question;
- ``first_errors(rewards, threshold)``: the predicted first error of every example;
- ``choose_threshold(rewards, records)``: the cut that maximises ProcessBench F1 (on a split
  that is not the one you report);
- ``evaluate(rewards, records, threshold)``: ProcessBench F1 and its two accuracies, step AUROC
  (up to the first error; all steps), first-error accuracy, by error type, each with a
  bootstrap 95 % CI over examples;
- ``paired_difference(...)``: PRM A minus PRM B with a paired bootstrap CI;
- ``baseline_rewards(records, kind)``: the trivial PRMs (``"always_correct"``,
  ``"step_position"``);
- ``read_report()``, ``metrics_frame(report, split)``: the shipped evaluation as a table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from ._files import read_shipped_json
from .metrics import processbench_scores, step_auroc
from .steps import first_error_from_rewards

if TYPE_CHECKING:
    import pandas as pd

Rewards = Sequence[Sequence[float]]
Baseline = Literal["always_correct", "step_position"]
#: Resamples for the bootstrap CIs of ``evaluate``.
N_BOOTSTRAP = 1000


def _as_arrays(rewards: Rewards, records: Sequence[dict[str, Any]]) -> list[np.ndarray]:
    if len(rewards) != len(records):
        raise ValueError(f"got rewards for {len(rewards)} examples but {len(records)} records; "
                         "give one reward list per record, in order")
    out = []
    for i, (r, rec) in enumerate(zip(rewards, records, strict=True)):
        array = np.asarray(r.tolist() if hasattr(r, "tolist") else list(r), dtype=np.float64)
        if array.shape != (len(rec["labels"]),):
            raise ValueError(f"example {i} ({rec.get('id', '?')}) has {len(rec['labels'])} steps "
                             f"but {array.size} rewards")
        out.append(array)
    return out


def up_to_first_error(records: Sequence[dict[str, Any]]) -> list[np.ndarray]:
    """Per example, ``[n_steps]`` bool: the step is at or before the first error (every step of
    a correct example). These steps ask ProcessBench's question — is *this* the step that goes
    wrong? — while later steps are wrong only because they build on a wrong value."""
    masks = []
    for r in records:
        n, fe = len(r["labels"]), r["first_error"]
        masks.append(np.arange(n) <= (n if fe < 0 else fe))
    return masks


def first_errors(rewards: Rewards, threshold: float) -> list[int]:
    """The predicted first error of every example: its first reward below ``threshold``."""
    return [first_error_from_rewards(list(r), threshold) for r in rewards]


def choose_threshold(rewards: Rewards, records: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """The cut in ``0.02, 0.03, …, 0.98`` that maximises ProcessBench F1, and that F1.

    Choose it on a split you do not report (the PRMs here use ``dev`` or out-of-fold train
    predictions); ties keep the lowest cut.
    """
    arrays = _as_arrays(rewards, records)
    true = [r["first_error"] for r in records]
    best = (0.5, -1.0)
    for cut in np.round(np.arange(0.02, 0.99, 0.01), 2):
        f1 = processbench_scores(first_errors(arrays, float(cut)), true).f1
        if f1 > best[1] + 1e-12:
            best = (float(cut), f1)
    return best


def baseline_rewards(records: Sequence[dict[str, Any]], kind: Baseline) -> list[np.ndarray]:
    """Rewards of a trivial PRM: ``"always_correct"`` (1.0 for every step) or
    ``"step_position"`` (``1 / (1 + step index)``: later steps look worse)."""
    if kind == "always_correct":
        return [np.ones(len(r["labels"])) for r in records]
    if kind == "step_position":
        return [1.0 / (1.0 + np.arange(len(r["labels"]))) for r in records]
    raise ValueError(f"unknown baseline {kind!r}; use 'always_correct' or 'step_position'")


def _point_metrics(arrays, records, predicted, index) -> dict[str, float]:
    """The headline metrics on the examples ``index`` (a resample, or all of them);
    ``predicted`` holds every example's predicted first error."""
    index = list(index)
    true = [records[i]["first_error"] for i in index]
    pred = [predicted[i] for i in index]
    pb = processbench_scores(pred, true)
    masks = up_to_first_error([records[i] for i in index])
    rews = [arrays[i] for i in index]
    labels = [np.asarray(records[i]["labels"], dtype=bool) for i in index]
    upto_s = np.concatenate([r[m] for r, m in zip(rews, masks, strict=True)])
    upto_y = np.concatenate([y[m] for y, m in zip(labels, masks, strict=True)])
    all_s, all_y = np.concatenate(rews), np.concatenate(labels)
    return {
        "processbench_f1": pb.f1,
        "error_accuracy": pb.error_accuracy,  # exact first error, erroneous examples
        "correct_accuracy": pb.correct_accuracy,
        "first_error_accuracy": float(np.mean([p == t for p, t in zip(pred, true,
                                                                       strict=True)])),
        "step_auroc_up_to_first_error": step_auroc(upto_s, upto_y),
        "step_auroc_all_steps": step_auroc(all_s, all_y),
    }


def evaluate(
    rewards: Rewards,
    records: Sequence[dict[str, Any]],
    threshold: float,
    *,
    n_bootstrap: int = N_BOOTSTRAP,
    seed: int = 0,
) -> dict[str, Any]:
    """A PRM's metrics on ``records``, each with a bootstrap 95 % CI over examples.

    Args:
        rewards: per example, ``[n_steps]`` rewards in [0, 1] (higher = more likely correct).
        records: the step-labelled examples (``labels``, ``first_error``, ``error_type``).
        threshold: ``first_error`` cut (choose it elsewhere: ``choose_threshold``).
        n_bootstrap: resamples of the examples (0: no CIs).
        seed: the resampling seed (the CIs are a function of it).

    Returns:
        ``{metric: value, "ci95": {metric: [low, high]}, "error_accuracy_by_type": {...},
        "threshold", "n_examples", "n_erroneous_examples", "n_steps", "n_wrong_steps"}``;
        metrics: ``processbench_f1``, ``error_accuracy``, ``correct_accuracy``,
        ``first_error_accuracy`` (all examples: the predicted first error, -1 included, is
        exact), ``step_auroc_up_to_first_error``, ``step_auroc_all_steps``. Undefined values
        (an AUROC with one class) are ``nan``; CIs are percentile intervals over the
        resamples where the metric is defined.

    Raises:
        ValueError: rewards and records do not match.
    """
    arrays = _as_arrays(rewards, records)
    n = len(records)
    predicted = first_errors(arrays, threshold)
    point = _point_metrics(arrays, records, predicted, range(n))
    ci: dict[str, list[float]] = {}
    if n_bootstrap:
        rng = np.random.default_rng(seed)
        draws = {k: [] for k in point}
        for _ in range(n_bootstrap):
            sample = _point_metrics(arrays, records, predicted, rng.integers(0, n, n))
            for k, v in sample.items():
                draws[k].append(v)
        for k, values in draws.items():
            finite = np.asarray([v for v in values if not math.isnan(v)])
            ci[k] = ([float(np.percentile(finite, 2.5)), float(np.percentile(finite, 97.5))]
                     if finite.size else [math.nan, math.nan])
    by_type = {}
    for kind in sorted({r["error_type"] for r in records if r["error_type"]}):
        rows = [i for i, r in enumerate(records) if r["error_type"] == kind]
        by_type[kind] = float(np.mean([predicted[i] == records[i]["first_error"] for i in rows]))
    labels = np.concatenate([np.asarray(r["labels"], dtype=bool) for r in records])
    return {
        **point,
        "ci95": ci,
        "error_accuracy_by_type": by_type,
        "threshold": float(threshold),
        "n_examples": n,
        "n_erroneous_examples": sum(r["first_error"] >= 0 for r in records),
        "n_steps": int(labels.size),
        "n_wrong_steps": int((~labels).sum()),
    }


def paired_difference(
    rewards_a: Rewards,
    threshold_a: float,
    rewards_b: Rewards,
    threshold_b: float,
    records: Sequence[dict[str, Any]],
    *,
    n_bootstrap: int = N_BOOTSTRAP,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """PRM A minus PRM B on the same examples, with a *paired* bootstrap 95 % CI.

    Both PRMs are measured on the same resample each time, so the interval reflects how much
    the difference (not each metric) moves with the choice of examples.

    Returns:
        ``{metric: {"difference": a - b, "ci95": [low, high]}}`` for the metrics of
        ``evaluate``.
    """
    a, b = _as_arrays(rewards_a, records), _as_arrays(rewards_b, records)
    n = len(records)
    pred_a, pred_b = first_errors(a, threshold_a), first_errors(b, threshold_b)
    pa = _point_metrics(a, records, pred_a, range(n))
    pb = _point_metrics(b, records, pred_b, range(n))
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {k: [] for k in pa}
    for _ in range(n_bootstrap):
        index = rng.integers(0, n, n)
        sa = _point_metrics(a, records, pred_a, index)
        sb = _point_metrics(b, records, pred_b, index)
        for k in draws:
            if not (math.isnan(sa[k]) or math.isnan(sb[k])):
                draws[k].append(sa[k] - sb[k])
    out = {}
    for k in pa:
        d = np.asarray(draws[k])
        ci = ([float(np.percentile(d, 2.5)), float(np.percentile(d, 97.5))] if d.size
              else [math.nan, math.nan])
        out[k] = {"difference": pa[k] - pb[k], "ci95": ci}
    return out


#: Row labels of ``metrics_frame``, in order.
METRIC_LABELS: dict[str, str] = {
    "processbench_f1": "ProcessBench F1",
    "error_accuracy": "erroneous examples: first error found exactly",
    "correct_accuracy": "correct examples: no error flagged",
    "first_error_accuracy": "first-error accuracy, all examples",
    "step_auroc_up_to_first_error": "step AUROC, steps up to the first error",
    "step_auroc_all_steps": "step AUROC, all steps",
}


def read_report(path: str | None = None) -> dict[str, Any]:
    """The shipped evaluation of the fine-tuned PRM (``data/prm/smollm2-prm/metrics.json``,
    written by ``scripts/eval_prm.py``), or the one at ``path``.

    Raises:
        FileNotFoundError: no such file (the message says how to write it).
    """
    return read_shipped_json(path, "metrics.json", what="PRM evaluation",
                             write_with="python scripts/eval_prm.py")


def metrics_frame(report: dict[str, Any], split: str, *,
                  names: Sequence[str] | None = None) -> pd.DataFrame:
    """A readable table of an evaluation: one row per metric, one column per PRM, each cell
    ``value [95 % CI]`` (``–`` where undefined); the example counts go in the column names.

    Args:
        report: ``read_report()`` or a dict of the same shape (``{split: {prm: evaluate(...)}}``).
        split: ``"test"`` or ``"hard"``.
        names: the PRMs to show (default: every PRM of the split, report order).

    Raises:
        ValueError: a split or PRM the report does not hold.
    """
    if split not in report:
        raise ValueError(f"the report has no split {split!r}; it has "
                         f"{[k for k in report if isinstance(report[k], dict)]}")
    results = {k: v for k, v in report[split].items()  # PRMs, not paired differences
               if not isinstance(v.get("processbench_f1"), dict) and "processbench_f1" in v}
    names = list(results) if names is None else list(names)
    missing = [n for n in names if n not in results]
    if missing:
        raise ValueError(f"no results for {missing} on {split!r}; it has {list(results)}")

    def cell(metrics: dict[str, Any], key: str) -> str:
        value, ci = metrics.get(key), metrics.get("ci95", {}).get(key)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "–"
        if not ci or ci[0] is None or math.isnan(ci[0]):
            return f"{value:.3f}"
        return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"

    first = results[names[0]]
    frame = pd.DataFrame({n: [cell(results[n], k) for k in METRIC_LABELS] for n in names},
                         index=list(METRIC_LABELS.values()))
    frame.index.name = (f"{split}: {first['n_examples']} examples "
                        f"({first['n_erroneous_examples']} with an error)")
    return frame
