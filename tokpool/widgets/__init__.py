"""Interactive explorers: pure ``render_*`` functions plus thin ipywidgets wiring.

``tokpool`` imports this package lazily (``tp.token_explorer``), so ``import tokpool`` does not
import ipywidgets or matplotlib.
"""

from .base import Explorer, MultiToggle
from .buffer import BufferReuseExplorer, buffer_reuse_explorer, render_buffer_reuse
from .late_interaction import RerankExplorer, render_rerank, rerank_explorer
from .memory import MemoryExplorer, context_range, memory_explorer, prompt_grid, render_memory
from .ownership import (
    OwnershipExplorer,
    check_workload,
    corruption_table,
    ownership_explorer,
    parse_prompt_lens,
    render_ownership,
)
from .rewards import StepRewardExplorer, render_step_rewards, step_reward_explorer, steps_html
from .tokens import (
    TOKEN_METRICS,
    TokenExplorer,
    all_hidden_states,
    hidden_states,
    render_token_heatmap,
    render_tokens,
    token_explorer,
    token_metric,
)
from .view import View, png_size, table_html

__all__ = [
    "TOKEN_METRICS",
    "BufferReuseExplorer",
    "Explorer",
    "MemoryExplorer",
    "MultiToggle",
    "OwnershipExplorer",
    "RerankExplorer",
    "StepRewardExplorer",
    "TokenExplorer",
    "View",
    "all_hidden_states",
    "buffer_reuse_explorer",
    "check_workload",
    "context_range",
    "corruption_table",
    "hidden_states",
    "memory_explorer",
    "ownership_explorer",
    "parse_prompt_lens",
    "png_size",
    "prompt_grid",
    "render_buffer_reuse",
    "render_memory",
    "render_ownership",
    "render_rerank",
    "render_step_rewards",
    "render_token_heatmap",
    "render_tokens",
    "rerank_explorer",
    "step_reward_explorer",
    "steps_html",
    "table_html",
    "token_explorer",
    "token_metric",
]
