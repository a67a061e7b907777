"""The notebooks' key figures, drawn at build time by the library's own plot functions (the
calls the notebooks and ``scripts/docs_figures.py`` make): one section per notebook that needs
no model weights. Notebooks 03, 04 and 06 need real models and are not on the site.
"""

from __future__ import annotations

from collections.abc import Callable

import matplotlib as mpl
import matplotlib.pyplot as plt

from ..plots._style import RC, figure_png
from ..plots.gate import plot_task_gate
from ..plots.memory import plot_memory_vs_prompt_length
from ..plots.schedule import plot_ownership_schedule
from ..pooler.tasks import task_table
from ..sim import SimConfig, mark_startup_refusals, simulate
from ..sim.results.analysis import prompt_grid
from ..sim.sweeps import sweep

__all__ = ["FIGURES"]

#: What pooling itself hands over (notebook 02's identity head).
_IDENTITY_HEAD = {"head_dtype": None, "use_activation": False}


def task_gate() -> bytes:
    """Notebook 01: model kinds × tasks, what the runner serves before and after PR #50931."""
    return figure_png(plot_task_gate(task_table()).figure)


def ownership_schedule() -> bytes:
    """Notebook 02: legacy vs clone under async scheduling, requests of 5, 12 and 3 tokens."""
    config = SimConfig(hidden_size=576, max_num_batched_tokens=8, async_scheduling=True,
                       **_IDENTITY_HEAD)
    with mpl.rc_context(RC):
        fig, axes = plt.subplots(2, 1, figsize=(8.4, 9.6), layout="constrained")
        for ax, policy in zip(axes, ("legacy", "clone"), strict=True):
            plot_ownership_schedule(simulate([5, 12, 3], config.replace(policy=policy)), ax=ax)
    return figure_png(fig)


def memory_vs_prompt_length() -> bytes:
    """Notebook 05: Qwen3-Embedding-8B token_embed, every policy, vLLM's defaults on an H100,
    1K tokens to its 40,960-token context."""
    config = SimConfig.for_model("Qwen3-Embedding-8B", hardware="H100 SXM")
    lens = prompt_grid(1024, config.max_model_len or 40_960, points_per_doubling=4)
    swept = mark_startup_refusals(sweep(lens, config, async_scheduling=[config.async_scheduling],
                                        progress=False), config)
    return figure_png(plot_memory_vs_prompt_length(swept, hardware="H100 SXM").figure)


#: (notebook, caption, drawing function) per figure, in the notebooks' order.
FIGURES: tuple[tuple[str, str, Callable[[], bytes]], ...] = (
    ("01_task_gate", "The task gate: what the pooling runner serves, before and after "
     "PR #50931.", task_gate),
    ("02_chunked_prefill_ownership", "Who owns what: legacy keeps views the next step "
     "rewrites under async scheduling; clone owns its chunks.", ownership_schedule),
    ("05_memory_vs_prompt_length", "Peak pooling memory against prompt length for "
     "Qwen3-Embedding-8B under vLLM's defaults.", memory_vs_prompt_length),
)
