"""Token explorer: per-token values of a real model's hidden states, layer by layer.

``render_tokens`` is pure (hidden states in, ``View`` out); ``token_explorer`` wires a layer
slider and a metric menu to it and caches one forward pass per layer.
"""

from __future__ import annotations

import html as _html
import io
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import ipywidgets as W
import matplotlib as mpl
import numpy as np
import torch

from .. import _args as checks
from ..guard import ensure_fits
from ..plots import cosine_similarity_matrix, plot_similarity, token_html, token_strings
from ..plots._fonts import box_note
from ..plots._style import RC, as_numpy, styled
from ..plots.embeddings import _tick_labels
from .base import _WIDE, Explorer, _slider_layout
from .view import View

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..models import PoolingModel

TokenMetric = Literal["relative norm", "cosine to previous token", "cosine to text mean"]
#: Each metric with its fixed colour range (so colours mean the same on every layer).
TOKEN_METRICS: dict[str, tuple[float, float]] = {
    "relative norm": (0.0, 3.0),
    "cosine to previous token": (-1.0, 1.0),
    "cosine to text mean": (-1.0, 1.0),
}


def token_metric(hidden: Any, metric: TokenMetric) -> np.ndarray:
    """One number per token from ``[n_tokens, hidden]`` hidden states.

    Args:
        hidden: ``[n_tokens, hidden]`` tensor or array (unnormalised hidden states).
        metric: ``"relative norm"`` (‖h_i‖ divided by the median norm: outliers such as the
            first token of a decoder stand out), ``"cosine to previous token"`` (0 for the first
            token), or ``"cosine to text mean"``.

    Returns:
        ``[n_tokens]`` float64 values.

    Raises:
        ValueError: unknown metric.
    """
    h = as_numpy(hidden, name="hidden", ndim=2)  # [n, H]
    if metric == "relative norm":
        norms = np.linalg.norm(h, axis=1)
        median = float(np.median(norms)) or 1.0
        return norms / median
    if metric == "cosine to previous token":
        sim = cosine_similarity_matrix(h)
        return np.concatenate([[0.0], np.diagonal(sim, offset=1)]) if len(h) else np.zeros(0)
    if metric == "cosine to text mean":
        both = np.vstack([h, h.mean(axis=0, keepdims=True)])
        return cosine_similarity_matrix(both)[-1, :-1]
    raise ValueError(f"unknown metric {metric!r}; choose one of {list(TOKEN_METRICS)}")


def heatmap_caption(n_tokens: int, max_heatmap_tokens: int = 96) -> str:
    """What the heatmap leaves out, as a caption ("" when it shows every token)."""
    if n_tokens <= max_heatmap_tokens:
        return ""
    return (f"The heatmap shows the first {max_heatmap_tokens} of {n_tokens:,} tokens (the "
            "coloured text above has them all).")


def _heatmap_figure(tokens: Sequence[str], hidden: Any, *, layer_label: str,
                    max_heatmap_tokens: int) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    suffix = f" · {layer_label}" if layer_label else ""
    n = min(len(tokens), max_heatmap_tokens)
    cut = f" · first {n} of {len(tokens):,} tokens" if n < len(tokens) else ""
    # the final size first: tick labels are thinned to what this size holds. Fixed margins
    # (room for 10-character labels), not constrained layout: half the drawing time, and the
    # explorer redraws this on every new layer. No pyplot: nothing to close, nothing shown.
    fig = Figure(figsize=(6.2, 5.2))
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.16, 0.17, 0.72, 0.75))
    plot_similarity(hidden[:n], tokens=list(tokens[:n]), ax=ax,
                    title=f"Token × token cosine similarity{suffix}{cut}")
    note = box_note(_tick_labels(tokens[:n]))
    if note:  # why a label is a box, under the figure
        fig.text(0.01, 0.005, textwrap.fill(note, 110), fontsize=6.5, color="0.35",
                 va="bottom", ha="left")
    return fig


class TokenHeatmap:
    """The similarity heatmap of one text, drawn once; a new layer repaints only its image.

    Everything but the image and the title — labels, ticks, colorbar, note — depends only on
    the tokens, and drawing those labels is most of a heatmap's time. The first ``png`` draws
    the whole figure without the image and title and keeps those pixels (matplotlib's blitting:
    ``copy_from_bbox``); each ``png`` then restores them, draws the layer's image, the spines
    over it and the title, and encodes the canvas. The pixels equal a full draw's up to the
    stacking of the spines, which are drawn last either way.

    Args:
        tokens: ``n`` token strings (the labels).
        max_heatmap_tokens: the heatmap shows at most this many leading tokens.

    Example:
        >>> import torch
        >>> heat = TokenHeatmap(["a", "b", "c"])
        >>> heat.png(torch.eye(3), layer_label="layer 1")[1:4] == b"PNG"
        True
    """

    def __init__(self, tokens: Sequence[str], *, max_heatmap_tokens: int = 96) -> None:
        self.tokens = list(tokens)
        self.max_heatmap_tokens = max_heatmap_tokens
        self._fig: Figure | None = None
        self._background: Any = None

    def _prepare(self, hidden: Any) -> Figure:
        from .view import PNG_DPI  # view imports plots; here on use like the rest of widgets

        fig = _heatmap_figure(self.tokens, hidden, layer_label="",
                              max_heatmap_tokens=self.max_heatmap_tokens)
        fig.set_dpi(PNG_DPI)  # draw at the PNG's resolution: the canvas is the PNG
        ax = fig.axes[0]
        image = ax.images[0]
        image.set_visible(False)
        ax.title.set_text("")  # placed by the draw (above the labels), written per layer
        fig.canvas.draw()
        self._background = fig.canvas.copy_from_bbox(fig.bbox)
        image.set_visible(True)
        self._fig = fig
        return fig

    def png(self, hidden: Any, *, layer_label: str = "") -> bytes:
        """PNG (at ``PNG_DPI``) of the similarity of ``[n, hidden]`` states, titled with
        ``layer_label``."""
        from PIL import Image  # on use: only a heatmap's repaint encodes the canvas itself

        n = min(len(self.tokens), self.max_heatmap_tokens)
        h = as_numpy(hidden, name="hidden", ndim=2)
        if h.shape[0] != len(self.tokens):
            raise ValueError(f"got {h.shape[0]} hidden rows for {len(self.tokens)} tokens; "
                             "pass one row per token")
        with mpl.rc_context(RC):
            fig = self._prepare(h) if self._fig is None else self._fig
            ax = fig.axes[0]
            canvas = fig.canvas
            canvas.restore_region(self._background)
            ax.images[0].set_data(cosine_similarity_matrix(h[:n]))
            cut = f" · first {n} of {len(self.tokens):,} tokens" if n < len(self.tokens) else ""
            suffix = f" · {layer_label}" if layer_label else ""
            ax.title.set_text(f"Token × token cosine similarity{suffix}{cut}")
            ax.draw_artist(ax.images[0])
            for spine in ax.spines.values():
                ax.draw_artist(spine)
            ax.draw_artist(ax.title)
            width, height = canvas.get_width_height()
            buf = io.BytesIO()
            Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0,
                             1).save(buf, format="png", dpi=(fig.dpi, fig.dpi))
        return buf.getvalue()


def render_token_heatmap(tokens: Sequence[str], hidden: Any, *, layer_label: str = "",
                         max_heatmap_tokens: int = 96) -> bytes:
    """PNG of the token × token cosine similarity of the first ``max_heatmap_tokens`` tokens.

    When the text is longer, the title says so ("first 96 of 412 tokens"); labels with
    characters no font has are explained under the figure (``plots._fonts.box_note``). To draw
    many layers of one text, keep a ``TokenHeatmap``: it draws the labels once.

    Args:
        tokens: ``n`` token strings (tick labels; thinned to what fits, see ``plot_similarity``).
        hidden: ``[n, hidden]`` hidden states of those tokens.
        layer_label: shown in the title, e.g. ``"layer 12 of 30"``.
        max_heatmap_tokens: the heatmap shows at most this many leading tokens.

    Returns:
        PNG bytes at ``PNG_DPI``.
    """
    return TokenHeatmap(tokens, max_heatmap_tokens=max_heatmap_tokens).png(
        hidden, layer_label=layer_label)


def render_tokens(
    tokens: Sequence[str],
    hidden: Any,
    *,
    metric: TokenMetric = "relative norm",
    layer_label: str = "",
    max_heatmap_tokens: int = 96,
    heatmap: bytes | None = None,
    settings: dict[str, Any] | None = None,
) -> View:
    """Coloured tokens for one metric plus the token × token similarity heatmap.

    Args:
        tokens: ``n`` token strings.
        hidden: ``[n, hidden]`` hidden states of those tokens.
        metric: see ``token_metric``; its colour range is fixed (``TOKEN_METRICS``).
        layer_label: shown in the titles, e.g. ``"layer 12 of 30"``.
        max_heatmap_tokens: the heatmap shows at most this many leading tokens (a caption
            says so when the text has more).
        heatmap: the PNG ``render_token_heatmap`` made for these hidden states, if the caller
            kept it (the metric does not change the heatmap; the explorer reuses it).
        settings: what produced the hidden states (model, layer, ...), kept with the view
            for ``View.save``.

    Returns:
        ``View`` with ``html`` (coloured tokens, and the heatmap's caption when it is cut),
        ``png`` (heatmap) and ``data['values']``.
    """
    values = token_metric(hidden, metric)
    vmin, vmax = TOKEN_METRICS[metric]
    suffix = f" · {layer_label}" if layer_label else ""
    html = token_html(tokens, values, vmin=vmin, vmax=vmax, label=metric,
                      title=f"{metric}{suffix}")
    caption = heatmap_caption(len(tokens), max_heatmap_tokens)
    if caption:
        html += ('<div class="tokpool-caption" style="font-family:sans-serif;color:#555;'
                 f'font-size:12px;margin-top:4px">{_html.escape(caption)}</div>')
    if heatmap is None:
        heatmap = render_token_heatmap(tokens, hidden, layer_label=layer_label,
                                       max_heatmap_tokens=max_heatmap_tokens)

    def draw() -> Figure:
        return _heatmap_figure(tokens, hidden, layer_label=layer_label,
                               max_heatmap_tokens=max_heatmap_tokens)

    shown = {"metric": metric, "layer": layer_label, "tokens": len(tokens),
             "heatmap_tokens": min(len(tokens), max_heatmap_tokens), **(settings or {})}
    return View(html=html, png=heatmap, settings=shown, redraw=styled(draw),
                data={"values": values})


def hidden_states(model: PoolingModel, text: str, *, layer: int) -> torch.Tensor:
    """``[n_tokens, hidden]`` float32 hidden states of ``text`` at ``layer`` (no activation).

    Goes through ``model.encode(task="token_embed")``, the same pooling path users study.
    """
    (out,) = model.encode([text], task="token_embed", layer=layer, use_activation=False)
    return out.detach().float()


def all_hidden_states(model: PoolingModel, token_ids: torch.Tensor) -> torch.Tensor:
    """Every layer's hidden states of one prompt from a single forward pass.

    Args:
        model: the ``PoolingModel``.
        token_ids: ``[n_tokens]`` ids (``model.token_ids([text])[0]``).

    Returns:
        ``[num_layers + 1, n_tokens, hidden]`` float32: index 0 is the embeddings, ``k`` the
        output of layer ``k``, the last the final hidden states after the final norm (what
        ``hidden_states(model, text, layer=k)`` returns, one forward pass for all of them).
    """
    base = model.base_model
    ids = token_ids.to(model.device).unsqueeze(0)  # [1, n]
    with torch.inference_mode():
        out = base(input_ids=ids, attention_mask=torch.ones_like(ids),
                   position_ids=torch.arange(ids.shape[1], device=ids.device).unsqueeze(0),
                   output_hidden_states=True, use_cache=False)
    layers = [h[0] for h in out.hidden_states[: model.num_layers]]  # [n, hidden] each
    layers.append(out.last_hidden_state[0])  # after the final norm
    return torch.stack(layers).float()  # [num_layers + 1, n, hidden]


#: The token explorer refuses texts longer than this (characters, checked before tokenizing).
MAX_TEXT_CHARS = 20_000
#: ... and longer than this (tokens): one forward pass keeps every layer of every token.
MAX_TEXT_TOKENS = 1_024


def _check_model(model: Any) -> None:
    """A ``PoolingModel`` (``tp.load_model(...)``), not its name or path."""
    from ..models.source import require_pooling_model  # tokpool.models: transformers

    require_pooling_model(model)


class TokenExplorer(Explorer):
    """Per-token values and token × token similarity of ``model``'s hidden states of a text.

    One forward pass per text keeps every layer's hidden states (``all_hidden_states``), and
    each layer's heatmap is drawn once: moving the layer slider back, or changing the metric,
    only recolours the tokens.

    Attributes:
        text_input: ``Textarea`` with the text (edit it and leave the box to re-encode).
        layer: ``IntSlider`` over ``0..model.num_layers`` (0 = embeddings, the last = final
            hidden states after the final norm, what an engine pools).
        metric: ``Dropdown`` of ``TOKEN_METRICS``.
        tokens: the token strings of the current text.
    """
    def __init__(self, model: PoolingModel, text: str, *, layer: int = -1,
                 metric: TokenMetric = "relative norm") -> None:
        if metric not in TOKEN_METRICS:
            raise ValueError(f"unknown metric {metric!r}; choose one of {list(TOKEN_METRICS)}")
        if not isinstance(text, str) or not text.strip():
            raise ValueError("token_explorer needs a non-empty text string")
        _check_model(model)
        n = model.num_layers
        layer = checks.whole("layer", layer, minimum=-(n + 1), maximum=n,
                             why=f" (0 = embeddings, {n} = the last of the model's {n} layers; "
                                 "negative counts from the end)")
        self.model = model
        self.text_input = W.Textarea(value=text, continuous_update=False, description="text",
                                     placeholder="your own text",
                                     tooltip="the text to encode (edit it and leave the box "
                                             "to encode it)",
                                     layout=W.Layout(width="100%", height="4.5em"))
        self.layer = W.IntSlider(value=layer % (n + 1), min=0, max=n, continuous_update=False,
                                 description="layer", style=_WIDE, layout=_slider_layout(),
                                 tooltip=f"0 = the embeddings, {n} = the final hidden states "
                                         "(after the final norm, what an engine pools)")
        self.metric = W.Dropdown(options=list(TOKEN_METRICS), value=metric,
                                 description="metric",
                                 tooltip="the number each token is coloured by")
        self._states: dict[str, Any] = {}  # text -> [num_layers + 1, n, hidden], last few texts
        self._heatmaps: dict[tuple[str, int], bytes] = {}
        self._canvases: dict[str, TokenHeatmap] = {}  # text -> its heatmap, labels drawn
        self._tokens: dict[str, list[str]] = {}
        super().__init__([self.text_input, self.layer, self.metric])
        self._watch(self.text_input, self.layer, self.metric)
        self.update()

    @property
    def text(self) -> str:
        """The text being explored (``text_input.value``)."""
        return self.text_input.value

    @property
    def tokens(self) -> list[str]:
        """The token strings of ``text``."""
        self._encode(self.text)
        return self._tokens[self.text]

    def _encode(self, text: str) -> Any:
        """``[num_layers + 1, n, hidden]`` of ``text``, after checking it is small enough."""
        if text in self._states:
            return self._states[text]
        if len(text) > MAX_TEXT_CHARS:
            raise ValueError(f"the text has {len(text):,} characters; the explorer takes at "
                             f"most {MAX_TEXT_CHARS:,}. Shorten it, or call model.encode(...) "
                             "in a cell for long texts")
        try:
            (ids,) = self.model.token_ids([text])
        except ValueError as err:  # longer than the model takes, ...
            raise ValueError(f"text: {err}") from err
        n = int(ids.numel())
        if n > MAX_TEXT_TOKENS:
            raise ValueError(f"the text has {n:,} tokens; the explorer takes at most "
                             f"{MAX_TEXT_TOKENS:,} (its heatmap shows the first 96). Shorten "
                             "it, or call model.encode(...) in a cell for long texts")

        layers = self.model.num_layers + 1
        ensure_fits(layers * n * self.model.hidden_size * 4 * 2,  # kept + transformers' copy
                    what=f"every layer of {n:,} tokens", cheaper="a shorter text")
        states = all_hidden_states(self.model, ids)  # [layers, n, hidden]
        if len(self._states) >= 4:  # keep the last few texts only
            old = next(iter(self._states))
            self._states.pop(old)
            self._heatmaps = {k: v for k, v in self._heatmaps.items() if k[0] != old}
            self._canvases.pop(old, None)
        self._states[text] = states
        self._tokens[text] = token_strings(self.model.tokenizer, ids)
        return states

    def render(self) -> View:
        text, layer = self.text, self.layer.value
        if not text.strip():
            raise ValueError("write some text to encode")
        hidden = self._encode(text)[layer]  # [n, hidden]
        n = self.model.num_layers
        label = f"layer {layer} of {n}" + (" (final, after norm)" if layer == n else "")
        tokens = self._tokens[text]
        if (text, layer) not in self._heatmaps:  # the labels are drawn once per text
            if text not in self._canvases:
                self._canvases[text] = TokenHeatmap(tokens)
            self._heatmaps[text, layer] = self._canvases[text].png(hidden, layer_label=label)
        return render_tokens(tokens, hidden, metric=self.metric.value, layer_label=label,
                             heatmap=self._heatmaps[text, layer],
                             settings={"model": getattr(self.model, "name", None)
                                       or type(self.model).__name__, "text": text})

    def settings(self) -> list[tuple[str, str]]:
        text = self.text if len(self.text) <= 60 else self.text[:57] + "…"
        return [("model", type(self.model).__name__), ("text", text),
                ("layer", str(self.layer.value)), ("metric", self.metric.value)]


def token_explorer(model: PoolingModel, text: str, *, layer: int = -1,
                   metric: TokenMetric = "relative norm") -> TokenExplorer:
    """Explore a model's per-token hidden states of a text: your text, layer slider, metric.

    Args:
        model: a ``tp.PoolingModel`` (``tp.load_model(...)``: a built-in name or a local
            directory with a transformers checkpoint).
        text: the initial text; edit it in the explorer's text box.
        layer: initial layer (``-1`` = final hidden states).
        metric: initial metric (see ``TOKEN_METRICS``).

    Returns:
        The explorer widget; set ``ex.text_input.value`` / ``ex.layer.value`` /
        ``ex.metric.value`` to drive it.

    Raises:
        ValueError: an unknown metric or an empty text.
    """
    return TokenExplorer(model, text, layer=layer, metric=metric)
