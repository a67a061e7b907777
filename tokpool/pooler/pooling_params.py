"""``tp.PoolingParams``: vLLM 0.33.0's per-request pooling options that change bytes.

vLLM's ``PoolingParams`` (vllm/pooling_params.py) rides along with every pooling request; the
fields kept here are the ones that change what the engine holds or delivers:

- ``late_chunking_size`` (vLLM: ``late_chunking_params.chunk_size``, ``token_embed`` only): the
  head mean-pools every chunk of that many tokens into one row (⌈n / chunk⌉ rows, float32
  accumulation, out in the head dtype, before the projector and normalisation:
  ``tokpool.pooler.late_chunking``); such requests skip prefix-cache reads;
- ``dimensions`` (``embed``/``token_embed`` of a Matryoshka model): rows are cut to their first
  ``dimensions`` columns after the projector (a view; the normalisation then allocates the
  narrower rows);
- ``use_activation``: the head's normalise / softmax for this request (``None``: the engine's);
- ``step_tag_id`` / ``returned_token_ids``: STEP pooling's rows and columns (process reward
  models);
- ``truncate_prompt_tokens`` / ``truncation_side`` (vLLM: the request's tokenization
  parameters, ``TokenizeParams``): keep the first (``"right"``) or last (``"left"``) N prompt
  tokens; ``-1`` keeps ``max_model_len``;
- ``late_interaction_mode`` (vLLM: ``late_interaction_params.mode``, set by the scoring path:
  ``"cache_query"`` / ``"score_doc"``);
- ``task`` (vLLM: ``PoolingParams.task``): the request's own pooling task (``None``: the
  engine's, ``SimConfig.task``). A model serves its token task with its sequence twin
  (``token_embed`` with ``embed``, ``token_classify`` with ``classify``: vLLM's
  ``DispatchPooler`` keys), so one workload may mix them (``tokpool.sim.vllm_rules.
  request_tasks``).

A record checks its own fields when built (types and ranges, as vLLM's ``LateChunkingParams``
and request models do); what depends on the model and the task — vLLM's
``PoolingParams.verify`` and the renderer's late-chunking checks — is
``tokpool.sim.vllm_rules.engine_checks.check_pooling_params`` (``verify`` calls it; so does
``tp.simulate``). ``tp.simulate(..., pooling_params=...)`` takes one record for every request or
a list of one per request.

This module mirrors vLLM's ``vllm/pooling_params.py`` in the pooler's room, beside
``heads.py``, rather than inside ``tokpool.late_interaction``: only one of its fields is about
late interaction, the others are the head's and the tokenizer's.

Example:
    >>> p = tp.PoolingParams(late_chunking_size=512)
    >>> p.delivered_rows(32_768)
    64
    >>> tp.PoolingParams(late_chunking_size=0)
    Traceback (most recent call last):
    ValueError: late_chunking_size must be a positive integer less than 2**63 (vLLM's ...), got 0
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Literal

import numpy as np

from .._args import choice, whole
from .late_chunking import MAX_CHUNK_SIZE, late_chunk_rows
from .task_names import POOLING_TASKS

__all__ = ["LATE_INTERACTION_MODES", "TRUNCATION_SIDES", "PoolingParams", "per_request_params"]

LATE_INTERACTION_MODES = ("cache_query", "score_doc")
TRUNCATION_SIDES = ("left", "right")


def _strict_int(name: str, value: Any, *, minimum: int | None = None,
                optional: bool = True) -> int | None:
    """vLLM's request fields are strict ints: ``True`` and ``3.0`` are refused."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int{' or None' if optional else ''}, got "
                        f"{value!r} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class PoolingParams:
    """One request's pooling options (vLLM 0.33.0's ``PoolingParams`` fields that change bytes,
    and the request's truncation); see the module docstring.

    Attributes:
        late_chunking_size: tokens per late chunk (``token_embed``): ⌈n / size⌉ rows delivered.
        dimensions: Matryoshka width of each delivered row (embed tasks).
        use_activation: the head's activation for this request (``None``: the engine's).
        step_tag_id: STEP pooling's tag token (``None``: the engine's).
        returned_token_ids: STEP pooling's columns (``None``: the engine's).
        truncate_prompt_tokens: keep this many prompt tokens (``-1``: ``max_model_len``;
            ``None``: no truncation).
        truncation_side: ``"right"`` keeps the first tokens, ``"left"`` the last; ``None``:
            the tokenizer's default (``"right"`` for Hugging Face tokenizers).
        late_interaction_mode: ``"cache_query"`` / ``"score_doc"`` when the scoring path sends
            the request (late-interaction reranking), else ``None``.
        task: the request's pooling task (vLLM's ``PoolingParams.task``; ``None``: the
            engine's). ``tp.simulate`` runs a workload mixing a token task with its sequence
            twin through the dispatch pooler.

    Raises:
        TypeError: a field of the wrong type (``True`` and ``3.0`` are not ints).
        ValueError: a field out of its range, with vLLM's rule.

    Example:
        >>> tp.PoolingParams(dimensions=256, truncate_prompt_tokens=-1)
        PoolingParams(dimensions=256, truncate_prompt_tokens=-1)
    """

    late_chunking_size: int | None = None
    dimensions: int | None = None
    use_activation: bool | None = None
    step_tag_id: int | None = None
    returned_token_ids: tuple[int, ...] | None = None
    truncate_prompt_tokens: int | None = None
    truncation_side: Literal["left", "right"] | None = None
    late_interaction_mode: Literal["cache_query", "score_doc"] | None = None
    task: str | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        size = self.late_chunking_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int | np.integer)
                                 or not 0 < int(size) <= MAX_CHUNK_SIZE):
            kind = ValueError if isinstance(size, int | np.integer) and not isinstance(
                size, bool) else TypeError
            raise kind(f"late_chunking_size must be a positive integer less than 2**63 "
                       f"(vLLM's LateChunkingParams.verify: chunk_size), got {size!r}")
        set_(self, "late_chunking_size", None if size is None else int(size))
        set_(self, "dimensions", _strict_int("dimensions", self.dimensions))
        if self.use_activation is not None and not isinstance(self.use_activation,
                                                              bool | np.bool_):
            raise TypeError(f"use_activation must be True, False or None, got "
                            f"{self.use_activation!r} ({type(self.use_activation).__name__})")
        set_(self, "step_tag_id", _strict_int("step_tag_id", self.step_tag_id, minimum=0))
        ids = self.returned_token_ids
        if ids is not None:
            if isinstance(ids, str | bytes) or not hasattr(ids, "__iter__"):
                raise TypeError(f"returned_token_ids must be a list of token ids, got {ids!r}")
            ids = tuple(_strict_int(f"returned_token_ids[{i}]", v, minimum=0, optional=False)
                        for i, v in enumerate(ids))
            if not ids:
                raise ValueError("returned_token_ids is empty; give at least one token id, or "
                                 "None for every column")
            set_(self, "returned_token_ids", ids)
        set_(self, "truncate_prompt_tokens", _strict_int(
            "truncate_prompt_tokens", self.truncate_prompt_tokens, minimum=-1))
        if self.truncation_side is not None:
            choice("truncation_side", self.truncation_side, TRUNCATION_SIDES)
        if self.late_interaction_mode is not None:
            choice("late_interaction_mode", self.late_interaction_mode, LATE_INTERACTION_MODES)
        if self.task is not None:
            if not isinstance(self.task, str):
                raise TypeError(f"task must be a pooling task name (a str) or None, got "
                                f"{self.task!r} ({type(self.task).__name__})")
            choice("task", self.task, POOLING_TASKS)

    def __repr__(self) -> str:
        given = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                 if getattr(self, f.name) is not None]
        return f"PoolingParams({', '.join(given)})"

    def replace(self, **changes: Any) -> PoolingParams:
        """A copy with ``changes`` (checked again)."""
        return replace(self, **changes)

    def delivered_rows(self, num_tokens: int) -> int:
        """Rows the head hands over for ``num_tokens`` pooled rows: one per late chunk, else
        ``num_tokens``."""
        n = whole("num_tokens", num_tokens, minimum=1)
        return n if self.late_chunking_size is None else late_chunk_rows(
            n, self.late_chunking_size)

    def truncated_length(self, prompt_len: int, max_model_len: int | None) -> int:
        """The prompt's length after ``truncate_prompt_tokens`` (vLLM's
        ``TokenizeParams._truncation_slice``; ``-1``: ``max_model_len``, the whole input budget
        of a pooling request)."""
        keep = self.truncate_prompt_tokens
        if keep is not None and keep < 0:
            keep = max_model_len
        return prompt_len if keep is None or keep >= prompt_len else keep

    def truncate(self, token_ids: list[int], max_model_len: int | None) -> list[int]:
        """``token_ids`` as the renderer truncates them (``"left"`` keeps the last tokens)."""
        n = self.truncated_length(len(token_ids), max_model_len)
        if n == len(token_ids):
            return token_ids
        return token_ids[len(token_ids) - n:] if self.truncation_side == "left" else \
            token_ids[:n]

    def verify(self, config) -> None:
        """vLLM's refusals of this request on ``config`` (a ``tp.SimConfig``):
        ``engine_checks.check_pooling_params``, asked through
        ``SimConfig.check_pooling_params`` (the simulator's room is above this one).

        Raises:
            EngineRefusal: vLLM refuses the request (its words and the rule it follows).
            TypeError: ``config`` is not a ``tp.SimConfig``.
        """
        check = getattr(config, "check_pooling_params", None)
        if not callable(check):
            raise TypeError(f"verify takes the tp.SimConfig the request runs on, got "
                            f"{type(config).__name__}")
        check(self)


def per_request_params(pooling_params: Any, n_requests: int) -> list[PoolingParams | None]:
    """``simulate``'s ``pooling_params=``: ``None``, one ``PoolingParams`` for every request, or
    a list with one (or ``None``) per request.

    Raises:
        TypeError: anything else, or a list entry that is not a ``PoolingParams``.
        ValueError: a list of the wrong length.
    """
    if pooling_params is None:
        return [None] * n_requests
    if isinstance(pooling_params, PoolingParams):
        return [pooling_params] * n_requests
    if isinstance(pooling_params, str | bytes | dict) or not isinstance(pooling_params,
                                                                        list | tuple):
        raise TypeError(f"pooling_params must be a tp.PoolingParams (for every request) or a "
                        f"list of one per request, got {type(pooling_params).__name__}")
    if len(pooling_params) != n_requests:
        raise ValueError(f"pooling_params has {len(pooling_params)} entries for {n_requests} "
                         "requests; give one per request (None for the engine's defaults), or "
                         "one PoolingParams for all")
    for i, p in enumerate(pooling_params):
        if p is not None and not isinstance(p, PoolingParams):
            raise TypeError(f"pooling_params[{i}] must be a tp.PoolingParams or None, got "
                            f"{type(p).__name__}")
    return list(pooling_params)
