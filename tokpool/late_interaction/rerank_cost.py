"""What a rerank costs the engine, as the number of documents and their length grow.

``tp.simulate_score`` runs one ``/score`` call; :func:`rerank_sweep` runs it for a grid of
(documents, document length) in both of vLLM's late-interaction paths — two stages (the
online server's default: queries cached in the worker, documents scored there, 4 bytes each
to the host) and one stage (``--disable-flash-late-interaction``, and offline ``LLM.score``:
every token row to the API process) — one row per call from ``ScoreResult.summary()``. A call
vLLM refuses (a document past the context, ...) is a row too, marked, with vLLM's words.

Example:
    >>> cfg = tp.SimConfig.for_model("SmolLM2-135M", hardware="H100", task="token_embed",
    ...                              usage="server")
    >>> from tokpool.late_interaction.rerank_cost import rerank_sweep
    >>> t = rerank_sweep([1, 100], [512], cfg, query_len=32)
    >>> t[["stages", "n_docs", "host_bytes"]].values.tolist()
    [['two', 1, 8], ['two', 100, 404], ['one', 1, 1253376], ['one', 100, 118038528]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pandas as pd

from .._args import each, items, whole
from ..sim import SimConfig
from ..sim.vllm_rules.scoring_path import LateInteractionHead
from .simulate_score import simulate_score

__all__ = ["STAGES", "refusal_words", "rerank_sweep", "width_head"]

#: The two late-interaction paths: ``"two"`` (flash late interaction on), ``"one"`` (off).
STAGES: dict[str, bool] = {"two": True, "one": False}

Stages = Literal["two", "one"]


def refusal_words(err: Exception) -> str:
    """vLLM's refusal as a reader reads it: its words without the vLLM function it follows
    (private names such as ``InputProcessor._validate_prompt_len``; an ``EngineRefusal`` keeps
    that in ``err.follows``).

    Example:
        >>> from tokpool.sim.vllm_rules.engine_checks import check_prompts_fit
        >>> try:
        ...     check_prompts_fit([9000], 8192)
        ... except ValueError as err:
        ...     refused = err
        >>> said = refusal_words(refused)
        >>> "_validate" in said, said.split("; ")[1][:16], refused.follows
        (False, 'vLLM rejects it.', 'InputProcessor._validate_prompt_len')
    """
    text, follows = str(err), getattr(err, "follows", "")
    return text.replace(f" ({follows})", "") if follows else text


def width_head(config: SimConfig, width: int | None) -> LateInteractionHead | None:
    """A head delivering rows of ``width`` (a ColBERT-style projection), or ``None`` for the
    model's own (``width`` ``None`` or the model's width)."""
    if width is None or width == config.width:
        return None
    w = whole("output width", width, minimum=1)
    return LateInteractionHead(getattr(config.model, "architecture", "") or "", w,
                               f"a projection to {w} (as a ColBERT head's Dense layer)")


def rerank_sweep(n_docs: Sequence[int], doc_lens: Sequence[int], config: SimConfig, *,
                 query_len: int = 32, output_width: int | None = None,
                 stages: Sequence[Stages] = ("two", "one")) -> pd.DataFrame:
    """One query against ``n`` documents of ``L`` tokens, for every ``n``, ``L`` and path.

    Args:
        n_docs: document counts.
        doc_lens: document lengths in tokens.
        config: the engine (``task="token_embed"``: late interaction).
        query_len: tokens of the query.
        output_width: width of a delivered row (a projection head); default the model's.
        stages: the paths, ``"two"`` and/or ``"one"``.

    Returns:
        One row per call: ``stages``, ``n_docs``, ``doc_len``, ``query_len``, ``refused``
        (bool), ``refusal`` (vLLM's words without the function it follows, else ``""``) and
        ``ScoreResult.summary()``'s bytes
        (``peak_pooling_bytes``, ``peak_query_cache_bytes``, ``peak_maxsim_scratch_bytes``,
        ``host_bytes``, ``api_maxsim_bytes``; 0 where refused).

    Raises:
        ValueError, TypeError: a count or length that is not a whole number >= 1, an unknown
            path.
    """
    counts = each("n_docs", items("n_docs", n_docs), lambda n, v: whole(n, v, minimum=1))
    lens = each("doc_lens", items("doc_lens", doc_lens), lambda n, v: whole(n, v, minimum=1))
    q = whole("query_len", query_len, minimum=1)
    paths = items("stages", stages)
    for p in paths:
        if p not in STAGES:
            raise ValueError(f"stages must hold 'two' and/or 'one', got {p!r}")
    head = width_head(config, output_width)
    rows = []
    for p in paths:
        for length in lens:
            for n in counts:
                row = {"stages": p, "n_docs": n, "doc_len": length, "query_len": q,
                       "refused": False, "refusal": ""}
                try:
                    r = simulate_score([q], [length] * n, config, mode="analytic",
                                       flash_late_interaction=STAGES[p], head=head)
                except ValueError as err:  # vLLM's refusal, in its words (no private names)
                    row.update(refused=True, refusal=refusal_words(err), peak_pooling_bytes=0,
                               peak_query_cache_bytes=0, peak_maxsim_scratch_bytes=0,
                               host_bytes=0, api_maxsim_bytes=0)
                else:
                    s = r.summary()
                    row.update({k: s[k] for k in (
                        "peak_pooling_bytes", "peak_query_cache_bytes",
                        "peak_maxsim_scratch_bytes", "host_bytes", "api_maxsim_bytes")})
                rows.append(row)
    return pd.DataFrame(rows)
