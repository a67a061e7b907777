"""What a rerank costs the engine: bytes of one query against N documents, both paths."""

from __future__ import annotations

import textwrap

import pandas as pd
from matplotlib import ticker
from matplotlib.axes import Axes

from .._args import choice
from ._style import OKABE_ITO, at_least_ticks, format_bytes, format_tokens, new_axes, styled

__all__ = ["plot_rerank_cost"]

#: What each line is: column, label, line style, marker (filled / open: told apart in the
#: legend too, where a short dash looks like a solid line).
_SERIES = (("peak_pooling_bytes", "peak device bytes of pooling (solid, ●)", "-", "o"),
           ("host_bytes", "bytes to the host (dashed, ○)", "--", "o"))
_PATHS = {"two": ("two stages (online default)", OKABE_ITO[0]),
          "one": ("one stage (flag off, offline LLM.score)", OKABE_ITO[3])}


@styled
def plot_rerank_cost(table: pd.DataFrame, *, x: str = "n_docs", ax: Axes | None = None,
                     title: str | None = None) -> Axes:
    """Peak pooling bytes and host bytes against documents (or their length), per path.

    Args:
        table: ``tokpool.late_interaction.rerank_cost.rerank_sweep(...)`` with one value of
            the other axis (one document length when ``x="n_docs"``).
        x: ``"n_docs"`` or ``"doc_len"``.
        ax: axes to draw into (a new figure when ``None``); title: axes title.

    Returns:
        The axes (log–log). Calls vLLM refuses are marked × on the lower edge, their reason
        in the legend.

    Example:
        >>> from tokpool.late_interaction.rerank_cost import rerank_sweep
        >>> cfg = tp.SimConfig.for_model("SmolLM2-135M", task="token_embed")
        >>> ax = tp.viz.plot_rerank_cost(rerank_sweep([1, 10], [9000], cfg))  # past 8,192
        >>> ax.get_legend_handles_labels()[1][-1][:21]
        'vLLM refuses (× here)'
    """
    choice("x", x, ("n_docs", "doc_len"))
    if not isinstance(table, pd.DataFrame) or table.empty or "stages" not in table:
        raise ValueError("table must be a non-empty rerank_sweep(...) DataFrame")
    other = "doc_len" if x == "n_docs" else "n_docs"
    if table[other].nunique() != 1:
        raise ValueError(f"the table holds several {other} values "
                         f"{sorted(table[other].unique())[:6]}; select one "
                         f"(table[table.{other} == ...]) to draw against {x}")
    ax = new_axes(ax, (10.5, 4.2))
    refused = table[table["refused"]]
    ok = table[~table["refused"]]
    for path, part in ok.groupby("stages", sort=False):
        label, colour = _PATHS[path]
        part = part.sort_values(x)
        for column, what, style, marker in _SERIES:
            values = part[column].clip(lower=1)
            ax.plot(part[x], values, linestyle=style, marker=marker, markersize=4,
                    color=colour, label=f"{label}: {what}",
                    markerfacecolor=colour if style == "-" else "white")
    ax.set_xscale("log")
    ax.set_yscale("log")
    if len(refused):
        bottom = ok[[c for c, *_ in _SERIES]].clip(lower=1).min().min() if len(ok) else 1
        reason = refused["refusal"].iloc[0].split(";")[0]
        ax.scatter(refused[x], [bottom] * len(refused), marker="x", s=50, color="#b00020",
                   zorder=5, label="\n".join(textwrap.wrap(
                       f"vLLM refuses (× here): {reason}", 70, max_lines=3,
                       placeholder=" …")))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: format_bytes(v)))
    at_least_ticks(ax.yaxis, ticker.LogLocator(base=4, numticks=30), log=True, unit=1024)
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: format_tokens(v)))
    ax.set_xlabel("documents" if x == "n_docs" else "document length (tokens)")
    ax.set_ylabel("bytes")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7.5,  # beside: no overlap
              handlelength=4.5)  # long enough to show the dashes
    fixed = int(table[other].iloc[0])
    ax.set_title(title if title is not None else
                 f"1 query × N documents of {fixed:,} tokens" if x == "n_docs" else
                 f"1 query × {fixed:,} documents")
    return ax
