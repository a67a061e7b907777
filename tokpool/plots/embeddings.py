"""Per-token embeddings: token × token cosine similarity and a 2-D PCA coloured by position."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes

from .._args import items, number, whole
from ._fonts import font_family
from ._style import as_numpy, check_cmap, new_axes, styled
from .token_text import visible_whitespace

#: Tallest similarity heatmap (inches) ``plot_similarity`` makes: it fits a screen.
MAX_HEATMAP_HEIGHT_IN = 7.0


def cosine_similarity_matrix(embeddings: Any) -> np.ndarray:
    """Cosine similarity between every pair of token vectors.

    Args:
        embeddings: ``[n_tokens, dim]`` tensor or array.

    Returns:
        ``[n_tokens, n_tokens]`` float64 array in ``[-1, 1]`` (zero vectors give 0).
    """
    x = as_numpy(embeddings, name="embeddings", ndim=2, finite=True, empty=False)  # [n, D]
    norms = np.linalg.norm(x, axis=1, keepdims=True)  # [n, 1]
    unit = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    return np.clip(unit @ unit.T, -1.0, 1.0)  # [n, n]


def pca_2d(embeddings: Any) -> tuple[np.ndarray, np.ndarray]:
    """Project token vectors on their first two principal components.

    Args:
        embeddings: ``[n_tokens, dim]`` tensor or array, ``n_tokens >= 2``.

    Returns:
        ``(coords, explained)``: ``[n_tokens, 2]`` coordinates and the ``[2]`` fraction of
        variance each component explains. Signs are fixed so that the largest loading is positive
        (the picture does not flip between runs).

    Raises:
        ValueError: fewer than two tokens.
    """
    x = as_numpy(embeddings, name="embeddings", ndim=2)  # [n, D]
    if x.shape[0] < 2:
        raise ValueError(f"PCA needs at least 2 token vectors, got shape {x.shape}")
    centred = x - x.mean(axis=0, keepdims=True)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)  # vt: [k, D]
    k = min(2, vt.shape[0])
    comps = vt[:k]
    signs = np.sign(comps[np.arange(k), np.abs(comps).argmax(axis=1)])
    comps = comps * signs[:, None]
    coords = centred @ comps.T  # [n, k]
    var = s**2
    explained = var[:k] / var.sum() if var.sum() > 0 else np.zeros(k)
    if k < 2:  # one-dimensional data: pad so callers always get two columns
        coords = np.hstack([coords, np.zeros((coords.shape[0], 1))])
        explained = np.append(explained, 0.0)
    return coords, explained


def _tick_labels(tokens: Sequence[str], max_chars: int = 10) -> list[str]:
    out = []
    for tok in tokens:
        shown = visible_whitespace(tok) or "∅"
        out.append(shown if len(shown) <= max_chars else shown[: max_chars - 1] + "…")
    return out


def _labels_that_fit(ax: Axes, *, fontsize: float) -> int:
    """How many tick labels of ``fontsize`` points fit along the shorter side of ``ax``.

    Reads the axes' box in the figure before layout (constrained layout shrinks it a little
    more for the labels and colorbar, hence the 0.9); an ``imshow`` keeps its square aspect,
    so the shorter side is the one that counts. One label needs about 1.25 × its font size.
    """
    fig_w, fig_h = ax.figure.get_size_inches()
    box = ax.get_position()
    side_pt = min(box.width * fig_w, box.height * fig_h) * 72.0 * 0.9
    return max(2, int(side_pt / (1.25 * fontsize)))


@styled
def plot_similarity(
    embeddings: Any,
    *,
    tokens: Sequence[str] | None = None,
    ax: Axes | None = None,
    vmin: float = -1.0,
    vmax: float = 1.0,
    cmap: str = "RdBu_r",
    max_labels: int | None = None,
    title: str | None = "Token × token cosine similarity",
    colorbar: bool = True,
) -> Axes:
    """Heatmap of the cosine similarity between every pair of token vectors.

    Similarity is signed, so it is drawn with ``RdBu_r`` centred at 0 on a fixed ``[-1, 1]``.
    A new figure is at most ``MAX_HEATMAP_HEIGHT_IN`` (7 in) tall, so it fits a screen; a long
    text then gets every k-th label.

    Args:
        embeddings: ``[n_tokens, dim]`` tensor or array.
        tokens: token strings for the tick labels.
        ax: axes to draw into (a new figure when ``None``).
        vmin: value of the first colour.
        vmax: value of the last colour.
        cmap: colormap.
        max_labels: label at most this many tokens per axis (default: as many as fit the
            axes at 7 pt without overlapping); above it every k-th token is labelled
            (``"12 ·Col"``: position and text), so a stripe can still be traced to its token.
        title: axes title.
        colorbar: draw a colorbar.

    Returns:
        The axes.
    """
    sim = cosine_similarity_matrix(embeddings)
    n = sim.shape[0]
    if tokens is not None:
        tokens = items("tokens", tokens, what="a list of token strings, one per row")
        if len(tokens) != n:
            raise ValueError(f"got {len(tokens)} tokens for {n} embeddings; pass one per row")
    low, high = number("vmin", vmin), number("vmax", vmax)
    if not low < high:
        raise ValueError(f"vmin={vmin!r} must be below vmax={vmax!r} (the colour range)")
    whole("max_labels", max_labels, minimum=1, optional=True)
    check_cmap(cmap)
    # room for one label per token, capped at what a screen shows whole (7 in: 700 px in a
    # notebook); a longer text is labelled every k-th token
    height = min(MAX_HEATMAP_HEIGHT_IN, max(5.4, 0.1 * n + 2.6))
    ax = new_axes(ax, (height + 1.2, height))
    image = ax.imshow(sim, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    ax.grid(False)
    if tokens is not None:
        fit = _labels_that_fit(ax, fontsize=7.0)
        limit = fit if max_labels is None else max(1, min(max_labels, fit))
        every = max(1, -(-n // limit))
        shown = range(0, n, every)
        text = _tick_labels(tokens)
        labels = [f"{i} {text[i]}" if every > 1 else text[i] for i in shown]
        family = font_family(labels)  # CJK / emoji glyphs from Noto where DejaVu has none
        ax.set_xticks(list(shown), labels, rotation=90, family=family, fontsize=7)
        ax.set_yticks(list(shown), labels, family=family, fontsize=7)
    else:
        ax.set_xlabel("token position")
        ax.set_ylabel("token position")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.85).set_label("cosine similarity")
    if title:
        ax.set_title(title)
    return ax


@styled
def plot_token_pca(
    embeddings: Any,
    *,
    tokens: Sequence[str] | None = None,
    ax: Axes | None = None,
    annotate: int = 30,
    cmap: str = "viridis",
    title: str | None = "Token vectors, first two principal components",
    colorbar: bool = True,
) -> Axes:
    """Scatter of token vectors on their first two principal components, coloured by position.

    Consecutive tokens are joined by a faint line, so the path of the text through the space is
    visible.

    Args:
        embeddings: ``[n_tokens, dim]`` tensor or array.
        tokens: token strings; up to ``annotate`` of them are written next to their points
            (see ``_annotate_apart``: the first and last token, then the points farthest from
            the crowd, each label only where it overlaps no label already written).
        ax: axes to draw into (a new figure when ``None``).
        annotate: how many points to label with their token (0 for none).
        cmap: colormap for the position (a non-negative amount: ``viridis``).
        title: axes title.
        colorbar: draw a colorbar for the position.

    Returns:
        The axes.
    """
    coords, explained = pca_2d(embeddings)
    n = coords.shape[0]
    if tokens is not None and len(tokens) != n:
        raise ValueError(f"got {len(tokens)} tokens for {n} embeddings; pass one per row")
    ax = new_axes(ax, (6.4, 5.0))
    ax.plot(coords[:, 0], coords[:, 1], color="0.75", lw=0.7, zorder=1)
    points = ax.scatter(
        coords[:, 0], coords[:, 1], c=np.arange(n), cmap=cmap, vmin=0, vmax=max(n - 1, 1),
        s=28, edgecolors="white", linewidths=0.4, zorder=2,
    )
    if tokens is not None and annotate > 0:
        _annotate_apart(ax, coords, _tick_labels(list(tokens), 12), limit=annotate)
    ax.set_xlabel(f"PC1 ({explained[0]:.0%} of variance)")
    ax.set_ylabel(f"PC2 ({explained[1]:.0%} of variance)")
    if colorbar:
        ax.figure.colorbar(points, ax=ax).set_label("token position")
    if title:
        ax.set_title(title)
    return ax


def _annotate_apart(ax: Axes, coords: np.ndarray, labels: Sequence[str], *, limit: int,
                    fontsize: float = 7.5) -> list[int]:
    """Write up to ``limit`` labels next to their points, none overlapping another.

    Candidates in order: the first and the last token, then the others from the farthest from
    the centre of the cloud inwards (the dense middle is where labels pile up, and where a
    reader needs them least). Each tries four places around its point (right-above,
    right-below, left-above, left-below) and takes the first whose box — estimated from the
    label's length in this monospace font — overlaps no label already placed and stays in the
    axes; a label with no free place is left out.

    Returns:
        The indices labelled, in the order they were placed.
    """
    n = len(coords)
    ax.autoscale_view()
    box = ax.get_position()
    width_in, height_in = ax.figure.get_size_inches()
    # the axes' size in points once laid out (the layout takes room for labels and colorbar)
    x0, y0 = 0.0, 0.0
    x1, y1 = box.width * width_in * 72.0 * 0.85, box.height * height_in * 72.0 * 0.9
    frac = ax.transAxes.inverted().transform(ax.transData.transform(coords))  # [n, 2] in 0…1
    points = frac * np.array([x1, y1])  # [n, 2] in points from the axes' corner
    centre = np.median(points, axis=0)
    rest = sorted(range(1, n - 1), key=lambda i: -float(np.hypot(*(points[i] - centre))))
    order = list(dict.fromkeys([0, n - 1, *rest]))
    char_w, line_h, gap = 0.6 * fontsize, 1.2 * fontsize, 3.0
    placed: list[tuple[float, float, float, float]] = []
    chosen: list[int] = []
    family = font_family(labels)
    for i in order:
        if len(chosen) >= limit:
            break
        w = char_w * len(labels[i])
        px, py = points[i]
        for dx, dy in ((gap, gap), (gap, -gap - line_h), (-gap - w, gap),
                       (-gap - w, -gap - line_h)):
            bx0, by0 = px + dx, py + dy
            rect = (bx0, by0, bx0 + w, by0 + line_h)
            outside = rect[0] < x0 or rect[2] > x1 or rect[1] < y0 or rect[3] > y1
            if outside and placed:  # the first labels may touch the frame; no later one
                continue
            if any(rect[0] < q[2] and q[0] < rect[2] and rect[1] < q[3] and q[1] < rect[3]
                   for q in placed):
                continue
            placed.append(rect)
            chosen.append(i)
            ax.annotate(labels[i], coords[i], xytext=(dx, dy), textcoords="offset points",
                        fontsize=fontsize, family=family, color="0.15", va="bottom",
                        ha="left")
            break
    return chosen
