"""The simulator's seams: one rule in one place, every backend asking it.

- Step memory (``tokpool.sim.vllm_rules.step_memory.step_memory``): swapping the rule — here
  "vLLM 0.34 reuses eager-step memory like graph memory" — is ONE edit, and tensor, counting and
  closed forms still agree on every column, with the new answers.
- The schedule (``simulate(..., schedule=...)``): the backends run any given schedule, checked
  first.
- The pooling kind (``tokpool.sim.vllm_rules.pooling_kind``): swapping one kind's rule (a STEP
  that keeps every row) is ONE edit, and every mode follows; no pooling name is compared
  anywhere else.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sim_property import configs

import tokpool as tp
import tokpool.sim.vllm_rules.step_memory as step_memory_module
from tokpool.sim import ScheduledStep, SimConfig, simulate
from tokpool.sim.backends.closed_form import single_request
from tokpool.sim.vllm_rules.pooling_kind import StepKind

vllm_033_rule = step_memory_module.step_memory


def eager_memory_reused(config, num_tokens):
    """A hypothetical next vLLM: eager steps write persistent memory too (rows [0, n))."""
    _, rows = vllm_033_rule(config, num_tokens)
    return np.ones(np.shape(rows), dtype=bool), rows


@pytest.fixture
def reused_eager_memory(monkeypatch):
    monkeypatch.setattr(step_memory_module, "step_memory", eager_memory_reused)


def _agree(cfg, lens):
    tensor = simulate(lens, cfg, mode="tensor")
    analytic = simulate(lens, cfg, mode="analytic")
    pd.testing.assert_frame_equal(tensor.steps, analytic.steps)
    pd.testing.assert_frame_equal(tensor.requests, analytic.requests)
    pd.testing.assert_frame_equal(tensor.chunks, analytic.chunks)
    assert tensor.corrupted == analytic.corrupted
    assert tensor.peak_device_bytes == analytic.peak_device_bytes
    return tensor


def test_the_swapped_rule_changes_the_answers(monkeypatch):
    # Legacy views of 8-token eager steps (largest capture size 4): under vLLM 0.33.0 they pin
    # their step's fresh tensor and stay intact; with eager memory reused they are rewritten.
    def cfg():
        return SimConfig(hidden_size=4, max_num_batched_tokens=8, max_num_seqs=1,
                         max_cudagraph_capture_size=4, policy="legacy", use_activation=False)

    old = _agree(cfg(), [20])
    assert old.corrupted == [] and cfg().buffer_rows == 4
    full = old.chunks[old.chunks.token_end < 20]
    assert full["eager"].all() and full["overwritten_at_step"].isna().all()

    monkeypatch.setattr(step_memory_module, "step_memory", eager_memory_reused)  # ONE edit
    new = _agree(cfg(), [20])
    assert new.corrupted == [0]
    assert cfg().buffer_rows == 8  # the persistent memory now holds the largest eager step
    full = new.chunks[new.chunks.token_end < 20]
    assert not full["eager"].any() and full["overwritten_at_step"].notna().all()
    # the persistent memory grew from 4 to 8 rows of 4 bfloat16 columns
    assert new.peak_device_bytes - old.peak_device_bytes == (8 - 4) * 4 * 2
    row = single_request(np.array([20]), cfg())  # the closed form follows the same rule
    assert bool(row["corrupted"][0]) and row["peak_pooling_bytes"][0] == new.peak_pooling_bytes


@settings(max_examples=80, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cfg=configs(), lens=st.lists(st.integers(1, 40), min_size=1, max_size=4))
def test_every_backend_follows_the_swapped_rule(reused_eager_memory, cfg, lens):
    if not cfg.enable_chunked_prefill:
        cfg = cfg.replace(max_num_batched_tokens=max(cfg.max_num_batched_tokens, max(lens)))
    _agree(cfg, lens)
    table = single_request(np.array(lens), cfg)
    for i, n in enumerate(lens):
        row = simulate([n], cfg, mode="analytic").summary()
        for name, values in table.items():
            if not name.startswith("est_"):
                assert values[i] == row[name] if np.ndim(values) else values == row[name], name


def _step(index, chunks, lens):
    return ScheduledStep(index, tuple(chunks),
                         tuple(r for r, _, stop in chunks if stop == lens[r]))


def test_backends_run_a_hand_written_schedule():
    lens = [5, 3]
    # step 0: request 1 in one shot; step 1: request 0's first 4 tokens (a legacy view at rows
    # [0, 4) of the teaching buffer); step 2: its last token, written at row 0: the view's
    # first row is rewritten before the cat reads it.
    plan = [_step(0, [(1, 0, 3)], lens), _step(1, [(0, 0, 4)], lens),
            _step(2, [(0, 4, 5)], lens)]
    cfg = SimConfig(hidden_size=3, max_num_batched_tokens=4, max_num_seqs=2,
                    output_memory="one_buffer", policy="legacy", use_activation=False)
    result = _agree_given(cfg, lens, plan)
    # the given schedule, with its KV blocks counted by the scheduler's rules (kv_blocks=0:
    # not given)
    assert [dataclasses.replace(s, kv_blocks=0) for s in result.schedule] == plan
    assert [s.kv_blocks for s in result.schedule] == [1, 1, 1]
    assert result.corrupted == [0]
    first = result.chunks[(result.chunks.request == 0) & (result.chunks.token_start == 0)]
    assert first["overwritten_at_step"].tolist() == [2]
    # tokpool's own schedule, given explicitly, is the default run
    own = simulate(lens, cfg, mode="analytic")
    again = simulate(lens, cfg, mode="analytic", schedule=own.schedule)
    pd.testing.assert_frame_equal(own.steps, again.steps)


def _agree_given(cfg, lens, plan):
    tensor = simulate(lens, cfg, mode="tensor", schedule=plan)
    analytic = simulate(lens, cfg, mode="analytic", schedule=plan)
    pd.testing.assert_frame_equal(tensor.steps, analytic.steps)
    pd.testing.assert_frame_equal(tensor.chunks, analytic.chunks)
    assert tensor.corrupted == analytic.corrupted
    return tensor


@pytest.mark.parametrize(("plan", "message"), [
    ([ScheduledStep(0, ((0, 1, 5),), (0,))], "must start at 0"),
    ([ScheduledStep(0, ((0, 0, 5),), ())], "finished must be"),
    ([ScheduledStep(0, ((0, 0, 3),), ())], "never finishes"),
    ([ScheduledStep(0, ((0, 0, 5),), (0,)), ScheduledStep(0, ((1, 0, 1),), (1,))],
     "indices must increase"),
    ([ScheduledStep(0, ((0, 0, 5), (1, 0, 1)), (0, 1))], "more than max_num_batched_tokens"),
    ("steps", "list of ScheduledStep"),
])
def test_a_wrong_schedule_is_refused(plan, message):
    cfg = SimConfig(hidden_size=2, max_num_batched_tokens=5, max_num_seqs=2)
    with pytest.raises((ValueError, TypeError), match=message):
        simulate([5, 1], cfg, mode="analytic", schedule=plan)
    with pytest.raises(ValueError, match="closed forms"):
        simulate([5, 1], cfg, mode="closed_form", schedule=[])


def test_a_verdict_from_the_time_estimate_says_so():
    base = SimConfig(model="SmolLM2-135M", async_scheduling=True, max_num_batched_tokens=512,
                     max_num_seqs=4, policy="legacy")
    assert not any("corrupted" in line for line in simulate([900], base, mode="analytic")
                   .estimates)
    timed = base.replace(async_overwrite="forward_end")
    lines = simulate([900], timed, mode="analytic").estimates
    assert any(line.startswith("corrupted:") and "ESTIMATE" in line for line in lines)


class _Asked(Exception):
    pass


@pytest.mark.parametrize("rule", [
    "default_head_dtype", "default_use_activation", "default_async_scheduling",
    "chunked_prefill_supported", "derive_batch_limits", "pooling_cudagraph_mode",
    "resolve_cudagraph_sizes", "kv_cache_spec", "default_prefix_caching",
])
def test_the_simulator_asks_the_rules_the_parity_tests_check(monkeypatch, rule):
    """SimConfig's defaults come from the very functions checked against vLLM's code: replace
    one and the resolution step runs into it."""
    import tokpool.sim.vllm_rules.resolve as resolve

    def asked(*args, **kwargs):
        raise _Asked(rule)

    monkeypatch.setattr(resolve, rule, asked)
    with pytest.raises(_Asked):
        SimConfig(model="SmolLM2-135M" if rule != "derive_batch_limits" else None,
                  gpu_memory_utilization=0.9 if rule == "kv_cache_spec" else None)


def test_the_step_memory_rule_reads_vllms_dispatch(monkeypatch):
    import tokpool.sim.vllm_rules.step_memory as sm

    def asked(*args, **kwargs):
        raise _Asked("padded_step_sizes")

    monkeypatch.setattr(sm, "padded_step_sizes", asked)
    with pytest.raises(_Asked):
        simulate([10], SimConfig(hidden_size=2, max_num_batched_tokens=8), mode="analytic")


# --- the pooling kind: ALL / STEP / LAST decided once (vllm_rules.pooling_kind) -----------------


def _every_row(self, config):
    """A hypothetical STEP kind that keeps every row (no step-tag selection)."""
    return None


def _step_config(**changes):
    fields = dict(task="token_classify", num_labels=5, pooling="STEP", num_returned_columns=2,
                  step_tag_every=4, hidden_size=8, max_num_batched_tokens=8, max_num_seqs=2,
                  enable_chunked_prefill=True, use_activation=False, head_dtype="float32")
    return SimConfig(**{**fields, **changes})


def _three_modes_agree(cfg, lens):
    tensor = _agree(cfg, lens)
    for n in lens:
        row = simulate([n], cfg, mode="analytic").summary()
        closed = simulate([n], cfg, mode="closed_form").summary()
        for name, value in closed.items():
            if not name.startswith("est_"):
                assert value == row[name], name
    return tensor


def test_the_swapped_pooling_kind_changes_the_answers(monkeypatch):
    """ONE edit in the rules room (STEP keeps every row) and tensor, counting and closed forms
    all follow it, on every column."""
    lens = [20, 13]
    old = _three_modes_agree(_step_config(), lens)
    # STEP delivers the tag rows: 20 // 4 = 5 and 13 // 4 = 3 rows of 2 float32 columns
    assert old.requests["output_bytes"].tolist() == [5 * 2 * 4, 3 * 2 * 4]
    assert [tuple(t.shape) for t in old.outputs] == [(5, 2), (3, 2)]

    monkeypatch.setattr(StepKind, "row_tag", _every_row)  # ONE edit
    new = _three_modes_agree(_step_config(), lens)
    assert new.requests["output_bytes"].tolist() == [20 * 2 * 4, 13 * 2 * 4]
    assert [tuple(t.shape) for t in new.outputs] == [(20, 2), (13, 2)]
    assert int(new.steps["host_bytes"].iloc[-1]) == (20 + 13) * 2 * 4  # what reaches the host
    assert new.corrupted == old.corrupted == []


@settings(max_examples=60, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cfg=configs(tasks=("token_classify",)), lens=st.lists(st.integers(1, 40), min_size=1,
                                                             max_size=4))
def test_every_backend_follows_the_swapped_pooling_kind(monkeypatch, cfg, lens):
    monkeypatch.setattr(StepKind, "row_tag", _every_row)
    if not cfg.enable_chunked_prefill:
        cfg = cfg.replace(max_num_batched_tokens=max(cfg.max_num_batched_tokens, max(lens)))
    tensor = _agree(cfg, lens)
    for r, n in enumerate(lens):  # every row delivered, whatever the kind
        assert tensor.outputs[r].shape[0] == n
    table = single_request(np.array(lens), cfg)
    for i, n in enumerate(lens):
        row = simulate([n], cfg, mode="analytic").summary()
        for name, values in table.items():
            if not name.startswith("est_"):
                assert values[i] == row[name] if np.ndim(values) else values == row[name], name


_KIND_NAMES = {"ALL", "STEP", "JINA_RANKING", "LAST"}
_KIND_HOME = Path(tp.__file__).parent / "sim" / "vllm_rules" / "pooling_kind.py"


def _kind_comparisons(path: Path) -> list[str]:
    """Comparisons (==, !=, in, not in) of anything with a pooling-kind name in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            values = [side] + (list(side.elts) if isinstance(side, (ast.Tuple, ast.List,
                                                                      ast.Set)) else [])
            if any(isinstance(v, ast.Constant) and v.value in _KIND_NAMES for v in values):
                found.append(f"{path}:{node.lineno}")
    return found


def test_no_pooling_kind_is_compared_outside_its_record(tmp_path):
    """The backends, closed forms, results, rules and vLLM bridge ask the kind's record; none
    compares a pooling name (the finder itself is tested on lines that do)."""
    package = _KIND_HOME.parents[2]
    paths = [*(package / "sim").rglob("*.py"), package / "pooler" / "vllm_bridge.py"]
    found = [hit for p in paths if p != _KIND_HOME for hit in _kind_comparisons(p)]
    assert not found, found
    assert _kind_comparisons(_KIND_HOME) == []  # the record itself looks names up in a table
    probe = tmp_path / "probe.py"
    probe.write_text('if config.pooling_method == "LAST" or kind in ("ALL", "STEP"):\n    pass\n')
    assert len(_kind_comparisons(probe)) == 2
