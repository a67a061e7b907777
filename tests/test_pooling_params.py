"""tp.PoolingParams: vLLM's per-request options in the simulator (late chunking, dimensions,
use_activation, truncation), its refusals, and late chunking's row rule.

Every mode agrees to the byte with per-request params (tensor == analytic on every column;
closed forms == the analytic loop); the 32K document at chunk 512 delivers 64 rows while
pooling holds all 32,768; the parity part (marker ``parity``, skipped without vLLM) checks
``late_chunk_pool`` against ``_mean_pool_chunks``, the delivered outputs against vLLM's own
``TokenEmbeddingPoolerHead``, and the refusals against ``PoolingParams.verify``.
"""

from __future__ import annotations

import dataclasses
import random
from types import SimpleNamespace as NS

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sim_property import configs

import tokpool as tp
import tokpool.sim.vllm_rules.engine_checks as checks
from tokpool.late_interaction import late_chunk_pool, late_chunk_rows
from tokpool.pooler.vllm_bridge import VLLM_REFERENCE_VERSION, vllm_unavailable_reason, vllm_version
from tokpool.sim.backends.closed_form import single_request
from tokpool.sim.backends.source import default_source

EngineRefusal = checks.EngineRefusal


# --- the row rule -----------------------------------------------------------------------------


def test_a_32k_document_at_chunk_512_delivers_64_rows_while_pooling_holds_all_of_it():
    cfg = tp.SimConfig(hidden_size=1024, max_num_batched_tokens=2048)  # bf16, float32 head
    p = tp.PoolingParams(late_chunking_size=512)
    plain = tp.simulate([32_768], cfg, mode="analytic")
    chunked = tp.simulate([32_768], cfg, mode="analytic", pooling_params=p)
    assert chunked.requests.delivered_rows.tolist() == [64]
    assert chunked.requests.output_bytes.tolist() == [64 * 1024 * 4]  # float32 rows
    assert plain.requests.output_bytes.tolist() == [32_768 * 1024 * 4]
    # pooling's chunk cache and its cat still hold every hidden state (bf16)
    assert chunked.peak_pooling_bytes >= 32_768 * 1024 * 2
    assert chunked.steps.pool_cache_bytes.max() == plain.steps.pool_cache_bytes.max()
    closed = tp.simulate([32_768], cfg, mode="closed_form", pooling_params=p).summary()
    assert closed["output_bytes"] == 64 * 1024 * 4
    assert closed["peak_pooling_bytes"] == chunked.peak_pooling_bytes


def test_late_chunk_pool_is_the_mean_of_each_chunk():
    g = torch.Generator().manual_seed(1)
    for n, c in [(1, 1), (7, 3), (8, 4), (5, 512), (100, 7)]:
        h = torch.randn(n, 6, generator=g, dtype=torch.float64).to(torch.bfloat16)
        got = late_chunk_pool(h, c)
        assert got.dtype == torch.float32 and got.shape == (late_chunk_rows(n, c), 6)
        want = torch.stack([h[i:i + c].double().mean(0) for i in range(0, n, c)])
        assert torch.allclose(got.double(), want, atol=1e-6)


@pytest.mark.parametrize("call, kind, words", [
    (lambda: late_chunk_pool([[1.0]], 2), TypeError, "hidden must be a torch.Tensor"),
    (lambda: late_chunk_pool(torch.ones(0, 4), 2), ValueError, "n >= 1"),
    (lambda: late_chunk_pool(torch.ones(3), 2), ValueError, r"\[n, H\]"),
    (lambda: late_chunk_pool(torch.ones(3, 2, dtype=torch.int64), 2), TypeError, "floating"),
    (lambda: late_chunk_pool(torch.ones(3, 2), 0), ValueError, "chunk_size"),
    (lambda: late_chunk_rows(10, 1.5), TypeError, "chunk_size"),
    (lambda: tp.PoolingParams(late_chunking_size=True), TypeError, "late_chunking_size"),
    (lambda: tp.PoolingParams(late_chunking_size=2**63), ValueError, "less than 2"),
    (lambda: tp.PoolingParams(dimensions=3.0), TypeError, "dimensions must be an int"),
    (lambda: tp.PoolingParams(use_activation="no"), TypeError, "use_activation"),
    (lambda: tp.PoolingParams(step_tag_id=-1), ValueError, "step_tag_id must be >= 0"),
    (lambda: tp.PoolingParams(returned_token_ids="ab"), TypeError, "returned_token_ids"),
    (lambda: tp.PoolingParams(returned_token_ids=[]), ValueError, "is empty"),
    (lambda: tp.PoolingParams(truncate_prompt_tokens=-2), ValueError, ">= -1"),
    (lambda: tp.PoolingParams(truncation_side="middle"), ValueError, "truncation_side"),
    (lambda: tp.PoolingParams(late_interaction_mode="x"), ValueError, "late_interaction_mode"),
    (lambda: tp.simulate([4], tp.SimConfig(hidden_size=4), pooling_params={}), TypeError,
     "pooling_params must be a tp.PoolingParams"),
    (lambda: tp.simulate([4, 4], tp.SimConfig(hidden_size=4),
                         pooling_params=[tp.PoolingParams()]), ValueError, "1 entries for 2"),
    (lambda: tp.simulate([4], tp.SimConfig(hidden_size=4), pooling_params=[5]), TypeError,
     r"pooling_params\[0\]"),
    (lambda: tp.simulate([4, 4], tp.SimConfig(hidden_size=4), mode="closed_form",
                         pooling_params=tp.PoolingParams()), ValueError, "ONE request"),
])
def test_bad_input_is_refused_in_words(call, kind, words):
    with pytest.raises(kind, match=words):
        call()


# --- vLLM's refusals ------------------------------------------------------------------------


MATRYOSHKA = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "intermediate_size": 128, "vocab_size": 1000,
              "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
              "matryoshka_dimensions": [16, 32, 64]}


def _matryoshka(**kw):
    return tp.SimConfig.from_hf_config(MATRYOSHKA, max_num_batched_tokens=64, **kw)


@pytest.mark.parametrize("config, params, words", [
    (lambda: tp.SimConfig(task="token_classify"), {"late_chunking_size": 8},
     "Late chunking requires token_embed"),
    (lambda: tp.SimConfig(task="embed"), {"late_chunking_size": 8},
     "Late chunking requires token_embed"),
    (lambda: tp.SimConfig(), {"late_chunking_size": 8, "late_interaction_mode": "score_doc"},
     "Late chunking cannot be combined with late-interaction scoring"),
    (lambda: tp.SimConfig(), {"step_tag_id": 3},
     "Task token_embed only supports ['dimensions', 'use_activation', 'late_chunking_params'] "
     "parameters, does not support ['step_tag_id'] parameters"),
    (lambda: tp.SimConfig(), {"dimensions": 8}, "does not support Matryoshka embeddings"),
    (lambda: _matryoshka(), {"dimensions": 128}, "only supports dimensions in range [1, 64]"),
    (lambda: _matryoshka(), {"dimensions": 24},
     "only supports Matryoshka dimensions [16, 32, 64], got 24"),
    (lambda: tp.SimConfig(task="classify"), {"dimensions": 8},
     "Task 'classify' only supports ['use_activation'] parameters, does not support "
     "['dimensions'] parameters"),
    (lambda: tp.SimConfig(task="token_classify", pooling="STEP", step_tag_every=4,
                          num_labels=2), {"late_chunking_size": 8},
     "Late chunking requires token_embed"),
    (lambda: tp.SimConfig(), {"late_chunking_size": 8, "truncate_prompt_tokens": 100},
     "Late chunking does not support input padding, truncation"),
    (lambda: tp.SimConfig(max_model_len=100), {"truncate_prompt_tokens": 101},
     "truncate_prompt_tokens=101 cannot be greater than max_total_tokens = 100"),
])
def test_vllms_refusals_in_its_words_on_every_mode(config, params, words):
    cfg = config()
    for mode in ("tensor", "analytic", "closed_form"):
        with pytest.raises(EngineRefusal) as err:
            tp.simulate([16], cfg, mode=mode, pooling_params=tp.PoolingParams(**params))
        assert words in str(err.value) and err.value.follows in str(err.value)
        assert str(err.value).startswith("request 0: ")


def test_jina_for_ranking_refuses_late_chunking():
    jina = {**MATRYOSHKA, "architectures": ["JinaForRanking"]}
    jina.pop("matryoshka_dimensions")
    cfg = tp.sim.vllm_rules.hf_config.preset_from_hf_config(jina)
    config = tp.SimConfig(hidden_size=64, model=cfg, max_num_batched_tokens=64)
    with pytest.raises(EngineRefusal, match="JinaForRanking returns document/query vectors"):
        tp.PoolingParams(late_chunking_size=4).verify(config)


def test_every_mode_asks_the_one_function(monkeypatch):
    def asked(*args, **kwargs):
        raise EngineRefusal("<the one definition>", follows="check_pooling_params")

    monkeypatch.setattr(checks, "check_pooling_params", asked)
    cfg = tp.SimConfig(hidden_size=4)
    for mode in ("tensor", "analytic", "closed_form"):
        with pytest.raises(EngineRefusal, match="the one definition"):
            tp.simulate([4], cfg, mode=mode, pooling_params=tp.PoolingParams())


def test_as_if_looks_past_a_model_that_is_not_matryoshka():
    cfg = tp.SimConfig(hidden_size=8, as_if=True)
    r = tp.simulate([10], cfg, mode="analytic", pooling_params=tp.PoolingParams(dimensions=3))
    assert any("Matryoshka" in line for line in r.looked_past)
    assert r.requests.output_bytes.tolist() == [10 * 3 * 4]


def test_a_request_may_not_change_the_engines_step_selection():
    cfg = tp.SimConfig(task="token_classify", pooling="STEP", step_tag_id=5, num_labels=2)
    tp.simulate([8], cfg, mode="analytic", pooling_params=tp.PoolingParams(step_tag_id=5))
    with pytest.raises(ValueError, match="one STEP selection per run"):
        tp.simulate([8], cfg, mode="analytic", pooling_params=tp.PoolingParams(step_tag_id=6))


# --- truncation and the prefix cache ----------------------------------------------------------


def test_truncation_shortens_the_prompt_before_anything_else():
    cfg = tp.SimConfig(hidden_size=4, max_model_len=50, max_num_batched_tokens=64)
    keep = [tp.PoolingParams(truncate_prompt_tokens=10), tp.PoolingParams(
        truncate_prompt_tokens=-1), None]
    r = tp.simulate([30, 80, 20], cfg, mode="analytic", pooling_params=keep)
    assert r.requests.prompt_len.tolist() == [10, 50, 20]  # -1 keeps max_model_len
    with pytest.raises(EngineRefusal, match="empty"):
        tp.simulate([30], cfg, pooling_params=tp.PoolingParams(truncate_prompt_tokens=0))


def test_truncation_keeps_the_first_or_last_tokens_of_token_ids():
    ids = list(range(1, 21))
    p = tp.PoolingParams(truncate_prompt_tokens=5)
    assert p.truncate(ids, None) == [1, 2, 3, 4, 5]
    assert p.replace(truncation_side="left").truncate(ids, None) == [16, 17, 18, 19, 20]


def test_late_chunked_requests_never_read_the_prefix_cache():
    cfg = tp.SimConfig(hidden_size=4, max_num_batched_tokens=64, block_size=4,
                       enable_prefix_caching=True)
    prompts = [list(range(1, 33)), list(range(1, 33))]
    chunked = tp.simulate(prompts, cfg, mode="analytic",
                          pooling_params=tp.PoolingParams(late_chunking_size=8),
                          arrival_steps=[0, 1])
    assert chunked.requests.num_cached_tokens.tolist() == [0, 0]
    embed = tp.simulate(prompts, cfg.replace(task="embed"), mode="analytic",
                        arrival_steps=[0, 1])
    assert embed.requests.num_cached_tokens.tolist()[1] > 0  # what a cache read would give


# --- every mode agrees to the byte -----------------------------------------------------------


@st.composite
def request_params(draw, task):
    """A PoolingParams the task takes (or None), drawn."""
    if draw(st.booleans()):
        return None
    fields = {"use_activation": draw(st.none() | st.booleans())}
    if task == "token_embed" and draw(st.booleans()):
        fields["late_chunking_size"] = draw(st.integers(1, 12))
    if task in ("token_embed", "embed") and draw(st.booleans()):
        fields["dimensions"] = draw(st.integers(1, 6))
    return tp.PoolingParams(**fields)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), cfg=configs(tasks=("token_embed", "embed", "token_classify")),
       lens=st.lists(st.integers(1, 40), min_size=1, max_size=4))
def test_tensor_equals_analytic_with_per_request_params(data, cfg, lens):
    params = [data.draw(request_params(cfg.task)) for _ in lens]
    params = [p if p is None or p.dimensions is None or p.dimensions <= cfg.hidden_size
              else p.replace(dimensions=cfg.hidden_size) for p in params]
    cfg = cfg.replace(as_if=True)  # dimensions on a model that is not Matryoshka
    if not cfg.enable_chunked_prefill:
        cfg = cfg.replace(max_num_batched_tokens=max(cfg.max_num_batched_tokens, max(lens)))
    tensor = tp.simulate(lens, cfg, mode="tensor", pooling_params=params)
    analytic = tp.simulate(lens, cfg, mode="analytic", pooling_params=params)
    pd.testing.assert_frame_equal(tensor.steps, analytic.steps)
    pd.testing.assert_frame_equal(tensor.requests, analytic.requests)
    pd.testing.assert_frame_equal(tensor.chunks, analytic.chunks)
    assert tensor.corrupted == analytic.corrupted
    for r, (n, p) in enumerate(zip(tensor.requests.prompt_len, params, strict=True)):
        if p is not None and p.late_chunking_size is not None and cfg.task == "token_embed":
            assert tensor.outputs[r].shape[0] == late_chunk_rows(int(n), p.late_chunking_size)
    if len(lens) == 1:  # the closed form solves one request
        row = tp.simulate(lens, cfg, mode="closed_form", pooling_params=params[0]).summary()
        summary = analytic.summary()
        for name in ("peak_pooling_bytes", "copy_bytes", "d2h_bytes", "host_bytes",
                     "output_bytes", "corrupted"):
            assert row[name] == summary[name], name


def test_the_closed_forms_stay_vectorised_without_params():
    cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=16)
    table = single_request(np.array([10, 100, 1000]), cfg)
    assert table["output_bytes"].tolist() == [n * 8 * 4 for n in (10, 100, 1000)]


# --- parity with vLLM's own code --------------------------------------------------------------

_reason = vllm_unavailable_reason()
if _reason is None and vllm_version() != VLLM_REFERENCE_VERSION:
    _reason = f"vLLM {vllm_version()} is installed, the rules were read in 0.33.0"
needs_vllm = [pytest.mark.parity,
              pytest.mark.skipif(_reason is not None, reason=f"vLLM parity skipped: {_reason}")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parity
@pytest.mark.skipif(_reason is not None, reason=f"vLLM parity skipped: {_reason}")
def test_late_chunk_pool_is_vllms_mean_pool_chunks(dtype, parity_count):
    from vllm.model_executor.layers.pooler.tokwise.heads import _mean_pool_chunks

    rng = random.Random(512)
    g = torch.Generator().manual_seed(512)
    for _ in range(150):
        n = rng.choice((1, 2, rng.randint(1, 50), rng.randint(1, 3000)))
        c = rng.choice((1, 2, rng.randint(1, 64), 512, rng.randint(1, 5000)))
        h = torch.randn(n, rng.randint(1, 40), generator=g).to(dtype)
        ours, theirs = late_chunk_pool(h, c), _mean_pool_chunks(h, c)
        assert ours.dtype == theirs.dtype and torch.equal(ours, theirs), (n, c)
    parity_count("late-chunk means (_mean_pool_chunks)", 150)


@pytest.mark.parity
@pytest.mark.skipif(_reason is not None, reason=f"vLLM parity skipped: {_reason}")
def test_delivered_outputs_are_vllms_token_embedding_head(parity_count):
    """tp.simulate's delivered outputs (tensor mode) == vLLM's TokenEmbeddingPoolerHead on the
    same pooled rows with the same PoolingParams (late chunking, dimensions, activation)."""
    from vllm.model_executor.layers.pooler.activations import PoolerNormalize
    from vllm.model_executor.layers.pooler.tokwise import heads as vheads
    from vllm.pooling_params import LateChunkingParams
    from vllm.pooling_params import PoolingParams as VParams

    rng = random.Random(38)
    n = 0
    for _ in range(40):
        dtype = rng.choice(("bfloat16", "float16", "float32"))
        head = rng.choice((None, "float32", "bfloat16"))
        cfg = tp.SimConfig(hidden_size=rng.randint(2, 12), dtype=dtype, head_dtype=head,
                           max_num_batched_tokens=rng.randint(4, 32), as_if=True)
        lens = [rng.randint(1, 60) for _ in range(rng.randint(1, 3))]
        params = [tp.PoolingParams(
            late_chunking_size=rng.choice((None, rng.randint(1, 20))),
            dimensions=rng.choice((None, rng.randint(1, cfg.hidden_size))),
            use_activation=rng.choice((None, True, False))) for _ in lens]
        result = tp.simulate(lens, cfg, mode="tensor", pooling_params=params)
        source = default_source(cfg)
        source.prepare(lens)
        vhead = vheads.TokenEmbeddingPoolerHead(head_dtype=cfg.head_dtype,
                                                activation=PoolerNormalize())
        for r, p in enumerate(params):
            vp = VParams(task="token_embed", dimensions=p.dimensions,
                         use_activation=True if p.use_activation is None else p.use_activation,
                         late_chunking_params=None if p.late_chunking_size is None else
                         LateChunkingParams(chunk_size=p.late_chunking_size))
            want = vhead.forward_chunk(source.reference(r), vp)
            got = result.outputs[r]
            assert got.dtype == want.dtype and torch.equal(got, want.contiguous()), (r, p)
            n += 1
    parity_count("token_embed head outputs with PoolingParams (TokenEmbeddingPoolerHead)", n)


def _vllm_model(task_pooling: str, *, matryoshka=None, is_matryoshka=False, size=64):
    from vllm.config.pooler import PoolerConfig

    return NS(pooler_config=PoolerConfig(tok_pooling_type=task_pooling),
              served_model_name="m", embedding_size=size, is_matryoshka=is_matryoshka or bool(
                  matryoshka), matryoshka_dimensions=matryoshka)


VERIFY_CASES = [  # (task, token pooling, matryoshka dims, is_matryoshka, tokpool params)
    ("token_classify", "ALL", None, False, {"late_chunking_size": 8}),
    ("embed", "ALL", None, False, {"late_chunking_size": 8}),
    ("token_embed", "ALL", None, False, {"late_chunking_size": 8,
                                         "late_interaction_mode": "score_doc"}),
    ("token_embed", "ALL", None, False, {"step_tag_id": 3}),
    ("token_embed", "ALL", None, False, {"returned_token_ids": [1, 2]}),
    ("token_embed", "ALL", None, False, {"dimensions": 8}),
    ("embed", "ALL", None, True, {"dimensions": 65}),
    ("token_embed", "ALL", [16, 32, 64], True, {"dimensions": 24}),
    ("classify", "ALL", None, False, {"dimensions": 8}),
    ("token_classify", "ALL", None, False, {"dimensions": 8}),
    ("token_classify", "STEP", None, False, {"late_chunking_size": 4}),
    ("token_embed", "ALL", [16, 32, 64], True, {"dimensions": 32}),  # accepted
    ("token_embed", "ALL", None, False, {"late_chunking_size": 4}),  # accepted
]


@pytest.mark.parity
@pytest.mark.skipif(_reason is not None, reason=f"vLLM parity skipped: {_reason}")
@pytest.mark.parametrize("case", range(len(VERIFY_CASES)))
def test_refusals_are_pooling_params_verify(case, parity_count):
    from vllm.exceptions import VLLMValidationError
    from vllm.pooling_params import LateChunkingParams, LateInteractionParams
    from vllm.pooling_params import PoolingParams as VParams

    task, pooling, mds, is_m, fields = VERIFY_CASES[case]
    ours = tp.PoolingParams(**fields)
    vp = VParams(task=task, dimensions=ours.dimensions, step_tag_id=ours.step_tag_id,
                 returned_token_ids=None if ours.returned_token_ids is None else list(
                     ours.returned_token_ids),
                 late_chunking_params=None if ours.late_chunking_size is None else
                 LateChunkingParams(chunk_size=ours.late_chunking_size),
                 late_interaction_params=None if ours.late_interaction_mode is None else
                 LateInteractionParams(mode=ours.late_interaction_mode, query_key="q",
                                       query_uses=1))
    try:
        vp.verify(_vllm_model(pooling, matryoshka=mds, is_matryoshka=is_m))
        theirs = None
    except VLLMValidationError as err:
        theirs = str(err)
    preset = dataclasses.replace(tp.sim.vllm_rules.hf_config.preset_from_hf_config(
        {**MATRYOSHKA, "matryoshka_dimensions": mds, "is_matryoshka": is_m}), name="m")
    kw = {"pooling": "STEP", "num_labels": 2} if pooling == "STEP" else {}
    cfg = tp.SimConfig(model=preset, task=task, max_num_batched_tokens=64, max_model_len=64,
                       **kw)
    try:
        checks.check_pooling_params(ours, cfg)
        mine = None
    except EngineRefusal as err:
        mine = str(err)
    assert (mine is None) == (theirs is None), (mine, theirs)
    if theirs is not None:
        assert theirs in mine, (mine, theirs)
    parity_count("PoolingParams.verify refusals", 1)


def test_a_nan_the_head_makes_is_not_corruption():
    # late chunking averages +c and -c to 0; a float16 normalisation of 0 is NaN (eps
    # underflows), as in vLLM: the same NaN in every mode, not a corrupted output
    cfg = tp.SimConfig(hidden_size=1, dtype="float16", head_dtype=None, use_activation=True,
                       max_num_batched_tokens=2, max_num_seqs=1, enable_chunked_prefill=False,
                       policy="legacy", output_memory="one_buffer", as_if=True)
    params = [tp.PoolingParams(late_chunking_size=2)]
    tensor = tp.simulate([2], cfg, mode="tensor", pooling_params=params)
    analytic = tp.simulate([2], cfg, mode="analytic", pooling_params=params)
    assert torch.isnan(tensor.outputs[0]).all()
    assert tensor.corrupted == analytic.corrupted == []


def test_an_offloaded_matryoshka_slice_pins_its_whole_host_tensor():
    # offload keeps outputs on the host: the delivered dimensions-slice is a view of the
    # host tensor, so the host holds the whole width, while the output is the slice
    cfg = tp.SimConfig(hidden_size=2, head_dtype=None, use_activation=False,
                       max_num_batched_tokens=1, max_num_seqs=1, enable_chunked_prefill=False,
                       policy="offload", output_memory="one_buffer", as_if=True)
    params = [tp.PoolingParams(dimensions=1)]
    for mode in ("tensor", "analytic"):
        r = tp.simulate([1], cfg, mode=mode, pooling_params=params)
        assert r.requests.output_bytes.tolist() == [2], mode
        assert r.steps.host_bytes.tolist() == [4], mode
    row = tp.simulate([1], cfg, mode="closed_form", pooling_params=params[0]).summary()
    assert row["host_bytes"] == 4 and row["output_bytes"] == 2


def test_explain_says_what_late_chunking_delivered():
    cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=4096)
    r = tp.simulate([32_768, 100], cfg, mode="analytic",
                    pooling_params=[tp.PoolingParams(late_chunking_size=512), None])
    first, second = r.explain()
    assert "late chunking at 512 tokens" in first and "into 64 chunk rows" in first
    assert "while pooling held all 32,768 rows" in first
    assert "late chunking" not in second
