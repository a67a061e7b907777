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
from sweep_sizes import sample_size, scaled
from test_schedule_rules import RULE_CASES, as_table

from tokpool.pooler.vllm_bridge import VLLM_REFERENCE_VERSION
from tokpool.sim.schedule.given import check_schedule
from tokpool.sim.schedule.scheduler import engine_steps, schedule
from tokpool.sim.vllm_run import vllm_scheduler_unavailable_reason

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

# make test: the first workloads of each seeded stream; CI (TOKPOOL_FULL=1): all of them
NUM_WORKLOADS = sample_size(full=1200, sample=300)
NUM_PREFIX_WORKLOADS = sample_size(full=300, sample=75)
NUM_SLIDING_WORKLOADS = sample_size(full=300, sample=75)
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


class _NotGiven(Exception):
    """A schedule with aborts: not one ``check_schedule`` replays."""


def _compare(kw: dict, task: str, ours_drop: tuple[str, ...] = ()
             ) -> tuple[list[str], dict[str, int]]:
    """Differences between vLLM's and tokpool's schedules (empty: equal), and counts
    (``ours_drop``: arguments only vLLM's driver takes)."""
    theirs = _outcome(vllm_schedule, task=task, **kw)
    ours = _outcome(schedule, task=task, **{k: v for k, v in kw.items() if k not in ours_drop})
    counts = {"steps": 0, "chunks": 0, "preemptions": 0, "refused": 0, "hits": 0,
              "resumed from the cache": 0}
    if isinstance(theirs, ValueError) or isinstance(ours, ValueError):
        if isinstance(theirs, ValueError) and isinstance(ours, ValueError):
            counts["refused"] = 1
            return [], counts
        return [f"vLLM: {theirs!r}\ntokpool: {ours!r}"], counts
    diffs = []
    try:  # vLLM's schedule is one the step loop accepts as a given schedule, every limit
        if kw.get("aborts"):
            raise _NotGiven  # a given schedule has no aborts (it ends every prompt)
        # replayed by tokpool's scheduler rules (KV blocks included, counted the same)
        check_schedule(theirs, kw["prompt_lens"],
                       max_num_batched_tokens=kw["max_num_batched_tokens"],
                       enable_chunked_prefill=kw["enable_chunked_prefill"],
                       long_prefill_token_threshold=kw["long_prefill_token_threshold"],
                       reads_prefix_cache=kw.get("enable_prefix_caching", False)
                       and task in ("embed", "classify"),
                       max_num_seqs=kw["max_num_seqs"], kv_cache_blocks=kw["kv_cache_blocks"],
                       block_size=kw["block_size"], async_scheduling=kw["async_scheduling"],
                       kv_cache_groups=kw.get("kv_cache_groups", (None,)),
                       max_model_len=kw.get("max_model_len"),
                       prompt_token_ids=kw.get("prompt_token_ids"),
                       arrival_steps=kw.get("arrival_steps"))
    except ValueError as err:
        diffs.append(f"check_schedule refuses vLLM's schedule: {err}")
    except _NotGiven:
        pass
    if len(theirs) != len(ours):
        diffs.append(f"{len(theirs)} steps (vLLM) vs {len(ours)} (tokpool)")
    for a, b in zip(theirs, ours, strict=False):  # a length difference is reported above
        same = (a.index == b.index and a.chunks == b.chunks and a.finished == b.finished
                and sorted(a.preempted) == sorted(b.preempted) and a.kv_blocks == b.kv_blocks
                and a.cached == b.cached)
        if not same:
            diffs.append(f"vLLM {a}\ntokpool {b}")
        counts["steps"] += 1
        counts["chunks"] += len(a.chunks)
        counts["preemptions"] += len(a.preempted)
        counts["hits"] += len(a.cached)
    preempted = {r for step in theirs for r in step.preempted}
    counts["resumed from the cache"] = sum(r in preempted for step in theirs
                                           for r, _ in step.cached)
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
    totals = {"steps": 0, "chunks": 0, "preemptions": 0, "refused": 0, "hits": 0,
              "resumed from the cache": 0}
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
    assert min(seen.values()) >= scaled(20, 1200, NUM_WORKLOADS), seen
    assert totals["refused"] >= scaled(5, 1200, NUM_WORKLOADS), totals
    assert totals["steps"] >= 10 * NUM_WORKLOADS, totals


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


def kv_cache_workload(rng: random.Random, *, sliding: bool) -> dict:
    """A workload for prefix caching (vLLM's default for causal pooling models) and KV-cache
    groups: prompts as token ids drawn from a few shared prefixes (duplicates too), caches
    tight enough to preempt, thresholds that run requests side by side, sliding-window and
    hybrid groups, ``max_model_len`` given or not."""
    chunked = rng.random() < 0.8
    budget = rng.choice((16, 32, 48, 64, 128))
    block = rng.choice((16, 16, 32))
    families = [[rng.randint(0, 5) for _ in range(300)] for _ in range(rng.randint(1, 3))]
    ids: list[list[int]] = []
    for _ in range(rng.randint(1, 7)):
        n = rng.randint(1, 300 if chunked else budget) if rng.random() < 0.85 else rng.randint(
            1, 20)
        if ids and rng.random() < 0.15:
            ids.append(list(rng.choice(ids)))  # the same prompt again
            continue
        shared = rng.randint(0, n)
        ids.append(rng.choice(families)[:shared] + [rng.randint(6, 99)
                                                    for _ in range(n - shared)])
    lens = [len(x) for x in ids]
    window = rng.choice((17, 32, 48, 64, 100))
    groups = rng.choice([(window,), (window, None), (window, window, None), (None, window),
                         (window, 2 * window, None)]) if sliding else (None,)
    threshold = rng.choice((None, 8, 16, 24, 50))
    if threshold and not chunked and threshold > budget:
        threshold = None
    need = [-(-x // block) for x in lens]
    blocks = None
    if rng.random() < 0.8:  # from "only the largest prompt fits" to a little more
        blocks = rng.randint(max(need) + 1, max(need) + 1 + len(groups) * sum(need) // 2)
        if rng.random() < 0.05:
            blocks = max(need)  # one block short (the null block): both refuse or spin
    max_model_len = None
    if rng.random() < 0.5:
        max_model_len = max(lens) + rng.randint(0, 300) if chunked else budget
        if threshold and threshold > max_model_len:
            threshold = None  # SchedulerConfig refuses it at start-up (not a scheduling rule)
    return {
        "prompt_lens": lens, "prompt_token_ids": ids if rng.random() < 0.85 else None,
        "max_num_batched_tokens": budget,
        "max_num_seqs": min(budget, rng.choice((1, 2, 3, 4, 8, 256))),
        "enable_chunked_prefill": chunked, "long_prefill_token_threshold": threshold,
        "kv_cache_blocks": blocks, "block_size": block,
        "arrival_steps": [rng.randint(0, 6) for _ in lens] if rng.random() < 0.3 else None,
        "async_scheduling": rng.random() < 0.4, "kv_cache_groups": groups,
        "max_model_len": max_model_len,
        "enable_prefix_caching": rng.random() < (0.7 if sliding else 1.0),
    }


def _kv_cache_parity(rng: random.Random, n: int, *, sliding: bool, kind: str,
                     parity_count) -> dict:
    totals = {"steps": 0, "chunks": 0, "preemptions": 0, "refused": 0, "hits": 0,
              "resumed from the cache": 0, "workloads without the rule that differ": 0}
    failures = []
    for w in range(n):
        kw = kv_cache_workload(rng, sliding=sliding)
        task = rng.choice(("embed", "embed", "classify", "token_embed"))
        diffs, counts = _compare(kw, task)
        if diffs:
            failures.append(f"workload {w} ({task}): {kw}\n" + "\n".join(diffs[:4]))
        for k, v in counts.items():
            totals[k] += v
        # the same workload with the rule left out of tokpool's scheduler (what tokpool did
        # before): a layer that cannot fail would find no difference here
        without = kw | ({"kv_cache_groups": (None,)} if sliding
                        else {"enable_prefix_caching": False})
        theirs, ours = (_outcome(vllm_schedule, task=task, **kw),
                        _outcome(schedule, task=task, **without))
        if not (isinstance(theirs, ValueError) and isinstance(ours, ValueError)) and (
                isinstance(theirs, ValueError) or isinstance(ours, ValueError) or [
                (s.chunks, s.preempted) for s in theirs] != [(s.chunks, s.preempted)
                                                             for s in ours]):
            totals["workloads without the rule that differ"] += 1
    parity_count(f"{kind} workloads (equal schedules)", n - len(failures))
    for k, v in totals.items():
        parity_count(f"{kind} {k}", v)
    parity_count(f"{kind} differences", len(failures))
    assert not failures, f"{len(failures)} of {n} workloads differ:\n" + "\n\n".join(
        failures[:3])
    return totals


def test_prefix_caching_workloads_schedule_as_vllm(parity_count):
    """Prefix caching on (vLLM's default): shared token-id prefixes and preempted requests
    resuming from their cached blocks, step by step equal to vLLM's scheduler."""
    totals = _kv_cache_parity(random.Random(2701), NUM_PREFIX_WORKLOADS, sliding=False,
                              kind="prefix-caching", parity_count=parity_count)
    n = NUM_PREFIX_WORKLOADS  # the floors are the full run's, scaled to the sample
    assert totals["hits"] >= scaled(100, 300, n), totals
    assert totals["resumed from the cache"] >= scaled(10, 300, n), totals
    assert totals["preemptions"] >= scaled(30, 300, n) and totals["refused"] >= 1, totals
    assert totals["workloads without the rule that differ"] >= scaled(50, 300, n), totals


def test_sliding_window_workloads_schedule_as_vllm(parity_count):
    """Sliding-window and hybrid KV-cache groups (with and without prefix caching), step by
    step equal to vLLM's scheduler with those groups."""
    totals = _kv_cache_parity(random.Random(2702), NUM_SLIDING_WORKLOADS, sliding=True,
                              kind="sliding-window", parity_count=parity_count)
    n = NUM_SLIDING_WORKLOADS
    assert totals["preemptions"] >= scaled(10, 300, n), totals
    assert totals["hits"] >= scaled(30, 300, n), totals
    assert totals["workloads without the rule that differ"] >= scaled(50, 300, n), totals


def test_simulate_with_prefix_caching_on_vllms_schedule(parity_count):
    """``tp.simulate(..., scheduler="vllm")`` with prefix caching and token-id prompts: the
    backends run vLLM's schedule (cache hits included) and every frame equals tokpool's."""
    import pandas as pd

    import tokpool as tp

    rng = random.Random(2703)
    for i in range(30):
        kw = kv_cache_workload(rng, sliding=False)
        if kw["prompt_token_ids"] is None or kw["max_model_len"] is not None:
            kw["prompt_token_ids"] = kw["prompt_token_ids"] or [[r] * n for r, n in enumerate(
                kw["prompt_lens"])]
        cfg = tp.SimConfig(
            hidden_size=4, task=("embed", "classify")[i % 2], num_labels=2,
            max_num_batched_tokens=kw["max_num_batched_tokens"],
            max_num_seqs=kw["max_num_seqs"], enable_chunked_prefill=kw["enable_chunked_prefill"],
            long_prefill_token_threshold=kw["long_prefill_token_threshold"],
            kv_cache_blocks=kw["kv_cache_blocks"], block_size=kw["block_size"],
            async_scheduling=kw["async_scheduling"], rows_from="backbone")
        mode = "tensor" if i % 2 else "analytic"
        run = {s: _outcome(tp.simulate, prompt_lens=kw["prompt_token_ids"], config=cfg,
                           mode=mode, arrival_steps=kw["arrival_steps"], scheduler=s)
               for s in ("tokpool", "vllm")}
        if isinstance(run["tokpool"], ValueError):
            assert isinstance(run["vllm"], ValueError)
            continue
        ours, theirs = run["tokpool"], run["vllm"]
        assert ours.schedule == theirs.schedule
        pd.testing.assert_frame_equal(ours.steps, theirs.steps)
        pd.testing.assert_frame_equal(ours.requests, theirs.requests)
        assert ours.corrupted == theirs.corrupted == []
        parity_count("simulate(scheduler='vllm') with prefix caching (equal frames)")
