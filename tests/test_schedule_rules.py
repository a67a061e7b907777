"""tokpool's scheduler, rule by rule, as vLLM 0.33.0's running code decides (no vLLM needed).

Each case below was derived by hand from the vLLM function its test quotes, and
``tests/test_parity_schedule.py`` runs every case through vLLM's own ``Scheduler`` too
(``RULE_CASES``), so a case that misreads vLLM fails there.
"""

from __future__ import annotations

import sys

import pytest

from tokpool.sim.schedule.scheduler import schedule

BASE = {"max_num_seqs": 8, "enable_chunked_prefill": True}


def _case(lens, **kw):
    return {"prompt_lens": lens, **(BASE | kw)}


#: (name, schedule kwargs, expected [(index, {request: (start, stop)}, finished, preempted)])
RULE_CASES = [
    # Scheduler.schedule -> KVCacheManager.allocate_slots(full_sequence_must_fit=True)
    ("whole_prompt_admission",
     _case([40, 60], max_num_batched_tokens=64, kv_cache_blocks=6),
     [(0, {0: (0, 40)}, (0,), ()), (1, {1: (0, 60)}, (1,), ())]),
    # Scheduler.schedule: long_prefill_token_threshold is 0 when num_eligible_reqs <= 1
    ("threshold_lifted_alone",
     _case([100], max_num_batched_tokens=64, long_prefill_token_threshold=16),
     [(0, {0: (0, 64)}, (), ()), (1, {0: (64, 100)}, (0,), ())]),
    ("threshold_lifted_when_the_other_finished",
     _case([100, 10], max_num_batched_tokens=64, long_prefill_token_threshold=16),
     [(0, {0: (0, 16), 1: (0, 10)}, (1,), ()), (1, {0: (16, 80)}, (), ()),
      (2, {0: (80, 100)}, (0,), ())]),
    # Scheduler.schedule (waiting loop): the cap is applied before the no-chunking check
    ("threshold_without_chunking",
     _case([30, 30], max_num_batched_tokens=64, enable_chunked_prefill=False,
           long_prefill_token_threshold=10),
     [(0, {0: (0, 10), 1: (0, 10)}, (), ()), (1, {0: (10, 20), 1: (10, 20)}, (), ()),
      (2, {0: (20, 30), 1: (20, 30)}, (0, 1), ())]),
    # Scheduler.schedule (running loop): allocate_slots fails -> preempt self.running.pop()
    ("preemption_after_admission",
     _case([64, 64], max_num_batched_tokens=64, long_prefill_token_threshold=32,
           kv_cache_blocks=7),
     [(0, {0: (0, 32), 1: (0, 32)}, (), ()), (1, {0: (32, 64)}, (0,), (1,)),
      (2, {1: (0, 64)}, (1,), ())]),
    # BlockPool.__init__: null_block = free_block_queue.popleft() (one block never holds KV)
    ("null_block",
     _case([40, 40], max_num_batched_tokens=80, kv_cache_blocks=6),
     [(0, {0: (0, 40)}, (0,), ()), (1, {1: (0, 40)}, (1,), ())]),
    # EngineCore.step_with_batch_queue: step N+1 is scheduled before update_from_output(N)
    ("async_blocks_held_one_step",
     _case([40, 40], max_num_batched_tokens=40, kv_cache_blocks=4, async_scheduling=True),
     [(0, {0: (0, 40)}, (0,), ()), (2, {1: (0, 40)}, (1,), ())]),
    ("sync_blocks_freed_at_once",
     _case([40, 40], max_num_batched_tokens=40, kv_cache_blocks=4),
     [(0, {0: (0, 40)}, (0,), ()), (1, {1: (0, 40)}, (1,), ())]),
    ("async_slot_held_one_step",
     _case([10, 10], max_num_batched_tokens=10, max_num_seqs=1, async_scheduling=True),
     [(0, {0: (0, 10)}, (0,), ()), (2, {1: (0, 10)}, (1,), ())]),
    ("async_finished_counts_for_threshold",
     _case([10, 100], max_num_batched_tokens=64, long_prefill_token_threshold=16,
           async_scheduling=True),
     [(0, {0: (0, 10), 1: (0, 16)}, (0,), ()), (1, {1: (16, 32)}, (), ()),
      (2, {1: (32, 96)}, (), ()), (3, {1: (96, 100)}, (1,), ())]),
    # update_from_output: a preempted request whose pooler output was in flight finishes
    # (stopped_preempted_reqs): it is never scheduled again
    ("async_preempted_in_flight_finishes",
     _case([17, 1], max_num_batched_tokens=24, long_prefill_token_threshold=16,
           kv_cache_blocks=3, async_scheduling=True),
     [(0, {0: (0, 16), 1: (0, 1)}, (1,), ()), (1, {0: (16, 17)}, (0,), (1,))]),
    # a call that preempts and then schedules nothing (async: request 1 needs a 4th block while
    # request 0's finished blocks are in flight, and preempts itself): told with the next step
    ("async_preemption_in_an_empty_call",
     _case([47, 51, 16], max_num_batched_tokens=128, enable_chunked_prefill=False,
           long_prefill_token_threshold=24, kv_cache_blocks=7, async_scheduling=True),
     [(0, {0: (0, 24), 1: (0, 24), 2: (0, 16)}, (2,), ()),
      (1, {0: (24, 47), 1: (24, 48)}, (0,), (2,)), (3, {1: (0, 51)}, (1,), (1,))]),
    # SingleTypeKVCacheManager.get_num_blocks_to_allocate(apply_admission_cap=True): a
    # sliding-window group admits a request with SlidingWindowSpec.
    # max_admission_blocks_per_request blocks (ceil(min(31 + 64, 256) / 16) + 1 = 7 of the 9),
    # and SlidingWindowManager.remove_skipped_blocks frees the blocks before its window: a
    # 200-token prompt full attention never admits (13 blocks) runs
    ("sliding_window_admits_with_its_window",
     _case([200], max_num_batched_tokens=64, kv_cache_blocks=10, kv_cache_groups=(32,),
           max_model_len=256),
     [(0, {0: (0, 64)}, (), ()), (1, {0: (64, 128)}, (), ()), (2, {0: (128, 192)}, (), ()),
      (3, {0: (192, 200)}, (0,), ())]),
    # ... and two of them run side by side where full attention preempts one
    ("sliding_window_runs_two_where_full_attention_preempts",
     _case([200, 200], max_num_batched_tokens=64, kv_cache_blocks=16, kv_cache_groups=(32,),
           max_model_len=256, long_prefill_token_threshold=32),
     [(i, {0: (32 * i, 32 * i + 32), 1: (32 * i, 32 * i + 32)}, (), ()) for i in range(6)]
     + [(6, {0: (192, 200), 1: (192, 200)}, (0, 1), ())]),
    # a hybrid model (HybridKVCacheCoordinator): its full-attention group still grows
    ("hybrid_groups_share_one_pool",
     _case([200, 200], max_num_batched_tokens=64, kv_cache_blocks=30,
           kv_cache_groups=(32, None), max_model_len=256, long_prefill_token_threshold=32),
     [(i, {0: (32 * i, 32 * i + 32), 1: (32 * i, 32 * i + 32)}, (), ()) for i in range(5)]
     + [(5, {0: (160, 192)}, (), (1,)), (6, {0: (192, 200)}, (0,), ()),
        (7, {1: (0, 64)}, (), ()), (8, {1: (64, 128)}, (), ()), (9, {1: (128, 192)}, (), ()),
        (10, {1: (192, 200)}, (1,), ())]),
    # KVCacheManager.get_computed_blocks: a preempted embed request resumes after its blocks
    # still in the prefix cache (BlockPool.free_blocks evicts a request's tail blocks first)
    ("prefix_cache_resumes_a_preempted_request",
     _case([128, 128], max_num_batched_tokens=64, kv_cache_blocks=11,
           long_prefill_token_threshold=32, enable_prefix_caching=True, task="embed"),
     [(0, {0: (0, 32), 1: (0, 32)}, (), ()), (1, {0: (32, 64), 1: (32, 64)}, (), ()),
      (2, {0: (64, 96)}, (), (1,)), (3, {0: (96, 128)}, (0,), ()), (4, {1: (32, 96)}, (), ()),
      (5, {1: (96, 128)}, (1,), ())]),
    # PoolingParams._merge_default_parameters: token tasks skip reading it (from token 0)
    ("token_tasks_skip_the_prefix_cache",
     _case([128, 128], max_num_batched_tokens=64, kv_cache_blocks=11,
           long_prefill_token_threshold=32, enable_prefix_caching=True, task="token_embed"),
     [(0, {0: (0, 32), 1: (0, 32)}, (), ()), (1, {0: (32, 64), 1: (32, 64)}, (), ()),
      (2, {0: (64, 96)}, (), (1,)), (3, {0: (96, 128)}, (0,), ()), (4, {1: (0, 64)}, (), ()),
      (5, {1: (64, 128)}, (1,), ())]),
    # allocate_slots caches a request's blocks when they are allocated: a prompt admitted
    # after another in the same step hits them, up to num_tokens - 1 and whole blocks
    ("prefix_cache_hit_in_the_same_step",
     _case([40, 40], max_num_batched_tokens=80, enable_prefix_caching=True, task="embed",
           prompt_token_ids=[list(range(40)), list(range(40))]),
     [(0, {1: (32, 40), 0: (0, 40)}, (0, 1), ())]),
]


def as_table(steps):
    """Steps as ``(index, {request: (start, stop)}, finished, sorted preempted)``."""
    return [(s.index, {r: (a, b) for r, a, b in s.chunks}, tuple(sorted(s.finished)),
             tuple(sorted(s.preempted))) for s in steps]


def _run(name):
    kw, expected = next((kw, e) for n, kw, e in RULE_CASES if n == name)
    assert as_table(schedule(**kw)) == expected


def test_whole_prompt_must_fit_to_admit():
    """vLLM 0.33.0 ``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule`` passes
    ``full_sequence_must_fit=self.scheduler_reserve_full_isl`` (``SchedulerConfig``, default
    True) to ``vllm/v1/core/kv_cache_manager.py`` ``KVCacheManager.allocate_slots``: a
    waiting request is admitted only when its whole prompt's blocks are free. Request 1
    (60 tokens, 4 blocks) waits while request 0 holds 3 of the 5 usable blocks, though its
    first 24-token chunk would fit."""
    _run("whole_prompt_admission")


def test_threshold_does_not_apply_to_a_lone_request():
    """``Scheduler.schedule``: ``long_prefill_token_threshold = (...threshold if
    num_eligible_reqs > 1 else 0)`` with ``num_eligible_reqs`` = running + waiting
    (``get_request_counts``): nobody to starve, the whole budget goes to it."""
    _run("threshold_lifted_alone")
    _run("threshold_lifted_when_the_other_finished")


def test_threshold_caps_even_without_chunked_prefill():
    """``Scheduler.schedule``'s waiting loop applies ``long_prefill_token_threshold`` before
    its ``if not enable_chunked_prefill and num_new_tokens > request_token_budget: break``
    check, so a capped prompt is prefilled in chunks even with chunked prefill off."""
    _run("threshold_without_chunking")


def test_preemption_still_happens_after_admission():
    """Whole-prompt admission checks the FREE blocks, not what running requests will still
    need: in ``Scheduler.schedule``'s running loop ``allocate_slots`` fails and
    ``self.running.pop()`` (request 1, itself) is preempted (``_preempt_request``: blocks
    freed, ``num_computed_tokens = 0``, prepended to ``waiting``), no waiting request is
    admitted that step (``if not preempted_reqs``)."""
    _run("preemption_after_admission")


def test_one_block_is_vllms_null_block():
    """``vllm/v1/core/block_pool.py`` ``BlockPool.__init__``: ``self.null_block =
    self.free_block_queue.popleft()``: of ``num_gpu_blocks`` blocks, one never holds KV. With
    6 blocks, two 40-token prompts (3 blocks each) cannot run together."""
    _run("null_block")
    with pytest.raises(ValueError, match="null block"):
        schedule([32], max_num_batched_tokens=64, max_num_seqs=8, enable_chunked_prefill=True,
                 kv_cache_blocks=2)  # 2 blocks, 1 usable: 16 tokens


def test_async_frees_a_finished_request_only_after_the_next_step_is_scheduled():
    """``vllm/v1/engine/core.py`` ``EngineCore.step_with_batch_queue`` (a queue of
    ``VllmConfig.max_concurrent_batches`` = 2 under async scheduling) schedules step N+1
    before ``Scheduler.update_from_output`` of step N, which is where a finished pooling
    request is freed (``_free_request``): its KV blocks and its ``max_num_seqs`` slot are still
    taken, and it still counts as running for the threshold rule, while step N+1 is
    scheduled (the step index it would have used stays empty)."""
    _run("async_blocks_held_one_step")
    _run("sync_blocks_freed_at_once")
    _run("async_slot_held_one_step")
    _run("async_finished_counts_for_threshold")


def test_async_preempted_request_with_its_last_chunk_in_flight_finishes():
    """``Scheduler.update_from_output``: a request preempted (``_preempt_request``) while the
    step that computed its last prompt token was in flight still gets that step's pooler
    output: ``request.pooling_params and pooler_output is not None`` -> FINISHED_STOPPED,
    removed from the waiting queue (``stopped_preempted_reqs``), never scheduled again."""
    _run("async_preempted_in_flight_finishes")


def test_a_preemption_in_a_call_that_schedules_nothing_is_told_with_the_next_step():
    """``Scheduler.schedule`` may preempt (``_preempt_request``) and then schedule no token;
    ``ScheduledStep.preempted`` of the next step that computes lists it, so the backends clean
    the request's pooling state before its prefill restarts."""
    _run("async_preemption_in_an_empty_call")


def test_unservable_configurations_are_errors_naming_the_flag():
    """A configuration vLLM cannot serve: without chunked prefill ``SchedulerConfig.
    verify_max_model_len`` refuses ``max_num_batched_tokens < max_model_len`` (an engine that
    accepts a longer prompt anyway breaks out of ``Scheduler.schedule``'s waiting loop every
    step and spins forever); a prompt whose blocks exceed the cache is never admitted
    (``allocate_slots(full_sequence_must_fit=True)`` returns None every step)."""
    with pytest.raises(ValueError, match=r"enable_chunked_prefill=True.*max-num-batched-tokens"):
        schedule([150], max_num_batched_tokens=64, max_num_seqs=8,
                 enable_chunked_prefill=False)
    with pytest.raises(ValueError, match="kv_cache_blocks"):
        schedule([100], max_num_batched_tokens=64, max_num_seqs=8, enable_chunked_prefill=True,
                 kv_cache_blocks=7)  # 6 usable blocks, 7 needed
    with pytest.raises(ValueError, match="kv_cache_blocks must be an int >= 2"):
        schedule([1], max_num_batched_tokens=64, max_num_seqs=8, enable_chunked_prefill=True,
                 kv_cache_blocks=1)


def test_issue_example():
    """Issue 19's check: prompts [150, 40, 90] at budget 64 (the real engine's schedule)."""
    steps = schedule([150, 40, 90], max_num_batched_tokens=64, max_num_seqs=8,
                     enable_chunked_prefill=True)
    assert [{r: b - a for r, a, b in s.chunks} for s in steps] == [
        {0: 64}, {0: 64}, {0: 22, 1: 40, 2: 2}, {2: 64}, {2: 24}]


def test_vllm_scheduler_without_vllm_says_how_to_install(monkeypatch):
    """``scheduler="vllm"`` with no importable vLLM: a VllmUnavailableError naming
    ``make vllm``."""
    from tokpool.pooler.vllm_bridge import VllmUnavailableError
    from tokpool.sim.vllm_run import scheduler as run

    monkeypatch.setattr(run, "_MODULES", {})
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(VllmUnavailableError, match="make vllm"):
        run.vllm_schedule([10], max_num_batched_tokens=8, max_num_seqs=8,
                          enable_chunked_prefill=True)
    assert not run.vllm_scheduler_available()


@pytest.mark.parametrize("policy", ["legacy", "clone", "prealloc", "offload"])
def test_backends_run_a_request_preempted_after_it_finished(policy):
    """The async case above through both backends: the preemption of a request whose last
    chunk is in flight frees only KV (its pooling is done), its output is still delivered, and
    tensor and analytic mode agree."""
    import pandas as pd

    import tokpool as tp

    cfg = tp.SimConfig(hidden_size=4, max_num_batched_tokens=24, long_prefill_token_threshold=16,
                       kv_cache_blocks=3, async_scheduling=True, policy=policy)
    tensor, counted = tp.simulate([17, 1], cfg, mode="tensor"), tp.simulate([17, 1], cfg)
    pd.testing.assert_frame_equal(tensor.steps, counted.steps)
    pd.testing.assert_frame_equal(tensor.requests, counted.requests)
    assert tensor.requests["num_preemptions"].tolist() == [0, 1]
    assert tensor.requests["delivered_step"].tolist() == [2, 1]
    assert tensor.corrupted == []
    # and a preemption told one step late (the empty call's), the prompt restarted
    cfg = cfg.replace(max_num_batched_tokens=128, long_prefill_token_threshold=24,
                      kv_cache_blocks=7)
    lens = [47, 51, 16]
    tensor, counted = tp.simulate(lens, cfg, mode="tensor"), tp.simulate(lens, cfg)
    pd.testing.assert_frame_equal(tensor.steps, counted.steps)
    pd.testing.assert_frame_equal(tensor.requests, counted.requests)
    assert tensor.requests["num_preemptions"].tolist() == [0, 1, 1]
    assert [s.preempted for s in tensor.schedule] == [(), (2,), (1,)]
    if policy != "legacy":
        assert tensor.corrupted == []


def test_simulate_rejects_an_unknown_scheduler():
    import tokpool as tp

    with pytest.raises(ValueError, match="unknown scheduler 'sglang'"):
        tp.simulate([4], scheduler="sglang")


@pytest.mark.parametrize("name", [n for n, _, _ in RULE_CASES if n.startswith(
    ("sliding_window", "hybrid", "prefix_cache", "token_tasks"))])
def test_kv_cache_groups_and_prefix_caching_rules(name):
    """The sliding-window, hybrid and prefix-caching cases of RULE_CASES (each quotes its
    vLLM function above; tests/test_parity_schedule.py runs them through vLLM itself)."""
    _run(name)


def test_full_attention_never_admits_what_a_sliding_window_runs():
    kw = next(kw for n, kw, _ in RULE_CASES if n == "sliding_window_admits_with_its_window")
    with pytest.raises(ValueError, match=r"13 KV blocks of 16 tokens.*never admits it"):
        schedule(**(kw | {"kv_cache_groups": (None,)}))
    two = next(kw for n, kw, _ in RULE_CASES if n.startswith("sliding_window_runs_two"))
    assert any(s.preempted for s in schedule(**(two | {"kv_cache_groups": (None,)})))
