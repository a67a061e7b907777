"""Rerank explorer: what one query against N documents costs the engine, in either path.

``render_rerank(...)`` is the pure part (a ``View``: the chosen path's bytes over steps, and a
table of both paths); ``rerank_explorer(...)`` wires sliders to it like the other explorers
(typed boxes, values refused in words, a static snapshot for exports).
"""

from __future__ import annotations

import functools
import html
from typing import Any

import ipywidgets as W
import pandas as pd

from ..late_interaction.rerank_cost import STAGES, refusal_words, width_head
from ..late_interaction.simulate_score import simulate_score
from ..plots import figure_png, format_bytes
from ..plots.score_memory import plot_score_memory
from ..sim import SimConfig
from .base import Explorer, _slider_layout
from .view import View

__all__ = ["RerankExplorer", "render_rerank", "rerank_explorer"]

#: The explorer's bounds (documents, tokens), checked before any work.
MAX_DOCS = 1_000
MAX_DOC_LEN = 32_768
MAX_QUERY_LEN = 2_048
MAX_WIDTH = 8_192

_ROWS = (("peak_pooling_bytes", "peak device bytes of pooling"),
         ("peak_query_cache_bytes", "query cache (cloned rows)"),
         ("peak_maxsim_scratch_bytes", "worker's MaxSim scratch"),
         ("host_bytes", "bytes to the host"),
         ("api_maxsim_bytes", "API process's MaxSim score matrix"))


def _default_config() -> SimConfig:
    return SimConfig.for_model("SmolLM2-135M", hardware="H100", task="token_embed",
                               usage="server")


def _in_controls(message: str, config: SimConfig) -> str:
    """A refusal's advice, limited to what the explorer's controls can do (it has no
    ``as_if`` and no ``max_model_len`` control)."""
    head = message.split(" Pass max_model_len >=", 1)[0]
    if head == message:
        return message.replace(", or simulate it on purpose with as_if=True", "")
    return (f"{head} Shorten the document or the query to at most "
            f"{config.max_model_len:,} tokens (the model's context).")


def max_prompt_len(config: SimConfig | None) -> int:
    """The longest document or query the explorer offers: the model's context, within
    ``MAX_DOC_LEN``."""
    return min(MAX_DOC_LEN, (_default_config() if config is None else config).max_model_len)


def _check(documents: Any, doc_len: Any, query_len: Any, output_width: Any, stages: Any,
           config: Any) -> None:
    """The explorer's bounds, before any work (the constructor and every render ask this)."""
    for value, name, top in ((documents, "documents", MAX_DOCS),
                             (doc_len, "document length", MAX_DOC_LEN),
                             (query_len, "query length", MAX_QUERY_LEN)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise ValueError(f"{name} must be a whole number from 1 to {top:,}, got {value!r}")
    if output_width is not None and (isinstance(output_width, bool) or not isinstance(
            output_width, int) or not 1 <= output_width <= MAX_WIDTH):
        raise ValueError(f"output width must be a whole number from 1 to {MAX_WIDTH:,} (or "
                         f"None: the model's), got {output_width!r}")
    if stages not in STAGES:
        raise ValueError(f"stages must be 'two' or 'one', got {stages!r}")
    if config is not None and not isinstance(config, SimConfig):
        raise TypeError(f"config must be a tp.SimConfig (or None: SmolLM2-135M on an H100), "
                        f"got {type(config).__name__}")


@functools.lru_cache(maxsize=32)
def _both_paths(query_len: int, doc_len: int, documents: int, config: SimConfig,
                output_width: int | None) -> dict[str, Any]:
    """Both paths' ``simulate_score`` results for one call, kept for the last 32 calls: the
    path control and a value seen before only redraw (the simulation is most of a redraw's
    work; ``SimConfig`` is frozen, so it keys the cache). Callers must not mutate the
    results."""
    head = width_head(config, output_width)
    return {p: simulate_score([query_len], [doc_len] * documents, config, mode="analytic",
                              flash_late_interaction=flag, head=head)
            for p, flag in STAGES.items()}


def render_rerank(*, documents: int = 100, doc_len: int = 512, query_len: int = 32,
                  output_width: int | None = None, stages: str = "two",
                  config: SimConfig | None = None) -> View:
    """One query against ``documents`` documents of ``doc_len`` tokens, through vLLM's scoring.

    Args:
        documents, doc_len, query_len: the call (1 query).
        output_width: delivered row width (a ColBERT-style projection); ``None``: the model's.
        stages: ``"two"`` (the online default: query cache, MaxSim in the worker) or ``"one"``
            (``--disable-flash-late-interaction`` / offline ``LLM.score``): the path drawn.
        config: the engine (default SmolLM2-135M on an H100, served for ``token_embed`` with
            the server's defaults).

    Returns:
        ``View``: ``png`` = the drawn path's bytes per step (``tp.viz.plot_score_memory``);
        ``html`` = both paths side by side; ``table`` = that comparison.

    Raises:
        ValueError: a value out of the explorer's bounds, or a call vLLM refuses (its words).

    Example:
        >>> v = tp.viz.render_rerank(documents=10, doc_len=256)
        >>> v.table.loc["bytes to the host"].tolist()   # 4 B a request; 2,592 rows x 576 x 4 B
        [44, 5971968]
    """
    _check(documents, doc_len, query_len, output_width, stages, config)
    config = _default_config() if config is None else config
    head = width_head(config, output_width)
    try:
        results = _both_paths(query_len, doc_len, documents, config, output_width)
    except ValueError as err:  # vLLM's refusal, in the explorer's controls' words
        said = _in_controls(refusal_words(err), config)
        if hasattr(err, "follows"):  # an EngineRefusal keeps the vLLM function it follows
            raise type(err)(said, follows=err.follows) from err
        raise ValueError(said) from err
    table = pd.DataFrame({f"{p} stage{'s' if p == 'two' else ''}":
                          [r.summary()[k] for k, _ in _ROWS] for p, r in results.items()},
                         index=[label for _, label in _ROWS])
    drawn = results[stages]

    def draw():
        ax = plot_score_memory(drawn, title=f"{stages} stage{'s' if stages == 'two' else ''}: "
                               f"1 query × {documents:,} documents of {doc_len:,} tokens")
        return ax.figure

    # constrained layout already fits the legend; the tight box would draw the figure twice
    png = figure_png(draw(), tight=False)
    head_cells = "".join(f"<th style='padding:2px 10px'>{html.escape(c)}</th>"
                         for c in table.columns)
    body = "".join(
        f"<tr><th style='text-align:left;padding:2px 10px'>{html.escape(i)}</th>"
        + "".join(f"<td style='padding:2px 10px;text-align:right'>{format_bytes(v)}</td>"
                  for v in row) + "</tr>"
        for i, row in zip(table.index, table.to_numpy(), strict=True))
    caption = (f"{config.model.name if config.model else 'model'} · query {query_len:,} tokens "
               f"· rows {head.dim if head else config.width} wide · path read from the config: "
               f"{drawn.path.io_processor}")
    page = ("<table style='font-family:sans-serif;font-size:12px;border-collapse:collapse'>"
            "<caption style='caption-side:bottom;text-align:left;color:#555;padding-top:4px'>"
            f"{html.escape(caption)}</caption><tr><th></th>{head_cells}</tr>{body}</table>")
    settings = {"documents": documents, "doc_len": doc_len, "query_len": query_len,
                "output_width": output_width, "stages": stages}
    return View(html=page, png=png, table=table, settings=settings, redraw=draw,
                data={"results": results})


class RerankExplorer(Explorer):
    """Sliders for documents, document length, query length and output width; one/two stages.

    Attributes:
        documents, doc_len, query_len, output_width: ``IntSlider`` (output width 0 = the
            model's own).
        stages: ``ToggleButtons`` (``"two"`` / ``"one"``).
    """

    def __init__(self, *, documents: int = 100, doc_len: int = 512, query_len: int = 32,
                 output_width: int = 0, stages: str = "two",
                 config: SimConfig | None = None) -> None:
        _check(documents, doc_len, query_len, output_width or None, stages, config)
        if isinstance(output_width, bool) or not isinstance(output_width, int):
            raise ValueError(f"output width must be a whole number from 0 (the model's) to "
                             f"{MAX_WIDTH:,}, got {output_width!r}")
        self._config = config
        common: dict[str, Any] = {"continuous_update": False, "layout": _slider_layout(),
                                  "style": {"description_width": "initial"}}
        self.documents = W.IntSlider(value=documents, min=1, max=MAX_DOCS,
                                     description="documents", **common)
        self.doc_len = W.IntSlider(value=doc_len, min=1, max=max(doc_len, max_prompt_len(config)),
                                   description="document length", **common)
        self.query_len = W.IntSlider(value=query_len, min=1, max=MAX_QUERY_LEN,
                                     description="query length", **common)
        self.output_width = W.IntSlider(value=output_width, min=0, max=MAX_WIDTH,
                                        description="output width (0: model's)", **common)
        self.stages = W.ToggleButtons(options=[("two stages", "two"), ("one stage", "one")],
                                      value=stages, description="path")
        super().__init__([self.documents, self.doc_len, self.query_len, self.output_width,
                          self.stages])
        self._watch(self.documents, self.doc_len, self.query_len, self.output_width,
                    self.stages)
        self.update()

    def render(self) -> View:
        return render_rerank(documents=self.documents.value, doc_len=self.doc_len.value,
                             query_len=self.query_len.value,
                             output_width=self.output_width.value or None,
                             stages=self.stages.value, config=self._config)


def rerank_explorer(*, documents: int = 100, doc_len: int = 512, query_len: int = 32,
                    output_width: int = 0, stages: str = "two",
                    config: SimConfig | None = None) -> RerankExplorer:
    """An explorer of one rerank's bytes: documents, their length, the query's, the row width,
    and the path (two stages / one).

    Example:
        >>> ex = tp.rerank_explorer(documents=10, doc_len=256)
        >>> ex.stages.value = "one"
        >>> ex.error is None and ex.view.settings["stages"]
        'one'
        >>> ex.typed["document length"].value = "99999"
        >>> ex.error.startswith("document length must be from 1 to 8192")
        True
    """
    return RerankExplorer(documents=documents, doc_len=doc_len, query_len=query_len,
                          output_width=output_width, stages=stages, config=config)


