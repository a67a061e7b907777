"""The fine-tuned PRM's learning curve: dev metrics against the number of training problems.

``scripts/prm_curve.py`` collects the ``training.json`` of several ``scripts/train_prm.py`` runs
into ``data/prm/smollm2-prm/curve.json``; ``read_curve`` reads it and ``plot_learning_curve``
draws ProcessBench F1 and step AUROC (steps up to the first error) against training problems,
one line per variant of what is trained, each point with its bootstrap 95 % interval on ``dev``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ._files import read_shipped_json

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

#: The two metrics of the curve: ``(key in evaluate()'s result, axis label)``.
CURVE_METRICS: tuple[tuple[str, str], ...] = (
    ("processbench_f1", "ProcessBench F1 (dev)"),
    ("step_auroc_up_to_first_error", "step AUROC up to the first error (dev)"),
)
#: What each variant trains (the keys of ``curve.json``'s points).
VARIANTS: dict[str, str] = {
    "lora": "LoRA r16 on layers 13–16 + head",
    "head_only": "head only (logistic regression)",
}


def curve_point(training: dict[str, Any], variant: str) -> dict[str, Any]:
    """One point of the curve from a run's ``training.json``.

    Args:
        training: the parsed ``training.json`` of ``scripts/train_prm.py``.
        variant: ``"lora"`` (the shipped recipe: the best dev point of the run) or
            ``"head_only"`` (the run's logistic-regression head before any LoRA step).

    Returns:
        ``{"variant", "train_examples", "processbench_f1", "step_auroc_up_to_first_error",
        "ci95": {metric: [low, high]}, "threshold", "error_accuracy_by_type", "best_step",
        "seconds"}``.

    Raises:
        ValueError: an unknown variant, or a ``training.json`` without dev metrics with CIs.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; use one of {list(VARIANTS)}")
    key = "dev" if variant == "lora" else "head_only_dev"
    metrics = training.get(key)
    if not metrics or "ci95" not in metrics:
        raise ValueError(f"training.json has no {key!r} metrics with bootstrap intervals; "
                         "it was written by an older scripts/train_prm.py — rerun it")
    settings = training["settings"]
    return {
        "variant": variant,
        "train_examples": settings["train_examples"],
        **{k: metrics[k] for k, _ in CURVE_METRICS},
        "ci95": {k: metrics["ci95"][k] for k, _ in CURVE_METRICS},
        "threshold": metrics["threshold"],
        "error_accuracy_by_type": metrics["error_accuracy_by_type"],
        "best_step": settings.get("best_step") if variant == "lora" else 0,
        "seconds": training.get("seconds", {}),
    }


def read_curve(path: str | Path | None = None) -> dict[str, Any]:
    """The shipped learning curve (``data/prm/smollm2-prm/curve.json``) or the one at ``path``.

    Raises:
        FileNotFoundError: no such file (the message says how to write it).
    """
    return read_shipped_json(path, "curve.json", what="learning curve",
                             write_with="python scripts/prm_curve.py RUN_DIR...")


def curve_frame(curve: dict[str, Any]) -> pd.DataFrame:
    """The curve's points as a table: one row per (variant, training problems), each metric as
    ``value [low, high]``."""

    rows = []
    for p in sorted(curve["points"], key=lambda p: (p["variant"], p["train_examples"])):
        row = {"variant": VARIANTS.get(p["variant"], p["variant"]),
               "training problems": p["train_examples"]}
        for key, label in CURVE_METRICS:
            low, high = p["ci95"][key]
            row[label] = f"{p[key]:.3f} [{low:.3f}, {high:.3f}]"
        row["arithmetic slips found"] = p["error_accuracy_by_type"].get("arithmetic", math.nan)
        rows.append(row)
    return pd.DataFrame(rows).set_index(["variant", "training problems"])


def plot_learning_curve(curve: dict[str, Any], *, targets: Sequence[float] | None = (0.70, 0.85),
                        axes: Sequence[Axes] | None = None) -> Sequence[Axes]:
    """ProcessBench F1 and step AUROC on ``dev`` against training problems (log scale), one
    line per variant, bootstrap 95 % intervals as error bars.

    Args:
        curve: ``read_curve()`` (``{"points": [curve_point(...), ...], ...}``).
        targets: a dotted target line per metric (``None``: none).
        axes: two matplotlib axes to draw into (default: a new 1×2 figure).

    Returns:
        The two axes.

    Raises:
        ValueError: a curve without points.
    """
    import matplotlib.pyplot as plt

    points = curve.get("points") or []
    if not points:
        raise ValueError("the curve has no points; add runs with scripts/prm_curve.py")
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    sizes = sorted({p["train_examples"] for p in points})
    for i, ((key, label), ax) in enumerate(zip(CURVE_METRICS, axes, strict=True)):
        for variant, name in VARIANTS.items():
            mine = sorted((p for p in points if p["variant"] == variant),
                          key=lambda p: p["train_examples"])
            if not mine:
                continue
            x = [p["train_examples"] for p in mine]
            y = [p[key] for p in mine]
            err = [[p[key] - p["ci95"][key][0] for p in mine],
                   [p["ci95"][key][1] - p[key] for p in mine]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=name)
        if targets is not None:
            ax.axhline(targets[i], color="grey", ls=":", lw=1, label=f"target {targets[i]:.2f}")
        ax.set_xscale("log")
        ax.set_xticks(sizes, [f"{s:,}" for s in sizes])
        # room beyond the first and last points: their error bars' caps clear the spines
        ax.set_xlim(sizes[0] / 1.35, sizes[-1] * 1.35)
        ax.minorticks_off()
        ax.set(xlabel="training problems", ylabel=label, title=label.split(" (")[0])
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower right")
    return axes
