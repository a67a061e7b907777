"""The fast analytic path equals the general loop, byte for byte: the saturated stream's closed
form (``schedule.stream``) and the KV block counts (``schedule.block_counts``) against the
scheduler's loop with vLLM's block tables, on random workloads and engines."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tokpool.sim import SimConfig, simulate
from tokpool.sim import simulation as simulation_module
from tokpool.sim.backends.clone_ledger import run_clone_ledger
from tokpool.sim.schedule import scheduler as scheduler_module
from tokpool.sim.schedule.block_counts import BlockCounts, counts_suffice
from tokpool.sim.schedule.scheduler import kv_blocks_for, schedule
from tokpool.sim.schedule.stream import stream_applies, stream_schedule

FRAMES = ("steps", "requests", "chunks", "buffer_writes", "overwrites")


def _same(summary: dict) -> dict:
    """NaN (an ESTIMATE with no model) equals NaN here."""
    return {k: "NaN" if isinstance(v, float) and v != v else v for k, v in summary.items()}


def _general(monkeypatch) -> None:
    """Only the general loop: no stream closed form, vLLM's block tables block by block, the
    counting engine (no clone ledger)."""
    monkeypatch.setattr(simulation_module, "stream_schedule", lambda *a, **k: None)
    monkeypatch.setattr(scheduler_module, "counts_suffice", lambda *a, **k: False)
    monkeypatch.setattr(simulation_module, "run_clone_ledger", lambda *a, **k: None)


@st.composite
def engines(draw):
    """A small engine: chunked or not, async or not, KV limits, thresholds, groups."""
    budget = draw(st.integers(1, 64))
    return SimConfig(
        task=draw(st.sampled_from(("token_embed", "token_classify", "embed", "classify"))),
        hidden_size=draw(st.integers(1, 6)),
        policy=draw(st.sampled_from(("legacy", "clone", "prealloc", "offload"))),
        max_num_batched_tokens=budget,
        max_num_seqs=min(budget, draw(st.integers(1, 8))),
        enable_chunked_prefill=draw(st.booleans()),
        async_scheduling=draw(st.booleans()),
        long_prefill_token_threshold=draw(st.none() | st.integers(1, budget)),
        block_size=draw(st.sampled_from((1, 4, 16))),
        output_memory=draw(st.sampled_from(("vllm", "one_buffer"))),
        model_runner=draw(st.sampled_from(("v1", "v2"))),
        as_if=True,
    )


def _run(lens, cfg, arrivals, kv):
    return simulate(lens, cfg.replace(kv_cache_blocks=kv), mode="analytic",
                    arrival_steps=arrivals)


@settings(max_examples=120, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cfg=engines(), lens=st.lists(st.integers(1, 90), min_size=1, max_size=8),
       arrive=st.booleans(), kv=st.none() | st.integers(2, 80), data=st.data())
def test_the_fast_path_equals_the_general_loop_on_every_frame(monkeypatch, cfg, lens, arrive,
                                                              kv, data):
    arrivals = (data.draw(st.lists(st.integers(0, 4), min_size=len(lens), max_size=len(lens)))
                if arrive else None)
    try:
        fast = _run(lens, cfg, arrivals, kv)
    except ValueError as err:  # refused: the general loop refuses it with the same words
        with monkeypatch.context() as m:
            _general(m)
            with pytest.raises(type(err), match=None) as again:
                _run(lens, cfg, arrivals, kv)
        assert str(again.value) == str(err)
        return
    with monkeypatch.context() as m:
        _general(m)
        slow = _run(lens, cfg, arrivals, kv)
    assert fast.schedule == slow.schedule
    for name in FRAMES:
        pd.testing.assert_frame_equal(getattr(fast, name), getattr(slow, name), check_exact=True)
    assert _same(fast.summary()) == _same(slow.summary())
    assert (fast.corrupted, fast.peak_pooling_bytes) == (slow.corrupted, slow.peak_pooling_bytes)


@settings(max_examples=80, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cfg=engines(), lens=st.lists(st.integers(1, 300), min_size=1, max_size=12),
       task=st.sampled_from(("token_embed", "token_classify")))
def test_the_stream_path_itself_equals_the_general_loop(monkeypatch, cfg, lens, task):
    # the region the closed form covers: chunked, synchronous, no threshold, no KV limit
    cfg = cfg.replace(task=task, enable_chunked_prefill=True, async_scheduling=False,
                      long_prefill_token_threshold=None, kv_cache_blocks=None)
    used = []

    def stream(*args, **kwargs):
        used.append(stream_schedule(*args, **kwargs))
        return used[-1]

    with monkeypatch.context() as m:
        m.setattr(simulation_module, "stream_schedule", stream)
        fast = simulate(lens, cfg, mode="analytic")
    assert used and (used[0] is not None or len(lens) > cfg.max_num_seqs)
    with monkeypatch.context() as m:
        _general(m)
        slow = simulate(lens, cfg, mode="analytic")
    assert fast.schedule == slow.schedule
    for name in FRAMES:
        pd.testing.assert_frame_equal(getattr(fast, name), getattr(slow, name), check_exact=True)
    assert _same(fast.summary()) == _same(slow.summary())


@settings(max_examples=200, deadline=None)
@given(lens=st.lists(st.integers(1, 3000), min_size=1, max_size=60),
       budget=st.integers(1, 4096), seqs=st.integers(1, 64), block=st.sampled_from((1, 7, 16)),
       groups=st.integers(1, 3))
def test_the_stream_is_the_schedulers_schedule_where_it_applies(lens, budget, seqs, block,
                                                                groups):
    kw = dict(max_num_batched_tokens=budget, max_num_seqs=seqs, enable_chunked_prefill=True,
              block_size=block, kv_cache_groups=(None,) * groups)
    fast = stream_schedule(lens, **kw)
    if fast is not None:
        assert fast == schedule(lens, **kw)
    else:  # only max_num_seqs can stop it here: a step of more requests than that
        assert max(len(s.chunks) for s in schedule(lens, **kw)) <= seqs


def test_the_stream_applies_only_to_a_saturated_queue_with_nothing_but_the_budget_binding():
    base = dict(enable_chunked_prefill=True, arrival_steps=None,
                long_prefill_token_threshold=None, kv_cache_blocks=None,
                async_scheduling=False, kv_cache_groups=(None,), max_model_len=None,
                reads_cache=False)
    assert stream_applies([8, 9], **base)
    for change in ({"enable_chunked_prefill": False}, {"arrival_steps": [0, 1]},
                   {"long_prefill_token_threshold": 4}, {"kv_cache_blocks": 100},
                   {"async_scheduling": True}, {"kv_cache_groups": (None, 4)},
                   {"max_model_len": 8}, {"reads_cache": True}):
        assert not stream_applies([8, 9], **{**base, **change}), change
    assert stream_applies([8, 9], **{**base, "arrival_steps": [0, 0]})


@settings(max_examples=150, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(lens=st.lists(st.integers(1, 200), min_size=1, max_size=10),
       budget=st.integers(1, 64), seqs=st.integers(1, 6), kv=st.none() | st.integers(2, 60),
       block=st.sampled_from((1, 4, 16)), async_=st.booleans(),
       threshold=st.none() | st.integers(1, 64), groups=st.integers(1, 2))
def test_block_counts_schedule_as_vllms_block_tables_do(monkeypatch, lens, budget, seqs, kv,
                                                        block, async_, threshold, groups):
    kw = dict(max_num_batched_tokens=budget, max_num_seqs=seqs, enable_chunked_prefill=True,
              kv_cache_blocks=kv, block_size=block, async_scheduling=async_,
              long_prefill_token_threshold=threshold, kv_cache_groups=(None,) * groups)
    try:
        counted = schedule(lens, **kw)
    except ValueError as err:
        with monkeypatch.context() as m:
            m.setattr(scheduler_module, "counts_suffice", lambda *a, **k: False)
            with pytest.raises(ValueError) as again:
                schedule(lens, **kw)
        assert str(again.value) == str(err)
        return
    with monkeypatch.context() as m:
        m.setattr(scheduler_module, "counts_suffice", lambda *a, **k: False)
        tables = schedule(lens, **kw)
    assert counted == tables


def test_block_counts_are_taken_only_when_no_block_is_ever_read():
    def manager(groups, caching):
        return kv_blocks_for([40, 50], None, 16, groups, None, 64, caching, None)

    assert isinstance(manager((None,), False), BlockCounts)
    assert not isinstance(manager((None,), True), BlockCounts)  # prefix hits read blocks
    assert not isinstance(manager((None, 32), False), BlockCounts)  # a window frees old ones
    assert counts_suffice((None, None), caching=False)


def test_a_long_run_shows_a_bar_and_a_bad_progress_is_refused_before_any_work(capsys):
    import io

    from tokpool.sim.backends import progress

    cfg = SimConfig(hidden_size=8, max_num_batched_tokens=16)
    quiet = simulate([40, 9], cfg, mode="analytic")
    assert "tokpool simulate" not in capsys.readouterr().out  # short: no bar (auto)
    shown = simulate([40, 9], cfg, mode="analytic", progress=True)
    assert "tokpool simulate" in capsys.readouterr().out  # notebooks: stdout, as tp.sweep
    pd.testing.assert_frame_equal(quiet.steps, shown.steps)
    err = io.StringIO()
    with progress.bar_file(err), progress.show_progress(True):  # the command line: stderr
        assert list(progress.ticks([1, 2, 3])) == [1, 2, 3]
    assert "3/3" in err.getvalue()
    with pytest.raises(TypeError, match=r"progress must be True, False or None"):
        simulate([40, 9], cfg, mode="analytic", progress="yes")
    assert len(progress.ticks(range(progress.AUTO_STEPS - 1))) == progress.AUTO_STEPS - 1


@st.composite
def clone_engines(draw):
    """An engine in the clone ledger's region (token pooler, chunked, synchronous, clone's
    keep rules) with everything else drawn: heads, thresholds, KV limits (preemptions send the
    run back to the general loop), memory, runners, platforms, models."""
    budget = draw(st.integers(1, 96))
    model = draw(st.sampled_from((None, "SmolLM2-135M")))
    return SimConfig(
        task=draw(st.sampled_from(("token_embed", "token_classify"))),
        hidden_size=None if model else draw(st.integers(1, 6)),
        model=model,
        head_dtype=draw(st.sampled_from(("auto", None, "float32", "bfloat16"))),
        use_activation=draw(st.sampled_from((None, True, False))),
        policy="clone",
        max_num_batched_tokens=budget,
        max_num_seqs=min(budget, draw(st.integers(1, 8))),
        enable_chunked_prefill=True,
        async_scheduling=False,
        long_prefill_token_threshold=draw(st.none() | st.integers(1, budget)),
        block_size=draw(st.sampled_from((1, 4, 16))),
        output_memory=draw(st.sampled_from(("vllm", "one_buffer"))),
        model_runner=draw(st.sampled_from(("v1", "v2"))),
        hardware=draw(st.sampled_from(("H100 SXM", "CPU", "L4"))),
        as_if=True,
    )


@settings(max_examples=480, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cfg=clone_engines(), lens=st.lists(st.integers(1, 200), min_size=1, max_size=10),
       arrive=st.booleans(), kv=st.none() | st.integers(2, 80), data=st.data())
def test_the_clone_ledger_equals_the_general_loop_on_every_frame(monkeypatch, cfg, lens, arrive,
                                                                 kv, data):
    arrivals = (data.draw(st.lists(st.integers(0, 6), min_size=len(lens), max_size=len(lens)))
                if arrive else None)
    used = []

    def ledger(*args, **kwargs):
        used.append(run_clone_ledger(*args, **kwargs))
        return used[-1]

    try:
        with monkeypatch.context() as m:
            m.setattr(simulation_module, "run_clone_ledger", ledger)
            fast = _run(lens, cfg, arrivals, kv)
    except ValueError as err:  # refused before any ledger: the general loop says the same
        with monkeypatch.context() as m:
            _general(m)
            with pytest.raises(type(err)) as again:
                _run(lens, cfg, arrivals, kv)
        assert str(again.value) == str(err)
        return
    if kv is None:  # nothing can preempt: the ledger ran the whole run
        assert used and used[0] is not None
    event(f"the clone ledger ran: {bool(used and used[0] is not None)}")  # about 2 in 3
    with monkeypatch.context() as m:
        _general(m)
        slow = _run(lens, cfg, arrivals, kv)
    assert fast.schedule == slow.schedule
    for name in FRAMES:
        pd.testing.assert_frame_equal(getattr(fast, name), getattr(slow, name), check_exact=True)
    assert _same(fast.summary()) == _same(slow.summary())
    assert (fast.corrupted, fast.peak_pooling_bytes, fast.aborts) == (
        slow.corrupted, slow.peak_pooling_bytes, slow.aborts)


def test_the_clone_ledger_steps_aside_outside_its_region():
    cfg = SimConfig(hidden_size=8, max_num_batched_tokens=16)
    steps = simulate([40, 9], cfg, mode="analytic").schedule
    params = [None, None]
    assert run_clone_ledger([40, 9], cfg, steps, pooling_params=params) is not None
    for other in (cfg.replace(policy="prealloc"), cfg.replace(async_scheduling=True),
                  cfg.replace(task="embed"), cfg.replace(enable_chunked_prefill=False)):
        assert run_clone_ledger([40, 9], other, steps, pooling_params=params) is None, other
    assert run_clone_ledger([40, 9], cfg, steps, pooling_params=params,
                            aborts=["an abort"]) is None
    assert run_clone_ledger([40, 9], cfg, steps, pooling_params=[tp_params(), None]) is None


def tp_params():
    from tokpool import PoolingParams

    return PoolingParams(dimensions=4)
