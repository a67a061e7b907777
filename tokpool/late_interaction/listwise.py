"""Listwise prompts for ``JinaForRanking`` (jina-reranker-v3), as vLLM 0.33.0's serving layer
builds them (entrypoints/pooling/scoring/io_processor.py,
``JinaRankingIOProcessorMixin.format_docs_prompts_func``): ONE prompt per query holding every
document (1:N), one prompt per pair for N:N; the API process then takes the cosine of the query
row against each document row.

The pooling method that reads those prompts (``JinaRankingPool``: the marker rows, the
projector) is a pooling rule and lives with the pooler, ``tokpool.pooler.jina_ranking``; its
names are re-exported here for the old import path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..pooler.jina_ranking import (
    DOC_MARK,
    DOC_TOKEN_ID,
    MARKER_TOKEN_IDS,
    QUERY_MARK,
    QUERY_TOKEN_ID,
    JinaRankingPool,
    marker_positions,
    marker_rows,
    projector_allocations,
    seeded_projector,
)
from .scoring import check_pairing

__all__ = [
    "DOC_TOKEN_ID",
    "MARKER_TOKEN_IDS",
    "QUERY_TOKEN_ID",
    "JinaRankingPool",
    "jina_prompt_text",
    "listwise_prompts",
    "marker_positions",
    "marker_rows",
    "projector_allocations",
    "seeded_projector",
]


def jina_prompt_text(query: str, docs: Sequence[str], *, instruction: str | None = None) -> str:
    """The prompt text vLLM's ``format_docs_prompts_func`` builds (markers removed from the
    inputs first, ``no_thinking=True``)."""
    def clean(text: str) -> str:
        return text.replace(QUERY_MARK, "").replace(DOC_MARK, "")

    query, docs = clean(query), [clean(d) for d in docs]
    prefix = (
        "<|im_start|>system\nYou are a search relevance expert who can determine a ranking of "
        "the passages based on how relevant they are to the query. If the query is a question, "
        "how relevant a passage is depends on how well it answers the question. If not, try to "
        "analyze the intent of the query and assess how well each passage satisfies the intent. "
        "If an instruction is provided, you should follow the instruction when determining the "
        "ranking.<|im_end|>\n<|im_start|>user\n")
    body = (f"I will provide you with {len(docs)} passages, each indicated by a numerical "
            f"identifier. Rank the passages based on their relevance to query: {query}\n")
    if instruction:
        body += f"<instruct>\n{clean(instruction)}\n</instruct>\n"
    body += "\n".join(f'<passage id="{i}">\n{d}{DOC_MARK}\n</passage>'
                      for i, d in enumerate(docs)) + "\n"
    body += f"<query>\n{query}{QUERY_MARK}\n</query>"
    return prefix + body + "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def listwise_prompts(queries: Sequence, docs: Sequence, *,
                     tokenize: Callable[[str], list[int]] | None = None,
                     template_tokens: int = 0) -> list[list[int]]:
    """The prompts vLLM's ``JinaRankingIOProcessor`` sends the engine, as token ids.

    One query: ONE prompt with every document; N queries and N documents: one prompt per pair
    (``format_docs_prompts_func(q, [d])``); other shapes are refused with vLLM's rule.

    Args:
        queries, docs: texts (with ``tokenize``: the exact prompt is built as text, as vLLM
            does, then tokenized), or token-id lists / lengths (no tokenizer: each document is
            its ids followed by the document marker, then the query's ids and the query marker;
            the template's own tokens are not known without the tokenizer: ``template_tokens``
            filler tokens (id 0) stand for them at the start).
        tokenize: text -> token ids (e.g. ``tokenizer.encode``) for text inputs.
        template_tokens: filler tokens for the template when no tokenizer is given.

    Returns:
        One token-id list per prompt.

    Raises:
        ValueError: empty lists, N:1 or other shapes, ``template_tokens`` < 0.
        TypeError: texts without ``tokenize``, a ``tokenize`` that is not callable, or inputs
            of another kind.

    Example:
        >>> [len(p) for p in listwise_prompts([3], [5, 6])]  # 5+1 + 6+1 + 3+1
        [17]
        >>> [len(p) for p in listwise_prompts([3, 4], [5, 6])]  # one prompt per pair
        [10, 12]
    """
    for name, items in (("queries", queries), ("docs", docs)):
        if not isinstance(items, (list, tuple)):
            raise TypeError(f"{name} must be a list of texts, lengths or token-id lists, got "
                            f"{type(items).__name__}")
    if tokenize is not None and not callable(tokenize):
        raise TypeError(f"tokenize must be a function text -> token ids (or None), got "
                        f"{type(tokenize).__name__}")
    check_pairing(len(queries), len(docs))
    if isinstance(template_tokens, bool) or not isinstance(template_tokens, int) \
            or template_tokens < 0:
        raise ValueError(f"template_tokens must be an int >= 0, got {template_tokens!r}")
    groups = ([(queries[0], list(docs))] if len(queries) == 1
              else [(q, [d]) for q, d in zip(queries, docs, strict=True)])
    texts = [isinstance(x, str) for x in (*queries, *docs)]
    if any(texts):
        if not all(texts) or tokenize is None:
            raise TypeError("texts need tokenize= (text -> token ids), and every query and "
                            "document must then be a text: JinaForRanking only takes text")
        return [list(tokenize(jina_prompt_text(q, ds))) for q, ds in groups]
    return [[0] * template_tokens
            + [t for d in ds for t in (*_ids(d, "document"), DOC_TOKEN_ID)]
            + [*_ids(q, "query"), QUERY_TOKEN_ID] for q, ds in groups]


def _ids(item, what: str) -> list[int]:
    if isinstance(item, bool):
        raise TypeError(f"a {what} is a length or token ids, got {item!r}")
    if isinstance(item, int):
        if item < 1:
            raise ValueError(f"a {what} length must be >= 1, got {item}")
        return [0] * item
    if isinstance(item, (list, tuple)) or getattr(item, "ndim", 0) == 1:
        ids = [int(t) for t in item]
        if not ids:
            raise ValueError(f"an empty {what}: give at least one token")
        return ids
    raise TypeError(f"a {what} is a length (int) or token ids (a list of ints), got "
                    f"{type(item).__name__}")
