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
states, ``torch.equal``, and the bytes alive at each of its allocations); ``marker_rows`` and
``projector_allocations`` give the rows and the tensors
the projector makes (``tokpool.late_interaction.listwise`` builds the prompts). The simulator runs
it as the ``JINA_RANKING`` pooling kind
(``tokpool.sim.vllm_rules.pooling_kind.JinaRankingKind``), which ``SimConfig.from_hf_config``
picks for a ``JinaForRanking`` config.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .metadata import PoolingMetadata
from .pooling import AllPool

__all__ = [
    "DOC_TOKEN_ID",
    "MARKER_TOKEN_IDS",
    "QUERY_TOKEN_ID",
    "JinaRankingPool",
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
#: the markers as text, as the prompt template writes them
DOC_MARK, QUERY_MARK = "<|embed_token|>", "<|rerank_token|>"


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
        #: the last ``forward``'s marker rows before the projector, per request (``None``:
        #: unfinished), for an oracle: ReLU can map an overwritten row to the right output
        self.last_gathered: list[Tensor | None] = []

    def forward(self, hidden_states: Tensor, metadata: PoolingMetadata) -> list[Tensor | None]:
        pooled = super().forward(hidden_states, metadata)  # AllPool: [prompt_len, H] or None
        if all(p is None for p in pooled):
            return pooled
        token_ids = metadata.get_prompt_token_ids_cpu()
        out: list[Tensor | None] = []
        self.last_gathered = []
        for data, ids in zip(pooled, token_ids, strict=True):
            if data is None:
                out.append(None)
                self.last_gathered.append(None)
                continue
            gathered = data[marker_positions(ids).to(data.device)]  # [n_rows, H]
            self.last_gathered.append(gathered)
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
