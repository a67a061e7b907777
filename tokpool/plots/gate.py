"""The task gate as a picture: model kinds × tasks, what the runner serves before and after."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from ._style import new_axes, styled

#: (label, colour, cell text) per category, in the order of the colour map.
_CATEGORIES: tuple[tuple[str, str, str], ...] = (
    ("not declared by the model", "#f2f2f2", ""),
    ("served before and after", "#8fd19e", "✓"),
    ("served only after PR #50931", "#4c9be8", "new"),
    ("declared, never served by this runner", "#f4a6a6", "✗"),
)


def gate_categories(table: pd.DataFrame) -> tuple[np.ndarray, list[str], list[str]]:
    """Cell categories of ``tp.task_table()``: 0 undeclared, 1 both, 2 current only, 3 neither.

    Returns:
        ``(codes [n_kinds, n_tasks], kinds, tasks)``.
    """
    tasks = [c.split(":", 1)[1] for c in table.columns if c.startswith("current:")]
    kinds = list(table.index)
    codes = np.zeros((len(kinds), len(tasks)), dtype=int)
    for i, kind in enumerate(kinds):
        declared = {t.strip() for t in str(table.loc[kind, "model_tasks"]).split(",")}
        for j, task in enumerate(tasks):
            legacy = table.loc[kind, f"pre_50931:{task}"] == "yes"
            current = table.loc[kind, f"current:{task}"] == "yes"
            if task not in declared:
                codes[i, j] = 0
            elif legacy and current:
                codes[i, j] = 1
            elif current:
                codes[i, j] = 2
            else:
                codes[i, j] = 3
    return codes, kinds, tasks


@styled
def plot_task_gate(
    table: pd.DataFrame,
    *,
    ax: Axes | None = None,
    title: str | None = "Which tasks the pooling runner serves, per model kind",
) -> Axes:
    """Grid of model kinds × pooling tasks, coloured by what the gate serves.

    A cell is blue (``new``) when the current gate serves a task the legacy gate filtered out,
    green when both serve it, red when the model declares it but this runner never serves it,
    grey when the model does not declare it.

    Args:
        table: the DataFrame from ``tp.task_table()``.
        ax: axes to draw into (a new figure when ``None``).
        title: axes title.

    Returns:
        The axes.
    """
    codes, kinds, tasks = gate_categories(table)
    ax = new_axes(ax, (8.6, 0.42 * len(kinds) + 1.9))
    cmap = ListedColormap([c for _, c, _ in _CATEGORIES])
    ax.imshow(codes, cmap=cmap, vmin=-0.5, vmax=len(_CATEGORIES) - 0.5, aspect="auto")
    ax.grid(False)
    for i in range(codes.shape[0]):
        for j in range(codes.shape[1]):
            ax.text(j, i, _CATEGORIES[codes[i, j]][2], ha="center", va="center", fontsize=9,
                    color="white" if codes[i, j] == 2 else "0.15")
    ax.set_xticks(range(len(tasks)), tasks, rotation=20, ha="right")
    examples = [f"{k}\n({table.loc[k, 'attn_type']})" for k in kinds]
    ax.set_yticks(range(len(kinds)), examples, fontsize=8)
    ax.set_xticks(np.arange(-0.5, len(tasks)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(kinds)), minor=True)
    ax.grid(which="minor", color="white", lw=2)
    ax.tick_params(which="minor", length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.legend(
        handles=[Patch(facecolor=c, label=label) for label, c, _ in _CATEGORIES],
        loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False,
    )
    if title:
        ax.set_title(title)
    return ax
