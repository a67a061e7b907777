"""A workload mixing tasks of one model (``tp.PoolingParams(task=...)``): both backends, with
the dispatch pooler's groups.

vLLM's ``DispatchPooler.forward`` (vllm/model_executor/layers/pooler/special.py, PR 36614)
walks the step's requests in batch order, groups consecutive requests of one task, slices the
step's hidden states to the group's rows and runs that task's pooler on them alone: ``AllPool``
for the token task (its chunks kept as the keep rule says, a finished request's output handed
over), ``LastPool`` for the sequence task (one ``[group requests, W]`` gather per group, every
step, nothing kept across steps). Every group's outputs stay in the dispatcher's list until it
returns, so a gather lives until then; the finished requests' rows (views of it) go on to the
head, one row each.

- ``MixedCountingEngine`` (analytic mode): the counting engine, pooling group by group in that
  order, each gather held until the last group is pooled;
- ``MixedTensorEngine`` (tensor mode): tokpool's ``DispatchPooler`` (``tokpool.pooler.
  poolers``) over ``AllPool`` and ``LastPool``, memory measured after every allocation as the
  tensor engine does (earlier groups' outputs included).

Both then run the head per finished request with the request's own kind (a sequence request
delivers one row) and record, per step and task, what its requests' pooling states own and
what the host copies delivered (``BY_TASK_COLUMNS``, ``SimResult.by_task``). The head runs
after the dispatcher has pooled every group (vLLM runs each group's head inside its group):
the step's peak may differ from vLLM's by the heads' tensors of the groups before the last;
what each task holds at the step's end does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

import pandas as pd

from ...pooler.keep_rule import keep_rule
from ...pooler.metadata import build_metadata
from ...pooler.poolers import DispatchPooler, Pooler
from ...pooler.pooling import LastPool
from ..vllm_rules.pooling_kind import POOLING_KINDS, SEQUENCE_TASKS
from ..vllm_rules.runner import keeps_pooling_state_on_preemption
from .counting import CountingEngine
from .tensor import TensorEngine

__all__ = ["BY_TASK_COLUMNS", "MixedCountingEngine", "MixedTensorEngine"]

#: ``SimResult.by_task`` columns, one line each (one row per engine step and task).
BY_TASK_COLUMNS: dict[str, str] = {
    "step": "engine step (iteration)",
    "task": "the requests' pooling task (PoolingParams.task, else the engine's)",
    "num_requests": "requests of this task scheduled in the step",
    "num_finished": "of them, finished in the step (their output handed to the head)",
    "cache_bytes": "device bytes this task's pooling states own at the step's end (clones, "
                   "prealloc buffers; a sequence task keeps nothing: 0)",
    "delivered_bytes": "bytes the host copies of this task's outputs delivered in the step "
                       "(a sequence task's output is one row)",
}


class _Tasks:
    """What both mixed engines add to their backend: each request's task and kind, its keep
    rules, and the per-task records."""

    def _set_tasks(self, tasks: Sequence[str]) -> None:
        cfg = self.cfg
        self.tasks = list(tasks)
        self.task_names = sorted(set(self.tasks))
        all_kind, last = POOLING_KINDS["ALL"], POOLING_KINDS["LAST"]
        self._kinds = [last if t in SEQUENCE_TASKS else all_kind for t in self.tasks]
        token_rules = {
            (finished, first): (rule, all_kind.chunk_label(rule))
            for finished in (False, True) for first in (False, True)
            for rule in [all_kind.chunk_rule(cfg, finished=finished, first_chunk=first)]}
        gather = {key: (None, last.chunk_label(None)) for key in token_rules}
        self._rules_by_request = [gather if k is last else token_rules for k in self._kinds]
        # V1 keeps a preempted request's state: its token requests' stale chunks stay cached
        self.keeps_stale = (
            keeps_pooling_state_on_preemption(cfg.model_runner) and cfg.enable_chunked_prefill
            and keep_rule(cfg.policy, async_scheduling=cfg.async_scheduling, finished=False,
                          first_chunk=True).keep not in ("buffer", "host"))
        self._delivered_now: dict[str, int] = {}
        self._task_rows: list[dict] = []

    def request_kind(self, request: int):
        return self._kinds[request]

    def _groups(self, chunks):
        """The dispatcher's groups: consecutive chunks of one task, ``(task, chunks)``."""
        return [(task, list(group)) for task, group in groupby(
            chunks, key=lambda c: self.tasks[c[0]])]

    def deliver(self, index: int, request: int, output) -> int:
        nbytes = super().deliver(index, request, output)
        task = self.tasks[request]
        self._delivered_now[task] = self._delivered_now.get(task, 0) + nbytes
        return nbytes

    def _record(self, index: int, step):
        record = super()._record(index, step)
        chunks = [] if step is None else step.chunks
        finished = set() if step is None else set(step.finished)
        for task in self.task_names:
            mine = [r for r, _, _ in chunks if self.tasks[r] == task]
            owned = 0
            for r in range(len(self.tasks)):
                held = self.state_bytes(r) if self.tasks[r] == task else None
                owned += held[0] if held is not None else 0
            self._task_rows.append({
                "step": index, "task": task, "num_requests": len(mine),
                "num_finished": sum(r in finished for r in mine), "cache_bytes": owned,
                "delivered_bytes": self._delivered_now.get(task, 0)})
        self._delivered_now = {}
        return record

    def by_task_frame(self) -> pd.DataFrame:
        """``SimResult.by_task``: ``BY_TASK_COLUMNS``, one row per step and task."""
        return pd.DataFrame(self._task_rows, columns=list(BY_TASK_COLUMNS)).astype(
            {c: "int64" for c in BY_TASK_COLUMNS if c != "task"})


class MixedCountingEngine(_Tasks, CountingEngine):
    """The counting engine with the dispatch pooler's groups (module docstring)."""

    def __init__(self, prompt_lens, config, kept, *, tasks, pooling_params=None,
                 aborts=()) -> None:
        super().__init__(prompt_lens, config, kept, pooling_params=pooling_params,
                         aborts=aborts)
        self._set_tasks(tasks)

    def pool(self, index, step, rules):
        pooled, gathers = {}, []
        rules_left = iter(rules)  # the token chunks' rules, in batch order
        for _task, group in self._groups(step.chunks):
            if self._kinds[group[0][0]].token_level:
                pooled.update(self._pool_all(group, [next(rules_left) for _ in group]))
            else:
                out, gather = self._pool_last(group, step.finished)
                pooled.update(out)
                gathers.append(gather)
        for gather in gathers:  # the dispatcher returns: its list lets go of the gathers
            self._drop(gather)
        return pooled


class _Measured:
    """One task's pooler inside the dispatcher: after it returns, the tensor engine measures
    with every group's outputs so far (they stay in the dispatcher's list)."""

    def __init__(self, engine: MixedTensorEngine, pooler: Pooler) -> None:
        self.engine, self.pooler = engine, pooler

    def get_supported_tasks(self) -> frozenset[str]:
        return self.pooler.get_supported_tasks()

    def __call__(self, hidden_states, metadata):
        result = self.pooler(hidden_states, metadata)
        self.engine._done.extend(list(result))
        self.engine._checkpoint(list(self.engine._done))
        return result


class MixedTensorEngine(_Tasks, TensorEngine):
    """The tensor engine pooling through tokpool's ``DispatchPooler`` (module docstring)."""

    def __init__(self, prompt_lens, config, source, device="cpu", *, tasks,
                 pooling_params=None, aborts=()) -> None:
        super().__init__(prompt_lens, config, source, device=device,
                         pooling_params=pooling_params, aborts=aborts)
        self._set_tasks(tasks)
        self._done: list = []
        all_pool = POOLING_KINDS["ALL"].pooler(config)  # AllPool under the config's policy
        all_pool.probe = lambda event, outputs: self._checkpoint([*self._done, *outputs])
        by_task = {}
        for task in self.task_names:
            method = LastPool() if task in SEQUENCE_TASKS else all_pool
            by_task[task] = _Measured(self, Pooler(method, tasks=frozenset({task})))
        self.dispatcher = DispatchPooler(by_task)

    def pool(self, index, step, rules):
        batch = [r for r, _, _ in step.chunks]
        meta = build_metadata(
            [self.lens[r] for r in batch],
            num_scheduled_tokens=[stop - start for _, start, stop in step.chunks],
            seq_lens=[stop for _, _, stop in step.chunks],
            states=[self.states[r] for r in batch], task=[self.tasks[r] for r in batch])
        self._done = []
        outputs = self.dispatcher(self._hidden, meta)
        self._checkpoint(outputs)
        self._done = []
        rules_left = iter(rules)
        finished = set(step.finished)
        pooled = {}
        for (r, start, stop), out in zip(step.chunks, outputs, strict=True):
            if self._kinds[r].token_level:
                if next(rules_left).keep == "buffer":
                    self._prealloc_writes += (stop - start) * self.row_bytes
                if out is not None:
                    pooled[r] = out
            elif r in finished:
                pooled[r] = out  # [W]: a row of its group's gather
        del outputs
        self._step_outputs = list(pooled.values())
        self._drop_finished(step)
        return pooled

    def _reference(self, request: int):
        return self._kinds[request].reference(self.cfg, self.source, request)

