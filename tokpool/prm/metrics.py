"""PRM metrics: ProcessBench F1 (first-error identification) and step-level AUROC.

Both are pure Python/NumPy so the package does not depend on scikit-learn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ProcessBenchScores:
    """ProcessBench's two accuracies and their harmonic mean.

    Attributes:
        error_accuracy: on samples with an error, the share whose first-error index is found
            exactly (``nan`` when there are none).
        correct_accuracy: on samples without an error, the share predicted ``-1`` (``nan``
            when there are none).
        f1: ``2·a·b / (a + b)``; ``0.0`` when both are 0; ``nan`` when either is ``nan``.
        n_error, n_correct: how many samples of each kind.
    """

    error_accuracy: float
    correct_accuracy: float
    f1: float
    n_error: int
    n_correct: int


def _first_errors(values: Sequence[int], name: str) -> np.ndarray:
    array = np.asarray(list(values))
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one index per sample), got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{name} must hold integer step indices (-1 = no error), got "
                        f"dtype {array.dtype}")
    if array.size and array.min() < -1:
        raise ValueError(f"{name} holds {int(array.min())}; indices are >= 0, or -1 for "
                         "'no error'")
    return array.astype(np.int64)


def processbench_scores(
    pred_first_error: Sequence[int], true_first_error: Sequence[int]
) -> ProcessBenchScores:
    """ProcessBench's accuracies on erroneous and on correct samples, and their F1.

    Args:
        pred_first_error: ``[n_samples]`` predicted index of the first wrong step, ``-1`` for
            "every step is correct".
        true_first_error: ``[n_samples]`` the labels, same encoding.

    Returns:
        ``ProcessBenchScores``. Degenerate cases: a kind of sample that is absent has accuracy
        ``nan`` and makes F1 ``nan`` (the metric is undefined on it: evaluate on a set that
        holds both kinds); both accuracies 0 give F1 ``0.0``.

    Raises:
        ValueError: different lengths, or indices below -1.
        TypeError: indices that are not integers — a NaN prediction included: NaN/Inf never
            count as ``-1`` ("no error"); derive predictions with
            ``first_error_from_rewards``, which refuses non-finite rewards.
    """
    pred = _first_errors(pred_first_error, "pred_first_error")
    true = _first_errors(true_first_error, "true_first_error")
    if pred.shape != true.shape:
        raise ValueError(f"pred_first_error has {pred.size} samples but true_first_error has "
                         f"{true.size}; give one prediction per sample")
    erroneous = true != -1
    n_error, n_correct = int(erroneous.sum()), int((~erroneous).sum())
    error_acc = float((pred[erroneous] == true[erroneous]).mean()) if n_error else math.nan
    correct_acc = float((pred[~erroneous] == -1).mean()) if n_correct else math.nan
    if math.isnan(error_acc) or math.isnan(correct_acc):
        f1 = math.nan
    elif error_acc + correct_acc == 0:
        f1 = 0.0
    else:
        f1 = 2 * error_acc * correct_acc / (error_acc + correct_acc)
    return ProcessBenchScores(error_acc, correct_acc, f1, n_error, n_correct)


def processbench_f1(pred_first_error: Sequence[int], true_first_error: Sequence[int]) -> float:
    """ProcessBench F1: harmonic mean of the accuracy on erroneous samples (the first-error
    index must match exactly) and on correct samples (``-1`` must be predicted).

    Args:
        pred_first_error: ``[n_samples]`` predicted first-error index, ``-1`` = no error.
        true_first_error: ``[n_samples]`` true first-error index, ``-1`` = no error.

    Returns:
        F1 in [0, 1]; ``nan`` when the labels hold only one kind of sample (one accuracy is
        undefined); ``0.0`` when both accuracies are 0.

    Raises:
        ValueError: different lengths, or indices below -1.

    Example:
        >>> tp.prm.processbench_f1([2, -1, 0, -1], [2, -1, 1, 3])  # error acc 1/3, correct acc 1
        0.5
    """
    return processbench_scores(pred_first_error, true_first_error).f1


def step_auroc(scores: Sequence[float], labels: Sequence[bool | int]) -> float:
    """Area under the ROC curve of ``scores`` for telling positive steps from negative ones.

    With PRM rewards and labels ``True`` = "step is correct", this is the chance that a random
    correct step scores above a random wrong one (ties count one half): the Mann–Whitney U
    statistic divided by ``n_pos · n_neg``, with average ranks for tied scores.

    Args:
        scores: ``[n_steps]`` real scores (higher = more likely positive).
        labels: ``[n_steps]`` booleans or 0/1.

    Returns:
        AUROC in [0, 1]; ``nan`` when only one class is present (undefined).

    Raises:
        ValueError: different lengths, labels other than 0/1, or non-finite scores.
    """
    s = np.asarray(list(scores), dtype=np.float64).reshape(-1)
    y = np.asarray(list(labels)).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"scores has {s.size} entries but labels has {y.size}; give one "
                         "label per score")
    if y.size and not np.isin(y, (0, 1)).all():
        raise ValueError(f"labels must be booleans or 0/1, got values {np.unique(y)[:5]}")
    if not np.isfinite(s).all():
        raise ValueError("scores must be finite (got nan or inf)")
    y = y.astype(bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    order = np.argsort(s, kind="mergesort")
    sorted_scores = s[order]
    ranks = np.empty(s.size, dtype=np.float64)
    # average rank (1-based) over each run of tied scores
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_scores)) + 1]
    stops = np.r_[starts[1:], s.size]
    for start, stop in zip(starts, stops, strict=True):
        ranks[order[start:stop]] = (start + 1 + stop) / 2
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))
