"""Abort parity: tokpool's scheduler with ``aborts={request: step}`` against vLLM 0.33.0's own
V1 ``Scheduler``, which ``vllm_schedule`` drives with ``Scheduler.finish_requests(id,
RequestStatus.FINISHED_ABORTED)`` right before the abort's ``schedule()`` call.

On seeded random workloads (the schedule-parity workloads of tests/test_parity_schedule.py, each
with one to three random aborts, some before a request's first chunk, some mid-prompt, some
while preempted, some after its finish, sync and async) both schedules must be equal step by
step (chunks, finished, preempted, KV blocks held: the blocks an abort frees come back at once),
and ``schedule.aborts.abort_outcomes`` must say of every abort what vLLM's ``finish_requests``
answered: aborted (returned) or a no-op (an id already finished). A third test replays
each run's schedule and aborts through vLLM's own ``PoolingRunner`` (Model Runner V2) and
``AllPool``: the bytes its pooling states hold after every engine iteration equal tokpool's. The
counts go to the terminal summary (``parity_count``).

Needs vLLM 0.33.0 (``make vllm``); the module skips with the reason otherwise.
"""

from __future__ import annotations

import random

import pytest
from sweep_sizes import sample_size
from test_parity_schedule import TASKS, _compare, random_workload

from tokpool.sim.schedule.aborts import abort_outcomes
from tokpool.sim.schedule.scheduler import schedule

pytestmark = pytest.mark.parity

# make test: the first workloads of the seeded stream; CI (TOKPOOL_FULL=1): all of them
NUM_WORKLOADS = sample_size(full=600, sample=300)


def random_aborts(rng: random.Random, kw: dict) -> dict[int, int]:
    """One to three aborts at steps from the request's arrival to a few steps past a rough
    finish (so no-ops, mid-prompt and never-started aborts all occur)."""
    lens = kw["prompt_lens"]
    arrival = kw["arrival_steps"] or [0] * len(lens)
    horizon = sum(lens) // kw["max_num_batched_tokens"] + len(lens) + 3
    chosen = rng.sample(range(len(lens)), rng.randint(1, min(3, len(lens))))
    aborts = {r: rng.randint(arrival[r], arrival[r] + horizon) for r in chosen}
    if kw["kv_cache_blocks"] is not None and rng.random() < 0.5:
        try:  # abort a request while it waits preempted (the call after its preemption)
            preempted = [(r, s.index + 1) for s in schedule(**kw) for r in s.preempted]
        except ValueError:
            preempted = []
        if preempted:
            r, step = rng.choice(preempted)
            aborts[r] = step
    return aborts


def runner_replay(kw: dict, model_runner: str):
    """What a runner replay of one abort workload needs: ``tp.simulate`` (analytic, clone,
    width 4, no head, the given runner) with its aborts, as ``({step: requests aborted},
    engine iterations [(step, ScheduledStep | None)], {step: pool_cache_bytes})``; ``None``
    where tokpool refuses the workload (vLLM refuses the same)."""
    import tokpool as tp
    from tokpool.sim.schedule.aborts import abort_iterations
    from tokpool.sim.schedule.scheduler import engine_steps

    cfg = tp.SimConfig(
        hidden_size=4, dtype="float32", head_dtype=None, use_activation=False,
        max_num_batched_tokens=kw["max_num_batched_tokens"],
        max_num_seqs=kw["max_num_seqs"], enable_chunked_prefill=kw["enable_chunked_prefill"],
        long_prefill_token_threshold=kw["long_prefill_token_threshold"],
        kv_cache_blocks=kw["kv_cache_blocks"], block_size=kw["block_size"],
        async_scheduling=kw["async_scheduling"], model_runner=model_runner, policy="clone")
    try:
        res = tp.simulate(kw["prompt_lens"], cfg, mode="analytic", aborts=kw["aborts"],
                          arrival_steps=kw["arrival_steps"])
    except ValueError:
        return None
    aborted_at: dict[int, list[int]] = {}
    for o in res.aborts.itertuples():
        if o.outcome == "aborted":
            aborted_at.setdefault(o.step, []).append(o.request)
    outcomes = abort_outcomes(res.schedule, kw["aborts"], async_scheduling=cfg.async_scheduling)
    plan = abort_iterations(engine_steps(res.schedule, async_scheduling=cfg.async_scheduling),
                            outcomes)
    return aborted_at, plan, dict(zip(res.steps["step"], res.steps["pool_cache_bytes"],
                                      strict=True))


def runner_replays(seed: int, model_runner: str, n: int):
    """The first ``n`` random abort workloads of the seeded stream ``seed``, each that tokpool
    does not refuse with ``runner_replay``'s answer and a fresh vLLM ``AllPool``: yields
    ``(index, workload, aborted_at, plan, cache, pool)``."""
    from test_parity_vllm import make_vllm_pool
    from vllm.config import VllmConfig

    rng = random.Random(seed)
    vllm_config = VllmConfig()
    for w in range(n):
        kw = random_workload(rng)
        kw["aborts"] = random_aborts(rng, kw)
        replay = runner_replay(kw, model_runner)
        if replay is None:
            continue  # refused (tests/test_parity_schedule.py: vLLM refuses the same)
        pool = make_vllm_pool(vllm_config, "ALL", chunked=kw["enable_chunked_prefill"],
                              async_=kw["async_scheduling"])
        yield (w, kw, *replay, pool)


def pool_step(pool, step, lens, states: dict, gen) -> None:
    """One engine step through vLLM's ``AllPool``: ``PoolingMetadata`` of the step's chunks
    with each request's ``PoolingStates`` from ``states``, on fresh hidden states
    ``[tokens, 4]``."""
    import numpy as np
    import torch
    from vllm.pooling_params import PoolingParams
    from vllm.v1.pool.metadata import PoolingMetadata as VMeta

    reqs = [r for r, _, _ in step.chunks]
    scheduled = [stop - start for _, start, stop in step.chunks]
    meta = VMeta(prompt_lens=torch.tensor([lens[r] for r in reqs]),
                 prompt_token_ids=None, prompt_token_ids_cpu=None,
                 pooling_params=[PoolingParams(task="token_embed") for _ in reqs],
                 pooling_states=[states[r] for r in reqs])
    meta.build_pooling_cursor(np.array(scheduled),
                              torch.tensor([stop for _, _, stop in step.chunks]),
                              torch.device("cpu"))
    pool(torch.randn(sum(scheduled), 4, generator=gen), meta)  # a fresh step output


def test_random_aborts_schedule_as_vllm(parity_count):
    rng = random.Random(46)
    failures = []
    seen = {"aborted": 0, "no-op": 0, "output dropped": 0, "async": 0, "preempted then "
            "aborted": 0, "refused": 0}
    compared = 0
    for w in range(NUM_WORKLOADS):
        kw = random_workload(rng)
        kw["aborts"] = random_aborts(rng, kw)
        task = rng.choice(TASKS)
        log: list[tuple[int, int, bool]] = []
        diffs, counts = _compare(kw | {"abort_log": log}, task, ours_drop=("abort_log",))
        seen["refused"] += counts["refused"]
        if not diffs and not counts["refused"]:
            steps = schedule(task=task, **kw)
            outcomes = abort_outcomes(steps, kw["aborts"],
                                      async_scheduling=kw["async_scheduling"])
            ours = sorted((o.request, o.step, o.outcome != "no-op") for o in outcomes)
            if ours != sorted(log):
                diffs.append(f"abort outcomes: vLLM {sorted(log)} tokpool {ours}")
            for o in outcomes:
                seen[o.outcome] += 1
                preempted = {r for s in steps if s.index < o.step for r in s.preempted}
                seen["preempted then aborted"] += (o.outcome == "aborted"
                                                   and o.request in preempted)
            seen["async"] += kw["async_scheduling"]
            compared += len(outcomes)
        if diffs:
            failures.append(f"workload {w}: {kw}\n" + "\n".join(diffs[:4]))
    parity_count("abort workloads (equal schedules and outcomes)", NUM_WORKLOADS - len(failures))
    parity_count("aborts compared with finish_requests", compared)
    parity_count("abort differences", len(failures))
    assert not failures, f"{len(failures)} of {NUM_WORKLOADS} differ:\n" + "\n\n".join(
        failures[:3])
    assert min(seen[k] for k in ("aborted", "no-op", "output dropped", "async",
                                 "preempted then aborted")) >= 3, seen


def test_simulate_with_aborts_on_vllms_schedule(parity_count):
    """``tp.simulate(..., aborts=..., scheduler="vllm")``: the step loop on vLLM's schedule
    with the aborts frees the same bytes in the same steps as on tokpool's."""
    import pandas as pd

    import tokpool as tp

    rng = random.Random(4646)
    for i in range(40):
        kw = random_workload(rng)
        aborts = random_aborts(rng, kw)
        cfg = tp.SimConfig(
            hidden_size=4, max_num_batched_tokens=kw["max_num_batched_tokens"],
            max_num_seqs=kw["max_num_seqs"], enable_chunked_prefill=kw["enable_chunked_prefill"],
            long_prefill_token_threshold=kw["long_prefill_token_threshold"],
            kv_cache_blocks=kw["kv_cache_blocks"], block_size=kw["block_size"],
            async_scheduling=kw["async_scheduling"], model_runner=("v1", "v2")[i % 2],
            policy=("clone", "prealloc", "offload", "legacy")[i % 4])
        mode = "tensor" if i % 2 else "analytic"
        run = {}
        for s in ("tokpool", "vllm"):
            try:
                run[s] = tp.simulate(kw["prompt_lens"], cfg, mode=mode, aborts=aborts,
                                     arrival_steps=kw["arrival_steps"], scheduler=s)
            except ValueError as err:
                run[s] = err
        if isinstance(run["tokpool"], ValueError):
            assert isinstance(run["vllm"], ValueError)
            continue
        ours, theirs = run["tokpool"], run["vllm"]
        assert ours.schedule == theirs.schedule
        pd.testing.assert_frame_equal(ours.steps, theirs.steps)
        pd.testing.assert_frame_equal(ours.requests, theirs.requests)
        pd.testing.assert_frame_equal(ours.aborts, theirs.aborts)
        parity_count("simulate(aborts=..., scheduler='vllm') runs (equal frames)")


def test_runner_state_after_aborts_is_vllms(parity_count):
    """Model Runner V2's pooling state through aborts, on vLLM's own objects: tokpool's
    schedule with the aborts (the events vLLM's scheduler emits, checked above) replayed
    through vLLM's ``PoolingRunner`` (a state per admitted request, ``remove_request`` for
    every id in ``finished_req_ids`` or ``preempted_req_ids``: an abort's in the abort's step)
    and vLLM's ``AllPool``; after every engine iteration the bytes vLLM's states hold equal
    tokpool's ``pool_cache_bytes`` (analytic mode), and an aborted request's state is gone."""
    import torch
    from vllm.v1.pool.metadata import PoolingStates as VStates
    from vllm.v1.worker.gpu.pool.pooling_runner import PoolingRunner

    import tokpool as tp

    gen = torch.Generator().manual_seed(46)
    compared = runs = freed = 0
    for _, kw, aborted_at, plan, cache, pool in runner_replays(464, "v2", NUM_WORKLOADS):
        runs += 1
        runner = object.__new__(PoolingRunner)
        runner.pooling_params, runner.pooling_states, runner.prompt_token_ids = {}, {}, {}
        for index, step in plan:
            for r in aborted_at.get(index, ()):  # finished_req_ids: GPUModelRunner.finish_requests
                had = r in runner.pooling_states
                runner.remove_request(r)
                freed += had
            if step is not None:
                for r in step.preempted:  # V2: preempted ids join finished_req_ids
                    runner.remove_request(r)
                for r, start, _ in step.chunks:
                    if start == 0 or r not in runner.pooling_states:
                        runner.pooling_states[r] = VStates()  # add_request: a fresh state
                pool_step(pool, step, kw["prompt_lens"], runner.pooling_states, gen)
                for r in step.finished:  # the runner drops a finished request's state
                    runner.remove_request(r)
            held = tp.owned_bytes([t for s in runner.pooling_states.values()
                                   for t in s.hidden_states_cache])
            assert held == cache[index], (kw, index)
            assert not any(r in runner.pooling_states for r in aborted_at.get(index, ()))
            compared += 1
    parity_count("abort runs replayed through vLLM's PoolingRunner + AllPool", runs)
    parity_count("engine iterations with equal held bytes (runner state)", compared)
    assert runs >= NUM_WORKLOADS // 2 and freed >= 10
