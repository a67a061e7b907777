"""The states a static page can show, each computed by the function the notebooks call.

A ``State`` is one point of an explorer's grid: the control values that pick it, the readout
HTML and the PNG that ``render_*`` returned for it. The page's JavaScript never computes a
state; it only chooses which of these to show (``page.py``).

Grids (``grid(name, sample=...)``): the full grid for ``tokpool site`` and a small sample for
the browser test. Every workload, budget and policy below is a ``render_*`` call's argument.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import product
from typing import Any

from ..plots.buffer_reuse import buffer_reuse_panels
from ..pooler.pooling import RETENTION_POLICIES
from ..sim import SimConfig, simulate
from ..widgets.buffer import render_buffer_reuse
from ..widgets.memory import render_memory
from ..widgets.ownership import render_ownership
from ..widgets.view import View

__all__ = ["EXPLORERS", "Control", "Explorer", "State", "buffer_config", "shrink_png"]


@dataclass(frozen=True)
class Control:
    """One control of a static page: a name, its label and the values it steps through."""
    name: str
    label: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class State:
    """One precomputed state: ``key`` (control name -> value), the view's readout and PNG."""
    key: dict[str, Any]
    html: str
    png: bytes | None
    settings: dict[str, Any] = field(default_factory=dict)
    #: per prompt length (memory explorer): the sweep's exact peaks and vLLM's verdict
    points: dict[str, Any] | None = None


@dataclass(frozen=True)
class Explorer:
    """A static explorer: its page name, title, controls and a generator of its states."""
    name: str
    title: str
    blurb: str
    controls: Callable[[bool], tuple[Control, ...]]
    states: Callable[[bool], Iterator[State]]
    count: Callable[[bool], int]


def shrink_png(png: bytes) -> bytes:
    """The same picture as a 256-colour palette PNG (a figure of flat colours and text loses
    nothing a reader sees; the file is 3-4x smaller, so the whole site fits its 30 MB)."""
    from PIL import Image  # Pillow comes with matplotlib; only the site needs it

    with Image.open(io.BytesIO(png)) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE)
        out = io.BytesIO()
        small.save(out, format="PNG", optimize=True)
    data = out.getvalue()
    return data if len(data) < len(png) else png


def _view_state(key: dict[str, Any], view: View) -> State:
    return State(key=key, html=view.html, png=view.png, settings=view.settings)


# --- the buffer-reuse stepper ------------------------------------------------------------

#: Notebook 02's workloads (one 20-token prompt; three requests 5, 12, 3) and the ownership
#: explorer's default (20, 6, 9).
BUFFER_WORKLOADS = ("20", "5, 12, 3", "20, 6, 9")


def buffer_config(budget: int, policy: str, async_scheduling: bool) -> SimConfig:
    """Notebook 02's configuration (SmolLM2's width, bfloat16, no head) with these controls."""
    return SimConfig(hidden_size=576, dtype="bfloat16", head_dtype="bfloat16",
                     use_activation=False, async_scheduling=async_scheduling,
                     max_num_batched_tokens=budget, policy=policy)


def _buffer_controls(sample: bool) -> tuple[Control, ...]:
    grid = _buffer_grid(sample)
    steps = max(len(_buffer_panels(*g)) for g in grid)
    return (Control("workload", "prompt lengths", tuple(dict.fromkeys(g[0] for g in grid))),
            Control("budget", "tokens per step", tuple(dict.fromkeys(g[1] for g in grid))),
            Control("policy", "policy", tuple(dict.fromkeys(g[2] for g in grid))),
            Control("async_scheduling", "async scheduling",
                    tuple(dict.fromkeys(g[3] for g in grid))),
            Control("step", "engine step", tuple(range(steps))))


def _buffer_grid(sample: bool) -> list[tuple[str, int, str, bool]]:
    if sample:
        # budget 16 has one step fewer: its step 2 was not computed (the page snaps)
        return [("20", 8, "legacy", False), ("20", 8, "clone", False), ("20", 16, "legacy", False)]
    return list(product(BUFFER_WORKLOADS, (8, 16), RETENTION_POLICIES, (False, True)))


_RUNS: dict[tuple, Any] = {}


def _buffer_run(workload: str, budget: int, policy: str, async_scheduling: bool) -> Any:
    key = (workload, budget, policy, async_scheduling)
    if key not in _RUNS:
        lens = [int(n) for n in workload.split(",")]
        _RUNS[key] = simulate(lens, buffer_config(budget, policy, async_scheduling))
    return _RUNS[key]


def _buffer_panels(*key: Any) -> list[Any]:
    return buffer_reuse_panels(_buffer_run(*key))


def _buffer_states(sample: bool) -> Iterator[State]:
    for g in _buffer_grid(sample):
        result = _buffer_run(*g)
        for step in range(len(_buffer_panels(*g))):
            key = dict(zip(("workload", "budget", "policy", "async_scheduling"), g,
                           strict=True)) | {"step": step}
            yield _view_state(key, render_buffer_reuse(result, step))


def _buffer_count(sample: bool) -> int:
    return sum(len(_buffer_panels(*g)) for g in _buffer_grid(sample))


# --- the ownership explorer ----------------------------------------------------------------

def _ownership_grid(sample: bool) -> dict[str, tuple[Any, ...]]:
    if sample:
        return {"workload": ("20, 6, 9",), "budget": (16,), "policy": ("legacy", "clone"),
                "async_scheduling": (False, True), "vllm_head": (False,)}
    return {"workload": ("20, 6, 9", "5, 12, 3", "20"), "budget": (8, 16, 32),
            "policy": tuple(RETENTION_POLICIES), "async_scheduling": (False, True),
            "vllm_head": (False, True)}


_OWNERSHIP_LABELS = {"workload": "prompt lengths", "budget": "tokens per step",
                     "policy": "policy", "async_scheduling": "async scheduling",
                     "vllm_head": "vLLM's head (float32 cast + activation)"}


def _ownership_controls(sample: bool) -> tuple[Control, ...]:
    return tuple(Control(k, _OWNERSHIP_LABELS[k], v) for k, v in _ownership_grid(sample).items())


def _ownership_states(sample: bool) -> Iterator[State]:
    grid = _ownership_grid(sample)
    for values in product(*grid.values()):
        key = dict(zip(grid, values, strict=True))
        lens = [int(n) for n in key["workload"].split(",")]
        view = render_ownership(lens, max_num_batched_tokens=key["budget"],
                                async_scheduling=key["async_scheduling"], policy=key["policy"],
                                vllm_head=key["vllm_head"])
        yield _view_state(key, view)


def _ownership_count(sample: bool) -> int:
    n = 1
    for v in _ownership_grid(sample).values():
        n *= len(v)
    return n


# --- the memory-vs-prompt-length explorer --------------------------------------------------

def _memory_grid(sample: bool) -> dict[str, tuple[Any, ...]]:
    if sample:
        return {"model": ("Qwen3-Embedding-0.6B",), "hardware": ("H100 SXM",),
                "async_scheduling": (False, True), "head_dtype": ("default",)}
    return {"model": ("Qwen3-Embedding-8B", "Qwen3-Embedding-0.6B", "Qwen2.5-Math-PRM-7B"),
            "hardware": ("H100 SXM", "A100 40GB", "L4"),
            "async_scheduling": (False, True), "head_dtype": ("default", None)}


_MEMORY_LABELS = {"model": "model", "hardware": "hardware", "async_scheduling":
                  "async scheduling", "head_dtype": "head dtype"}


def _memory_controls(sample: bool) -> tuple[Control, ...]:
    return tuple(Control(k, _MEMORY_LABELS[k], v) for k, v in _memory_grid(sample).items())


#: Prompt lengths per doubling of the memory page's prompt-length slider (the figure keeps
#: ``render_memory``'s default resolution).
MEMORY_POINTS_PER_DOUBLING = 8


def memory_view(key: dict[str, Any], *, points_per_doubling: int = 2) -> View:
    """``render_memory`` for one state of the memory page's grid."""
    return render_memory(model=key["model"], hardware=key["hardware"],
                         async_scheduling=key["async_scheduling"], head_dtype=key["head_dtype"],
                         points_per_doubling=points_per_doubling)


def memory_points(view: View) -> dict[str, Any]:
    """A ``render_memory`` sweep as the page's data: each prompt length's peak pooling bytes
    per policy and vLLM's verdict (``None`` = starts, else an index into ``refusals``)."""
    df = view.table
    lens = sorted(int(n) for n in df["prompt_len"].unique())
    peaks = {str(policy): [int(b) for b in rows.sort_values("prompt_len")["peak_pooling_bytes"]]
             for policy, rows in df.groupby("policy", sort=False)}
    first = df[df["policy"] == df["policy"].iloc[0]].sort_values("prompt_len")
    refusals: list[str] = []
    verdict: list[int | None] = []
    for starts, text in zip(first["vllm_starts"], first["refusal"], strict=True):
        if starts:
            verdict.append(None)
            continue
        if text not in refusals:
            refusals.append(str(text))
        verdict.append(refusals.index(text))
    return {"lens": lens, "peaks": peaks, "verdict": verdict, "refusals": refusals}


def _memory_states(sample: bool) -> Iterator[State]:
    grid = _memory_grid(sample)
    for values in product(*grid.values()):
        key = dict(zip(grid, values, strict=True))
        view = memory_view(key)
        dense = memory_view(key, points_per_doubling=MEMORY_POINTS_PER_DOUBLING)
        yield State(key=key, html=view.html, png=view.png, settings=view.settings,
                    points=memory_points(dense))


def _memory_count(sample: bool) -> int:
    n = 1
    for v in _memory_grid(sample).values():
        n *= len(v)
    return n


#: The static explorers, in the order the index lists them.
EXPLORERS: tuple[Explorer, ...] = (
    Explorer("buffer", "The reused buffer, step by step",
             "Notebook 02's workloads through the engine's step loop: which rows each kept "
             "view points at, and which step rewrote them (render_buffer_reuse).",
             _buffer_controls, _buffer_states, _buffer_count),
    Explorer("ownership", "Who owns what: schedule, corruption and memory",
             "A small workload through the simulated engine with real tensors "
             "(render_ownership): corrupted, intact, or intact only by luck.",
             _ownership_controls, _ownership_states, _ownership_count),
    Explorer("memory", "Peak pooling memory vs prompt length",
             "The analytic sweep of render_memory for a model on a hardware preset, with what "
             "sets the peak and vLLM's refusals in words.",
             _memory_controls, _memory_states, _memory_count),
)
