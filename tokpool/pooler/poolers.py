"""Poolers = a pooling method + a head, and a dispatcher that routes each request by task.

A model declares its tasks through its pooler (``get_supported_tasks``), as vLLM models do; the
gate (``tokpool.pooler.tasks.gate``) intersects that with what the runner serves.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import groupby

from torch import Tensor

from .heads import TokenClassifierHead, TokenEmbeddingHead
from .metadata import PoolingMetadata
from .task_names import POOLING_TASKS
from .tasks import UnsupportedTaskError


class Pooler:
    """``method`` then ``head`` (optional); tasks = what both declare.

    Call: ``pooler(hidden_states [n_tokens, hidden], metadata, **head_options)``; the result is
    whatever the method returns, passed through the head (``None`` entries stay ``None``).
    """

    def __init__(self, method, head: TokenEmbeddingHead | TokenClassifierHead | None = None,
                 *, tasks: frozenset[str] | None = None) -> None:
        for role, part, example in (("method", method, "tp.AllPool()"),
                                    ("head", head, "tp.TokenEmbeddingHead()")):
            if part is not None and not (
                callable(part) and callable(getattr(part, "get_supported_tasks", None))
            ):
                raise TypeError(
                    f"{role} must be a pooling {role} (callable, with get_supported_tasks()), "
                    f"such as {example}; got {part!r:.80}"
                )
        self.method = method
        self.head = head
        declared = set(POOLING_TASKS) & set(method.get_supported_tasks())
        if head is not None:
            declared &= set(head.get_supported_tasks())
        if tasks is not None:
            declared &= set(tasks)
        if not declared:
            raise ValueError(
                f"{type(method).__name__} with {type(head).__name__} serves no pooling task"
            )
        self.tasks = frozenset(declared)

    def get_supported_tasks(self) -> frozenset[str]:
        return self.tasks

    def __call__(self, hidden_states: Tensor, metadata: PoolingMetadata, **head_options):
        pooled = self.method(hidden_states, metadata)
        if self.head is None:
            return pooled
        return self.head(pooled, **head_options)

    def __repr__(self) -> str:
        head = type(self.head).__name__
        return f"Pooler({self.method!r}, head={head}, tasks={sorted(self.tasks)})"


class DispatchPooler:
    """Routes consecutive requests of one task to that task's pooler.

    Raises:
        UnsupportedTaskError: a request asks for a task this pooler does not serve.
    """

    def __init__(self, poolers_by_task: Mapping[str, object]) -> None:
        if not isinstance(poolers_by_task, Mapping):
            raise TypeError(
                "poolers_by_task must map task names to poolers, e.g. {'token_embed': pooler}; "
                f"got {type(poolers_by_task).__name__}"
            )
        for task, pooler in poolers_by_task.items():
            if not callable(getattr(pooler, "get_supported_tasks", None)):
                raise TypeError(f"the pooler for task {task!r} must be a Pooler, got "
                                f"{pooler!r:.80}")
            if task not in pooler.get_supported_tasks():
                raise ValueError(
                    f"pooler {pooler!r} does not support task {task!r}; it supports "
                    f"{sorted(pooler.get_supported_tasks())}"
                )
        self.poolers_by_task = dict(poolers_by_task)

    def get_supported_tasks(self) -> frozenset[str]:
        return frozenset(self.poolers_by_task)

    def __call__(self, hidden_states: Tensor, metadata: PoolingMetadata, **head_options) -> list:
        outputs: list = []
        first_request = first_token = 0
        for task, group in groupby(metadata.tasks):
            n = len(list(group))
            pooler = self.poolers_by_task.get(task)
            if pooler is None:
                raise UnsupportedTaskError(
                    f"Unsupported task: {task!r}. Supported tasks: "
                    f"{sorted(self.poolers_by_task)}"
                )
            sub = metadata[first_request : first_request + n]  # token indices recomputed
            n_tokens = int(sub.get_pooling_cursor().num_scheduled_tokens_cpu.sum())
            rows = hidden_states[first_token : first_token + n_tokens]
            result = pooler(rows, sub, **head_options) if head_options else pooler(rows, sub)
            outputs.extend(list(result))
            first_request += n
            first_token += n_tokens
        return outputs
