"""ProcessBench F1 and step AUROC on hand-made cases (sklearn as the AUROC reference)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokpool as tp

# --- ProcessBench F1 ---------------------------------------------------------------------

def test_processbench_hand_made_case():
    # erroneous samples: 0 (found), 2 (wrong index), 3 (missed: predicted -1) → 1/3
    # correct samples: 1 (found), 4 (flagged at step 0) → 1/2
    pred, true = [2, -1, 0, -1, 0], [2, -1, 1, 3, -1]
    scores = tp.prm.processbench_scores(pred, true)
    assert scores.error_accuracy == pytest.approx(1 / 3)
    assert scores.correct_accuracy == pytest.approx(1 / 2)
    assert (scores.n_error, scores.n_correct) == (3, 2)
    assert tp.prm.processbench_f1(pred, true) == pytest.approx(2 * (1 / 3) * (1 / 2) / (5 / 6))


def test_processbench_docstring_example():
    assert tp.prm.processbench_f1([2, -1, 0, -1], [2, -1, 1, 3]) == pytest.approx(0.5)


def test_processbench_perfect_and_trivial_baselines():
    true = [-1, 0, 3, -1, 1]
    assert tp.prm.processbench_f1(true, true) == 1.0
    # always "correct": every correct sample right, no error found → F1 0
    assert tp.prm.processbench_f1([-1] * 5, true) == 0.0
    # flag the first step everywhere: correct accuracy 0 → F1 0
    assert tp.prm.processbench_f1([0] * 5, true) == 0.0


def test_processbench_exact_index_is_required():
    # an error found one step late does not count
    assert tp.prm.processbench_scores([3], [2]).error_accuracy == 0.0


def test_processbench_degenerate_cases():
    # only correct samples, or only erroneous ones: one accuracy is undefined → F1 nan
    only_correct = tp.prm.processbench_scores([-1, -1], [-1, -1])
    assert only_correct.correct_accuracy == 1.0 and math.isnan(only_correct.error_accuracy)
    assert math.isnan(only_correct.f1)
    assert math.isnan(tp.prm.processbench_f1([1, 2], [1, 2]))
    assert math.isnan(tp.prm.processbench_f1([], []))
    # both accuracies 0 → 0, not a division by zero
    assert tp.prm.processbench_f1([0, -1], [-1, 1]) == 0.0


def test_processbench_input_errors():
    with pytest.raises(ValueError, match="3 samples"):
        tp.prm.processbench_f1([0, 1, 2], [0, 1])
    with pytest.raises(ValueError, match="-1"):
        tp.prm.processbench_f1([-2], [0])
    with pytest.raises(TypeError, match="integer"):
        tp.prm.processbench_f1([0.5], [0])


# --- step AUROC --------------------------------------------------------------------------

def test_auroc_hand_made_cases():
    labels = [1, 1, 0, 0]
    assert tp.prm.step_auroc([0.9, 0.8, 0.2, 0.1], labels) == 1.0
    assert tp.prm.step_auroc([0.1, 0.2, 0.8, 0.9], labels) == 0.0
    assert tp.prm.step_auroc([0.5, 0.5, 0.5, 0.5], labels) == 0.5  # ties count one half
    # one positive below one negative: 3 of 4 pairs ordered right
    assert tp.prm.step_auroc([0.9, 0.3, 0.4, 0.1], labels) == 0.75
    assert tp.prm.step_auroc([0.9, 0.4, 0.4, 0.1], [True, True, False, False]) == 0.875


def test_auroc_single_class_is_nan_and_bad_input_raises():
    assert math.isnan(tp.prm.step_auroc([0.1, 0.2], [1, 1]))
    assert math.isnan(tp.prm.step_auroc([], []))
    with pytest.raises(ValueError, match="one label per score"):
        tp.prm.step_auroc([0.1, 0.2], [1])
    with pytest.raises(ValueError, match="0/1"):
        tp.prm.step_auroc([0.1, 0.2], [1, 2])
    with pytest.raises(ValueError, match="finite"):
        tp.prm.step_auroc([float("nan"), 0.2], [1, 0])


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=2, max_size=60),
)
def test_auroc_matches_sklearn_with_ties(data):
    metrics = pytest.importorskip("sklearn.metrics")
    scores = np.array([s / 6 for s, _ in data])
    labels = np.array([y for _, y in data])
    if labels.all() or not labels.any():
        assert math.isnan(tp.prm.step_auroc(scores, labels))
        return
    assert tp.prm.step_auroc(scores, labels) == pytest.approx(metrics.roc_auc_score(labels, scores))


def test_evaluate_metrics_frame_and_paired_difference_on_baselines():
    from tokpool.prm import baseline_rewards, evaluate, metrics_frame, paired_difference

    records = tp.load_prm_dataset("test")[:40]
    always = baseline_rewards(records, "always_correct")
    position = baseline_rewards(records, "step_position")
    a = evaluate(always, records, 0.5, n_bootstrap=50)
    # "every step is correct": right on every correct example, wrong on every erroneous one
    assert a["processbench_f1"] == 0.0 and a["correct_accuracy"] == 1.0
    assert a["error_accuracy"] == 0.0 and a["step_auroc_up_to_first_error"] == 0.5
    assert a["n_examples"] == 40 and a["n_erroneous_examples"] == 20
    p = evaluate(position, records, 0.6, n_bootstrap=50)
    low, high = p["ci95"]["step_auroc_all_steps"]
    assert low <= p["step_auroc_all_steps"] <= high
    diff = paired_difference(position, 0.6, always, 0.5, records, n_bootstrap=50)
    assert diff["correct_accuracy"]["difference"] == p["correct_accuracy"] - 1.0
    report = {"test": {"position": p, "always": a, "position_minus_always": diff}}
    frame = metrics_frame(report, "test")
    assert list(frame.columns) == ["position", "always"]  # the paired difference is no PRM
    assert frame.loc["ProcessBench F1", "always"] == "0.000 [0.000, 0.000]"
    assert "40 examples (20 with an error)" in frame.index.name
    with pytest.raises(ValueError, match="one reward list per record"):
        evaluate(always[:3], records, 0.5)
    with pytest.raises(ValueError, match="no results for"):
        metrics_frame(report, "test", names=["missing"])
