"""Property tests: analytic mode == tensor mode to the byte, closed forms == the analytic loop."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokpool.sim import SimConfig, simulate
from tokpool.sim.backends.closed_form import single_request

DTYPES = ("bfloat16", "float16", "float32")
HEAD_DTYPES = (None, "float32", "bfloat16", "float64")


ALL_TASKS = ("token_embed", "token_classify", "embed", "classify")
ALL_POLICIES = ("legacy", "clone", "prealloc", "offload")


@st.composite
def configs(draw, *, chunked=None, tasks=ALL_TASKS, policies=ALL_POLICIES):
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
    return SimConfig(
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


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(), lens=st.lists(st.integers(1, 40), min_size=1, max_size=5),
       arrivals=st.lists(st.integers(0, 3), min_size=5, max_size=5))
def test_analytic_equals_tensor_on_every_column(cfg, lens, arrivals):
    if not cfg.enable_chunked_prefill:
        cfg = cfg.replace(max_num_batched_tokens=max(cfg.max_num_batched_tokens, max(lens)))
    arrival = arrivals[: len(lens)]
    tensor = simulate(lens, cfg, mode="tensor", arrival_steps=arrival)
    analytic = simulate(lens, cfg, mode="analytic", arrival_steps=arrival)
    pd.testing.assert_frame_equal(tensor.steps, analytic.steps)
    pd.testing.assert_frame_equal(tensor.requests, analytic.requests)
    pd.testing.assert_frame_equal(tensor.chunks, analytic.chunks)
    assert tensor.corrupted == analytic.corrupted
    assert tensor.peak_pooling_bytes == analytic.peak_pooling_bytes
    assert tensor.peak_device_bytes == analytic.peak_device_bytes
    if cfg.policy != "legacy":
        assert tensor.corrupted == []


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
@given(cfg=configs(), lens=st.lists(st.integers(1, 200), min_size=1, max_size=6),
       model=st.sampled_from((None, "SmolLM2-135M", "Qwen3-Embedding-8B")),
       hardware=st.sampled_from(("H100 SXM", "L4")))
def test_closed_forms_equal_the_analytic_loop(cfg, lens, model, hardware):
    budget = cfg.max_num_batched_tokens
    if not cfg.enable_chunked_prefill:
        budget = max(budget, max(lens))  # unchunked prompts must fit one step
    if model is not None:  # a preset sets the width (its hidden size) and a context
        cfg = cfg.replace(model=model, hidden_size=None, hardware=hardware,
                          max_model_len=max(lens), max_num_batched_tokens=budget)
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
