"""``tp.simulate_score``: vLLM's online scoring flow on the step simulator.

The stages are ``tp.simulate`` runs: their schedules and untouched columns are compared with
``tp.simulate`` itself; the scoring layer's bytes (query cache, 4-byte deliveries, MaxSim
scratch, the clone) are checked against numbers worked out by hand from vLLM's code; tensor
and analytic modes agree to the byte on random workloads.
"""

from __future__ import annotations

import json
import random
import zlib

import pandas as pd
import pytest

import tokpool as tp
from tokpool.late_interaction import maxsim_plan
from tokpool.late_interaction.scoring import plan_requests

W = 64  # hidden width of the small engines
SMOLLM2 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
           "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
           "num_key_value_heads": 3, "vocab_size": 49152, "max_position_embeddings": 8192,
           "rope_theta": 100000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
           "torch_dtype": "bfloat16"}
MINILM = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 384,
          "intermediate_size": 1536, "num_hidden_layers": 6, "num_attention_heads": 12,
          "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2,
          "torch_dtype": "float32"}


def small(**changes) -> tp.SimConfig:
    return tp.SimConfig(**{"hidden_size": W, "max_num_batched_tokens": 256,
                           "task": "token_embed", **changes})


def byte_columns(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[[c for c in frame.columns if not c.startswith("est_")]].reset_index(drop=True)


# --- the two stages -------------------------------------------------------------------------


def test_one_query_many_documents_two_stages_by_hand():
    cfg = small()
    r = tp.simulate_score([32], [512] * 3, cfg, mode="analytic")
    assert r.path.name == "late-interaction" and r.path.two_stage
    assert list(r.requests["role"]) == ["query", "doc", "doc", "doc"]
    assert list(r.requests["query"]) == [0, 0, 0, 0]
    q_bytes = 32 * W * 4  # the query's float32 head output, cloned
    steps = r.steps
    # the query finishes in step 0: its output (cast and normalised) is alive, then the clone,
    # then the 0-d zero handed to the host
    assert steps.loc[0, "pool_peak_bytes"] == q_bytes + q_bytes + 4
    assert list(steps["query_cache_bytes"]) == [q_bytes] * 6 + [0]  # freed at the 3rd score
    assert list(steps["stage"]) == [1] + [2] * 6
    # documents are delivered as one float32 score each; the query as a 0-d zero
    assert list(r.requests["output_bytes"]) == [4, 4, 4, 4] and r.host_bytes == 16
    assert list(steps["host_bytes"]) == [4, 4, 8, 8, 12, 12, 16]
    assert steps["host_bytes"].iloc[-1] == 16
    # documents enter only after every query finished and was delivered
    docs = r.requests[r.requests["role"] == "doc"]
    assert docs["first_step"].min() > r.requests.loc[0, "delivered_step"]
    # the query cache is in the ledger: pool_bytes at the end of a step includes it
    assert (steps["pool_bytes"] >= steps["query_cache_bytes"]).all()
    # MaxSim scratch where a document finished: on the default H100 one document shares
    # one query, so the flash kernel scores it (tp.late_interaction.maxsim_plan's ESTIMATE for [32]
    # x [512])
    plan = maxsim_plan([32], [512], W, device="cuda", path="flash")
    finishing = steps[steps["num_finished"] > 0].iloc[1:]
    assert (finishing["maxsim_scratch_bytes"] == plan.attrs["peak_scratch_bytes"]).all()
    assert r.maxsim["estimate"].all()
    # the kernel off (PoolerConfig.enable_flash_late_interaction=False): the reference path
    off = tp.simulate_score([32], [512] * 3, cfg, mode="analytic", flash_maxsim_kernel=False)
    assert off.peak_maxsim_scratch_bytes == maxsim_plan([32], [512], W).attrs[
        "peak_scratch_bytes"]


def test_distinct_queries_in_one_step_use_the_reference_path():
    """N:N documents finishing together hold different queries: compute_maxsim_score_batched
    over them in batch order, even on CUDA."""
    cfg = small(max_num_batched_tokens=1024)
    r = tp.simulate_score([10, 20, 30], [100, 200, 300], cfg, mode="analytic")
    doc_step = r.steps[(r.steps["stage"] == 2) & (r.steps["num_finished"] > 0)]
    assert list(doc_step["num_finished"]) == [3]
    plan = maxsim_plan([10, 20, 30], [100, 200, 300], W)
    assert int(doc_step["maxsim_scratch_bytes"].iloc[0]) == plan.attrs["peak_scratch_bytes"]
    assert not r.maxsim["estimate"].any()


def test_stages_are_tp_simulate_runs():
    cfg = small()
    queries, docs = [40, 300], [700, 90]
    r = tp.simulate_score(queries, docs, cfg, mode="analytic")
    first, second = tp.simulate(queries, cfg, mode="analytic"), tp.simulate(docs, cfg,
                                                                             mode="analytic")
    untouched = ["num_scheduled_tokens", "num_requests", "num_finished", "pool_cache_bytes",
                 "kv_bytes"]
    both = pd.concat([first.steps, second.steps], ignore_index=True)
    pd.testing.assert_frame_equal(r.steps[untouched], both[untouched])
    assert list(r.steps["step"]) == list(range(len(both)))
    # N:N: each query is used once, released when its own document is scored
    assert [p.uses for p in plan_requests(2, 2)] == [1, 1, 0, 0]
    assert r.steps["query_cache_bytes"].iloc[-1] == 0
    assert r.peak_query_cache_bytes == (40 + 300) * W * 4


def test_one_stage_delivers_every_row():
    cfg = small()
    r = tp.simulate_score([32], [512] * 3, cfg, mode="analytic", flash_late_interaction=False)
    assert not r.path.two_stage and r.path.io_processor == "late-interaction"
    plain = tp.simulate([32, 512, 512, 512], cfg, mode="analytic")
    pd.testing.assert_frame_equal(byte_columns(r.steps.drop(columns=[
        "engine", "stage", "query_cache_bytes", "maxsim_scratch_bytes"])),
        byte_columns(plain.steps))
    assert r.host_bytes == (32 + 3 * 512) * W * 4
    assert r.peak_query_cache_bytes == 0 and r.peak_maxsim_scratch_bytes == 0
    assert r.api_maxsim_bytes == 32 * 512 * 4  # compute_maxsim_score's [q, d] float32


def test_bi_encoder_when_embed_is_selected(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2))
    line = f"vllm serve {tmp_path} --runner pooling"
    cfg = tp.SimConfig.from_vllm_args(line)
    r = tp.simulate_score([20], [100, 200], cfg, mode="analytic")
    assert r.path.name == "bi-encoder" and "ranks 'embed' above 'token_embed'" in r.path.reason
    assert r.host_bytes == 3 * 576 * 4  # one float32 vector per text
    late = tp.SimConfig.from_vllm_args(line + " --pooler-config '{\"task\": \"token_embed\"}'")
    r = tp.simulate_score([20], [100, 200], late, mode="analytic")
    assert r.path.name == "late-interaction" and r.host_bytes == 12
    assert r.peak_query_cache_bytes == 20 * 576 * 4


def test_minilm_is_a_bi_encoder_unless_token_embed_is_asked(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(MINILM))
    assert tp.simulate_score([8], [30], tp.SimConfig.from_vllm_args(
        f"vllm serve {tmp_path}"), mode="analytic").path.name == "bi-encoder"
    late = tp.SimConfig.from_vllm_args(f"vllm serve {tmp_path} --pooler-config.task token_embed")
    assert tp.simulate_score([8], [30], late, mode="analytic").path.name == "late-interaction"


def test_async_scheduling_keeps_scalars_pending():
    cfg = small(async_scheduling=True)
    r = tp.simulate_score([32], [100, 100], cfg, mode="analytic")
    assert r.host_bytes == 12
    # under async the 0-d outputs await the next step's copy, not the rows
    plain = tp.simulate([32], cfg, mode="analytic")
    assert plain.steps.loc[0, "pool_bytes"] == 32 * W * 4
    assert r.steps.loc[0, "pool_bytes"] == 4 + 32 * W * 4  # the zero + the cache
    assert r.steps.loc[0, "pool_head_bytes"] == 4  # what awaits the copy: the 0-d zero
    parts = ["pool_cache_bytes", "pool_output_bytes", "pool_head_bytes", "query_cache_bytes"]
    assert (r.steps[parts].sum(axis=1) <= r.steps["pool_bytes"]).all()


def test_data_parallel_pinning_with_given_keys():
    keys = ["alpha", "beta", "gamma", "delta"]
    r = tp.simulate_score([10, 20, 30, 40], [50, 60, 70, 80], small(), mode="analytic",
                          query_keys=keys, num_engines=3)
    want = [zlib.crc32(k.encode()) % 3 for k in keys]
    assert list(r.requests["engine"]) == want + want  # documents follow their query
    assert set(r.steps["engine"]) == set(want)
    for e in set(want):
        mine = r.steps[r.steps["engine"] == e]
        assert mine["query_cache_bytes"].iloc[-1] == 0


@pytest.mark.parametrize("seed", range(12))
def test_modes_agree_to_the_byte(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 3)
    queries = [rng.randint(1, 120) for _ in range(n)]
    docs = [rng.randint(1, 400) for _ in range(n if n > 1 else rng.randint(1, 4))]
    cfg = tp.SimConfig(hidden_size=rng.choice([8, 16]), task="token_embed",
                       max_num_batched_tokens=rng.choice([64, 128, 512]),
                       max_num_seqs=rng.choice([1, 2, 8]),
                       async_scheduling=rng.random() < 0.4,
                       dtype=rng.choice(["bfloat16", "float32"]))
    two = rng.random() < 0.7
    a = tp.simulate_score(queries, docs, cfg, mode="analytic", flash_late_interaction=two)
    t = tp.simulate_score(queries, docs, cfg, mode="tensor", flash_late_interaction=two)
    pd.testing.assert_frame_equal(byte_columns(a.steps), byte_columns(t.steps))
    pd.testing.assert_frame_equal(a.requests, t.requests)
    assert not t.requests["corrupted"].any()


def test_token_ids_and_explain():
    cfg = small()
    r = tp.simulate_score([[1, 2, 3, 4]], [[5, 6] * 50, [7] * 30], cfg, mode="tensor")
    lines = r.explain()
    assert lines[0].startswith("scoring path: late-interaction (flash-late-interaction)")
    assert any("cloned into the query cache" in line for line in lines)
    assert any(line.startswith("query cache: at most 1,024 B") for line in lines)
    assert repr(r).startswith("ScoreResult(path='late-interaction', stages=2")
    assert r.summary()["host_bytes"] == 12


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(("queries", "docs", "words"), [
    ([3, 4, 5], [6], "N:1 is refused"),
    ([3, 4], [6, 7, 8], "Input lengths must be either 1:1, 1:N or N:N"),
    ([], [6], "At least one text element"),
    ([3], [], "At least one text_pair element"),
])
def test_pairings_vllm_refuses(queries, docs, words):
    with pytest.raises(ValueError, match=words):
        tp.simulate_score(queries, docs, small(), mode="analytic")


def test_other_bad_input(tmp_path):
    with pytest.raises(TypeError, match="not a mix"):
        tp.simulate_score([3], [[1, 2]], small(), mode="analytic")
    with pytest.raises(TypeError, match="list of lengths"):
        tp.simulate_score("query", [3], small(), mode="analytic")
    with pytest.raises(ValueError, match="closed forms"):
        tp.simulate_score([3], [4], small(), mode="closed_form")
    with pytest.raises(ValueError, match="no /score or /rerank"):
        tp.simulate_score([3], [4], small(task="token_classify", num_labels=2),
                          mode="analytic")
    with pytest.raises(ValueError, match="cross-encoder"):
        tp.simulate_score([3], [4], small(task="classify", num_labels=1), mode="analytic")
    with pytest.raises(ValueError, match="balances them by load"):
        tp.simulate_score([3], [4], small(), mode="analytic", num_engines=2,
                          flash_late_interaction=False)
    with pytest.raises(ValueError, match="one per query"):
        tp.simulate_score([3], [4], small(), mode="analytic", query_keys=["a", "b"])
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2))
    cfg = tp.SimConfig.from_vllm_args(f"vllm serve {tmp_path} --runner pooling "
                                      "--pooler-config.task token_embed --max-model-len 512")
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 49152\)"):
        tp.simulate_score([[1, 49152]], [[3]], cfg, mode="analytic")
    with pytest.raises(ValueError, match="doc 2: request 2 has 600 prompt tokens, longer than"):
        tp.simulate_score([10], [20, 600], cfg, mode="analytic")


def test_the_score_memory_plot_draws_the_query_cache():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    r = tp.simulate_score([200], [300] * 5, small(), mode="analytic")
    ax = tp.viz.plot_score_memory(r)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("query cache (cloned rows, peak 50 KiB)") for t in labels)
    assert any(t.startswith("documents scored in the worker") for t in labels)
    assert ax.get_ylim()[1] >= r.peak_pooling_bytes
    plt.close(ax.figure)
    with pytest.raises(TypeError, match="simulate_score"):
        tp.viz.plot_score_memory(tp.simulate([10], small(), mode="analytic"))
    with pytest.raises(ValueError, match="engine 3 ran nothing"):
        tp.viz.plot_score_memory(r, engine=3)


def test_on_vllms_cpu_platform():
    """The CPU platform: V1 runner, no flash kernel (the reference MaxSim path), and the host
    copy copies nothing (d2h 0); tensor and analytic agree."""
    cfg = tp.SimConfig.for_model("SmolLM2-135M", hardware="CPU", task="token_embed",
                                 cpu_kvcache_space=1, max_num_batched_tokens=256)
    a = tp.simulate_score([40], [300, 200], cfg, mode="analytic")
    t = tp.simulate_score([40], [300, 200], cfg, mode="tensor")
    pd.testing.assert_frame_equal(byte_columns(a.steps), byte_columns(t.steps))
    assert (a.steps["d2h_bytes"] == 0).all() and a.host_bytes == 12
    assert not a.maxsim["estimate"].any()
    assert a.peak_maxsim_scratch_bytes == maxsim_plan([40, 40], [300, 200], 576).attrs[
        "peak_scratch_bytes"]
    assert list(a.steps["query_cache_bytes"]) == [40 * 576 * 4] * 2 + [0]


def test_pooling_params_reach_every_request_as_vllm_sends_them():
    """A score call's options go to every engine request; in two stages each also carries
    its late-interaction mode, so late chunking is refused as vLLM refuses it, while one
    stage (the frontend flag off) late-chunks every document."""
    chunked = tp.PoolingParams(late_chunking_size=64)
    with pytest.raises(ValueError, match="cannot be combined with late-interaction"):
        tp.simulate_score([32], [512] * 3, small(), mode="analytic", pooling_params=chunked)
    one = {m: tp.simulate_score([32], [512] * 3, small(), mode=m, pooling_params=chunked,
                                flash_late_interaction=False) for m in ("analytic", "tensor")}
    for r in one.values():
        assert r.requests["delivered_rows"].tolist() == [1, 8, 8, 8]  # ceil(n / 64) each
        assert r.host_bytes == (1 + 3 * 8) * 64 * 4
    pd.testing.assert_frame_equal(byte_columns(one["analytic"].steps),
                                  byte_columns(one["tensor"].steps))
    plain = tp.simulate_score([32], [512] * 3, small(), mode="analytic")
    raw = tp.simulate_score([32], [512] * 3, small(), mode="analytic",
                            pooling_params=tp.PoolingParams(use_activation=False))
    assert raw.host_bytes == plain.host_bytes == 16  # the host still gets 4 B a request
    assert raw.peak_pooling_bytes < plain.peak_pooling_bytes  # no normalised copy
    cut = tp.simulate_score([32], [512] * 3, small(), mode="analytic",
                            pooling_params=[None, *[tp.PoolingParams(truncate_prompt_tokens=100)]
                                            * 3])
    assert cut.requests["prompt_len"].tolist() == [32, 100, 100, 100]
    with pytest.raises(ValueError, match="4 requests"):
        tp.simulate_score([32], [512] * 3, small(), mode="analytic",
                          pooling_params=[chunked, chunked])
