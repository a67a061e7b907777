"""Ownership view: a small workload through the simulated engine — schedule, corruption, memory."""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

import matplotlib as mpl
import matplotlib.pyplot as plt

from ..plots import format_bytes
from ..plots._style import RC, close, styled
from ..plots.memory import plot_memory_timeline
from ..plots.schedule import plot_ownership_schedule, step_label_every
from ..sim import SimConfig, simulate
from ..sim.results.analysis import corruption_table, lucky_requests
from .view import PNG_DPI, View

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..sim import SimResult

__all__ = ["check_workload", "corruption_table", "parse_prompt_lens", "render_ownership"]


#: Widest ownership figure (inches); longer runs get narrower steps, then lose box labels.
MAX_FIGURE_WIDTH = 16.0
#: ``render_ownership`` refuses workloads that need more engine steps than this (its figure
#: has a box per request and step; about a second to draw at this size) ...
MAX_STEPS = 128
#: ... or more requests than this.
MAX_REQUESTS = 16


def check_workload(prompt_lens: Sequence[int], max_num_batched_tokens: int, *,
                   max_steps: int = MAX_STEPS, max_requests: int = MAX_REQUESTS) -> int:
    """Refuse, before simulating, a workload too big to draw; return its estimated steps.

    Every step computes at most ``max_num_batched_tokens`` tokens, so the run needs at least
    ``ceil(sum(prompt_lens) / max_num_batched_tokens)`` steps: a count, no simulation.

    Raises:
        ValueError: too many requests or steps, with the numbers and what to change.
    """
    n = len(prompt_lens)
    if n > max_requests:
        raise ValueError(f"{n} requests; the ownership view draws at most {max_requests}. "
                         "Remove some, or run tp.simulate(...) in a cell for big workloads")
    total = sum(int(p) for p in prompt_lens)
    steps = -(-total // max(1, int(max_num_batched_tokens)))
    if steps > max_steps:
        raise ValueError(
            f"this workload needs at least {steps:,} engine steps ({total:,} tokens at "
            f"{max_num_batched_tokens} per step); the ownership view draws at most {max_steps}. "
            "Use fewer or shorter prompts or more tokens per step, or run tp.simulate(...) in "
            "a cell for big workloads")
    return steps


def parse_prompt_lens(text: str) -> list[int]:
    """``"20, 6 9"`` → ``[20, 6, 9]``.

    Raises:
        ValueError: a part that is not a positive integer (named in the message).
    """
    parts = [p for p in text.replace(",", " ").split() if p]
    if len(parts) > 10 * MAX_REQUESTS:
        raise ValueError(f"{len(parts)} prompt lengths; give at most {MAX_REQUESTS}")
    lens = []
    for p in parts:
        if p.isascii() and p.isdigit() and len(p) > 12:
            raise ValueError(f"prompt length {p[:16]}… has {len(p)} digits; no engine serves "
                             "that. Give lengths the view can draw, e.g. 6, 9")
        if not p.isascii() or not p.isdigit() or int(p) < 1:
            raise ValueError(f"prompt lengths must be positive integers; got {p!r} in {text!r}")
        lens.append(int(p))
    return lens


def fast_png(fig: Figure) -> bytes:
    """PNG bytes of ``fig`` at ``PNG_DPI``, for a redraw while a control moves; closes it.

    Its constrained layout already keeps every label inside the figure, so the tight bounding
    box (matplotlib draws the whole figure once more to find it) is skipped; zlib level 1
    encodes about three times faster than the default level 6 for a file about 20 % larger.
    Together they cut the ownership view's worst redraw by about a third (see
    ``benchmarks/ownership_render.py``)."""
    buf = io.BytesIO()
    with mpl.rc_context({**RC, "savefig.bbox": "standard"}):
        fig.savefig(buf, format="png", dpi=PNG_DPI, pil_kwargs={"compress_level": 1})
    close(fig)
    return buf.getvalue()


def _explain(result: SimResult) -> list[str]:
    """The per-request story of ``SimResult.explain()`` (kept for callers)."""
    return result.explain()


@styled
def render_ownership(
    prompt_lens: Sequence[int],
    *,
    max_num_batched_tokens: int = 16,
    async_scheduling: bool = False,
    policy: str = "clone",
    enable_chunked_prefill: bool = True,
    hidden_size: int = 576,
    dtype: str = "bfloat16",
    vllm_head: bool = False,
) -> View:
    """Simulate a small workload with real tensors and show who owns what, step by step.

    Args:
        prompt_lens: prompt length per request.
        max_num_batched_tokens: the token budget per step (and the buffer's rows).
        async_scheduling: launch step N+1 before step N's host copy.
        policy: retention policy (``tp.RETENTION_POLICIES``).
        enable_chunked_prefill: allow a prompt to be split across steps.
        hidden_size: width of the hidden states (bytes scale with it; 576 is SmolLM2's).
        dtype: hidden-state dtype.
        vllm_head: run vLLM's default head (float32 cast, then the activation). It copies a
            finished output within its step, so the async host copy never reads pooling's
            memory; the default (identity head) shows what pooling itself hands over.

    Returns:
        ``View``: ``png`` = schedule (top) and per-step memory (bottom); ``html`` = verdict,
        peak and one sentence per request (``SimResult.explain()``: "intact by luck (step 2
        wrote only rows 0–3; …)" for a request whose kept view survived only because later
        steps wrote fewer rows); ``table`` = ``result.requests``; ``data['result']`` = the
        ``SimResult``, ``data['lucky']`` = the requests intact by luck
        (``tp.sim.lucky_requests``).

    Raises:
        ValueError: a workload the simulator rejects (e.g. a prompt longer than the budget
            without chunked prefill), with the simulator's message; a workload too big to
            draw (``check_workload``: more than ``MAX_STEPS`` steps or ``MAX_REQUESTS``
            requests), refused before any work.
    """
    check_workload(prompt_lens, max_num_batched_tokens)
    head = {} if vllm_head else {"head_dtype": None, "use_activation": False}
    config = SimConfig(
        hidden_size=hidden_size, dtype=dtype, max_num_batched_tokens=max_num_batched_tokens,
        async_scheduling=async_scheduling, policy=policy,
        enable_chunked_prefill=enable_chunked_prefill, **head,
    )
    result = simulate(list(prompt_lens), config, mode="tensor")
    n_req = len(result.prompt_lens)
    n_steps = int(max(result.steps["step"].max(), result.requests["delivered_step"].max())) + 1
    # wide enough to read every box, up to MAX_FIGURE_WIDTH; the explorer never shrinks it
    # (its text keeps its size), it scrolls sideways instead
    width = min(MAX_FIGURE_WIDTH, max(7.5, 0.6 * n_steps + 3.0))
    annotate = (width - 3.0) / n_steps >= 0.5  # token ranges only while a box holds one

    def draw() -> Figure:
        fig = plt.figure(figsize=(width, 0.62 * n_req + 6.2), layout="constrained")
        top, bottom = fig.subplots(2, 1, height_ratios=[0.62 * n_req + 2.4, 2.6])
        plot_ownership_schedule(result, ax=top, annotate=annotate)
        plot_memory_timeline(result, ax=bottom, title="Bytes owned by pooling, per step")
        bottom.set_xlim(top.get_xlim())
        return fig

    fig = draw()
    every = step_label_every(fig.axes[0], n_steps)
    png = fast_png(fig)
    bad = result.corrupted
    lucky = sorted(lucky_requests(result))
    colour = "#b00020" if bad else "#00734a"
    verdict = (f"{len(bad)} of {n_req} outputs corrupted: requests {bad}" if bad
               else f"all {n_req} outputs intact")
    if lucky:  # intact only because the next step wrote fewer rows: say so up front
        verdict += (f"; request{'s' * (len(lucky) > 1)} {', '.join(map(str, lucky))} intact "
                    "only by luck")
    parts = [
        f'<div style="font-family:sans-serif;line-height:1.5">'
        f'<b style="color:{colour}">{html.escape(verdict)}</b> · '
        f"peak pooling memory {html.escape(format_bytes(result.peak_pooling_bytes))} "
        f"(+ the {html.escape(format_bytes(result.buffer_bytes))} hidden-state buffer) · "
        f"{len(result.steps)} engine steps</div>"
    ]
    reasons = _explain(result)
    if reasons:
        items = "".join(f"<li>{html.escape(r)}</li>" for r in reasons)
        parts.append(f'<ul style="font-family:sans-serif;margin:4px 0">{items}</ul>')
    cut = []
    if not annotate:
        cut.append("the boxes are too narrow for their token ranges (they are in the table)")
    if every > 1:
        cut.append(f"steps are labelled every {every}th")
    if width >= MAX_FIGURE_WIDTH:
        cut.append(f"the figure is capped at {MAX_FIGURE_WIDTH:g} in and keeps its text size: "
                   "scroll sideways on a narrow screen")
    if cut:
        parts.append('<div class="tokpool-caption" style="font-family:sans-serif;color:#555;'
                     f'font-size:12px">{n_steps} steps: {html.escape("; ".join(cut))}.</div>')
    settings = {"prompt_lens": [int(n) for n in prompt_lens],
                "max_num_batched_tokens": max_num_batched_tokens,
                "async_scheduling": async_scheduling, "policy": policy,
                "enable_chunked_prefill": enable_chunked_prefill, "hidden_size": hidden_size,
                "dtype": dtype, "vllm_head": vllm_head, "mode": "tensor"}
    return View(html="".join(parts), png=png, table=result.requests, settings=settings,
                redraw=draw, data={"result": result, "corrupted": list(bad),
                                   "lucky": lucky})
