"""The V1 model runner's abort path against vLLM 0.33.0's code (the runner the CPU platform
runs; ``tests/test_parity_aborts.py`` replays Model Runner V2's ``PoolingRunner``).

What V1 does (vllm/v1/worker/gpu_model_runner.py, ``GPUModelRunner._update_states``): a new
request gets a ``CachedRequestState`` whose ``__post_init__`` makes its ``PoolingStates``
(vllm/v1/worker/gpu_input_batch.py); a preempted request only leaves the persistent batch (its
state, with its cached chunks, stays: the stale rows tests/test_runner_lifecycle.py replays);
every id in the scheduler output's ``finished_req_ids`` — a finished request's, and an aborted
one's in the abort's own ``schedule()`` call (``Scheduler.finish_requests``) — is popped from
``self.requests``, and its ``PoolingStates`` with it: a request aborted while preempted frees its
stale chunks then, and one aborted before its first chunk had no state.

On the random abort workloads of tests/test_parity_aborts.py (the schedules and outcomes checked
there against vLLM's ``Scheduler``), each run's schedule and aborts are replayed on vLLM's own
``CachedRequestState``/``PoolingStates`` with vLLM's ``AllPool``, following those rules; after
every engine iteration the bytes vLLM's states hold equal tokpool's ``pool_cache_bytes``
(``model_runner="v1"``, analytic mode), and an aborted request's state is gone. Counts go to the
terminal summary (``parity_count``). Needs vLLM 0.33.0 (``make vllm``).
"""

from __future__ import annotations

import inspect

import pytest
from sweep_sizes import sample_size
from test_parity_aborts import pool_step, runner_replays

pytestmark = pytest.mark.parity

# make test: the first workloads of the seeded stream (320: over 300 runs once the workloads
# vLLM and tokpool both refuse are left out); CI (TOKPOOL_FULL=1): all of them
NUM_WORKLOADS = sample_size(full=640, sample=320)


def test_v1_pops_the_state_of_every_finished_or_aborted_id():
    """The rule the replay follows, read in vLLM's source: ``_update_states`` pops
    ``self.requests`` for ``finished_req_ids`` (no ``clean()``), keeps a preempted request's
    state, and a new request's ``CachedRequestState`` makes a fresh ``PoolingStates``."""
    from vllm.pooling_params import PoolingParams
    from vllm.v1.pool.metadata import PoolingStates
    from vllm.v1.worker import gpu_model_runner
    from vllm.v1.worker.gpu_input_batch import CachedRequestState

    source = inspect.getsource(gpu_model_runner.GPUModelRunner._update_states)
    assert "for req_id in scheduler_output.finished_req_ids:" in source
    assert "self.requests.pop(req_id, None)" in source
    assert "keep their cached states" in source and ".clean(" not in source
    state = _new_state("0", PoolingParams(task="token_embed"), 5)
    assert isinstance(state, CachedRequestState)
    assert isinstance(state.pooling_states, PoolingStates)
    assert state.pooling_states.hidden_states_cache == []


def _new_state(req_id: str, params, prompt_len: int):
    """A ``CachedRequestState`` as ``_update_states`` builds one for a new request (only the
    fields the pooling path reads)."""
    from vllm.v1.worker.gpu_input_batch import CachedRequestState

    return CachedRequestState(req_id=req_id, prompt_token_ids=[0] * prompt_len, mm_features=[],
                              sampling_params=None, generator=None, block_ids=([],),
                              num_computed_tokens=0, output_token_ids=[],
                              pooling_params=params)


def test_v1_runner_state_after_aborts_is_vllms(parity_count):
    import torch
    from vllm.pooling_params import PoolingParams

    import tokpool as tp

    gen = torch.Generator().manual_seed(461)
    compared = runs = freed = stale_freed = 0
    failures = []
    for w, kw, aborted_at, plan, cache, pool in runner_replays(4601, "v1", NUM_WORKLOADS):
        runs += 1
        requests: dict[int, object] = {}  # GPUModelRunner.requests: id -> CachedRequestState
        params = PoolingParams(task="token_embed")
        lens = kw["prompt_lens"]
        preempted: set[int] = set()
        for index, step in plan:
            for r in aborted_at.get(index, ()):  # finished_req_ids: self.requests.pop
                state = requests.pop(r, None)
                freed += state is not None
                stale_freed += state is not None and r in preempted and bool(
                    state.pooling_states.hidden_states_cache)
            if step is not None:
                preempted |= set(step.preempted)  # V1: the state stays (stale chunks)
                for r, _, _ in step.chunks:
                    if r not in requests:  # scheduled_new_reqs: a new CachedRequestState
                        requests[r] = _new_state(str(r), params, lens[r])
                    preempted.discard(r)
                pool_step(pool, step, lens, {r: s.pooling_states for r, s in requests.items()},
                          gen)
                for r in step.finished:  # its id joins the next call's finished_req_ids
                    requests.pop(r, None)
            held = tp.owned_bytes([t for s in requests.values()
                                   for t in s.pooling_states.hidden_states_cache])
            gone = not any(r in requests for r in aborted_at.get(index, ()))
            if held != cache[index] or not gone:
                failures.append(f"workload {w} iteration {index}: vLLM's states hold {held} B, "
                                f"tokpool {cache[index]} B; aborted state gone: {gone}; {kw}")
                break
            compared += 1
    parity_count("abort runs replayed through V1's CachedRequestState + AllPool", runs)
    parity_count("engine iterations with equal held bytes (V1 runner state)", compared)
    parity_count("V1 aborted requests whose state was popped", freed)
    parity_count("V1 aborted stale states popped", stale_freed)
    parity_count("V1 abort differences", len(failures))
    assert not failures, f"{len(failures)} differ:\n" + "\n".join(failures[:3])
    assert runs >= 300 and freed >= 10 and stale_freed >= 1, (runs, freed,
                                                                             stale_freed)
