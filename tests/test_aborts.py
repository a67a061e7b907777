"""Aborts in the step loop (``tp.simulate(..., aborts={request: step})``): what each abort
frees and when, in tensor and analytic mode alike, under Model Runner V2 and the V1 runner,
sync and async; the no-op after a finish; bad input refused in words.

The schedule side is checked against vLLM's own ``Scheduler.finish_requests`` in
tests/test_parity_aborts.py.
"""

from __future__ import annotations

import random

import pandas as pd
import pytest
from test_runner_lifecycle import PROMPTS, preempting

import tokpool as tp
from tokpool.sim.schedule.aborts import ABORT_COLUMNS


def small(**changes) -> tp.SimConfig:
    return tp.SimConfig(**(dict(hidden_size=8, max_num_batched_tokens=100, head_dtype=None,
                                use_activation=False) | changes))


@pytest.mark.parametrize("mode", ["analytic", "tensor"])
def test_a_client_hangs_up_mid_prompt(mode):
    """A 250-token prompt at chunk 100 (bf16, width 8: 1,600 bytes a chunk), aborted before
    step 2: its two cloned chunks (3,200 bytes) are freed in step 2, it delivers nothing, and
    request 1 takes its budget at once."""
    r = tp.simulate([250, 120], small(), mode=mode, aborts={0: 2})
    assert list(r.aborts.columns) == list(ABORT_COLUMNS)
    row = r.aborts.iloc[0]
    assert (row.outcome, row.freed_pool_bytes, row.finish_step) == ("aborted", 3200, -1)
    assert r.steps["pool_cache_bytes"].tolist() == [1600, 3200, 1600, 0]
    assert [s.chunks for s in r.schedule][2:] == [((1, 0, 100),), ((1, 100, 120),)]
    assert r.requests.loc[0, "output_bytes"] == 0 and r.requests.loc[0, "finish_step"] == -1
    if mode == "tensor":
        assert r.outputs[0] is None and r.outputs[1] is not None
    assert not r.corrupted


@pytest.mark.parametrize("mode", ["analytic", "tensor"])
def test_an_abort_after_the_finish_is_a_reported_no_op(mode):
    plain = tp.simulate([250, 120], small(), mode=mode)
    r = tp.simulate([250, 120], small(), mode=mode, aborts={0: 3, 1: 40})
    assert r.aborts["outcome"].tolist() == ["no-op", "no-op"]
    assert r.aborts["finish_step"].tolist() == [2, 3]
    pd.testing.assert_frame_equal(r.steps, plain.steps)
    pd.testing.assert_frame_equal(r.requests, plain.requests)


def test_async_abort_in_flight_drops_the_output():
    """Under async scheduling an abort in the step after the finishing one lands while that
    step is in flight: the runner pooled and copies the output, vLLM never sends it."""
    cfg = small(async_scheduling=True)
    r = tp.simulate([250, 120], cfg, mode="analytic", aborts={0: 3})
    assert r.aborts["outcome"].tolist() == ["output dropped"]
    assert r.aborts["freed_pool_bytes"].tolist() == [0]
    assert r.requests.loc[0, "finish_step"] == 2


@pytest.mark.parametrize("runner, freed", [("v1", 512 * 576 * 4), ("v2", 0)])
def test_aborted_while_preempted_frees_what_v1_kept(runner, freed):
    """Request 3 is preempted in step 8 after 512 tokens; aborted in step 10 while it waits:
    vLLM's V1 runner kept its 512 stale rows (freed now), Model Runner V2 cleaned them at the
    preemption (nothing left to free). Either way it never resumes."""
    cfg = preempting(model_runner=runner)
    for mode in ("analytic", "tensor"):
        r = tp.simulate(PROMPTS, cfg, mode=mode, aborts={3: 10})
        assert r.aborts["freed_pool_bytes"].tolist() == [freed]
        assert all(3 not in {q for q, _, _ in s.chunks} for s in r.schedule if s.index >= 10)
        assert r.requests.loc[3, "duplicated_rows"] == 0 and 3 not in r.corrupted


def test_an_abort_with_nothing_else_running_gets_its_own_iteration():
    """The only request, aborted mid-prompt: vLLM still calls schedule() (its id waits in
    finished_req_ids) and the runner frees the state in that step, which computes nothing."""
    r = tp.simulate([250], small(), mode="analytic", aborts={0: 1})
    assert r.steps[["step", "num_scheduled_tokens", "pool_bytes"]].values.tolist() == [
        [0, 100, 1600], [1, 0, 0]]


def test_tensor_and_analytic_agree_on_random_aborts():
    rng = random.Random(46)
    policies = ("clone", "prealloc", "offload", "legacy")
    for i in range(30):
        lens = [rng.randint(1, 300) for _ in range(rng.randint(1, 4))]
        blocks = sum(-(-n // 16) for n in lens) // 2 + max(-(-n // 16) for n in lens) + 1
        cfg = small(hidden_size=4, max_num_batched_tokens=rng.choice((32, 64, 128)),
                    policy=policies[i % 4], async_scheduling=rng.random() < 0.4,
                    model_runner=rng.choice(("v1", "v2")),
                    kv_cache_blocks=blocks if rng.random() < 0.5 else None)
        aborts = {r: rng.randint(0, 12) for r in rng.sample(range(len(lens)), 1)}
        a = tp.simulate(lens, cfg, mode="analytic", aborts=aborts)
        t = tp.simulate(lens, cfg, mode="tensor", aborts=aborts)
        pd.testing.assert_frame_equal(a.steps.filter(regex="bytes|step$"),
                                      t.steps.filter(regex="bytes|step$"))
        pd.testing.assert_frame_equal(a.requests, t.requests)
        pd.testing.assert_frame_equal(a.aborts, t.aborts)
        assert a.corrupted == t.corrupted


@pytest.mark.parametrize("aborts, error, words", [
    ({5: 1}, ValueError, "only 2 requests"),
    ({0: -1}, ValueError, "an engine step is >= 0"),
    ({0: 1.5}, TypeError, "whole engine step"),
    ({0: "3"}, TypeError, "whole engine step"),
    ({"0": 3}, TypeError, "request indices"),
    ([0, 3], TypeError, "must be a dict"),
])
def test_bad_aborts_are_refused_in_words(aborts, error, words):
    with pytest.raises(error, match=words):
        tp.simulate([250, 120], small(), mode="analytic", aborts=aborts)


def test_an_abort_before_arrival_or_with_a_closed_form_is_refused():
    with pytest.raises(ValueError, match="arrives at step 4"):
        tp.simulate([250, 120], small(), mode="analytic", arrival_steps=[0, 4], aborts={1: 2})
    with pytest.raises(ValueError, match="mid-prompt"):  # issue 46: closed form where exact
        tp.simulate([250], small(), mode="closed_form", aborts={0: 1})


def test_a_cancelled_rerank_call_frees_its_query_cache():
    """The client hangs up at step 3: documents 2 and 3 are aborted (one was scored, one never
    started), the query's cached rows are released, and nothing is sent for them."""
    cfg = tp.SimConfig(hidden_size=64, max_num_batched_tokens=256, task="token_embed")
    r = tp.simulate_score([32], [512] * 3, cfg, mode="analytic", cancel_step=3)
    assert r.aborts["outcome"].tolist() == ["no-op", "no-op", "aborted", "aborted"]
    assert r.steps["query_cache_bytes"].tolist() == [8192, 8192, 8192, 0]
    assert r.requests["output_bytes"].tolist() == [4, 4, 0, 0]
    early = tp.simulate_score([32], [512] * 3, cfg, mode="analytic", cancel_step=0)
    assert early.requests["role"].tolist() == ["query"]  # the documents are never sent
    late = tp.simulate_score([32], [512] * 3, cfg, mode="analytic", cancel_step=50)
    assert set(late.aborts["outcome"]) == {"no-op"} and late.host_bytes == 16
    with pytest.raises(ValueError, match="cancel_step"):
        tp.simulate_score([32], [512], cfg, mode="analytic", cancel_step=-1)


def test_the_ownership_explorer_takes_client_aborts():
    ex = tp.ownership_explorer([20, 6, 9], budget=16)
    ex.abort.value = "0@1"
    assert ex.view.settings["aborts"] == {0: 1}
    assert "request 0 aborted, nothing delivered" in ex.view.html
    assert ex.view.data["result"].aborts["outcome"].tolist() == ["aborted"]
    ex.abort.value = ""
    assert "aborted" not in ex.view.html.split("</b>")[0]
