"""A minimal engine step loop: prefill requests in chunks and pool them with the core's poolers.

Each step schedules up to ``chunk_size`` tokens of every unfinished request (all of them when
``chunk_size`` is ``None``), runs each request's chunk through its own KV cache, concatenates
the chunks into the step's flat ``[n_step_tokens, hidden]`` batch, builds the step's real
``PoolingMetadata`` (continuing each request's ``PoolingStates``) and calls the pooler. A request's
output is what the pooler returns at the step it finishes; earlier steps return ``None`` for it
(ALL pooling) or a row that the engine discards (LAST pooling on a partial chunk).

Every step's hidden states are a fresh tensor here (transformers allocates per forward), so no
retention policy can corrupt outputs in this loop; the simulator's persistent buffer is where
``legacy`` goes wrong (see ``tokpool.models.ModelSource``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..metadata import PoolingStates, build_metadata
from .forward import PrefillStream


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


def run_prefill(
    streams: Sequence[PrefillStream],
    *,
    pooler,
    task: str,
    chunk_size: int | None = None,
    head_options: dict | None = None,
    times: StepTimes | None = None,
) -> list[Tensor]:
    """Prefill every stream to its end, pooling each step; one output per request.

    Args:
        streams: one fresh ``PrefillStream`` per request, batch order.
        pooler: called as ``pooler(hidden [n_step_tokens, hidden], metadata, **head_options)``;
            returns one entry per request in the step.
        task: the pooling task of every request.
        chunk_size: most tokens of one request per step (``None``: the whole prompt).
        head_options: ``dimensions`` / ``use_activation`` for the head.
        times: accumulates forward and pooling wall time when given.

    Returns:
        Per request, what the pooler returned at the step it finished.
    """
    head_options = head_options or {}
    prompt_lens = [s.prompt_len for s in streams]
    states = [PoolingStates() for _ in streams]
    outputs: list[Tensor | None] = [None] * len(streams)
    while True:
        batch = [r for r, s in enumerate(streams) if s.computed < s.prompt_len]
        if not batch:
            break
        scheduled = [
            streams[r].prompt_len - streams[r].computed
            if chunk_size is None
            else min(chunk_size, streams[r].prompt_len - streams[r].computed)
            for r in batch
        ]
        t0 = time.perf_counter()
        rows = [streams[r].advance(streams[r].computed + n) for r, n in zip(batch, scheduled,
                                                                          strict=True)]
        hidden = rows[0] if len(rows) == 1 else torch.cat(rows)  # [n_step_tokens, hidden]
        t1 = time.perf_counter()
        meta = build_metadata(
            [prompt_lens[r] for r in batch],
            num_scheduled_tokens=scheduled,
            seq_lens=[streams[r].computed for r in batch],
            states=[states[r] for r in batch],
            task=task,
        )
        with torch.no_grad():  # heads may hold weights (a classifier): no autograd graph
            pooled = pooler(hidden, meta, **head_options)
        for i, r in enumerate(batch):
            if streams[r].computed == prompt_lens[r]:
                outputs[r] = pooled[i]
        if times is not None:
            times.forward_s += t1 - t0
            times.pooling_s += time.perf_counter() - t1
            times.n_steps += 1
    return outputs  # type: ignore[return-value]  # every request finished above
