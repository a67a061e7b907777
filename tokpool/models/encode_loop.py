"""``PoolingModel.encode``'s engine: the simulator's one step loop with the model as the source.

The prompts run through ``tokpool.sim``'s engine loop (``TensorEngine``): the scheduler splits
them into steps (``chunk_size`` is vLLM's ``long_prefill_token_threshold``: at most that many
tokens of one request per step, every unfinished request in every step), each step's hidden
states are written where vLLM would put them (CUDA-graph output memory that later replays
rewrite, or a fresh eager tensor), and the MODEL's pooler — pooling method and head, with the
policy and scheduling flags asked for — pools them through real ``PoolingMetadata``. So the same
flags mean the same thing in ``encode`` and in ``tp.simulate``: a policy that keeps views of
rewritten memory delivers corrupted outputs here too, and ``encode`` says so with a
``CorruptedOutputWarning`` naming them (an exact oracle compares every output with the model's
pooler applied to the hidden states the model actually produced).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..pooler.keep_rule import KeepRule
from ..pooler.metadata import build_metadata
from ..sim.backends.tensor import TensorEngine
from ..sim.config import SimConfig
from ..sim.schedule.scheduler import ScheduledStep
from ..sim.vllm_rules import step_order
from ..sim.vllm_rules.step_memory import StepOutput


class CorruptedOutputWarning(UserWarning):
    """``encode`` delivered outputs that differ from what the model computed (a retention policy
    kept views of memory that a later step rewrote)."""


@dataclass
class StepTimes:
    """Wall time of the loop's two halves, summed over steps (for benchmarks).

    Attributes:
        forward_s: seconds in the transformer (all chunks of all steps).
        pooling_s: seconds building metadata and in the pooler (method + head).
        n_steps: steps run.
    """

    forward_s: float = 0.0
    pooling_s: float = 0.0
    n_steps: int = 0


class EncodeLoop(TensorEngine):
    """The tensor backend with a model's own pooler (method + head) instead of the simulator's.

    The oracle's expected output for a request is the same pooler applied, in one shot, to the
    hidden states the source produced for it.
    """

    #: Padding rows of a replay: finite (a model's heads refuse NaN input), and a constant row
    #: no real hidden state has, so a view of them still fails the oracle.
    padding_value = 1.0e4

    def __init__(self, prompt_lens: Sequence[int], config: SimConfig, source, *, pooler,
                 task: str, head_options: dict, times: StepTimes | None) -> None:
        super().__init__(prompt_lens, config, source)
        self.model_pooler = pooler
        self.task = task
        self.head_options = head_options
        self.times = times

    def write_step(self, index: int, step: ScheduledStep, out: StepOutput) -> None:
        t0 = time.perf_counter()
        super().write_step(index, step, out)  # runs each chunk through the model
        if self.times is not None:
            self.times.forward_s += time.perf_counter() - t0
            self.times.n_steps += 1

    def _run_pooler(self, hidden: Tensor, lens: list[int], states=None, **chunking) -> list:
        meta = build_metadata(lens, states=states, task=self.task, **chunking)
        with torch.no_grad():  # heads may hold weights (a classifier): no autograd graph
            return self.model_pooler(hidden, meta, **self.head_options)

    def pool(self, index: int, step: ScheduledStep, rules: list[KeepRule]) -> dict[int, Tensor]:
        t0 = time.perf_counter()
        batch = [r for r, _, _ in step.chunks]
        outputs = self._run_pooler(
            self._hidden, [self.lens[r] for r in batch],
            states=[self.states[r] for r in batch],
            num_scheduled_tokens=[stop - start for _, start, stop in step.chunks],
            seq_lens=[stop for _, _, stop in step.chunks],
        )
        finished = set(step.finished)
        pooled = {r: outputs[i] for i, r in enumerate(batch) if r in finished}
        self._drop_finished(step)
        if self.times is not None:
            self.times.pooling_s += time.perf_counter() - t0
        return pooled

    def head(self, step: ScheduledStep, pooled: dict[int, Tensor]) -> list:
        outs = []
        for r in step.finished:  # the model's pooler already ran its head
            reference = self.source.reference(r)  # [prompt_len, hidden] what the model produced
            self.expected[r] = self._run_pooler(reference, [self.lens[r]])[0]
            outs.append((r, pooled[r], "output"))
        return outs


def every_prompt_every_step(lens: list[int], chunk_size: int | None) -> list[ScheduledStep]:
    """``encode``'s schedule: every unfinished prompt takes ``chunk_size`` tokens (``None``:
    all) in every step, rows in Model Runner V2's order.

    Not vLLM's scheduler: vLLM lifts ``long_prefill_token_threshold`` once one request is
    left (``Scheduler.schedule``), which would make the last prompt's chunks depend on the
    others; ``encode``'s ``chunk_size`` is a per-prompt chunk length.
    """
    computed = [0] * len(lens)
    steps = []
    while any(c < n for c, n in zip(computed, lens, strict=True)):
        chunks = [(r, c, n if chunk_size is None else min(n, c + chunk_size))
                  for r, (c, n) in enumerate(zip(computed, lens, strict=True)) if c < n]
        rows = tuple(chunks[i] for i in step_order([b - a for _, a, b in chunks]))
        for r, _, stop in chunks:
            computed[r] = stop
        kv_blocks = sum(-(-stop // 16) for _, _, stop in chunks)
        steps.append(ScheduledStep(len(steps), rows,
                                   tuple(r for r, _, stop in rows if stop == lens[r]),
                                   kv_blocks=kv_blocks))
    return steps


def run_encode(source, *, pooler, task: str, chunk_size: int | None, async_scheduling: bool,
               policy: str, head_options: dict | None = None,
               times: StepTimes | None = None) -> list[Tensor]:
    """Prefill every prompt of ``source`` through the engine loop; one output per request.

    Args:
        source: a ``tp.ModelSource`` (the model's hidden states, chunk by chunk, KV cached).
        pooler: the model's pooler, called as ``pooler(hidden, metadata, **head_options)``.
        task: the pooling task of every request.
        chunk_size: at most this many tokens of one request per step (``None``: whole
            prompts, one step).
        async_scheduling, policy: the engine's flags (as in ``tp.SimConfig``).
        head_options: ``dimensions`` / ``use_activation`` for the head.
        times: accumulates forward and pooling wall time when given.

    Returns:
        Per request, the delivered (host) output.

    Warns:
        CorruptedOutputWarning: outputs that differ from the model's own hidden states pooled
            in one shot (only a policy that keeps views of rewritten memory does this).
    """
    lens = source.prompt_lens
    config = SimConfig(
        hidden_size=source.width, dtype=source.dtype,
        # Every unfinished prompt runs in every step (as many sequences as vLLM's default
        # allows, which also sets its CUDA-graph sizes: capped at 2 x max_num_seqs).
        # (vLLM's budget >= max_num_seqs holds: every prompt has a token)
        max_num_batched_tokens=sum(lens), max_num_seqs=max(len(lens), min(256, sum(lens))),
        long_prefill_token_threshold=chunk_size, enable_chunked_prefill=chunk_size is not None,
        async_scheduling=async_scheduling, policy=policy,
    )
    steps = every_prompt_every_step(lens, chunk_size)
    source.prepare(lens)
    engine = EncodeLoop(lens, config, source, pooler=pooler, task=task,
                         head_options=head_options or {}, times=times)
    engine.run(steps)
    if engine.corrupted:
        bad = sorted(engine.corrupted)
        warnings.warn(
            f"policy={policy!r} (async_scheduling={async_scheduling}) delivered corrupted "
            f"outputs for prompts {bad}: they kept views of step output memory that a later "
            "step rewrote before they were read. Use policy='clone' (vLLM's), 'prealloc' or "
            "'offload'; tp.simulate(...).explain() shows which step overwrote what",
            CorruptedOutputWarning, stacklevel=3,
        )
    return [engine.delivered[r] for r in range(len(lens))]
