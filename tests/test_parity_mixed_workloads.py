"""Mixed-task workloads in the simulator against vLLM 0.33.0's ``DispatchPooler``, run here.

``tp.simulate`` runs a random workload mixing a token task with its sequence twin
(``tp.PoolingParams(task=...)``: ``token_embed`` with ``embed``, ``token_classify`` with
``classify``) on tokpool's own schedule (the scheduler that equals vLLM's:
tests/test_parity_schedule.py). vLLM's ``DispatchPooler`` (vllm/model_executor/layers/pooler/
special.py; ``AllPool`` in a ``TokenPooler`` beside ``LastPool`` in a ``SequencePooler``, heads
built as tests/test_parity_mixed_tasks.py builds them) is then driven on THAT schedule, step by
step, with the same hidden states written into one reused buffer. Compared: every delivered
output (``torch.equal`` to tokpool's tensor-mode output, dtype too) and, at the end of every
step, the bytes each task's pooling states own (``tp.owned_bytes`` of vLLM's
``hidden_states_cache``) against ``SimResult.by_task.cache_bytes`` of the analytic run. Sync and
async scheduling. The counts go to the terminal summary (``parity_count``).

Needs vLLM 0.33.0 (``make vllm``); the module skips with the reason otherwise.
"""

from __future__ import annotations

import random

import pytest
import torch
from sweep_sizes import sample_size

import tokpool as tp
from tokpool.sim.backends.source import default_source
from tokpool.sim.backends.tensor import make_classifier
from tokpool.sim.schedule.scheduler import engine_steps

pytestmark = pytest.mark.parity

vllm = pytest.importorskip("vllm", reason="vLLM 0.33.0 is needed (make vllm)")

from test_parity_mixed_tasks import PAIRS, _poolers, vllm_metadata  # noqa: E402
from vllm.v1.pool.metadata import PoolingStates as VStates  # noqa: E402

WIDTH = 6
LABELS = 3
NUM_WORKLOADS = sample_size(full=400, sample=200)


def _vllm_dispatch(vllm_config, cfg: tp.SimConfig, family: str):
    """vLLM's dispatch pooler for the family, heads as tests/test_parity_mixed_tasks.py builds
    them (float32), with the simulator's seeded classifier (``backends.tensor.
    make_classifier``)."""
    classifier = make_classifier(cfg) if family == "classify" else None
    return _poolers(vllm_config, family, async_=cfg.async_scheduling, classifier=classifier)[0]


def _workload(rng: random.Random, family: str, async_: bool):
    engine_task = rng.choice(PAIRS[family])  # the engine's task: either of the pair
    cfg = tp.SimConfig(
        task=engine_task, hidden_size=WIDTH, num_labels=LABELS, dtype="float32",
        head_dtype="float32", use_activation=True, policy="clone",
        classifier="pooler_head" if family == "classify" else None,
        max_num_batched_tokens=rng.randint(4, 24), max_num_seqs=rng.randint(2, 4),
        enable_chunked_prefill=True, async_scheduling=async_)
    lens = [rng.randint(1, 40) for _ in range(rng.randint(2, 6))]
    tasks = [rng.choice(PAIRS[family]) for _ in lens]
    arrivals = [rng.randint(0, 3) for _ in lens]
    params = [tp.PoolingParams(task=t) for t in tasks]
    return cfg, lens, tasks, arrivals, params



@pytest.fixture(scope="module")
def vllm_config():
    from vllm.config import VllmConfig

    return VllmConfig()


@pytest.mark.parametrize("family", ["embed", "classify"])
@pytest.mark.parametrize("async_", [False, True])
def test_simulated_mixed_workloads_match_vllms_dispatch_pooler(vllm_config, parity_count,
                                                               family, async_):
    rng = random.Random(f"mixed-sim{family}{async_}")
    n_workloads = NUM_WORKLOADS // 4
    mixed_steps = outputs = 0
    for _ in range(n_workloads):
        cfg, lens, tasks, arrivals, params = _workload(rng, family, async_)
        run = tp.simulate(lens, cfg, mode="tensor", arrival_steps=arrivals,
                          pooling_params=params)
        analytic = tp.simulate(lens, cfg, mode="analytic", arrival_steps=arrivals,
                               pooling_params=params)
        assert run.corrupted == []
        held = {}
        if analytic.by_task is not None:
            held = {(s, t): b for s, t, b in analytic.by_task[["step", "task", "cache_bytes"]]
                    .itertuples(index=False)}
        vdispatch = _vllm_dispatch(vllm_config, cfg, family)
        source = default_source(cfg)  # the hidden states tokpool's run wrote
        source.prepare(lens)
        buffer = torch.empty(max(s.num_tokens for s in run.schedule), WIDTH)
        states: dict[int, VStates] = {}
        for index, step in engine_steps(run.schedule, async_scheduling=async_):
            if step is None:
                continue  # a collect-only iteration: no pooling
            for r, start, _ in step.chunks:
                if start == 0:
                    states[r] = VStates()
            n_tokens = step.num_tokens
            buffer.normal_()  # the step rewrites the reused memory
            hidden = buffer[:n_tokens]  # [n_tokens, WIDTH], a view of the reused buffer
            source.fill(hidden, step.chunks)
            reqs = [r for r, _, _ in step.chunks]
            scheduled = [stop - start for _, start, stop in step.chunks]
            seq_lens = [stop for _, _, stop in step.chunks]
            vmeta = vllm_metadata([lens[r] for r in reqs], [tasks[r] for r in reqs],
                                  [states[r] for r in reqs], scheduled, seq_lens)
            with torch.no_grad():
                v_out = vdispatch(hidden, vmeta)
            mixed_steps += len({tasks[r] for r in reqs}) > 1
            for r, v in zip(reqs, v_out, strict=True):
                if r not in step.finished:
                    continue  # unfinished: the runner takes no output (sequence rows too)
                t = run.outputs[r]
                assert torch.equal(t, v.cpu()) and t.dtype == v.dtype, (tasks[r], lens[r])
                outputs += 1
                parity_count("simulated mixed-task outputs (torch.equal to vLLM's)")
                del states[r]  # the runner drops a finished request's state
            for task in sorted(set(tasks)):  # what each task's states own at the step's end
                owned = sum(tp.owned_bytes(list(s.hidden_states_cache))
                            for r, s in states.items() if tasks[r] == task)
                if held:
                    assert held[index, task] == owned, (index, task)
                else:  # every request runs the engine's task: nothing mixed to report
                    assert owned == analytic.steps.set_index("step").loc[
                        index, "pool_cache_bytes"]
                parity_count("simulated mixed-task held bytes (per step and task)")
    parity_count("simulated mixed-task random workloads (vs vLLM's DispatchPooler)",
                 n_workloads)
    parity_count("simulated mixed-task steps (two tasks in one step)", mixed_steps)
    assert mixed_steps >= n_workloads // 2 and outputs > n_workloads
