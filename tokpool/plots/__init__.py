"""Matplotlib figures and self-contained HTML for tokpool's data.

Every ``plot_*`` follows matplotlib's convention: ``plot_x(data, *, ax=None, **style) -> Axes``;
with ``ax=None`` it makes a ``layout="constrained"`` figure. Nothing here calls ``plt.show()``,
changes global rcParams or displays as a side effect. ``tokpool`` imports this package lazily, so
``import tokpool`` does not import matplotlib.
"""

from ._style import figure_png, format_bytes, format_range, format_tokens
from .buffer_reuse import BufferPanel, buffer_reuse_panels, plot_buffer_reuse
from .embeddings import cosine_similarity_matrix, pca_2d, plot_similarity, plot_token_pca
from .engine_memory import load_engine_memory, plot_engine_memory
from .equivalence import plot_chunked_error
from .gate import gate_categories, plot_task_gate
from .index_size import plot_index_bytes, plot_pooling_tradeoff
from .maxsim import plot_maxsim_alignment
from .memory import (
    plot_memory_timeline,
    plot_memory_vs_prompt_length,
    plot_pooling_share_of_kv,
    plot_time_vs_prompt_length,
)
from .rerank import plot_rerank_cost
from .response import plot_response_memory
from .rewards import plot_step_rewards
from .schedule import (
    CHUNK_KINDS,
    overwritten_requests,
    plot_buffer_rows,
    plot_ownership_schedule,
    schedule_frame,
)
from .score_memory import plot_score_memory
from .token_text import (
    CONTINUATION,
    ColourScale,
    HTMLText,
    colour_scale,
    plot_token_values,
    split_characters,
    token_html,
    token_strings,
    visible_whitespace,
    word_spans,
)

__all__ = [
    "CHUNK_KINDS",
    "CONTINUATION",
    "BufferPanel",
    "ColourScale",
    "HTMLText",
    "buffer_reuse_panels",
    "colour_scale",
    "cosine_similarity_matrix",
    "figure_png",
    "format_bytes",
    "format_range",
    "format_tokens",
    "gate_categories",
    "load_engine_memory",
    "overwritten_requests",
    "pca_2d",
    "plot_buffer_reuse",
    "plot_buffer_rows",
    "plot_chunked_error",
    "plot_engine_memory",
    "plot_index_bytes",
    "plot_maxsim_alignment",
    "plot_memory_timeline",
    "plot_memory_vs_prompt_length",
    "plot_ownership_schedule",
    "plot_pooling_share_of_kv",
    "plot_pooling_tradeoff",
    "plot_rerank_cost",
    "plot_response_memory",
    "plot_score_memory",
    "plot_similarity",
    "plot_step_rewards",
    "plot_task_gate",
    "plot_time_vs_prompt_length",
    "plot_token_pca",
    "plot_token_values",
    "schedule_frame",
    "split_characters",
    "token_html",
    "token_strings",
    "visible_whitespace",
    "word_spans",
]
