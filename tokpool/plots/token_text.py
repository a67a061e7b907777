"""Token text coloured by a per-token value: self-contained HTML and a matplotlib version.

The HTML needs nothing from the network (no CDN, no requirejs, no script): inline CSS only, every
token passed through ``html.escape``, whitespace made visible (``·`` space, ``→`` tab, ``↵``
newline), so it renders the same in JupyterLab, VS Code, a static HTML export or a widget.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib import colors as mcolors
from matplotlib.axes import Axes

from ._fonts import font_family
from ._style import as_numpy, new_axes, styled

#: How whitespace is drawn so that a token made of spaces is still visible.
WHITESPACE_GLYPHS: dict[str, str] = {" ": "·", "\t": "→", "\n": "↵", "\r": "␍"}


class HTMLText(str):
    """A ``str`` of HTML that Jupyter displays as HTML (``_repr_html_``) when it ends a cell."""

    def _repr_html_(self) -> str:
        return str(self)


def visible_whitespace(text: str) -> str:
    """Replace whitespace with visible glyphs: ``" a\\n" -> "·a↵"``."""
    return "".join(WHITESPACE_GLYPHS.get(ch, ch) for ch in text)


#: Shown for a token that holds only the trailing bytes of a character begun by an earlier
#: token (byte-level BPE splits "東" = e6 9d b1 across tokens): the character is shown on the
#: token where it starts, and this mark on the ones that finish it.
CONTINUATION = "◌"


def _byte_decoder(tokenizer: Any) -> dict[str, int] | None:
    """The unicode → byte table of a byte-level BPE tokenizer (GPT-2 style), else ``None``."""
    table = getattr(tokenizer, "byte_decoder", None)  # slow GPT-2 tokenizers keep it
    if isinstance(table, dict) and table:
        return table
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    if decoder is None or "ByteLevel" not in f"{type(decoder).__name__} {decoder!r}":
        return None
    # GPT-2's reversible map: printable bytes stand for themselves, the rest shift to 256+.
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {chr(b): b for b in keep}, 0
    for b in range(256):
        if b not in keep:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def _utf8_length(lead: int) -> int:
    if lead < 0x80:
        return 1
    for length, (lo, hi) in ((2, (0xC2, 0xDF)), (3, (0xE0, 0xEF)), (4, (0xF0, 0xF4))):
        if lo <= lead <= hi:
            return length
    return 1  # a continuation or invalid byte on its own: decoded as "\ufffd"


def split_characters(pieces: Sequence[bytes]) -> list[str]:
    r"""The text each token's bytes start: a character goes to the token holding its first byte.

    Args:
        pieces: the raw bytes of each token, in order.

    Returns:
        One string per token; a token that holds only the rest of a character begun earlier
        gets ``CONTINUATION``. Bytes that are not valid UTF-8 become ``"\ufffd"``.

    Example:
        >>> split_characters([b"\xc3", b"\x9c", b"ber"])  # "Über" split inside "Ü"
        ['Ü', '◌', 'ber']
    """
    data = b"".join(pieces)
    owner = [i for i, piece in enumerate(pieces) for _ in piece]  # byte position -> token
    out = [""] * len(pieces)
    pos = 0
    while pos < len(data):
        length = _utf8_length(data[pos])
        char = data[pos:pos + length].decode("utf-8", errors="replace")
        if len(char) != 1:  # truncated or malformed: one replacement for the lead byte
            char, length = "\ufffd", 1
        out[owner[pos]] += char
        pos += length
    return [text or (CONTINUATION if piece else "") for text, piece in zip(out, pieces,
                                                                          strict=True)]


def token_strings(tokenizer: Any, token_ids: Sequence[int] | Any) -> list[str]:
    r"""One display string per token, so leading spaces and newlines stay in the text.

    With a byte-level BPE tokenizer (GPT-2, SmolLM2, Qwen, Llama 3) one character can span
    tokens ("Ü" is two bytes, "東京" six, split over several tokens); decoding each token on
    its own would show "\ufffd". Here each character is shown on the token that holds its
    first byte, and the tokens that finish it show ``CONTINUATION``. Other tokenizers decode
    each id on its own.

    Args:
        tokenizer: a Hugging Face tokenizer (anything with ``decode``).
        token_ids: ``[n_tokens]`` ids (list or 1-D tensor).

    Returns:
        One string per token, e.g. ``["The", " cat", "\n"]`` or ``[" Ü", "◌", "n"]``.
    """
    if hasattr(token_ids, "tolist"):
        token_ids = token_ids.tolist()
    ids = [int(t) for t in token_ids]
    table = _byte_decoder(tokenizer)
    if table is not None and hasattr(tokenizer, "convert_ids_to_tokens"):
        raw = tokenizer.convert_ids_to_tokens(ids)
        special = set(getattr(tokenizer, "all_special_tokens", []) or [])
        if all(isinstance(t, str) for t in raw):
            pieces = [t.encode("utf-8") if t in special or any(c not in table for c in t)
                      else bytes(table[c] for c in t) for t in raw]
            return split_characters(pieces)
    return [tokenizer.decode([t]) for t in ids]


@dataclass(frozen=True)
class ColourScale:
    """A fixed value → colour mapping (so colours do not jump while a slider moves).

    Attributes:
        cmap: matplotlib colormap name.
        vmin: value drawn with the colormap's first colour.
        vmax: value drawn with its last colour.
    """

    cmap: str
    vmin: float
    vmax: float

    def rgba(self, values: np.ndarray) -> np.ndarray:
        """``[n, 4]`` RGBA colours for ``values`` (clipped to ``[vmin, vmax]``)."""
        norm = mcolors.Normalize(vmin=self.vmin, vmax=self.vmax, clip=True)
        return mpl.colormaps[self.cmap](norm(values))

    def mappable(self) -> mpl.cm.ScalarMappable:
        """A ScalarMappable for a colorbar."""
        norm = mcolors.Normalize(vmin=self.vmin, vmax=self.vmax)
        return mpl.cm.ScalarMappable(norm=norm, cmap=self.cmap)


def colour_scale(
    values: np.ndarray,
    *,
    vmin: float | None = None,
    vmax: float | None = None,
    cmap: str | None = None,
) -> ColourScale:
    """Choose the project's scale for ``values`` unless given.

    Signed values (any negative, or ``vmin < 0``) get ``RdBu_r`` centred at zero
    (``vmin = -vmax``); non-negative amounts get ``viridis`` from 0.
    """
    finite = values[np.isfinite(values)] if values.size else values
    if vmin is not None and vmax is not None:
        if vmax <= vmin:
            raise ValueError(f"vmax ({vmax}) must be greater than vmin ({vmin})")
        return ColourScale(cmap or ("RdBu_r" if vmin < 0 else "viridis"), float(vmin), float(vmax))
    if (vmin is not None and vmin < 0) or bool(finite.size and finite.min() < 0):
        given = vmin if vmin is not None else vmax
        bound = abs(float(given)) if given is not None else float(np.abs(finite).max())
        bound = bound or 1.0
        return ColourScale(cmap or "RdBu_r", -bound, bound)
    lo = 0.0 if vmin is None else float(vmin)
    hi = (float(finite.max()) if finite.size else 1.0) if vmax is None else float(vmax)
    if hi <= lo:
        hi = lo + 1.0
    return ColourScale(cmap or "viridis", lo, hi)


def _text_colour(rgba: Sequence[float]) -> str:
    r, g, b = rgba[:3]
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "#000" if luminance > 0.45 else "#fff"


def _check_pair(tokens: Sequence[str], values: Any) -> np.ndarray:
    if isinstance(tokens, str):
        raise TypeError("tokens must be a sequence of strings (one per token), not one string")
    vals = as_numpy(values, name="values", ndim=1)
    if len(tokens) != vals.shape[0]:
        raise ValueError(
            f"got {len(tokens)} tokens but {vals.shape[0]} values; pass one value per token"
        )
    return vals


def _legend_html(scale: ColourScale, label: str) -> str:
    stops = ", ".join(
        mcolors.to_hex(c) for c in scale.rgba(np.linspace(scale.vmin, scale.vmax, 11))
    )
    return (
        '<div style="display:flex;align-items:center;gap:6px;margin-top:6px;'
        'font-size:11px;color:#555;">'
        f"<span>{html.escape(label)}</span>"
        f"<span>{scale.vmin:.3g}</span>"
        f'<span style="display:inline-block;width:160px;height:10px;border-radius:2px;'
        f'background:linear-gradient(to right, {stops});"></span>'
        f"<span>{scale.vmax:.3g}</span></div>"
    )


#: A word longer than this many tokens (a run of text without spaces, e.g. Chinese) may break
#: between its tokens, every this many, so it never runs past the edge of the page.
MAX_WORD_TOKENS = 12


def word_spans(tokens: Sequence[str], *, max_tokens: int = MAX_WORD_TOKENS
               ) -> list[tuple[int, int]]:
    r"""``(start, stop)`` token ranges of the words of a tokenized text, where a line may break.

    A word starts at a token that begins with whitespace or follows one that ends with it (BPE
    tokens carry their leading space: ``["Hello", ",", " wor", "ld"]`` is two words); runs
    longer than ``max_tokens`` are cut every ``max_tokens``.

    Example:
        >>> tp.viz.word_spans(["Hello", ",", " wor", "ld", "\n", "Bye"])
        [(0, 2), (2, 4), (4, 5), (5, 6)]
    """
    spans: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(tokens) + 1):
        boundary = i == len(tokens) or (
            tokens[i][:1].isspace() or tokens[i - 1][-1:].isspace() or i - start >= max_tokens)
        if boundary:
            spans.append((start, i))
            start = i
    return spans


def token_html(
    tokens: Sequence[str],
    values: Any,
    *,
    vmin: float | None = None,
    vmax: float | None = None,
    cmap: str | None = None,
    label: str = "value",
    title: str | None = None,
    legend: bool = True,
) -> HTMLText:
    """Tokens as coloured boxes in self-contained HTML (inline CSS, no script, no network).

    Each token is HTML-escaped, its whitespace made visible, and given a tooltip with its index
    and value. A newline token also breaks the line.

    Args:
        tokens: ``n`` token strings (see ``token_strings``).
        values: ``[n]`` one number per token (norm, reward, error, ...).
        vmin: value of the first colour (default: 0, or ``-max|v|`` for signed values).
        vmax: value of the last colour (default: the maximum, or ``max|v|``). Pass both to keep
            colours fixed while something changes.
        cmap: colormap (default ``viridis``, or ``RdBu_r`` centred at 0 for signed values).
        label: what the value is, shown in the legend and tooltips.
        title: optional heading.
        legend: draw the colour scale under the tokens.

    Returns:
        An ``HTMLText`` (a ``str``) that Jupyter renders when it ends a cell.

    Raises:
        ValueError: ``tokens`` and ``values`` differ in length.

    Example:
        >>> html = tp.viz.token_html(["<b>", " hi"], [0.2, 0.9])
        >>> "&lt;b&gt;" in html and "<b>" not in html  # every token escaped
        True
    """
    vals = _check_pair(tokens, values)
    scale = colour_scale(vals, vmin=vmin, vmax=vmax, cmap=cmap)
    rgba = scale.rgba(vals)
    parts = []
    if title:
        parts.append(
            f'<div style="font-weight:600;margin-bottom:4px;font-family:sans-serif;">'
            f"{html.escape(title)}</div>"
        )
    parts.append(
        '<div style="font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,\'DejaVu Sans '
        'Mono\',\'Noto Sans CJK SC\',\'Noto Sans Mono CJK SC\',\'Noto Color Emoji\','
        'monospace;'
        'font-size:13px;line-height:2.0;">'
    )
    chips = []
    for i, (tok, val, colour) in enumerate(zip(tokens, vals, rgba, strict=True)):
        shown = html.escape(visible_whitespace(tok)) or "∅"
        tip = html.escape(f"#{i} {tok!r} {label}={val:.4g}", quote=True)
        chips.append(
            f'<span title="{tip}" style="background:{mcolors.to_hex(colour)};'
            f"color:{_text_colour(colour)};padding:1px 2px;margin:0 1px;border-radius:3px;"
            f'white-space:pre;">{shown}</span>'
        )
    # a line breaks between words only: each word's chips are held together (nowrap), with a
    # break opportunity (<wbr>) between words; a newline token also breaks the line
    for start, stop in word_spans(tokens):
        parts.append('<span class="tokpool-word" style="white-space:nowrap">'
                     + "".join(chips[start:stop]) + "</span>")
        parts.append("<br>" if "\n" in tokens[stop - 1] else "<wbr>")
    parts.append("</div>")
    if legend:
        parts.append(_legend_html(scale, label))
    return HTMLText(
        '<div class="tokpool-tokens" style="max-width:100%;">'
        + "".join(parts)
        + "</div>"
    )


@styled
def plot_token_values(
    tokens: Sequence[str],
    values: Any,
    *,
    ax: Axes | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
    cmap: str | None = None,
    label: str = "value",
    title: str | None = None,
    chars_per_line: int = 70,
    fontsize: float = 10.0,
) -> Axes:
    """Matplotlib version of ``token_html``: tokens as coloured boxes, wrapped into lines.

    Boxes are laid out in points with a monospace font, so the layout does not depend on the
    renderer; a colorbar gives the scale.

    Args:
        tokens: ``n`` token strings.
        values: ``[n]`` one number per token.
        ax: axes to draw into (a new figure sized to the text when ``None``).
        vmin: value of the first colour (see ``token_html``).
        vmax: value of the last colour.
        cmap: colormap (default ``viridis`` or ``RdBu_r`` for signed values).
        label: the colorbar label.
        title: axes title.
        chars_per_line: wrap width in characters.
        fontsize: token font size in points.

    Returns:
        The axes.
    """
    vals = _check_pair(tokens, values)
    scale = colour_scale(vals, vmin=vmin, vmax=vmax, cmap=cmap)
    rgba = scale.rgba(vals)
    char_w = 0.6 * fontsize  # monospace advance width, points
    line_h = 2.0 * fontsize
    # Lay out in character cells: (line, column) per token.
    cells, line, col = [], 0, 0
    for tok in tokens:
        width = max(1, len(visible_whitespace(tok)))
        if col and col + width > chars_per_line:
            line, col = line + 1, 0
        cells.append((line, col))
        col += width + 1
        if "\n" in tok:
            line, col = line + 1, 0
    n_lines = (cells[-1][0] + 1) if cells else 1
    family = font_family([visible_whitespace(t) for t in tokens])  # CJK / emoji fallback
    if ax is None:
        width_in = max(4.0, (chars_per_line * char_w) / 72 + 1.6)
        height_in = max(1.0, n_lines * line_h / 72 + 0.45)
        ax = new_axes(None, (width_in, height_in))
    ax.set_axis_off()
    for tok, (ln, cl), colour in zip(tokens, cells, rgba, strict=True):
        ax.annotate(
            visible_whitespace(tok) or "∅",
            xy=(0, 1),
            xycoords="axes fraction",
            xytext=(cl * char_w, -(ln + 0.75) * line_h),
            textcoords="offset points",
            family=family,
            fontsize=fontsize,
            color=_text_colour(colour),
            va="baseline",
            ha="left",
            bbox={"boxstyle": "round,pad=0.15", "facecolor": colour, "edgecolor": "none"},
            annotation_clip=False,
        )
    cbar = ax.figure.colorbar(scale.mappable(), ax=ax, fraction=0.025, pad=0.01)
    cbar.set_label(label)
    if title:
        ax.set_title(title, loc="left")
    return ax
