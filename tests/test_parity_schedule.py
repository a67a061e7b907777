"""Schedule parity: tokpool's scheduler against vLLM 0.33.0's own V1 ``Scheduler``, run here.

``tokpool.sim.vllm_run.vllm_schedule`` drives vLLM's ``Scheduler``/``AsyncScheduler`` and
``KVCacheManager`` step by step with fake model outputs (as ``EngineCore.step`` /
``step_with_batch_queue`` call them); ``tokpool.sim.schedule.scheduler.schedule`` must give the same
steps on seeded random workloads covering the budget, ``max_num_seqs``, KV blocks (too few:
preemption), ``long_prefill_token_threshold``, chunked prefill on and off, async scheduling,
arrival steps, block sizes and pooling tasks. Compared step by step: the step index, the chunks
in row order, who finished (row order), who was preempted, the KV blocks held; and which
workloads both refuse (ValueError). The counts go to the terminal summary (``parity_count``).

Needs vLLM 0.33.0 (``make vllm``); the module skips with the reason otherwise.
"""

from __future__ import annotations

import random

import pytest
from test_schedule_rules import RULE_CASES, as_table

from tokpool.sim.schedule.given import check_schedule
from tokpool.sim.schedule.scheduler import engine_steps, schedule
from tokpool.sim.vllm_run import vllm_scheduler_unavailable_reason
from tokpool.vllm_bridge import VLLM_REFERENCE_VERSION

pytestmark = pytest.mark.parity

_reason = vllm_scheduler_unavailable_reason()
if _reason is not None:
    pytest.skip(f"schedule parity skipped: {_reason}", allow_module_level=True)

import vllm  # noqa: E402

if vllm.__version__ != VLLM_REFERENCE_VERSION:
    pytest.skip(
        f"schedule parity skipped: vLLM {vllm.__version__} is installed, tokpool's scheduler "
        f"follows {VLLM_REFERENCE_VERSION} (`make vllm` installs it)",
        allow_module_level=True,
    )

from tokpool.sim.vllm_run import vllm_schedule  # noqa: E402

NUM_WORKLOADS = 1200
TASKS = ("token_embed", "embed", "token_classify", "classify")


def random_workload(rng: random.Random) -> dict:
    """One workload: flags drawn from small sets (vLLM's engine config is cached per set)."""
    chunked = rng.random() < 0.7
    budget = rng.choice((16, 32, 48, 64, 128, 256))
    n = rng.randint(1, 8)
    cap = 400 if chunked else budget
    lens = [rng.randint(1, cap) if rng.random() < 0.7 else rng.randint(1, 20) for _ in range(n)]
    threshold = rng.choice((None, None, 8, 24, 50))
    if threshold and not chunked and threshold > budget:
        threshold = None  # vLLM: threshold <= max_model_len (= the budget without chunking)
    block = rng.choice((16, 16, 16, 8, 32))
    need = [-(-x // block) for x in lens]
    blocks = None
    if rng.random() < 0.6:  # from "only the largest prompt fits" to "all fit at once"
        blocks = rng.randint(max(need) + 1, sum(need) + 2)
        if rng.random() < 0.05:
            blocks = max(need)  # one block short (the null block): both refuse
    return {
        "prompt_lens": lens,
        "max_num_batched_tokens": budget,
        "max_num_seqs": min(budget, rng.choice((1, 2, 3, 4, 8, 256))),
        "enable_chunked_prefill": chunked,
        "long_prefill_token_threshold": threshold,
        "kv_cache_blocks": blocks,
        "block_size": block,
        "arrival_steps": [rng.randint(0, 6) for _ in lens] if rng.random() < 0.3 else None,
        "async_scheduling": rng.random() < 0.4,
    }


def _outcome(fn, **kw):
    try:
        return fn(**kw)
    except ValueError as err:
        return err


def _compare(kw: dict, task: str) -> tuple[list[str], dict[str, int]]:
    """Differences between vLLM's and tokpool's schedules (empty: equal), and counts."""
    theirs = _outcome(vllm_schedule, task=task, **kw)
    ours = _outcome(schedule, **kw)
    counts = {"steps": 0, "chunks": 0, "preemptions": 0, "refused": 0}
    if isinstance(theirs, ValueError) or isinstance(ours, ValueError):
        if isinstance(theirs, ValueError) and isinstance(ours, ValueError):
            counts["refused"] = 1
            return [], counts
        return [f"vLLM: {theirs!r}\ntokpool: {ours!r}"], counts
    diffs = []
    try:  # vLLM's schedule is one the step loop accepts as a given schedule, every limit
        # replayed by tokpool's scheduler rules (KV blocks included, counted the same)
        check_schedule(theirs, kw["prompt_lens"],
                       max_num_batched_tokens=kw["max_num_batched_tokens"],
                       enable_chunked_prefill=kw["enable_chunked_prefill"],
                       long_prefill_token_threshold=kw["long_prefill_token_threshold"],
                       max_num_seqs=kw["max_num_seqs"], kv_cache_blocks=kw["kv_cache_blocks"],
                       block_size=kw["block_size"], async_scheduling=kw["async_scheduling"])
    except ValueError as err:
        diffs.append(f"check_schedule refuses vLLM's schedule: {err}")
    if len(theirs) != len(ours):
        diffs.append(f"{len(theirs)} steps (vLLM) vs {len(ours)} (tokpool)")
    for a, b in zip(theirs, ours, strict=False):  # a length difference is reported above
        same = (a.index == b.index and a.chunks == b.chunks and a.finished == b.finished
                and sorted(a.preempted) == sorted(b.preempted) and a.kv_blocks == b.kv_blocks)
        if not same:
            diffs.append(f"vLLM {a}\ntokpool {b}")
        counts["steps"] += 1
        counts["chunks"] += len(a.chunks)
        counts["preemptions"] += len(a.preempted)
    return diffs, counts


def test_issue_example_is_what_vllm_schedules():
    """Issue 19's check on vLLM's own scheduler: prompts [150, 40, 90] at budget 64."""
    steps = vllm_schedule([150, 40, 90], max_num_batched_tokens=64, max_num_seqs=8,
                          enable_chunked_prefill=True)
    assert [{r: b - a for r, a, b in s.chunks} for s in steps] == [
        {0: 64}, {0: 64}, {0: 22, 1: 40, 2: 2}, {2: 64}, {2: 24}]


@pytest.mark.parametrize("name", [name for name, _, _ in RULE_CASES])
def test_rule_cases_are_what_vllm_schedules(name, parity_count):
    """Each hand-derived case of tests/test_schedule_rules.py, run through vLLM itself."""
    kw, expected = next((kw, e) for n, kw, e in RULE_CASES if n == name)
    assert as_table(vllm_schedule(**kw)) == expected
    parity_count("schedule rule cases (equal steps)")


def test_random_workloads_schedule_step_by_step_as_vllm(parity_count):
    rng = random.Random(19)
    totals = {"steps": 0, "chunks": 0, "preemptions": 0, "refused": 0}
    seen = {"async": 0, "unchunked": 0, "threshold": 0, "arrivals": 0, "preempting": 0,
            "one_seq": 0}
    failures = []
    for w in range(NUM_WORKLOADS):
        kw = random_workload(rng)
        diffs, counts = _compare(kw, rng.choice(TASKS))
        if diffs:
            failures.append(f"workload {w}: {kw}\n" + "\n".join(diffs[:4]))
        for k, v in counts.items():
            totals[k] += v
        seen["async"] += kw["async_scheduling"]
        seen["unchunked"] += not kw["enable_chunked_prefill"]
        seen["threshold"] += kw["long_prefill_token_threshold"] is not None
        seen["arrivals"] += kw["arrival_steps"] is not None
        seen["preempting"] += counts["preemptions"] > 0
        seen["one_seq"] += kw["max_num_seqs"] == 1
    parity_count("schedule workloads (equal schedules)", NUM_WORKLOADS - len(failures))
    parity_count("schedule steps compared", totals["steps"])
    parity_count("schedule chunks compared", totals["chunks"])
    parity_count("schedule preemptions compared", totals["preemptions"])
    parity_count("schedule workloads both refuse (ValueError)", totals["refused"])
    parity_count("schedule differences", len(failures))
    assert not failures, f"{len(failures)} of {NUM_WORKLOADS} workloads differ:\n" + "\n\n".join(
        failures[:3])
    # the random set exercises every rule (not a test that cannot fail: vacuous coverage fails)
    assert min(seen.values()) >= 20, seen
    assert totals["refused"] >= 5 and totals["steps"] >= 10 * NUM_WORKLOADS, totals


def test_engine_steps_on_vllms_schedule():
    """The collect-only iterations tokpool's loop adds under async sit where vLLM's engine
    scheduled nothing: never on a step index vLLM computed."""
    rng = random.Random(5)
    for _ in range(50):
        kw = random_workload(rng) | {"async_scheduling": True}
        steps = _outcome(vllm_schedule, **kw)
        if isinstance(steps, ValueError):
            continue
        computed = {s.index for s in steps}
        plan = engine_steps(steps, async_scheduling=True)
        assert all(i not in computed for i, s in plan if s is None)
        assert [s for _, s in plan if s is not None] == steps


def test_simulate_with_vllms_scheduler_equals_tokpools(parity_count):
    """``tp.simulate(..., scheduler="vllm")``: the backends run on vLLM's schedule unchanged
    and every frame equals the default's (tensor mode: outputs checked against the oracle)."""
    import pandas as pd

    import tokpool as tp

    rng = random.Random(23)
    for i in range(40):
        kw = random_workload(rng)
        cfg = tp.SimConfig(
            hidden_size=4, max_num_batched_tokens=kw["max_num_batched_tokens"],
            max_num_seqs=kw["max_num_seqs"], enable_chunked_prefill=kw["enable_chunked_prefill"],
            long_prefill_token_threshold=kw["long_prefill_token_threshold"],
            kv_cache_blocks=kw["kv_cache_blocks"], block_size=kw["block_size"],
            async_scheduling=kw["async_scheduling"],
            policy=("clone", "prealloc", "offload", "legacy")[i % 4])
        mode = "tensor" if i % 2 else "analytic"
        run = {s: _outcome(tp.simulate, prompt_lens=kw["prompt_lens"], config=cfg, mode=mode,
                           arrival_steps=kw["arrival_steps"], scheduler=s)
               for s in ("tokpool", "vllm")}
        if isinstance(run["tokpool"], ValueError):
            assert isinstance(run["vllm"], ValueError)
            continue
        ours, theirs = run["tokpool"], run["vllm"]
        assert ours.schedule == theirs.schedule
        pd.testing.assert_frame_equal(ours.steps, theirs.steps)
        pd.testing.assert_frame_equal(ours.requests, theirs.requests)
        assert ours.corrupted == theirs.corrupted
        parity_count("simulate(scheduler='vllm') runs (equal frames)")
