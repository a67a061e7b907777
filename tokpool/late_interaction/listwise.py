"""Listwise decoder rerankers as vLLM 0.33.0 runs them: ``JinaForRanking`` (jina-reranker-v3).

vllm/model_executor/models/jina.py: the model is a Qwen3 backbone whose pooler is
``TokenPooler(pooling=JinaForRankingPool(projector))`` with **no head** — no cast to the head
dtype, no normalisation: rows leave in the model dtype. ``JinaForRankingPool`` is a
``StepPool`` (so ``AllPool`` underneath: its chunk cache holds every hidden state of the prompt
until the prompt finishes); for a finished request it keeps the rows at the document marker
(token 151670, one per document) and then at the query marker (151671), in that order, and
projects them ``Linear(H, H/2) -> ReLU -> Linear(H/2, embedding_size)`` (no bias).

The prompt is built by the serving layer (entrypoints/pooling/scoring/io_processor.py,
``JinaRankingIOProcessorMixin.format_docs_prompts_func``): ONE prompt per query holding every
document (1:N), one prompt per pair for N:N; the API process then takes the cosine of the query
row against each document row.

``JinaRankingPool`` is that pooling method on tokpool's ``AllPool``
(``tests/test_parity_late_interaction.py`` compares it with vLLM's class on random hidden
states, ``torch.equal``, and the bytes alive at each of its allocations); ``listwise_prompts``
builds the prompts; ``marker_rows`` and ``projector_allocations`` give the rows and the tensors
the projector makes. The simulator runs it as the ``JINA_RANKING`` pooling kind
(``tokpool.sim.vllm_rules.pooling_kind.JinaRankingKind``), which ``SimConfig.from_hf_config``
picks for a ``JinaForRanking`` config.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from ..metadata import PoolingMetadata
from ..pooling import AllPool

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

#: ``JinaForRankingPool.doc_token_id`` (``<|embed_token|>``) and ``query_token_id``
#: (``<|rerank_token|>``).
DOC_TOKEN_ID = 151670
QUERY_TOKEN_ID = 151671
MARKER_TOKEN_IDS = (DOC_TOKEN_ID, QUERY_TOKEN_ID)
_DOC_MARK, _QUERY_MARK = "<|embed_token|>", "<|rerank_token|>"


class JinaRankingPool(AllPool):
    """``JinaForRankingPool``: AllPool, then the marker rows (documents', then the query's),
    projected.

    Args:
        projector: the ``[rows, H] -> [rows, embedding_size]`` module (vLLM's
            ``nn.Sequential(Linear(H, H/2, bias=False), ReLU(), Linear(H/2, E, bias=False))``).
        **kwargs: ``AllPool``'s (``enable_chunked_prefill``, ``async_scheduling``, ``policy``).

    Returns (``forward``):
        One entry per request: ``None`` while unfinished, else ``[n_docs + 1, E]`` in the
        projector's dtype (the model dtype: no head follows).

    Example:
        >>> import tokpool as tp
        >>> from torch import nn
        >>> proj = nn.Sequential(nn.Linear(8, 4, bias=False), nn.ReLU(),
        ...                      nn.Linear(4, 3, bias=False))
        >>> ids = torch.tensor([[5, DOC_TOKEN_ID, 7, DOC_TOKEN_ID, 9, QUERY_TOKEN_ID]])
        >>> meta = tp.build_metadata([6], prompt_token_ids=ids)
        >>> JinaRankingPool(proj)(torch.randn(6, 8), meta)[0].shape  # 2 documents + query
        torch.Size([3, 3])
    """

    pooling_type = "ALL"

    def __init__(self, projector: nn.Module, **kwargs) -> None:
        super().__init__(**kwargs)
        self.projector = projector

    def forward(self, hidden_states: Tensor, metadata: PoolingMetadata) -> list[Tensor | None]:
        pooled = super().forward(hidden_states, metadata)  # AllPool: [prompt_len, H] or None
        if all(p is None for p in pooled):
            return pooled
        token_ids = metadata.get_prompt_token_ids_cpu()
        out: list[Tensor | None] = []
        for data, ids in zip(pooled, token_ids, strict=True):
            if data is None:
                out.append(None)
                continue
            gathered = data[marker_positions(ids).to(data.device)]  # [n_rows, H]
            self._notify("select", [*out, gathered, *pooled])
            out.append(self._project(gathered, [*out, *pooled]))  # [n_rows, E]
        return out

    def _project(self, gathered: Tensor, alive: list[Tensor | None]) -> Tensor:
        """``self.projector(gathered)``, layer by layer when it is an ``nn.Sequential`` so the
        probe sees each output while its input (and the gather, which the call holds) lives."""
        if not isinstance(self.projector, nn.Sequential):
            return self.projector(gathered)
        x = gathered
        for layer in self.projector:
            y = layer(x)
            self._notify("select", [*alive, gathered, x, y])
            x = y  # the input dies here (nn.Sequential rebinds it), the gather does not
        return x


def marker_positions(token_ids: Sequence[int] | Tensor) -> Tensor:
    """The rows ``JinaForRankingPool`` keeps, in its order: every document marker's position,
    then every query marker's (int64).

    Example:
        >>> marker_positions([QUERY_TOKEN_ID, 5, DOC_TOKEN_ID, DOC_TOKEN_ID]).tolist()
        [2, 3, 0]
    """
    ids = torch.as_tensor(token_ids)
    return torch.cat([torch.where(ids == DOC_TOKEN_ID)[0], torch.where(ids == QUERY_TOKEN_ID)[0]])


@functools.lru_cache(maxsize=8)
def seeded_projector(hidden_size: int, dim: int, dtype: torch.dtype) -> nn.Sequential:
    """A ``JinaForRanking`` projector with fixed seeded weights in ``dtype`` (the simulator's
    stand-in for the checkpoint's; no gradients, so nothing keeps an input alive):
    ``[rows, hidden_size] -> [rows, dim]``."""
    generator = torch.Generator().manual_seed(31)
    half = hidden_size // 2
    projector = nn.Sequential(nn.Linear(hidden_size, half, bias=False), nn.ReLU(),
                              nn.Linear(half, dim, bias=False))
    with torch.no_grad():
        for layer in (projector[0], projector[2]):
            layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator)
                               / layer.weight.shape[1] ** 0.5)
    return projector.to(dtype).requires_grad_(False)


def marker_rows(token_ids: Sequence[int] | Tensor) -> int:
    """Rows ``JinaForRankingPool`` keeps of one prompt: its document and query markers (every
    occurrence: the pool matches token ids; the serving layer strips markers from the texts).

    Example:
        >>> marker_rows([1, DOC_TOKEN_ID, 2, DOC_TOKEN_ID, QUERY_TOKEN_ID])
        3
    """
    ids = torch.as_tensor(token_ids)
    return int(((ids == DOC_TOKEN_ID) | (ids == QUERY_TOKEN_ID)).sum())


def projector_allocations(rows: int, hidden_size: int, dim: int) -> list[list[tuple[int, int]]]:
    """The tensors alive at each moment of one request's projection, as ``(rows, columns)``
    in the model dtype (inference mode: nothing saved for backward): the gather
    ``data[indexes]`` (alive until the projector returns: the call holds its argument), then
    each layer's output while its input is alive, the input dropped after (``nn.Sequential``
    rebinds its running value). ``JinaRankingKind.selection_shapes`` / ``selection_dies`` say
    the same to the simulator.

    Example:
        >>> projector_allocations(65, 1024, 512)  # doctest: +NORMALIZE_WHITESPACE
        [[(65, 1024)], [(65, 1024), (65, 512)], [(65, 1024), (65, 512), (65, 512)],
         [(65, 1024), (65, 512), (65, 512)]]
    """
    half = hidden_size // 2
    gather, first, relu, last = (rows, hidden_size), (rows, half), (rows, half), (rows, dim)
    return [[gather], [gather, first], [gather, first, relu], [gather, relu, last]]


def jina_prompt_text(query: str, docs: Sequence[str], *, instruction: str | None = None) -> str:
    """The prompt text vLLM's ``format_docs_prompts_func`` builds (markers removed from the
    inputs first, ``no_thinking=True``)."""
    def clean(text: str) -> str:
        return text.replace(_QUERY_MARK, "").replace(_DOC_MARK, "")

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
    body += "\n".join(f'<passage id="{i}">\n{d}{_DOC_MARK}\n</passage>'
                      for i, d in enumerate(docs)) + "\n"
    body += f"<query>\n{query}{_QUERY_MARK}\n</query>"
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
    from .scoring import check_pairing  # one statement of vLLM's rule

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
