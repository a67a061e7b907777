"""Why a document scored: MaxSim taken apart, one query token at a time.

MaxSim (ColBERT's late interaction, vLLM's ``compute_maxsim_score``) is
``sum_i max_j <q_i, d_j>``: each query token picks its best document token, and the picks add
up. :func:`maxsim_alignment` returns the pieces — the query × document similarity matrix, each
query token's pick and what it adds — with the total from :func:`tokpool.late_interaction.maxsim`
itself, so the
picture and the score cannot disagree. ``tp.viz.plot_maxsim_alignment`` draws it.

Example:
    >>> q = torch.tensor([[1., 0.], [0., 1.]])
    >>> d = torch.tensor([[0.6, 0.8], [1., 0.], [0., -1.]])
    >>> a = tp.late_interaction.maxsim_alignment(q, d)
    >>> a.best.tolist(), a.contributions.tolist(), float(a.score)
    ([1, 0], [1.0, 0.800000011920929], 1.7999999523162842)
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from .maxsim import maxsim

__all__ = ["MaxSimAlignment", "maxsim_alignment"]


@dataclass(frozen=True)
class MaxSimAlignment:
    """The parts of one query–document MaxSim score.

    Attributes:
        similarity: ``[Lq, Ld]`` float32 ``q @ d.T`` (cosine for unit rows), as MaxSim sees it.
        best: ``[Lq]`` int64: the document token each query token takes (its row's argmax; the
            first on ties, as ``amax`` does not say which).
        contributions: ``[Lq]`` float32: each query token's maximum; they sum to ``score``.
        score: 0-d float32: ``tp.late_interaction.maxsim(q, d)``.
    """

    similarity: Tensor
    best: Tensor
    contributions: Tensor
    score: Tensor


def maxsim_alignment(q: Tensor, d: Tensor) -> MaxSimAlignment:
    """Similarity matrix, each query token's best document token, and what each adds.

    Args:
        q: ``[Lq, D]`` query token embeddings.
        d: ``[Ld, D]`` document token embeddings (``Ld >= 1``), same ``D``.

    Returns:
        A :class:`MaxSimAlignment`; ``contributions.sum()`` equals ``score`` bit for bit
        (float32 matmul, max per row, the same sum ``tp.late_interaction.maxsim`` takes).

    Raises:
        TypeError, ValueError: as :func:`tokpool.late_interaction.maxsim` (not tensors, not 2-D,
        widths that
            differ, an empty document).
    """
    score = maxsim(q, d)  # checks the pair, in vLLM's words
    similarity = q.detach().float() @ d.detach().float().T  # [Lq, Ld] float32
    contributions, best = similarity.max(dim=-1)  # [Lq], [Lq]
    return MaxSimAlignment(similarity=similarity, best=best, contributions=contributions,
                           score=score)
