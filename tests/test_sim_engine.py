"""The step simulator: DESIGN.md's closed forms, the corruption cases, the scheduler, the ledger,
traces, sweeps and the CUDA check's skip. Both modes everywhere: they must agree to the byte."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import tokpool as tp
from tokpool.sim import STEP_COLUMNS, SWEEP_COLUMNS, SimConfig, schedule, simulate, sweep
from tokpool.sim.schedule.scheduler import engine_steps

MODES = ("tensor", "analytic")
ROOT = Path(__file__).resolve().parents[1]

# These tests are about what POOLING owns and delivers, so the head is the identity (vLLM's
# defaults — a float32 cast and the activation — are tested where they matter).
PoolingOnly = functools.partial(SimConfig, head_dtype=None, use_activation=False)


def both(lens, cfg, **kw):
    """Run both modes, check they agree on every column, return the tensor-mode result."""
    tensor = simulate(lens, cfg, mode="tensor", **kw)
    analytic = simulate(lens, cfg, mode="analytic", **kw)
    pd.testing.assert_frame_equal(tensor.steps, analytic.steps)
    pd.testing.assert_frame_equal(tensor.requests, analytic.requests)
    assert tensor.corrupted == analytic.corrupted
    assert tensor.peak_device_bytes == analytic.peak_device_bytes
    return tensor


def split(T: int, C: int) -> tuple[int, int]:
    n = -(-T // C)
    return n, T - (n - 1) * C


# --- DESIGN.md "Retention policies and memory": one request, T tokens, chunk C, width W ------

CASES = [(37, 8, 3, "bfloat16"), (64, 16, 5, "float32"), (100, 7, 2, "float16"), (9, 8, 1,
                                                                                     "bfloat16")]


@pytest.mark.parametrize(("T", "C", "W", "dtype"), CASES)
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_clone_peaks_at_two_T_minus_L(T, C, W, dtype, async_scheduling):
    s = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    n, L = split(T, C)
    cfg = PoolingOnly(hidden_size=W, dtype=dtype, max_num_batched_tokens=C,
                    async_scheduling=async_scheduling)
    r = both([T], cfg)
    assert r.peak_pooling_bytes == (2 * T - L) * W * s
    assert r.peak_device_bytes == (2 * T - L) * W * s + cfg.buffer_bytes
    # The cache grows by C·W·s per unfinished step; one copy per cached token, then the cat.
    assert r.steps["pool_cache_bytes"].iloc[: n - 1].tolist() == [
        (k + 1) * C * W * s for k in range(n - 1)]
    assert r.steps["copy_bytes"].sum() == (2 * T - L) * W * s
    assert r.corrupted == []


@pytest.mark.parametrize(("T", "C", "W", "dtype"), CASES)
def test_prealloc_holds_T_from_the_first_chunk(T, C, W, dtype):
    s = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    n, _ = split(T, C)
    r = both([T], PoolingOnly(hidden_size=W, dtype=dtype, max_num_batched_tokens=C,
                            policy="prealloc"))
    assert r.peak_pooling_bytes == T * W * s
    assert r.steps["pool_bytes"].iloc[: n - 1].eq(T * W * s).all()
    assert r.steps["copy_bytes"].sum() == T * W * s  # one copy per token
    assert r.corrupted == []


@pytest.mark.parametrize(("T", "C", "W", "dtype"), CASES)
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_offload_keeps_nothing_on_the_device(T, C, W, dtype, async_scheduling):
    s = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    r = both([T], PoolingOnly(hidden_size=W, dtype=dtype, max_num_batched_tokens=C,
                            policy="offload", async_scheduling=async_scheduling))
    assert r.peak_pooling_bytes == 0
    assert r.steps["pool_peak_bytes"].eq(0).all()
    host = r.steps["host_bytes"]
    assert host.is_monotonic_increasing and host.iloc[-1] == T * W * s
    assert r.steps["d2h_bytes"].sum() == T * W * s
    assert r.corrupted == []


def test_float32_head_on_bf16_adds_T_W_4_at_the_finish():
    T, C, W = 50, 16, 4
    base = PoolingOnly(hidden_size=W, max_num_batched_tokens=C, head_dtype="float32")
    n, L = split(T, C)
    pre = both([T], base.replace(policy="prealloc"))
    assert pre.peak_pooling_bytes == T * W * 2 + T * W * 4
    clone = both([T], base)
    # The cat's (2T − L)·W·s transient, then the cache is gone and the head casts the output.
    assert clone.peak_pooling_bytes == max((2 * T - L) * W * 2, T * W * 2 + T * W * 4)
    asyn = both([T], base.replace(async_scheduling=True))
    finish = asyn.steps.iloc[n - 1]
    assert finish["pool_head_bytes"] == T * W * 4  # awaiting its host copy
    assert finish["pool_output_bytes"] == 0 and finish["pool_cache_bytes"] == 0
    assert asyn.requests["output_bytes"].tolist() == [T * W * 4]


def test_activation_counts_its_output_while_the_cast_is_alive():
    T, W = 10, 4
    r = both([T], PoolingOnly(hidden_size=W, max_num_batched_tokens=16, head_dtype="float32",
                            use_activation=True, policy="prealloc"))
    # One shot, sync: pooled output is a view (0), cast T·W·4 and normalised T·W·4 coexist.
    assert r.peak_pooling_bytes == 2 * T * W * 4


# --- corruption -------------------------------------------------------------------------------

@pytest.mark.parametrize("async_scheduling", [False, True])
def test_legacy_corrupts_multi_chunk_prompts_even_when_synchronous(async_scheduling):
    cfg = PoolingOnly(hidden_size=4, max_num_batched_tokens=8, policy="legacy",
                    async_scheduling=async_scheduling)
    r = both([20], cfg)
    assert r.corrupted == [0]
    assert not torch.equal(r.outputs[0], tp.sim.SyntheticSource(4).rows(torch.arange(20)))


def test_legacy_corrupts_single_shot_outputs_under_async_when_a_later_step_follows():
    cfg = PoolingOnly(hidden_size=4, max_num_batched_tokens=8, policy="legacy",
                    async_scheduling=True)
    r = both([4, 4, 30], cfg)  # 0 and 1 finish in step 0; step 1 rewrites their rows
    assert r.corrupted[:2] == [0, 1]
    sync = both([4, 4, 30], cfg.replace(async_scheduling=False))
    assert 0 not in sync.corrupted and 1 not in sync.corrupted
    alone = both([4], cfg)  # no later step: the copy is safe
    assert alone.corrupted == []


def test_a_head_that_allocates_shields_single_shot_outputs():
    cfg = PoolingOnly(hidden_size=4, max_num_batched_tokens=8, policy="legacy",
                    async_scheduling=True, head_dtype="float32")
    assert both([4, 4, 8], cfg).corrupted == []


@pytest.mark.parametrize("policy", ["clone", "prealloc", "offload"])
@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("chunked", [True, False])
def test_clone_prealloc_offload_never_corrupt(policy, async_scheduling, chunked):
    cfg = PoolingOnly(hidden_size=3, max_num_batched_tokens=12, policy=policy,
                    async_scheduling=async_scheduling, enable_chunked_prefill=chunked,
                    max_num_seqs=3)
    lens = [5, 12, 3, 11, 1, 7] if not chunked else [5, 30, 3, 17, 1, 7, 44]
    r = both(lens, cfg)
    assert r.corrupted == []
    for i, out in enumerate(r.outputs):
        assert torch.equal(out, tp.sim.SyntheticSource(3).rows(torch.arange(sum(lens[:i]),
                                                                          sum(lens[: i + 1]))))


def test_step_pooling_corrupts_only_when_a_kept_row_is_stale():
    # vLLM never chunks a STEP model; chunked prefill is forced on here to see what would break,
    # with rows from the backbone (a score head's rows are fresh every step: never stale)
    base = PoolingOnly(task="token_classify", num_labels=6, pooling="STEP", num_returned_columns=2,
                       max_num_batched_tokens=8, policy="legacy", enable_chunked_prefill=True,
                       rows_from="backbone")
    # T=12, C=8: positions [0, 4) are read stale; a tag every 5 tokens keeps row 4 only.
    assert both([12], base.replace(step_tag_every=5)).corrupted == []
    assert both([12], base.replace(step_tag_every=4)).corrupted == [0]
    r = both([30], base.replace(step_tag_every=4, policy="clone"))
    assert r.outputs[0].shape == (7, 2)
    assert r.requests["output_bytes"].tolist() == [7 * 2 * 2]


# --- scheduler and engine iterations -----------------------------------------------------------

def test_scheduler_running_first_then_waiting_in_arrival_order():
    steps = schedule([10, 3, 6], max_num_batched_tokens=8, max_num_seqs=8,
                     enable_chunked_prefill=True, arrival_steps=[0, 1, 0])
    assert [s.chunks for s in steps] == [
        ((0, 0, 8),),
        ((0, 8, 10), (2, 0, 6)),
        ((1, 0, 3),),
    ]
    assert [s.finished for s in steps] == [(), (0, 2), (1,)]


def test_scheduler_limits_running_requests_and_blocks_fcfs_without_chunking():
    steps = schedule([4, 4, 4], max_num_batched_tokens=100, max_num_seqs=2,
                     enable_chunked_prefill=True)
    assert [len(s.chunks) for s in steps] == [2, 1]
    steps = schedule([5, 6, 1], max_num_batched_tokens=8, max_num_seqs=8,
                     enable_chunked_prefill=False)
    # rows in Model Runner V2's order: ascending scheduled tokens
    assert [s.chunks for s in steps] == [((0, 0, 5),), ((2, 0, 1), (1, 0, 6))]


def test_idle_gaps_and_collect_only_iterations():
    steps = schedule([3, 3], max_num_batched_tokens=8, max_num_seqs=8,
                     enable_chunked_prefill=True, arrival_steps=[0, 5])
    assert [s.index for s in steps] == [0, 5]
    plan = engine_steps(steps, async_scheduling=True)
    assert [(i, s is None) for i, s in plan] == [(0, False), (1, True), (5, False), (6, True)]
    assert engine_steps(steps, async_scheduling=False) == [(0, steps[0]), (5, steps[1])]
    r = both([3, 3], PoolingOnly(hidden_size=2, async_scheduling=True), arrival_steps=[0, 5])
    assert r.requests["delivered_step"].tolist() == [1, 6]
    assert r.requests["first_step"].tolist() == [0, 5]


def test_ledger_columns_and_requests_frame():
    r = both([9, 20, 4], PoolingOnly(hidden_size=4, max_num_batched_tokens=8, max_num_seqs=2))
    assert list(r.steps.columns) == list(STEP_COLUMNS)
    for col in ("step", "num_scheduled_tokens", "num_finished", "pool_bytes", "pool_peak_bytes",
                "host_bytes", "copy_bytes", "d2h_bytes", "pool_cache_bytes",
                "pool_output_bytes", "pool_head_bytes", "est_forward_s", "est_pool_s",
                "est_d2h_s"):
        assert col in r.steps.columns
    steps = r.steps
    assert (steps["pool_bytes"] == steps[["pool_cache_bytes", "pool_output_bytes",
                                         "pool_head_bytes"]].sum(axis=1)).all()
    assert (steps["pool_peak_bytes"] >= steps["pool_bytes"]).all()
    assert steps["num_scheduled_tokens"].sum() == 33
    assert r.peak_pooling_bytes == steps["pool_peak_bytes"].max()
    assert list(r.requests.columns) == ["request", "prompt_len", "first_step", "finish_step",
                                        "delivered_step", "num_chunks", "output_bytes",
                                        "corrupted", "stranded_bytes", "num_preemptions",
                                        "num_cached_tokens", "delivered_rows",
                                        "duplicated_rows"]
    assert r.requests["prompt_len"].tolist() == [9, 20, 4]
    assert r.requests["output_bytes"].tolist() == [9 * 8, 20 * 8, 4 * 8]
    assert "corrupted=[]" in repr(r)


def test_sequence_tasks_deliver_one_row():
    for task in ("embed", "classify"):
        cfg = PoolingOnly(task=task, hidden_size=6, num_labels=3, max_num_batched_tokens=8,
                        head_dtype="float32", use_activation=True)
        r = both([20, 5], cfg)
        width = 6 if task == "embed" else 3
        assert [o.shape for o in r.outputs] == [(width,), (width,)]
        assert r.corrupted == []
    # Nothing retained across steps: the peak is a few rows, not the prompt.
    assert both([1000], PoolingOnly(task="embed", hidden_size=4, max_num_batched_tokens=64)
                ).peak_pooling_bytes == 4 * 2


class ListSource:
    """A minimal hand-written HiddenStateSource: fixed random rows, real token ids."""

    def __init__(self, lens, width, tag_positions):
        g = torch.Generator().manual_seed(0)
        self.width, self.dtype = width, torch.float32
        self.data = [torch.randn(n, width, generator=g) for n in lens]
        self.ids = []
        for n in lens:
            ids = torch.full((n,), 5, dtype=torch.int64)
            ids[[p for p in tag_positions if p < n]] = 9
            self.ids.append(ids)

    def prepare(self, prompt_lens):
        if list(prompt_lens) != [len(d) for d in self.data]:
            raise ValueError("lengths differ")

    def fill(self, out, chunks):
        rows = [self.data[r][a:b] for r, a, b in chunks]
        out.copy_(torch.cat(rows))

    def reference(self, request):
        return self.data[request].clone()

    def token_ids(self, request):
        return self.ids[request]

    def reset(self, request):
        pass


def test_custom_source_and_step_tags_from_token_ids():
    src = ListSource([13, 6], 3, tag_positions=[1, 4, 11])
    cfg = PoolingOnly(task="token_classify", num_labels=3, dtype="float32", pooling="STEP",
                      step_tag_id=9, max_num_batched_tokens=5, enable_chunked_prefill=True)
    tensor = simulate([13, 6], cfg, mode="tensor", source=src)
    analytic = simulate([13, 6], cfg, mode="analytic", source=src)
    pd.testing.assert_frame_equal(tensor.steps, analytic.steps)
    assert [o.shape[0] for o in tensor.outputs] == [3, 2]
    assert torch.equal(tensor.outputs[0], src.data[0][[1, 4, 11]])
    with pytest.raises(ValueError, match="lengths differ"):
        simulate([13, 7], cfg, source=src)


def test_analytic_handles_million_token_prompts():
    cfg = SimConfig.for_model("Qwen3-Embedding-8B", max_num_batched_tokens=8192,
                              head_dtype="float32", use_activation=False,
                              max_model_len=2_000_000, as_if=True)  # past its context
    r = simulate([2_000_000], cfg, mode="analytic")
    T, C, W = 2_000_000, 8192, 4096
    n, L = split(T, C)
    assert len(r.steps) == n
    assert r.peak_pooling_bytes == max((2 * T - L) * W * 2, T * W * 2 + T * W * 4)


# --- trace ------------------------------------------------------------------------------------

def test_chrome_trace(tmp_path):
    cfg = SimConfig.for_model("SmolLM2-135M", max_num_batched_tokens=8, async_scheduling=True)
    r = simulate([20, 3], cfg, mode="analytic")
    path = r.to_chrome_trace(tmp_path / "trace.json")
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["name"] for e in events}
    assert {"step 0", "forward", "pooling copies", "device -> host", "clone chunk",
            "view + cat", "delivered", "bytes"} <= names
    assert all(e["ts"] >= 0 for e in events if "ts" in e)
    nominal = simulate([5], PoolingOnly(hidden_size=2), mode="analytic")
    data = json.loads(nominal.to_chrome_trace(tmp_path / "t2.json").read_text())
    assert "nominal" in data["otherData"]["tokpool"]


# --- sweep ------------------------------------------------------------------------------------

def test_sweep_rows_columns_and_agreement_with_simulate():
    cfg = SimConfig.for_model("SmolLM2-135M", max_num_batched_tokens=16, head_dtype="float32")
    lens = [1, 16, 17, 40]
    df = sweep(lens, cfg)
    assert list(df.columns) == list(SWEEP_COLUMNS)
    assert len(df) == len(lens) * 4 * 2
    assert df["prompt_len"].tolist()[:8] == [1] * 8
    assert df["policy"].tolist()[:8] == ["legacy", "legacy", "clone", "clone", "prealloc",
                                         "prealloc", "offload", "offload"]
    assert df["async_scheduling"].tolist()[:2] == [False, True]
    for row in df.itertuples(index=False):
        one = simulate([row.prompt_len], cfg.replace(policy=row.policy,
                                                    async_scheduling=row.async_scheduling),
                       mode="analytic").summary()
        for name in SWEEP_COLUMNS:
            if name.startswith("est_"):
                assert getattr(row, name) == pytest.approx(one[name], rel=1e-9)
            else:
                assert getattr(row, name) == one[name], name
    legacy = df[(df.policy == "legacy")]
    assert legacy["corrupted"].tolist() == [False, False, False, False, True, True, True, True]


def test_sweep_tensor_mode_matches_analytic():
    cfg = PoolingOnly(hidden_size=3, max_num_batched_tokens=6, head_dtype="float32")
    lens = [2, 6, 13]
    a = sweep(lens, cfg, policies=("legacy", "offload"), async_scheduling=(True,))
    t = sweep(lens, cfg, policies=("legacy", "offload"), async_scheduling=(True,),
              mode="tensor", progress=True)
    pd.testing.assert_frame_equal(a.drop(columns=["policy"]), t.drop(columns=["policy"]),
                                  check_dtype=False)
    assert a["policy"].tolist() == t["policy"].tolist()


def test_sweep_bad_input():
    with pytest.raises(ValueError, match="nope"):
        sweep([3], PoolingOnly(hidden_size=2), policies=("nope",))
    with pytest.raises(ValueError, match="40"):
        sweep([3, 40], PoolingOnly(hidden_size=2, max_num_batched_tokens=8,
                                 enable_chunked_prefill=False))
    with pytest.raises(ValueError, match="prompt"):
        sweep([3, 0], PoolingOnly(hidden_size=2))


def test_sweep_is_vectorised():
    df = sweep(np.arange(1, 50_001),
               SimConfig.for_model("Qwen3-Embedding-0.6B", max_model_len=50_000, as_if=True),
               progress=False)
    assert len(df) == 400_000
    assert df["peak_pooling_bytes"].max() > 0


# --- the CUDA check script --------------------------------------------------------------------

def test_cuda_engine_check_skips_cleanly_without_cuda(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = tmp_path / "check.md"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "cuda_engine_check.py"), "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "skipped: no CUDA" in proc.stdout
    assert not out.exists()


def test_score_head_rows_are_fresh_every_step():
    """vllm/model_executor/models/qwen2_rm.py, Qwen2RewardBaseModel.forward: the score head runs
    after the compiled backbone, so its [n, 2] logits are a fresh tensor every step: a legacy
    view of them is never rewritten, only kept alive."""
    cfg = PoolingOnly(task="token_classify", num_labels=2, max_num_batched_tokens=8,
                      policy="legacy", enable_chunked_prefill=True, max_cudagraph_capture_size=8)
    assert cfg.rows_from == "score_head" and cfg.buffer_rows == 0
    r = both([30], cfg)
    assert r.corrupted == [] and r.chunks["eager"].all()
    backbone = both([30], cfg.replace(rows_from="backbone"))
    assert backbone.corrupted == [0]


def test_step_pooling_serves_token_embed_too():
    """vllm/model_executor/layers/pooler/tokwise/poolers.py, pooler_for_token_embed: the
    configured token pooling method (STEP included) serves token_embed as well."""
    cfg = PoolingOnly(task="token_embed", hidden_size=4, pooling="STEP", step_tag_every=3,
                      max_num_batched_tokens=16)
    r = both([10], cfg)
    assert r.outputs[0].shape == (3, 4) and r.corrupted == []
