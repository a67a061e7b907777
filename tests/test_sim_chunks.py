"""SimResult.chunks and explain() against schedules worked out by hand; vLLM's output memory
(graph replays vs eager steps) against hand-computed bytes; the three modes agree."""

from __future__ import annotations

import functools

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokpool.sim import SimConfig as _SimConfig
from tokpool.sim import simulate

# What pooling keeps and delivers: an identity head (vLLM's float32 cast and activation are
# covered in test_sim_engine and the property tests).
SimConfig = functools.partial(_SimConfig, head_dtype=None, use_activation=False)

NA = pd.NA


def _rows(result) -> list[tuple]:
    return [tuple(None if pd.isna(v) else v for v in row)
            for row in result.chunks.itertuples(index=False)]


@pytest.mark.parametrize("mode", ["tensor", "analytic"])
def test_chunks_of_a_legacy_schedule_worked_by_hand(mode):
    # Budget 8, one buffer rewritten from row 0 each step, sync host copies; rows in Model
    # Runner V2's order (ascending scheduled tokens). Ranges half-open here:
    # step 0: r1 [0,3) rows 0-3, r0 [0,5) rows 3-8 (one shot, read by its host copy now)
    # step 1: r1 [3,11) rows 0-8   -> rewrites r1's first view (rows 0-3)
    # step 2: r1 [11,12) row 0, r2 [0,3) rows 1-4  -> rewrites rows 0-4 of r1's second view
    cfg = SimConfig(hidden_size=4, max_num_batched_tokens=8, policy="legacy",
                    output_memory="one_buffer")
    r = simulate([5, 12, 3], cfg, mode=mode)
    assert _rows(r) == [
        # step, request, start, end, row, eager, action, owned, read, overwritten, rows
        # overwritten, widest write while kept and its step
        (0, 1, 0, 3, 0, False, "view", False, 2, 1, 3, 8, 1),
        (0, 0, 0, 5, 3, False, "view", False, 0, None, 0, None, None),
        (1, 1, 3, 11, 0, False, "view", False, 2, 2, 4, 4, 2),
        (2, 1, 11, 12, 0, False, "view + cat", False, 2, None, 0, None, None),
        (2, 2, 0, 3, 1, False, "view", False, 2, None, 0, None, None),
    ]
    assert r.corrupted == [1]
    assert r.explain() == [
        "request 0 (5 tokens, 1 chunk in step 0): view → intact.",
        "request 1 (12 tokens, 3 chunks in steps 0 to 2): view, view + cat; tokens 0–10 "
        "(2 chunks) were kept as views and rewritten from step 1 before the cat that joins its "
        "chunks read them → CORRUPTED.",
        "request 2 (3 tokens, 1 chunk in step 2): view → intact.",
    ]


def test_chunks_under_clone_async_are_all_owned_but_the_cat_view():
    cfg = SimConfig(hidden_size=4, max_num_batched_tokens=8, async_scheduling=True,
                    output_memory="one_buffer")
    r = simulate([5, 12, 3], cfg, mode="analytic")
    assert list(r.chunks["action"]) == ["clone", "clone", "clone", "view + cat", "clone"]
    assert list(r.chunks["owned"]) == [True, True, True, False, True]
    assert r.chunks["overwritten_at_step"].isna().all() and r.corrupted == []
    assert all(line.endswith("→ intact.") for line in r.explain())


W, S = 4, 2  # width, bytes per element (bfloat16)
RB = W * S


@pytest.mark.parametrize("mode", ["tensor", "analytic"])
def test_legacy_with_eager_8192_token_steps_pins_memory_and_is_not_corrupted(mode):
    # Steps of 8192 tokens pad past the largest capture size (512): eager, fresh outputs.
    # step 0: r0 [0,300) one shot + r1 [0,7892): one 8192-row tensor; r1 keeps a view of it.
    # step 1: r1 [7892,10000): 2108 tokens, eager; the cat reads the pinned view: intact.
    cfg = SimConfig(hidden_size=W, max_num_batched_tokens=8192, policy="legacy")
    assert cfg.output_memory == "vllm" and cfg.graph_buffer_rows == 512
    r = simulate([300, 10_000], cfg, mode=mode)
    assert r.corrupted == []
    assert list(r.chunks["eager"]) == [True, True, True]
    steps = r.steps.set_index("step")
    # End of step 0: r1's view pins the whole 8192-row tensor; 300 rows of it are r0's.
    assert steps.at[0, "pool_bytes"] == 8192 * RB
    assert steps.at[0, "stranded_bytes"] == 300 * RB
    # Step 1: the pinned 7892 rows (whole tensor: 8192) live while the cat allocates 10000.
    assert steps.at[1, "pool_peak_bytes"] == (8192 + 10_000) * RB
    assert steps.at[1, "stranded_bytes"] == 0
    assert list(r.requests["stranded_bytes"]) == [0, 300 * RB]
    assert r.buffer_bytes == 512 * RB  # the graph output buffer


@pytest.mark.parametrize("mode", ["tensor", "analytic"])
def test_legacy_with_captured_256_token_steps_is_corrupted(mode):
    # 600 tokens, budget 256: steps of 256, 256, 88 tokens all replay graphs (88 pads to 88)
    # into one persistent buffer: step 1 rewrites rows 0-256 that step 0's view holds.
    cfg = SimConfig(hidden_size=W, max_num_batched_tokens=256, policy="legacy")
    r = simulate([600], cfg, mode=mode)
    assert r.corrupted == [0]
    assert list(r.chunks["overwritten_at_step"].astype(object)) == [1, 2, NA]
    assert r.steps["stranded_bytes"].eq(0).all()
    clone = simulate([600], cfg.replace(policy="clone"), mode=mode)
    assert clone.corrupted == [] and clone.peak_pooling_bytes == (2 * 600 - 88) * RB


def test_padding_rows_of_a_replay_count_as_overwritten():
    # Capture sizes ..., 8, 16: a 9-token step replays the 16-size graph and rewrites rows
    # 0-16. Request 1's view sits at rows 9-12 of step 0 (6 + 3 tokens = 9 -> padded 16).
    cfg = SimConfig(hidden_size=W, max_num_batched_tokens=12, policy="legacy",
                    async_scheduling=True, max_cudagraph_capture_size=16)
    r = simulate([9, 3], cfg, mode="tensor")
    assert r.corrupted == simulate([9, 3], cfg, mode="analytic").corrupted


def test_enforce_eager_never_corrupts_and_needs_no_graph_buffer():
    cfg = SimConfig(hidden_size=W, max_num_batched_tokens=16, policy="legacy",
                    async_scheduling=True, enforce_eager=True)
    r = simulate([40, 7, 3], cfg, mode="tensor")
    assert r.corrupted == [] and r.buffer_bytes == 0
    assert r.chunks["eager"].all()


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 120), budget=st.integers(1, 40),
       policy=st.sampled_from(("legacy", "clone", "prealloc", "offload")),
       async_scheduling=st.booleans(), capture=st.sampled_from((None, 4, 16)),
       head=st.sampled_from((None, "float32")), activation=st.booleans())
def test_tensor_analytic_and_closed_form_agree(n, budget, policy, async_scheduling, capture,
                                               head, activation):
    memory = {"output_memory": "one_buffer"} if capture is None else {
        "max_cudagraph_capture_size": capture}
    cfg = SimConfig(hidden_size=3, max_num_batched_tokens=budget, policy=policy,
                    async_scheduling=async_scheduling, head_dtype=head,
                    use_activation=activation, **memory)
    rows = [simulate([n], cfg, mode=m).summary() for m in ("tensor", "analytic", "closed_form")]
    for name in rows[0]:
        if name.startswith("est_"):
            continue
        assert rows[0][name] == rows[1][name] == rows[2][name], name


def test_closed_form_mode_takes_one_request_only():
    with pytest.raises(ValueError, match="ONE request"):
        simulate([3, 4], SimConfig(hidden_size=2), mode="closed_form")


def test_async_overwrite_knob_decides_the_one_shot_race():
    # [5, 12, 3] at 8 tokens per step, legacy, identity head: request 0's one-shot view is read
    # by its host copy during step 1. Conservatively (the next forward writes first) it is
    # corrupted; timed, its 5 × 576 × 2-byte copy (~90 ns at 64 GB/s) beats SmolLM2's ~80 µs
    # forward and reads intact memory. Request 1's unfinished chunk views break either way.
    cfg = _SimConfig.for_model("SmolLM2-135M", max_num_batched_tokens=8, policy="legacy",
                               async_scheduling=True, head_dtype=None, use_activation=False)
    for overwrite, corrupted in (("forward_start", [0, 1]), ("forward_end", [1])):
        c = cfg.replace(async_overwrite=overwrite)
        tensor, counted = simulate([5, 12, 3], c, mode="tensor"), simulate([5, 12, 3], c)
        assert tensor.corrupted == counted.corrupted == corrupted, overwrite
        pd.testing.assert_frame_equal(tensor.steps, counted.steps)
    with pytest.raises(ValueError, match="needs a model preset"):
        _SimConfig(async_overwrite="forward_end")


def test_trace_shows_the_race_window(tmp_path):
    import json

    cfg = _SimConfig.for_model("SmolLM2-135M", max_num_batched_tokens=8, async_scheduling=True)
    trace = json.loads(simulate([5, 12, 3], cfg).to_chrome_trace(tmp_path / "t.json")
                       .read_text())
    names = {e["name"] for e in trace["traceEvents"]}
    assert "race window" in names and "device -> host (races this step's forward)" in names


def test_kv_cache_preempts_the_last_running_request_worked_by_hand():
    from tokpool.sim.schedule.scheduler import schedule

    # Two 40-token prompts, 16 tokens each per step, a 6-block KV cache (vLLM's null block
    # leaves 5): both are admitted in step 0 (each prompt's 3 blocks fit the free blocks,
    # vLLM's whole-prompt admission); steps 0-1 fill 4 blocks; in step 2 request 0 takes the
    # 5th, so request 1 (the last running) cannot grow and is preempted: its blocks are freed
    # and it restarts from token 0, and no waiting request is admitted in that step (vLLM's
    # ``if not preempted_reqs``). Alone, it is no longer capped by the threshold.
    # kv_blocks: held right after the step is scheduled.
    steps = schedule([40, 40], max_num_batched_tokens=32, max_num_seqs=8,
                     enable_chunked_prefill=True, long_prefill_token_threshold=16,
                     kv_cache_blocks=6, block_size=16)
    assert [(s.chunks, s.preempted, s.kv_blocks) for s in steps] == [
        (((0, 0, 16), (1, 0, 16)), (), 2),
        (((0, 16, 32), (1, 16, 32)), (), 4),
        (((0, 32, 40),), (1,), 3),
        (((1, 0, 32),), (), 2),
        (((1, 32, 40),), (), 3),
    ]
    with pytest.raises(ValueError, match="5 KV blocks of 16 tokens, but the KV cache has 4"):
        schedule([80], max_num_batched_tokens=32, max_num_seqs=8, enable_chunked_prefill=True,
                 kv_cache_blocks=4)


@pytest.mark.parametrize("policy", ["legacy", "clone", "prealloc", "offload"])
def test_preemption_cleans_pooling_state_in_both_backends(policy):
    # max_model_len=80: vLLM refuses a cache whose 5 usable blocks cannot hold one 8,192-token
    # request (the preset's context), so the engine is started with the context they hold
    cfg = _SimConfig.for_model("SmolLM2-135M", max_num_batched_tokens=32,
                               long_prefill_token_threshold=16, kv_cache_blocks=6, max_model_len=80,
                               policy=policy, head_dtype=None, use_activation=False)
    tensor, counted = simulate([40, 40], cfg, mode="tensor"), simulate([40, 40], cfg)
    pd.testing.assert_frame_equal(tensor.steps, counted.steps)
    pd.testing.assert_frame_equal(tensor.requests, counted.requests)
    assert tensor.requests["num_preemptions"].tolist() == [0, 1]
    per_token = 2 * 30 * 3 * 64 * 2  # K and V × layers × KV heads × head dim × bf16
    assert tensor.steps["kv_bytes"].tolist()[:2] == [2 * 16 * per_token, 4 * 16 * per_token]
    if policy != "legacy":
        assert tensor.corrupted == []  # the restarted prefill is pooled afresh, correctly


@settings(max_examples=40, deadline=None)
@given(lens=st.lists(st.integers(1, 60), min_size=1, max_size=4),
       budget=st.integers(4, 40), threshold=st.none() | st.integers(1, 16),
       extra=st.integers(0, 4), block=st.sampled_from((4, 16)),
       policy=st.sampled_from(("legacy", "clone", "prealloc", "offload")),
       async_scheduling=st.booleans())
def test_tensor_equals_analytic_under_kv_pressure(lens, budget, threshold, extra, block, policy,
                                                   async_scheduling):
    blocks = -(-max(lens) // block) + 1 + extra  # + vLLM's null block
    cfg = SimConfig(hidden_size=3, max_num_batched_tokens=budget, policy=policy,
                    long_prefill_token_threshold=threshold, kv_cache_blocks=blocks,
                    block_size=block, async_scheduling=async_scheduling)
    tensor, counted = simulate(lens, cfg, mode="tensor"), simulate(lens, cfg)
    pd.testing.assert_frame_equal(tensor.steps, counted.steps)
    pd.testing.assert_frame_equal(tensor.requests, counted.requests)
    pd.testing.assert_frame_equal(tensor.chunks, counted.chunks)
    assert tensor.corrupted == counted.corrupted


def _unchunked_split(policy="clone", **changes):
    fields = dict(hidden_size=2, max_num_batched_tokens=24, max_num_seqs=1,
                  long_prefill_token_threshold=16, enable_chunked_prefill=False, policy=policy,
                  head_dtype=None, use_activation=False)
    return SimConfig(**{**fields, **changes})


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_split_without_chunked_prefill_runs_and_delivers_its_last_chunk(async_scheduling):
    """Chunked prefill off and a long-prefill threshold: vLLM's scheduler splits the prompts,
    (0,0,16) (0,16,24) (1,0,24) for two 24-token prompts at threshold 16, and runs them; its
    AllPool keeps no chunk, so request 0 is delivered as its last 8 rows. Both modes say so,
    byte for byte, in every mode (a given schedule too)."""
    cfg = _unchunked_split(async_scheduling=async_scheduling)
    tensor = simulate([24, 24], cfg, mode="tensor")
    counted = simulate([24, 24], cfg, mode="analytic")
    assert [s.chunks for s in tensor.schedule] == [((0, 0, 16),), ((0, 16, 24),), ((1, 0, 24),)]
    pd.testing.assert_frame_equal(tensor.steps, counted.steps)
    pd.testing.assert_frame_equal(tensor.requests, counted.requests)
    pd.testing.assert_frame_equal(tensor.chunks, counted.chunks)
    assert tensor.corrupted == counted.corrupted == [0]
    assert [tuple(o.shape) for o in tensor.outputs] == [(8, 2), (24, 2)]
    assert tensor.requests["output_bytes"].tolist() == [8 * 2 * 2, 24 * 2 * 2]
    assert "only its last chunk, tokens 16–23, is delivered → CORRUPTED" in counted.explain()[0]
    given = simulate([24, 24], cfg, mode="analytic", schedule=tensor.schedule)
    pd.testing.assert_frame_equal(given.steps, counted.steps)


def test_step_pooling_on_such_a_split_is_refused_as_vllm_fails():
    cfg = _unchunked_split(task="token_classify", num_labels=2, pooling="STEP", step_tag_every=4,
                           dtype="float32")
    for mode in ("tensor", "analytic"):
        with pytest.raises(ValueError, match=r"StepPool.*IndexError"):
            simulate([24, 24], cfg, mode=mode)
    # without a step tag nothing indexes the prompt: it runs (columns only)
    simulate([24, 24], cfg.replace(step_tag_every=None, num_returned_columns=1),
             mode="analytic")
