"""Property tests: analytic mode == tensor mode to the byte, closed forms == the analytic loop
(the three modes agree), with and without a ``long_prefill_token_threshold``."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokpool import PoolingParams
from tokpool.sim import EngineRefusal, SimConfig, simulate
from tokpool.sim.backends.closed_form import single_request

DTYPES = ("bfloat16", "float16", "float32")
HEAD_DTYPES = (None, "float32", "bfloat16", "float64")


ALL_TASKS = ("token_embed", "token_classify", "embed", "classify")
ALL_POLICIES = ("legacy", "clone", "prealloc", "offload")


@st.composite
def configs(draw, *, chunked=None, tasks=ALL_TASKS, policies=ALL_POLICIES, thresholds=False):
    """A small engine; ``thresholds``: also draw ``long_prefill_token_threshold`` (None, or
    1..budget: it cuts a request's chunk while another request runs or waits)."""
    task = draw(st.sampled_from(tasks))
    width_args = {"hidden_size": draw(st.integers(1, 6)), "num_labels": draw(st.integers(1, 5))}
    step = {}
    if task == "token_classify" and draw(st.booleans()):
        width = width_args["num_labels"]
        step = {
            "pooling": "STEP",
            "num_returned_columns": draw(st.none() | st.integers(1, width)),
            "step_tag_every": draw(st.none() | st.integers(1, 6)),
        }
    memory = draw(st.sampled_from(("one_buffer", "vllm", "vllm", "eager")))
    engine = ({"output_memory": "one_buffer"} if memory == "one_buffer" else
              {"output_memory": "vllm", "enforce_eager": True} if memory == "eager" else
              {"output_memory": "vllm",
               # small capture sizes so that short prompts see both replays and eager steps
               "max_cudagraph_capture_size": draw(st.sampled_from((1, 2, 4, 8, 16)))})
    cfg = SimConfig(
        task=task,
        **engine,
        dtype=draw(st.sampled_from(DTYPES)),
        head_dtype=draw(st.sampled_from(HEAD_DTYPES)),
        use_activation=draw(st.booleans()),
        max_num_batched_tokens=(budget := draw(st.integers(1, 24))),
        max_num_seqs=min(budget, draw(st.integers(1, 4))),  # vLLM: budget >= max_num_seqs
        enable_chunked_prefill=draw(st.booleans()) if chunked is None else chunked,
        async_scheduling=draw(st.booleans()),
        policy=draw(st.sampled_from(policies)),
        **width_args,
        **step,
    )
    if thresholds:
        cfg = cfg.replace(long_prefill_token_threshold=draw(st.none() | st.integers(1, budget)))
    return cfg


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(thresholds=True), lens=st.lists(st.integers(1, 40), min_size=1, max_size=5),
       arrivals=st.lists(st.integers(0, 3), min_size=5, max_size=5))
def test_analytic_equals_tensor_on_every_column(cfg, lens, arrivals):
    if not cfg.enable_chunked_prefill:
        cfg = cfg.replace(max_num_batched_tokens=max(cfg.max_num_batched_tokens, max(lens)))
    arrival = arrivals[: len(lens)]
    try:
        tensor = simulate(lens, cfg, mode="tensor", arrival_steps=arrival)
    except EngineRefusal as refusal:  # a threshold split vLLM's STEP pooling fails on
        with pytest.raises(EngineRefusal, match=re.escape(str(refusal))):
            simulate(lens, cfg, mode="analytic", arrival_steps=arrival)
        return
    analytic = simulate(lens, cfg, mode="analytic", arrival_steps=arrival)
    pd.testing.assert_frame_equal(tensor.steps, analytic.steps)
    pd.testing.assert_frame_equal(tensor.requests, analytic.requests)
    pd.testing.assert_frame_equal(tensor.chunks, analytic.chunks)
    assert tensor.corrupted == analytic.corrupted
    assert tensor.peak_pooling_bytes == analytic.peak_pooling_bytes
    assert tensor.peak_device_bytes == analytic.peak_device_bytes
    if cfg.policy != "legacy":
        # except a prompt the threshold split without chunked prefill: vLLM delivers its last
        # chunk alone, whatever the policy (keep_rule)
        split = {r for step in tensor.schedule for r, start, stop in step.chunks
                 if not cfg.enable_chunked_prefill and stop - start != lens[r]}
        assert set(tensor.corrupted) <= split


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(chunked=True, tasks=("token_embed", "token_classify"), policies=("legacy",)),
       lens=st.lists(st.integers(1, 40), min_size=1, max_size=5))
def test_analytic_predicts_exactly_the_corruption_tensor_mode_observes(cfg, lens):
    tensor = simulate(lens, cfg, mode="tensor")
    analytic = simulate(lens, cfg, mode="analytic")
    assert tensor.corrupted == analytic.corrupted
    pd.testing.assert_frame_equal(tensor.steps, analytic.steps)
    if (cfg.output_memory == "one_buffer" and cfg.pooling_method == "ALL"
            and cfg.rows_from == "backbone"  # a score head's rows are fresh every step
            and lens[0] > cfg.max_num_batched_tokens):
        # The first request starts at row 0, which every later step rewrites (in vLLM's
        # memory model only replays rewrite it: eager steps' views are pinned instead).
        assert 0 in tensor.corrupted


@settings(max_examples=150, deadline=None)
@given(cfg=configs(thresholds=True), lens=st.lists(st.integers(1, 200), min_size=1, max_size=6),
       model=st.sampled_from((None, "SmolLM2-135M", "Qwen3-Embedding-8B")),
       hardware=st.sampled_from(("H100 SXM", "L4")))
def test_closed_forms_equal_the_analytic_loop(cfg, lens, model, hardware):
    """Each prompt alone (closed forms solve one request): a drawn threshold is lifted."""
    budget = cfg.max_num_batched_tokens
    if not cfg.enable_chunked_prefill:
        budget = max(budget, max(lens))  # unchunked prompts must fit one step
    if model is not None:  # a preset sets the width (its hidden size) and a context
        context = max(*lens, cfg.long_prefill_token_threshold or 1)  # vLLM: threshold <= it
        cfg = cfg.replace(model=model, hidden_size=None, hardware=hardware,
                          max_model_len=context, max_num_batched_tokens=budget)
    else:
        cfg = cfg.replace(hardware=hardware, max_num_batched_tokens=budget)
    table = single_request(np.array(lens), cfg)
    for i, n in enumerate(lens):
        row = simulate([n], cfg, mode="analytic").summary()
        for name, values in table.items():
            value = values if np.ndim(values) == 0 else values[i]
            if name.startswith("est_"):
                assert (math.isnan(value) and math.isnan(row[name])) or math.isclose(
                    value, row[name], rel_tol=1e-9), name
            else:
                assert value == row[name], name


def test_offload_hands_a_threshold_split_chunk_over_on_the_device():
    """Offload keeps chunks on the host, but a prompt ``long_prefill_token_threshold`` splits
    without chunked prefill is handed over as its last chunk (keep_rule: ``"chunk"``), on the
    device: its host copy is a device-to-host copy, in both modes."""
    cfg = SimConfig(hidden_size=1, num_labels=1, dtype="bfloat16", head_dtype=None,
                    use_activation=False, task="token_classify", policy="offload",
                    enable_chunked_prefill=False, long_prefill_token_threshold=1,
                    max_num_batched_tokens=2, max_num_seqs=1, output_memory="one_buffer")
    frames = {mode: simulate([2, 1], cfg, mode=mode, arrival_steps=[0, 0]).steps
              for mode in ("tensor", "analytic")}
    pd.testing.assert_frame_equal(frames["tensor"], frames["analytic"])
    # no head (no cast, no activation): step 1 delivers request 0's last chunk (1 row, 2 B)
    # from the device; step 2 request 1 from its host buffer, its chunk copied as pooled
    assert frames["tensor"]["d2h_bytes"].tolist() == [0, 2, 2]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(thresholds=True, policies=("legacy", "clone", "prealloc")),
       lens=st.lists(st.integers(1, 40), min_size=1, max_size=5),
       twins=st.lists(st.booleans(), min_size=5, max_size=5),
       arrivals=st.lists(st.integers(0, 3), min_size=5, max_size=5))
def test_analytic_equals_tensor_on_mixed_task_workloads(cfg, lens, twins, arrivals):
    """Requests of a token task and its sequence twin in one workload (``PoolingParams(task=
    ...)``, vLLM's ``DispatchPooler`` groups): both modes agree to the byte, per task too."""
    if cfg.pooling_method not in ("ALL", "LAST"):
        cfg = cfg.replace(pooling=None, num_returned_columns=None, step_tag_every=None)
    if not cfg.enable_chunked_prefill:
        cfg = cfg.replace(max_num_batched_tokens=max(cfg.max_num_batched_tokens, max(lens)))
    twin = {"token_embed": "embed", "embed": "token_embed", "token_classify": "classify",
            "classify": "token_classify"}[cfg.task]
    params = [PoolingParams(task=twin) if t else None for t in twins[: len(lens)]]
    arrival = arrivals[: len(lens)]
    try:
        tensor = simulate(lens, cfg, mode="tensor", arrival_steps=arrival, pooling_params=params)
    except EngineRefusal as refusal:
        with pytest.raises(EngineRefusal, match=re.escape(str(refusal))):
            simulate(lens, cfg, mode="analytic", arrival_steps=arrival, pooling_params=params)
        return
    analytic = simulate(lens, cfg, mode="analytic", arrival_steps=arrival,
                        pooling_params=params)
    pd.testing.assert_frame_equal(tensor.steps, analytic.steps)
    pd.testing.assert_frame_equal(tensor.requests, analytic.requests)
    pd.testing.assert_frame_equal(tensor.chunks, analytic.chunks)
    assert tensor.corrupted == analytic.corrupted
    if any(twins[: len(lens)]):
        pd.testing.assert_frame_equal(tensor.by_task, analytic.by_task)
        seq = {r for r, p in enumerate(params) if (p.task if p else cfg.task) in
               ("embed", "classify")}
        for r in seq:  # a sequence request delivers one row
            assert tensor.outputs[r] is None or tensor.outputs[r].ndim == 1
    else:
        assert tensor.by_task is None
