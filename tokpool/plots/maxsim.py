"""Why this document scored: the query × document similarity matrix behind a MaxSim score."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

from .._args import _show, items, number, text
from ..late_interaction.alignment import maxsim_alignment
from ._fonts import font_family
from ._style import OKABE_ITO, check_cmap, new_axes, styled
from .embeddings import _tick_labels

__all__ = ["plot_maxsim_alignment"]

#: The tallest figure drawn, in inches: within 600 px at the notebooks' 100 dpi, padding included.
MAX_HEIGHT = 5.8


def _tokens(name: str, tokens: Any, n: int, what: str) -> list[str]:
    out = items(name, tokens, what=f"a list of {what} token strings, one per row")
    if len(out) != n:
        raise ValueError(f"got {len(out)} {name} for {n} {what} rows; pass one string per row")
    return [text(f"{name}[{i}]", t, empty=True) for i, t in enumerate(out)]


@styled
def plot_maxsim_alignment(
    q_emb: torch.Tensor,
    d_emb: torch.Tensor,
    q_tokens: Sequence[str],
    d_tokens: Sequence[str],
    *,
    ax: Axes | None = None,
    cmap: str = "RdBu_r",
    vmax: float | None = None,
    title: str | None = None,
    colorbar: bool = True,
) -> Axes:
    """Query-token × document-token similarities, each query token's best match boxed, and the
    per-query-token contributions that add up to the MaxSim score.

    Similarity is signed, so it is drawn with ``RdBu_r`` centred at 0 on ``[-vmax, vmax]``
    (fixed, so pictures of several documents compare). A bar beside each query row shows what
    that token adds (its row's maximum); the bars' sum is ``tp.late_interaction.maxsim(q_emb,
    d_emb)``, printed
    in the title. The figure has its own white background, so it reads the same in light and
    dark notebook themes.

    Args:
        q_emb: ``[Lq, D]`` query token vectors (a model's ``token_embed`` output).
        d_emb: ``[Ld, D]`` document token vectors, same ``D``.
        q_tokens: ``Lq`` query token strings (the y axis).
        d_tokens: ``Ld`` document token strings (the x axis).
        ax: axes for the matrix (a new figure when ``None``); the contribution bars go in an
            inset to its right (``ax.maxsim_bars``).
        cmap: colormap for the similarities.
        vmax: colour range ``[-vmax, vmax]``; default ``max(1, max |similarity|)`` (1 for
            unit vectors: cosine).
        title: axes title; default ``"MaxSim = <score>"``.
        colorbar: draw a colorbar under the matrix.

    Returns:
        The matrix axes.

    Raises:
        TypeError, ValueError: embeddings as :func:`tokpool.late_interaction.maxsim` refuses them;
        token lists
            whose length is not the row count; a bad ``vmax`` or ``cmap``.

    Example:
        >>> q = torch.nn.functional.normalize(torch.randn(3, 8), dim=-1)
        >>> d = torch.nn.functional.normalize(torch.randn(5, 8), dim=-1)
        >>> ax = tp.viz.plot_maxsim_alignment(q, d, ["a", "b", "c"], list("vwxyz"))
        >>> ax.get_title().startswith("MaxSim = ")
        True
    """
    parts = maxsim_alignment(q_emb, d_emb)
    sim = parts.similarity.numpy().astype(np.float64)  # [Lq, Ld]
    n_q, n_d = sim.shape
    q_text = _tick_labels(_tokens("q_tokens", q_tokens, n_q, "query"))
    d_text = _tick_labels(_tokens("d_tokens", d_tokens, n_d, "document"))
    check_cmap(cmap)
    top = max(1.0, float(np.abs(sim).max())) if vmax is None else number("vmax", vmax, low=0)
    if not top > 0:
        raise ValueError(f"vmax must be above 0 (the colour range is [-vmax, vmax]), got "
                         f"{_show(vmax)}")
    width = min(16.0, max(6.0, 0.16 * n_d + 3.5))
    # at most MAX_HEIGHT inches (under 600 px at 100 dpi): the whole figure fits a laptop screen
    ax = new_axes(ax, (width, min(MAX_HEIGHT, max(3.2, 0.2 * n_q + 2.2))))
    image = ax.imshow(sim, cmap=cmap, vmin=-top, vmax=top, interpolation="nearest",
                      aspect="auto")
    ax.grid(False)
    best = parts.best.tolist()
    for i, j in enumerate(best):  # each query token's maximum, boxed (dark edge, light halo)
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="white",
                               linewidth=3.0))
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black",
                               linewidth=1.4))
    labels_d = [f"{j} {t}" if n_d > 40 and j % 2 else t for j, t in enumerate(d_text)]
    ax.set_xticks(range(n_d), labels_d, rotation=90, fontsize=7,
                  family=font_family(labels_d))
    ax.set_yticks(range(n_q), q_text, fontsize=8 if n_q <= 24 else 6, family=font_family(q_text))
    ax.set_xlabel("document token")
    ax.set_ylabel("query token")
    score = float(parts.score)
    ax.set_title(title if title is not None else f"MaxSim = {score:.4g}  (sum of the bars)")
    bars = ax.inset_axes((1.02, 0.0, 0.22, 1.0), sharey=ax)
    contrib = parts.contributions.numpy().astype(np.float64)  # [Lq]
    bars.barh(range(n_q), contrib, color=OKABE_ITO[0], height=0.7)
    for i, c in enumerate(contrib):
        bars.annotate(f"{c:.2f}", (c, i), xytext=(2, 0), textcoords="offset points",
                      va="center", fontsize=7)
    bars.axvline(0, color="0.4", linewidth=0.8)
    bars.set_xlim(min(0.0, contrib.min() * 1.1), max(contrib.max() * 1.35, 1e-9))
    bars.tick_params(axis="y", labelleft=False)
    bars.set_xlabel("adds", fontsize=8)
    bars.grid(axis="y", visible=False)
    ax.maxsim_bars = bars  # type: ignore[attr-defined]
    if colorbar:
        ax.figure.colorbar(image, ax=ax, location="bottom", shrink=0.5, pad=0.02,
                           aspect=40).set_label("similarity  q·d")
    return ax
