"""The pooling kind — ALL, STEP, JINA_RANKING or LAST — decided once; every backend asks the
record it gets.

vLLM branches on the pooling type in one place (``get_tok_pooling_method``,
vllm/model_executor/layers/pooler/tokwise/methods.py) and ``StepPool`` builds on ``AllPool``:
every later step asks the object it was given. tokpool does the same. ``kind_of(config)`` is the
one branch; the record it returns says, for its kind:

- whether chunks are kept across steps under the keep rule (``token_level``: ALL, STEP) or each
  step gathers the last scheduled row of every request (LAST), and the keep rule of a chunk
  (``chunk_rule``) with its label for ``SimResult.chunks``;
- which positions a request delivers (``kept_rows``: all, STEP's step-tag rows, or
  JinaForRanking's marker rows read from the prompt's token ids) and which columns
  (``columns``: STEP's ``returned_token_ids``);
- the output's shape (``delivered_shape``), the tensors its selection allocates after the
  AllPool pass (``selection_shapes``) and when each dies (``selection_dies``), and the
  reference a correct engine delivers (``reference``);
- whether a pooler head follows (``has_head``: JinaForRanking's ``TokenPooler`` has none);
- which pooler runs it (``pooler``, through ``tokpool.pooler.pooling.get_pooling_method``, or the
  installed vLLM's own under ``policy="vllm"``);
- how a config is checked (``check``) and what vLLM's chunked-prefill rule reads
  (``tok_pooling_type``).

The tensor and counting backends, the closed forms, ``SimResult.chunks``, the trace and the
analysis all ask these methods (``tests/test_seams.py`` swaps one and sees every mode follow);
none compares a pooling name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ...pooler.jina_ranking import (
    MARKER_TOKEN_IDS,
    JinaRankingPool,
    marker_positions,
    seeded_projector,
)
from ...pooler.keep_rule import VLLM_POLICY, KeepRule, keep_rule
from ...pooler.pooling import get_pooling_method
from ...pooler.vllm_bridge import VllmPool
from .scoring_path import JINA_EMBEDDING_SIZE

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "POOLING_KINDS",
    "SEQUENCE_TASKS",
    "SYNTHETIC_STEP_TAG_ID",
    "TOKEN_TASKS",
    "AllKind",
    "JinaRankingKind",
    "KeptRows",
    "LastKind",
    "PoolingKind",
    "StepKind",
    "kind_of",
]

#: Token id that ``SyntheticSource`` writes at step-tag positions (STEP pooling keeps those rows).
SYNTHETIC_STEP_TAG_ID = 1
#: Tasks with one output row per prompt token (ALL or STEP pooling).
TOKEN_TASKS = frozenset({"token_embed", "token_classify"})
#: Tasks with one output row per request (LAST pooling).
SEQUENCE_TASKS = frozenset({"embed", "classify"})
#: Why a JinaForRanking run needs the prompts' token ids.
MARKER_ROWS_NEED_TOKEN_IDS = (
    "JINA_RANKING pooling (JinaForRanking) keeps the rows at its marker tokens "
    "(151670 per document, then 151671 for the query), which only the prompts' token ids say: "
    "give token-id prompts (tp.late_interaction.listwise_prompts builds them from lengths or "
    "texts) in mode='tensor' or 'analytic', or score with tp.simulate_score")
#: SimConfig fields that only STEP pooling reads.
_STEP_FIELDS = ("num_returned_columns", "returned_token_ids", "step_tag_every", "step_tag_id")


class KeptRows:
    """Which positions of each prompt pooling delivers: all, none, every k-th, or listed.

    Args:
        every: STEP tag period (positions ``k-1, 2k-1, ...``), or ``None``.
        positions: per request, sorted numpy arrays of kept positions (from token ids).
        keep_all: no row selection.
    """

    def __init__(self, *, every: int | None = None,
                 positions: Sequence[np.ndarray] | None = None, keep_all: bool = False) -> None:
        self.every = every
        self.positions = positions
        self.keep_all = keep_all

    def count(self, request: int, lo, hi):
        """Kept positions in ``[lo, hi)``: ints, or numpy arrays of bounds (the closed forms;
        not with ``positions``)."""
        if self.positions is not None:
            if hi <= lo:
                return 0
            pos = self.positions[request]
            return int(np.searchsorted(pos, hi) - np.searchsorted(pos, lo))
        if self.keep_all:
            return np.maximum(hi - lo, 0) if isinstance(hi, np.ndarray) else max(hi - lo, 0)
        if self.every is None:
            return hi * 0  # tags asked for, none in synthetic prompts
        return np.maximum(hi // self.every - lo // self.every, 0) if isinstance(
            hi, np.ndarray) else max(hi // self.every - lo // self.every, 0)


class PoolingKind:
    """One pooling kind's answers (see the module docstring). Subclasses: ``AllKind``,
    ``StepKind`` (AllKind, then column and row selection), ``LastKind``."""

    name: ClassVar[str]
    #: Chunks are kept across steps under the keep rule (else: each step gathers a row).
    token_level: ClassVar[bool]
    #: The tasks this kind serves.
    tasks: ClassVar[frozenset[str]]
    #: What vLLM's ``is_chunked_prefill_supported`` reads as the token pooling type.
    tok_pooling_type: ClassVar[str] = "ALL"
    #: A decoder whose token pooling is this kind may chunk its prompts
    #: (``ModelConfig.is_chunked_prefill_supported``: STEP never does).
    chunks: ClassVar[bool] = True
    #: A request may give ``step_tag_id`` / ``returned_token_ids``
    #: (``PoolingParams._verify_step_pooling``: only where the token pooling is STEP).
    takes_step_params: ClassVar[bool] = False
    #: A pooler head (cast, classifier, activation) runs after pooling; ``False``: the
    #: pooler's output is delivered as it is, in the model dtype (``TokenPooler(head=None)``).
    has_head: ClassVar[bool] = True
    #: The kept rows are read from each prompt's own token ids (``tp.simulate`` hands the
    #: prompts' ids to the source: ``backends.source.PromptTokenIds``).
    reads_prompt_token_ids: ClassVar[bool] = False
    #: What the selection is called in a peak's parts (``tp.sim.peak_parts``).
    selection_label: ClassVar[str] = "STEP selection"
    #: Requests of the task's twin may share a workload (``DispatchPooler``: ``AllPool`` for
    #: the token task beside ``LastPool`` for the sequence one; ``vllm_rules.request_tasks``).
    serves_twin_task: ClassVar[bool] = False

    def __repr__(self) -> str:
        return f"<pooling kind {self.name}>"

    # --- what is kept per chunk ------------------------------------------------------------

    def chunk_rule(self, config, *, finished: bool, first_chunk: bool) -> KeepRule | None:
        """The keep rule of one chunk (``tokpool.pooler.keep_rule``), or ``None``: nothing is
        kept."""
        return keep_rule(config.policy, chunked=config.enable_chunked_prefill,
                         async_scheduling=config.async_scheduling, finished=finished,
                         first_chunk=first_chunk)

    def chunk_label(self, rule: KeepRule | None) -> str:
        """The ``SimResult.chunks`` action of a chunk with this ``rule``."""
        return rule.label

    # --- which rows and columns a request delivers -----------------------------------------

    def columns(self, config) -> tuple[int, ...] | None:
        """The columns delivered (``None``: all of the pooled width)."""
        return None

    def row_tag(self, config) -> int | None:
        """The token id whose rows are delivered (``None``: every row)."""
        return None

    def needs_token_ids(self, config) -> bool:
        """Whether the pooler reads each request's prompt token ids (to select rows)."""
        return self.row_tag(config) is not None

    def kept_rows(self, config, source=None, n_requests: int = 0) -> KeptRows:
        """Which positions of each request are delivered."""
        return KeptRows(keep_all=True)

    def output_width(self, config) -> int:
        """Width of a delivered row."""
        columns = self.columns(config)
        return config.width if columns is None else len(columns)

    def delivered_shape(self, config, kept: KeptRows, request: int, start: int,
                        stop: int) -> tuple[int, int]:
        """``(rows, width)`` of the output pooling hands the head for one request whose
        prompt positions ``[start, stop)`` it holds (the whole prompt, but for a split prompt
        without chunked prefill: its last chunk)."""
        return kept.count(request, start, stop), self.output_width(config)

    def selects(self, config) -> bool:
        """Whether the pooler copies a finished output within its step (a selection)."""
        return self.columns(config) is not None or self.row_tag(config) is not None

    def selection_shapes(self, config, prompt_len, kept_rows) -> list[tuple[Any, int]]:
        """The ``(rows, width)`` tensors the selection allocates after the AllPool pass, in
        order, in the model dtype (when each dies: ``selection_dies``; the last is the
        output): ``[]`` for none."""
        return []

    def selection_dies(self, config, count: int) -> list[int | None]:
        """For each of ``count`` selection tensors, the index of the tensor whose creation
        ends its life (``None``: the output, alive after the pooler returns). By default each
        dies once the next is made (STEP rebinds ``data``)."""
        return [*range(1, count), None][:count]

    def selection_peak(self, config, prompt_len, kept_rows, itemsize: int):
        """The most selection bytes alive at once (beside AllPool's output, which lives until
        the pooler returns): the max over each tensor's creation of what is alive then (ints,
        or numpy arrays in the closed forms)."""
        shapes = self.selection_shapes(config, prompt_len, kept_rows)
        dies = self.selection_dies(config, len(shapes))
        sizes = [rows * width * itemsize for rows, width in shapes]
        peak = 0 * kept_rows
        for j in range(len(sizes)):
            alive = sum((sizes[i] for i in range(j + 1) if dies[i] is None or dies[i] >= j),
                        0 * kept_rows)
            peak = np.maximum(peak, alive)
        return peak

    def reference(self, config, source, request: int) -> Tensor:
        """What pooling must hand over for ``request`` before the head (host tensor)."""
        return source.reference(request)  # [prompt_len, width]

    # --- which pooler runs it --------------------------------------------------------------

    def pooler(self, config):
        """The pooling method that runs this kind for ``config``: tokpool's, or the installed
        vLLM's own (``policy="vllm"``)."""
        if config.policy == VLLM_POLICY:  # VllmPool imports vLLM when built, not before
            return VllmPool(self.name, enable_chunked_prefill=config.enable_chunked_prefill,
                            async_scheduling=config.async_scheduling)
        return get_pooling_method(self.name, enable_chunked_prefill=config.enable_chunked_prefill,
                                  async_scheduling=config.async_scheduling, policy=config.policy)

    # --- how a config is checked -----------------------------------------------------------

    def check(self, config) -> None:
        """Raise ``ValueError`` for a config this kind cannot run (fields named)."""
        if config.task not in self.tasks:
            raise ValueError(
                f"pooling {self.name!r} does not serve task {config.task!r}: token tasks use "
                "'ALL' (or 'STEP'), sequence tasks use 'LAST'"
            )
        self._check_selection(config)

    def _check_selection(self, config) -> None:
        given = [name for name in _STEP_FIELDS if getattr(config, name) is not None]
        if given:
            raise ValueError(f"{given} only apply to STEP pooling; set pooling='STEP'")


class AllKind(PoolingKind):
    """ALL: every row of the prompt, kept chunk by chunk (``AllPool``)."""

    name = "ALL"
    token_level = True
    tasks = TOKEN_TASKS
    serves_twin_task = True


class StepKind(AllKind):
    """STEP: ALL, then columns (``returned_token_ids``), then the step-tag rows
    (``StepPool``; vLLM's builds on its ``AllPool`` the same way)."""

    name = "STEP"
    tok_pooling_type = "STEP"
    chunks = False
    takes_step_params = True
    serves_twin_task = False

    def columns(self, config) -> tuple[int, ...] | None:
        if config.num_returned_columns is not None:
            return tuple(range(config.num_returned_columns))
        return config.returned_token_ids

    def row_tag(self, config) -> int | None:
        if config.step_tag_id is not None:
            return config.step_tag_id
        return SYNTHETIC_STEP_TAG_ID if config.step_tag_every is not None else None

    def kept_rows(self, config, source=None, n_requests: int = 0) -> KeptRows:
        tag = self.row_tag(config)
        if tag is None:
            return KeptRows(keep_all=True)
        if source is not None:
            ids = [source.token_ids(r) for r in range(n_requests)]
            if all(i is not None for i in ids):
                return KeptRows(positions=[np.flatnonzero(i.numpy() == tag) for i in ids])
        return KeptRows(every=config.step_tag_every)  # synthetic prompts; None = no tags at all

    def selection_shapes(self, config, prompt_len, kept_rows) -> list[tuple[Any, int]]:
        width = self.output_width(config)
        shapes = []
        if self.columns(config) is not None:
            shapes.append((prompt_len, width))  # [prompt_len, k]
        if self.row_tag(config) is not None:
            shapes.append((kept_rows, width))  # [n_tags, k]
        return shapes

    def reference(self, config, source, request: int) -> Tensor:
        ref = source.reference(request)  # [prompt_len, width]
        columns = self.columns(config)
        if columns is not None:
            ref = ref[:, list(columns)]  # [prompt_len, k]
        tag = self.row_tag(config)
        if tag is not None:
            ref = ref[source.token_ids(request) == tag]  # [n_tags, k]
        return ref

    def _check_selection(self, config) -> None:
        if config.num_returned_columns is not None and config.returned_token_ids is not None:
            raise ValueError("give num_returned_columns or returned_token_ids, not both")
        if config.num_returned_columns is not None and config.num_returned_columns > config.width:
            # before the columns are listed: 10**9 of them would not fit in memory
            raise ValueError(f"num_returned_columns={config.num_returned_columns:,} is more than "
                             f"the pooled width {config.width:,}; keep at most {config.width:,}")
        columns = self.columns(config)
        if columns is not None:
            bad = [c for c in columns if not 0 <= c < config.width]
            if bad:
                raise ValueError(
                    f"returned columns {bad[:5]} are outside the pooled width {config.width}"
                )


class JinaRankingKind(AllKind):
    """JINA_RANKING: vLLM's ``JinaForRankingPool`` (jina-reranker-v3, a listwise reranker):
    ``AllPool`` (every hidden state cached until the prompt finishes), then the rows at the
    document markers and then the query marker (``tokpool.late_interaction.listwise``), each
    projected ``Linear(H, H/2) -> ReLU -> Linear(H/2, 512)`` inside the pooling method; no
    pooler head follows, so the rows leave in the model dtype (vllm/model_executor/models/
    jina.py).

    The selection's tensors, ``self.projector(data[indexes])``: the gather ``[k, H]`` (alive
    until the projector returns: the call holds its argument), the first layer's
    ``[k, H/2]`` (dies once the ReLU's output exists: ``nn.Sequential`` rebinds its input),
    the ReLU's ``[k, H/2]`` and the output ``[k, 512]``; AllPool's ``[T, H]`` lives until the
    pooler returns (``pooled_data_lst``). The marker rows come from the prompt's token ids,
    so a run needs token-id prompts (``tp.late_interaction.listwise_prompts`` builds them) or a
    source with
    real token ids.
    """

    name = "JINA_RANKING"
    tasks = frozenset({"token_embed"})
    has_head = False
    reads_prompt_token_ids = True
    selection_label = "marker rows and projector"
    serves_twin_task = False

    def needs_token_ids(self, config) -> bool:
        return True

    def output_width(self, config) -> int:
        head = getattr(config.model, "late_interaction", None)
        return head.dim if head is not None else JINA_EMBEDDING_SIZE

    def selects(self, config) -> bool:
        return True

    def kept_rows(self, config, source=None, n_requests: int = 0) -> KeptRows:
        ids = [source.token_ids(r) for r in range(n_requests)] if source is not None else []
        if source is None or any(i is None for i in ids):
            raise ValueError(MARKER_ROWS_NEED_TOKEN_IDS)
        return KeptRows(positions=[np.flatnonzero(np.isin(i.numpy(), MARKER_TOKEN_IDS))
                                   for i in ids])

    def selection_shapes(self, config, prompt_len, kept_rows) -> list[tuple[Any, int]]:
        half = config.width // 2
        return [(kept_rows, config.width), (kept_rows, half), (kept_rows, half),
                (kept_rows, self.output_width(config))]

    def selection_dies(self, config, count: int) -> list[int | None]:
        return [3, 2, 3, None]  # gather, Linear, ReLU, Linear: see the class docstring

    def reference(self, config, source, request: int) -> Tensor:
        ref = source.reference(request)  # [prompt_len, H]
        rows = marker_positions(source.token_ids(request))  # documents', then the query's
        projector = seeded_projector(config.width, self.output_width(config), config.dtype)
        return projector(ref[rows])  # [n_markers, 512], the model dtype

    def pooler(self, config):
        return JinaRankingPool(
            seeded_projector(config.width, self.output_width(config), config.dtype),
            enable_chunked_prefill=config.enable_chunked_prefill,
            async_scheduling=config.async_scheduling, policy=config.policy)

    def check(self, config) -> None:
        super().check(config)
        if config.width < 2:
            raise ValueError(f"JINA_RANKING projects rows Linear(H, H/2): hidden_size="
                             f"{config.width} leaves no H/2; give hidden_size >= 2")
        if config.policy == VLLM_POLICY:
            raise ValueError("policy='vllm' drives the installed vLLM's AllPool/StepPool; "
                             "JINA_RANKING is vLLM's JinaForRankingPool, which tokpool's "
                             "JinaRankingPool equals (tests/test_parity_late_interaction.py): "
                             "use policy='clone', vLLM 0.33.0's rule")
        casts = not (isinstance(config.head_dtype, str) or config.head_dtype is None
                     or config.head_dtype == config.dtype)  # both resolved by now
        if casts or config.use_activation:
            raise ValueError(
                "JINA_RANKING pooling has no pooler head (JinaForRanking's TokenPooler): no "
                f"cast to head_dtype={config.head_dtype!r} and no activation "
                f"(use_activation={config.use_activation!r}); leave head_dtype='auto' (or "
                "None) and use_activation None/False — SimConfig.from_hf_config does")


class LastKind(PoolingKind):
    """LAST: one row per request, the last scheduled token's, gathered by each step
    (``LastPool``); nothing is kept across steps."""

    name = "LAST"
    token_level = False
    tasks = SEQUENCE_TASKS
    serves_twin_task = True

    def chunk_rule(self, config, *, finished: bool, first_chunk: bool) -> KeepRule | None:
        return None

    def chunk_label(self, rule: KeepRule | None) -> str:
        return "gather"

    def delivered_shape(self, config, kept: KeptRows, request: int, start: int,
                        stop: int) -> tuple[int, int]:
        return 1, config.width

    def reference(self, config, source, request: int) -> Tensor:
        return source.reference(request)[-1]  # [width]

    def pooler(self, config):
        return get_pooling_method(self.name)


#: The kinds by vLLM's name.
POOLING_KINDS: dict[str, PoolingKind] = {
    k.name: k for k in (AllKind(), StepKind(), JinaRankingKind(), LastKind())}


def kind_of(config) -> PoolingKind:
    """The kind a config pools with: its ``pooling``, else ALL for token tasks and LAST for
    sequence tasks (the one place the choice is made).

    Raises:
        ValueError: an unknown ``pooling`` name.
    """
    if config.pooling is None:
        return POOLING_KINDS["ALL" if config.task in TOKEN_TASKS else "LAST"]
    kind = POOLING_KINDS.get(config.pooling) if isinstance(config.pooling, str) else None
    if kind is None:
        raise ValueError(f"unknown pooling {config.pooling!r}; use one of {list(POOLING_KINDS)}")
    return kind
