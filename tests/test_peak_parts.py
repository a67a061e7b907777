"""What a peak is made of (``tp.sim.peak_parts``): the parts add up to the ledger's peak to the
byte, tensor and analytic mode give the same parts, and the closed form's parts (the explorer's
readout, no steps run) are the simulator's."""

from __future__ import annotations

import itertools

import pytest

import tokpool as tp
from tokpool.sim.results.peak_parts import NOT_BROKEN_DOWN, single_request_peak_parts

POLICIES = ("legacy", "clone", "prealloc", "offload")


def _config(policy: str, async_scheduling: bool, head: bool, budget: int = 64):
    return tp.SimConfig(hidden_size=32, max_num_batched_tokens=budget, policy=policy,
                        async_scheduling=async_scheduling,
                        **({"head_dtype": "float32", "use_activation": True} if head else
                           {"head_dtype": None, "use_activation": False}))


@pytest.mark.parametrize(("policy", "async_scheduling", "head"),
                         list(itertools.product(POLICIES, (False, True), (False, True))))
def test_every_steps_parts_sum_to_its_peak_in_both_modes(policy, async_scheduling, head):
    for prompt_len in (40, 64, 200):
        config = _config(policy, async_scheduling, head)
        tensor = tp.simulate([prompt_len], config, mode="tensor")
        analytic = tp.simulate([prompt_len], config, mode="analytic")
        for step, peak in zip(analytic.steps["step"], analytic.steps["pool_peak_bytes"],
                              strict=True):
            parts = tp.sim.peak_parts(analytic, int(step))
            assert NOT_BROKEN_DOWN not in parts
            assert sum(parts.values()) == peak
            assert tp.sim.peak_parts(tensor, int(step)) == parts


@pytest.mark.parametrize("name", list(tp.MODEL_PRESETS))
def test_the_closed_forms_parts_are_the_simulators(name):
    base = tp.SimConfig.for_model(name)
    checked = 0
    for policy, async_scheduling, head, prompt_len in itertools.product(
            POLICIES, (False, True), (False, True), (100, 5000, 40_000)):
        changes = {"policy": policy, "async_scheduling": async_scheduling}
        if not head:
            changes |= {"head_dtype": None, "use_activation": False}
        if base.enable_chunked_prefill:
            changes["max_num_batched_tokens"] = 2048
        if prompt_len > base.max_model_len:
            changes |= {"max_model_len": prompt_len, "as_if": True}
        config = base.replace(**changes)
        closed = single_request_peak_parts(config, prompt_len)
        if closed is None:  # STEP selections: the caller simulates
            assert config.pooling_kind.selects(config)
            continue
        assert closed == tp.sim.peak_parts(tp.simulate([prompt_len], config, mode="analytic"))
        checked += 1
    assert checked or base.pooling_kind.selects(base)


def test_several_requests_in_the_peak_step_are_not_broken_down():
    run = tp.simulate([40, 40], _config("clone", False, True, budget=128))
    parts = tp.sim.peak_parts(run)
    assert parts == {NOT_BROKEN_DOWN: run.peak_pooling_bytes}
    with pytest.raises(ValueError, match="step 99"):
        tp.sim.peak_parts(run, 99)
    with pytest.raises(TypeError, match=r"tp\.simulate"):
        tp.sim.peak_parts(object())
