"""Ownership view: a small workload through the simulated engine — schedule, corruption, memory.

``render_ownership`` is pure (a workload in, ``View`` out); ``ownership_explorer`` wires
sliders, a policy choice and checkboxes to it.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

import ipywidgets as W
import matplotlib as mpl
import matplotlib.pyplot as plt

from .. import _args as checks
from ..plots import format_bytes
from ..plots._style import RC, close, styled
from ..plots.memory import plot_memory_timeline
from ..plots.schedule import plot_ownership_schedule, step_label_every
from ..pooler.pooling import RETENTION_POLICIES
from ..sim import SimConfig, simulate
from ..sim.results.analysis import corruption_table, lucky_requests
from .base import _WIDE, Explorer, _slider_layout
from .view import PNG_DPI, View

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..sim import SimResult

__all__ = ["OwnershipExplorer", "check_workload", "corruption_table", "ownership_explorer",
           "parse_prompt_lens", "render_ownership"]


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
    aborts: dict[int, int] | None = None,
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
        aborts: ``{request: step}``: the client hangs up (``tp.simulate``'s ``aborts``).

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
    result = simulate(list(prompt_lens), config, mode="tensor", aborts=aborts or None)
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
    gone = ([] if result.aborts is None else
            sorted(int(r) for r in result.aborts.loc[result.aborts["outcome"] == "aborted",
                                                     "request"]))
    sent = n_req - len(gone)
    verdict = (f"{len(bad)} of {sent} outputs corrupted: requests {bad}" if bad
               else f"all {sent} outputs intact")
    if gone:  # the client hung up: nothing delivered for them
        verdict += (f"; request{'s' * (len(gone) > 1)} {', '.join(map(str, gone))} aborted, "
                    "nothing delivered")
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
                "dtype": dtype, "vllm_head": vllm_head, "mode": "tensor",
                "aborts": dict(aborts or {})}
    return View(html="".join(parts), png=png, table=result.requests, settings=settings,
                redraw=draw, data={"result": result, "corrupted": list(bad),
                                   "lucky": lucky})


#: Widest hidden states the ownership view simulates (it runs real tensors).
MAX_OWNERSHIP_WIDTH = 65_536


class OwnershipExplorer(Explorer):
    """A small workload through the simulated engine: schedule, corruption and memory.

    Attributes:
        prompt_len: ``IntSlider``, request 0's prompt length.
        more_requests: ``Text``, the other requests' prompt lengths (``"6, 9"``; may be empty).
        budget: ``IntSlider``, ``max_num_batched_tokens`` (tokens per step = buffer rows).
        async_scheduling: ``Checkbox``, ``async_scheduling``.
        policy: ``ToggleButtons`` over ``tp.RETENTION_POLICIES``.
        chunked: ``Checkbox``, ``enable_chunked_prefill``.
        vllm_head: ``Checkbox``, run vLLM's default head after pooling.
        abort: ``Text``, client aborts as ``request@step`` (``"1@2"``; comma-separated; may
            be empty): the request is cancelled right before that engine step.
        view: the last ``View``; ``view.data['result']`` is the ``SimResult``.
    """
    def __init__(self, prompt_lens: list[int] | None = None, *, budget: int = 16,
                 async_scheduling: bool = False, policy: str = "clone",
                 enable_chunked_prefill: bool = True, hidden_size: int = 576) -> None:

        lens = [20, 6, 9] if prompt_lens is None else checks.items(
            "prompt_lens", prompt_lens, what="a list of prompt lengths")
        lens = checks.each("prompt_lens", lens, lambda name, n: checks.whole(name, n, minimum=1))
        if not 1 <= lens[0] <= 96:
            raise ValueError(f"prompt_lens[0] = {lens[0]:,}: the request 0 tokens slider takes "
                             "1 to 96")
        checks.whole("budget", budget, minimum=2, maximum=64,
                     why=" (the tokens per step slider)")
        checks.flag("async_scheduling", async_scheduling)
        checks.flag("enable_chunked_prefill", enable_chunked_prefill)
        checks.choice("policy", policy, RETENTION_POLICIES)
        checks.whole("hidden_size", hidden_size, minimum=1, maximum=MAX_OWNERSHIP_WIDTH,
                     why=" (the view simulates real tensors of that width)")
        check_workload(lens, budget)  # a workload the view can draw, before any work
        self.hidden_size = hidden_size
        self._views: dict[tuple, View] = {}  # see CACHED_VIEWS
        self.prompt_len = W.IntSlider(value=lens[0], min=1, max=96, continuous_update=False,
                                      description="request 0 tokens", style=_WIDE,
                                      tooltip="request 0's prompt length in tokens (1 to 96)",
                                      layout=_slider_layout())
        self.more_requests = W.Text(value=", ".join(str(n) for n in lens[1:]),
                                    continuous_update=False, description="other requests",
                                    tooltip="the other requests' prompt lengths, e.g. 6, 9 "
                                            "(may be empty)",
                                    placeholder="e.g. 6, 9", style=_WIDE)
        self.budget = W.IntSlider(value=budget, min=2, max=64, continuous_update=False,
                                  description="tokens per step", style=_WIDE,
                                  tooltip="tokens the engine computes per step (vLLM's "
                                          "max_num_batched_tokens), 2 to 64",
                                  layout=_slider_layout())
        # on/off settings are all checkboxes, one style (async, chunked prefill, vLLM's head)
        self.async_scheduling = W.Checkbox(
            value=async_scheduling, description="async scheduling", indent=False,
            layout=W.Layout(width="auto"),
            tooltip="async scheduling: the engine starts step N+1 before step N's output is "
                    "copied to the host (vLLM's async_scheduling); off: each step's output is "
                    "copied before the next step starts")
        self.chunked = W.Checkbox(value=enable_chunked_prefill, description="chunked prefill",
                                  tooltip="split a prompt longer than tokens per step over "
                                          "several steps (vLLM's enable_chunked_prefill)",
                                  indent=False, layout=W.Layout(width="auto"))
        self.policy = W.ToggleButtons(
            options=list(RETENTION_POLICIES), value=policy, description="policy",
            tooltips=[POLICY_TIPS[p] for p in RETENTION_POLICIES],
            tooltip="how pooling keeps a request's chunks between steps")
        self.vllm_head = W.Checkbox(value=False, indent=False, layout=W.Layout(width="auto"),
                                    tooltip="run vLLM's default head after pooling: a float32 "
                                            "cast, then the activation",
                                    description="vLLM's head (float32 cast + activation)")
        self.abort = W.Text(value="", continuous_update=False, description="client aborts",
                            placeholder="e.g. 1@2", style=_WIDE,
                            tooltip="cancel a request right before an engine step, as "
                                    "request@step (1@2: request 1 before step 2); empty: none")
        super().__init__([self.prompt_len, self.more_requests, self.budget,
                          self.async_scheduling, self.chunked, self.policy, self.vllm_head,
                          self.abort])
        self._watch(self.prompt_len, self.more_requests, self.budget, self.async_scheduling,
                    self.chunked, self.policy, self.vllm_head, self.abort)
        self.update()

    @property
    def prompt_lens(self) -> list[int]:
        """The workload the controls describe."""
        try:
            others = parse_prompt_lens(self.more_requests.value)
        except ValueError as err:
            raise ValueError(f"other requests: {err}") from err
        return [self.prompt_len.value, *others]

    #: Views kept per explorer (settings -> View): a setting revisited while a slider is
    #: dragged back and forth, or a toggle flipped twice, is shown without redrawing.
    CACHED_VIEWS = 32

    @property
    def aborts(self) -> dict[int, int]:
        """The client aborts the ``abort`` box describes (``{request: step}``)."""
        return parse_aborts(self.abort.value, len(self.prompt_lens))

    def render(self) -> View:
        lens = self.prompt_lens
        if not self.chunked.value:
            self._check_unchunked(lens)
        aborts = self.aborts
        key = (tuple(lens), self.budget.value, self.async_scheduling.value, self.policy.value,
               self.chunked.value, self.hidden_size, self.vllm_head.value,
               tuple(sorted(aborts.items())))
        cache = self._views
        view = cache.pop(key, None)  # popped and put back: the most recent is last
        if view is None:
            view = render_ownership(
                lens, max_num_batched_tokens=self.budget.value,
                async_scheduling=self.async_scheduling.value, policy=self.policy.value,
                enable_chunked_prefill=self.chunked.value, hidden_size=self.hidden_size,
                vllm_head=self.vllm_head.value, aborts=aborts,
            )
        cache[key] = view
        while len(cache) > self.CACHED_VIEWS:
            del cache[next(iter(cache))]  # the least recently shown
        return view


    def _check_unchunked(self, lens: list[int]) -> None:
        """vLLM's refusal of a prompt longer than the budget with chunking off
        (``engine_checks.check_unchunked_prompts_schedulable``), said with this panel's
        controls instead of the engine's flags."""
        # the rules room only when a panel is checked: opening an explorer stays light
        from ..sim.vllm_rules.engine_checks import (
            EngineRefusal,
            check_unchunked_prompts_schedulable,
        )

        budget = self.budget.value
        try:
            check_unchunked_prompts_schedulable(lens, budget, enable_chunked_prefill=False)
        except EngineRefusal as err:
            long = [(i, n) for i, n in enumerate(lens) if n > budget]
            i, n = long[0]
            where = "request 0 tokens" if i == 0 else f"other requests (request {i})"
            more = (f", nor {len(long) - 1} more request{'s' if len(long) > 2 else ''}"
                    if len(long) > 1 else "")
            raise ValueError(
                f"{where}: {n} tokens, but tokens per step is {budget} and chunked prefill is "
                f"off, so no step can hold it{more} (vLLM refuses to start, "
                f"{err.follows}). Tick chunked prefill, raise tokens per step to at least "
                f"{max(n for _, n in long)}, or shorten {'those requests' if more else 'it'}"
            ) from None


def parse_aborts(text: object, n_requests: int) -> dict[int, int]:
    """``"1@2, 0@5"`` -> ``{1: 2, 0: 5}`` (the ownership explorer's abort box).

    Raises:
        ValueError: an entry that is not ``request@step`` with whole numbers, a request that
            is not in the workload, or a request given twice.

    Example:
        >>> parse_aborts("1@2, 0@5", 3)
        {1: 2, 0: 5}
    """
    if not isinstance(text, str):
        raise ValueError(f"client aborts: give request@step entries as text, got {text!r}")
    out: dict[int, int] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        parts = [p.strip() for p in entry.split("@")]
        if len(parts) != 2 or not all(p.isascii() and p.isdigit() and len(p) <= 6
                                      for p in parts):
            raise ValueError(f"client aborts: {entry!r} is not request@step (e.g. 1@2: request "
                             "1 cancelled right before engine step 2)")
        r, step = int(parts[0]), int(parts[1])
        if r >= n_requests:
            raise ValueError(f"client aborts: request {r} is not in the workload (requests 0 "
                             f"to {n_requests - 1})")
        if r in out:
            raise ValueError(f"client aborts: request {r} is given twice")
        out[r] = step
    return out


#: What each retention policy keeps between steps (the ownership explorer's button tooltips).
POLICY_TIPS: dict[str, str] = {
    "legacy": "legacy (before PR #50931): keeps views into the reused buffer",
    "clone": "clone (PR #50931, vLLM's): clones each unfinished chunk, joins them at the end",
    "prealloc": "prealloc: one owned buffer per request, each chunk copied in once",
    "offload": "offload: each chunk copied to host memory as it is produced",
}


def ownership_explorer(prompt_lens: list[int] | None = None, *, budget: int = 16,
                       async_scheduling: bool = False, policy: str = "clone",
                       enable_chunked_prefill: bool = True,
                       hidden_size: int = 576) -> OwnershipExplorer:
    """Explore chunked-prefill ownership: which chunks are cloned or viewed, what gets corrupted.

    Args:
        prompt_lens: the initial workload (default ``[20, 6, 9]``).
        budget: tokens per step (``max_num_batched_tokens``).
        async_scheduling: start with async scheduling on.
        policy: initial retention policy.
        enable_chunked_prefill: start with chunked prefill on.
        hidden_size: width of the simulated hidden states (bytes scale with it).

    Returns:
        The explorer widget; e.g. ``ex.async_scheduling.value = True`` redraws it.
    """
    return OwnershipExplorer(prompt_lens, budget=budget, async_scheduling=async_scheduling,
                             policy=policy, enable_chunked_prefill=enable_chunked_prefill,
                             hidden_size=hidden_size)
