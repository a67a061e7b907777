"""Ownership view: a small workload through the simulated engine — schedule, corruption, memory."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt

from ..plots import figure_png, format_bytes
from ..plots._style import styled
from ..plots.memory import plot_memory_timeline
from ..plots.schedule import plot_ownership_schedule, schedule_frame
from .view import View

if TYPE_CHECKING:
    import pandas as pd

    from ..sim import SimResult


#: Widest ownership figure (inches); longer runs get narrower steps, then lose box labels.
MAX_FIGURE_WIDTH = 16.0


def parse_prompt_lens(text: str) -> list[int]:
    """``"20, 6 9"`` → ``[20, 6, 9]``.

    Raises:
        ValueError: a part that is not a positive integer (named in the message).
    """
    parts = [p for p in text.replace(",", " ").split() if p]
    lens = []
    for p in parts:
        if not p.isdigit() or int(p) < 1:
            raise ValueError(f"prompt lengths must be positive integers; got {p!r} in {text!r}")
        lens.append(int(p))
    return lens


def _explain(result: SimResult) -> list[str]:
    """One sentence per corrupted request: which chunk was overwritten in which step."""
    frame = schedule_frame(result)
    hits = frame[frame["overwritten_step"] >= 0]
    lines = []
    for row in hits.itertuples(index=False):
        reader = ("the cat that joins its chunks" if row.stop < result.prompt_lens[row.request]
                  else "its host copy")
        lines.append(
            f"request {row.request}: tokens {row.start}–{row.stop} were kept as a view of buffer "
            f"rows {row.buffer_start}–{row.buffer_stop}; step {row.overwritten_step} wrote over "
            f"those rows before {reader} (step {row.read_step}) read them."
        )
    return lines


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

    Returns:
        ``View``: ``png`` = schedule (top) and per-step memory (bottom); ``html`` = verdict,
        peak and one sentence per corrupted request; ``table`` = ``result.requests``;
        ``data['result']`` = the ``SimResult``.

    Raises:
        ValueError: a workload the simulator rejects (e.g. a prompt longer than the budget
            without chunked prefill), with the simulator's message.
    """
    from ..sim import SimConfig, simulate

    config = SimConfig(
        hidden_size=hidden_size, dtype=dtype, max_num_batched_tokens=max_num_batched_tokens,
        async_scheduling=async_scheduling, policy=policy,
        enable_chunked_prefill=enable_chunked_prefill,
    )
    result = simulate(list(prompt_lens), config, mode="tensor")
    n_req = len(result.prompt_lens)
    n_steps = int(max(result.steps["step"].max(), result.requests["delivered_step"].max())) + 1
    # wide enough to read every box; past MAX_FIGURE_WIDTH the explorer scrolls sideways
    width = min(MAX_FIGURE_WIDTH, max(7.5, 0.6 * n_steps + 3.0))
    fig = plt.figure(figsize=(width, 0.62 * n_req + 6.2), layout="constrained")
    top, bottom = fig.subplots(2, 1, height_ratios=[0.62 * n_req + 2.4, 2.6])
    # token ranges in the boxes only while a step is wide enough to hold one
    plot_ownership_schedule(result, ax=top, annotate=(width - 3.0) / n_steps >= 0.5)
    plot_memory_timeline(result, ax=bottom, title="Bytes owned by pooling, per step")
    bottom.set_xlim(top.get_xlim())
    png = figure_png(fig)
    bad = result.corrupted
    colour = "#b00020" if bad else "#00734a"
    verdict = (f"{len(bad)} of {n_req} outputs corrupted: requests {bad}" if bad
               else f"all {n_req} outputs intact")
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
    return View(html="".join(parts), png=png, table=result.requests,
                data={"result": result, "corrupted": list(bad)})


def corruption_table(result: SimResult, request: int, *, column: int = 0) -> pd.DataFrame:
    """What each row of a request's delivered output actually holds, with real numbers.

    Every row of the default synthetic source identifies its token exactly, so each delivered
    row can be traced back to the (request, position) whose hidden state it really is.

    Args:
        result: a tensor-mode ``tp.simulate(...)`` result run with the default synthetic source,
            ALL pooling and no activation (``use_activation=False``, the default).
        request: which request's output to inspect.
        column: which hidden-state column to print the values of.

    Returns:
        DataFrame, one row per position: ``position``, ``expected`` (``"r0 t5"`` = request 0,
        token 5), ``holds`` (the token whose row was delivered there, ``"?"`` if none),
        ``expected_value`` / ``delivered_value`` (column ``column``), ``ok``.

    Raises:
        ValueError: an analytic result, another pooling or an activation, or a bad request.
    """
    import pandas as pd
    import torch

    from ..sim.simulation import default_source

    cfg = result.config
    if result.outputs is None:
        raise ValueError("corruption_table needs a tensor-mode result (mode='tensor')")
    if cfg.pooling_method != "ALL" or cfg.use_activation:
        raise ValueError("corruption_table supports ALL pooling without activation only")
    if not 0 <= request < len(result.prompt_lens):
        raise ValueError(f"request {request} is not in 0..{len(result.prompt_lens) - 1}")
    source = default_source(cfg)  # the source simulate used for this config
    source.prepare(result.prompt_lens)

    def key(row: torch.Tensor) -> bytes:  # exact bit pattern of one row
        return row.contiguous().view(torch.uint8).numpy().tobytes()

    owner: dict[bytes, str] = {}
    for r in range(len(result.prompt_lens)):
        ref = source.reference(r).to(cfg.output_dtype)  # [prompt_len, W]
        for p in range(ref.shape[0]):
            owner[key(ref[p])] = f"r{r} t{p}"
    expected = source.reference(request).to(cfg.output_dtype)  # [prompt_len, W]
    delivered = result.outputs[request]  # [prompt_len, W]
    rows = []
    for p in range(expected.shape[0]):
        holds = owner.get(key(delivered[p]), "?")
        rows.append({
            "position": p, "expected": f"r{request} t{p}", "holds": holds,
            "expected_value": float(expected[p, column]),
            "delivered_value": float(delivered[p, column]),
            "ok": bool(torch.equal(expected[p], delivered[p])),
        })
    return pd.DataFrame(rows)
