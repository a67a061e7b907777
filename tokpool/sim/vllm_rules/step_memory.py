"""Where a step's hidden states live — the step-memory rule, decided here and nowhere else.

vLLM 0.33.0 (Model Runner V2) runs a step as a CUDA-graph replay when its token count, padded up
to a capture size, is at most ``max_cudagraph_capture_size`` (and ``enforce_eager`` is off; the
sizes: ``cudagraph.resolve_cudagraph_sizes``, the dispatch: ``cudagraph.graph_size_for``). A
replay
writes its output into graph memory that later replays rewrite. Pooling models run PIECEWISE
graphs, whose outputs live in the shared graph pool; tokpool models that memory as rows
``[0, padded)`` of one persistent buffer (what a FULL graph's ``hidden_states`` buffer is): a
kept view is overwritten by a later replay whose padded size reaches its rows. This is the
CONSERVATIVE reading — the graph pool may hand different capture sizes different addresses, in
which case fewer views are overwritten; only a GPU can say (``benchmarks/cuda_engine_check.py``).
A larger step runs eagerly into a fresh tensor: a view kept from it is never overwritten, but it
keeps the whole step's tensor alive (pins it) until released.

``output_memory="one_buffer"`` is the teaching model: every step writes rows ``[0, n)`` of one
buffer of ``max_num_batched_tokens`` rows.

Rows from a score head (``SimConfig.rows_from="score_head"``: process reward models, classify
heads) are computed AFTER the compiled backbone (vllm/model_executor/models/qwen2_rm.py,
``Qwen2RewardBaseModel.forward``: ``self.score(hidden_states.to(head_dtype))``): every step
allocates them fresh, whatever the step's size.

Every consumer — the step loop of both backends (``tokpool.sim.backends.loop``), the closed forms
(``backends.closed_form``), the persistent buffer's size (``SimConfig.buffer_rows``) — asks
``step_memory`` through this module, so a new vLLM's rule ("eager steps reuse memory too") is an
edit of ``step_memory`` alone (``tests/test_seams.py`` swaps it and checks that every backend
follows).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cudagraph import padded_step_sizes

#: The region id of the persistent output memory (graph memory, or the teaching buffer).
PERSISTENT_REGION = 0


@dataclass(frozen=True)
class StepOutput:
    """Where one step's hidden states are written (what the step loop acts on).

    Attributes:
        region: ``PERSISTENT_REGION`` for the persistent output memory, else a fresh id.
        rows_written: rows of the region the step writes, from row 0 (a graph replay writes its
            whole padded size).
        rows: rows of the region (the fresh tensor's, or the persistent memory's).
        fresh: the step allocated a fresh output tensor: never rewritten by a later step, but
            a view kept from it pins all of it.
    """

    region: int
    rows_written: int
    rows: int
    fresh: bool

    @property
    def eager(self) -> bool:
        """The old name of ``fresh`` (under vLLM 0.33.0's rule only eager steps are fresh)."""
        return self.fresh


def step_memory(config, num_tokens):
    """THE rule: does a ``num_tokens`` step write persistent memory, and how many rows?

    Args:
        config: a ``SimConfig`` (reads ``output_memory`` and ``capture_sizes``).
        num_tokens: tokens the step computes: an int or an int array ``[n]``.

    Returns:
        ``(persistent, rows_written)``, each shaped like ``num_tokens``: ``persistent`` is True
        where the step writes the persistent output memory (rewritten by later steps that write
        it), False where it allocates a fresh tensor; ``rows_written`` is the rows written from
        row 0 (a replay's padded size; an eager step's own tokens).
    """
    n = np.asarray(num_tokens, dtype=np.int64)
    if config.rows_from == "score_head":  # computed after the graph replay: fresh logits
        return np.zeros(n.shape, dtype=bool), n
    if config.output_memory == "one_buffer":
        return np.ones(n.shape, dtype=bool), n
    padded = padded_step_sizes(n, config.capture_sizes)  # vLLM's dispatch; 0: eager
    persistent = padded > 0
    return persistent, np.where(persistent, padded, n)


def persistent_rows(config) -> int:
    """Rows of the persistent output memory: the most any persistent step writes, over every
    step size the budget allows (0 when no step writes it: every step fresh)."""
    budget = config.max_num_batched_tokens
    # rows_written never decreases with num_tokens (a contract of the rule, tested), so the
    # most a persistent step writes is at a capture size or at the full budget.
    candidates = np.unique(np.asarray(
        [s for s in config.capture_sizes if s <= budget] + [budget], dtype=np.int64))
    persistent, rows = step_memory(config, candidates)
    return int(rows[persistent].max()) if persistent.any() else 0


def step_output(config, num_tokens: int, next_region: int, rows: int) -> StepOutput:
    """The step loop's view of the rule for one step (``rows``: ``persistent_rows(config)``;
    ``next_region``: the id a fresh tensor gets)."""
    persistent, written = step_memory(config, num_tokens)
    if persistent:
        return StepOutput(PERSISTENT_REGION, int(written), rows, False)
    return StepOutput(next_region, int(written), int(written), True)
