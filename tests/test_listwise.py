"""Listwise rerankers (JinaForRanking), ColBERT-style heads and BGE-M3's token_embed, resolved
from config.json as vLLM 0.33.0 resolves them, and their bytes in ``tp.simulate_score``."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import tokpool as tp
from tokpool.late_interaction.listwise import (
    DOC_TOKEN_ID,
    QUERY_TOKEN_ID,
    JinaRankingPool,
    jina_prompt_text,
    listwise_prompts,
    marker_rows,
)
from tokpool.sim.vllm_rules.scoring_path import late_interaction_head

#: jinaai/jina-reranker-v3's config.json (Qwen3-0.6B backbone), as published.
JINA = {"architectures": ["JinaForRanking"], "model_type": "qwen3", "hidden_size": 1024,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151936,
        "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True, "rope_theta": 1000000}
COLBERT = {"architectures": ["HF_ColBERT"], "model_type": "bert", "hidden_size": 768,
           "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
           "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2,
           "torch_dtype": "float32"}
BGE_M3 = {"architectures": ["BgeM3EmbeddingModel"], "model_type": "xlm-roberta",
          "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
          "intermediate_size": 4096, "vocab_size": 250002, "max_position_embeddings": 8194,
          "type_vocab_size": 1, "torch_dtype": "float32", "bos_token_id": 0}


def jina_config(**changes) -> tp.SimConfig:
    return tp.SimConfig.from_hf_config(JINA, **changes)


def test_jina_resolves_as_vllm_pools_it():
    cfg = jina_config()
    assert cfg.model.declared_tasks == ("token_embed",) and cfg.task == "token_embed"
    assert cfg.head_dtype is None and cfg.use_activation is False  # TokenPooler, no head
    head = cfg.model.late_interaction
    assert (head.dim, head.head_dtype, head.marker_rows) == (512, False,
                                                            (DOC_TOKEN_ID, QUERY_TOKEN_ID))


def test_the_64_document_prompt():
    """12,850 tokens, 64 documents: 65 rows x 512 in bf16 = 66,560 B delivered; the AllPool
    chunk cache holds every hidden state until the prompt finishes."""
    cfg = jina_config(max_num_batched_tokens=2048)
    template = 12850 - 64 * 191 - 136  # 64 documents of 190 tokens, a 135-token query
    r = tp.simulate_score([135], [190] * 64, cfg, mode="analytic", template_tokens=template)
    assert r.path.name == "listwise" and not r.path.two_stage
    assert [len(p) for p in r.prompts] == [12850] and marker_rows(r.prompts[0]) == 65
    rec = r.requests.iloc[0]
    assert (rec.delivered_rows, rec.output_bytes) == (65, 66_560) and r.host_bytes == 66_560
    steps = r.steps
    last = len(steps) - 1
    held = steps.loc[last - 1, "pool_cache_bytes"]
    assert held == (12850 - 562) * 1024 * 2  # every earlier chunk, model dtype
    # the finishing step: the cache, the cat of all 12,850 rows, then the projector's tensors
    cat = 12850 * 1024 * 2
    assert steps.loc[last, "pool_peak_bytes"] == held + cat
    t = tp.simulate_score([135], [190] * 64, cfg, mode="tensor", template_tokens=template)
    assert t.steps.filter(like="bytes").equals(steps.filter(like="bytes"))


def test_plain_simulate_delivers_the_marker_rows_as_vllm():
    """tp.simulate on the JinaForRanking config pools as JinaForRankingPool (the 65 marker
    rows x 512 in bf16), in every mode, the same ledger as simulate_score's; plain ALL pooling
    with vLLM's float32 head would deliver every row: 12,850 x 1,024 x 4 B."""
    cfg = jina_config(max_num_batched_tokens=2048)
    assert cfg.pooling_method == "JINA_RANKING" and cfg.output_width == 512
    prompts = listwise_prompts([135], [190] * 64, template_tokens=12850 - 64 * 191 - 136)
    analytic = tp.simulate(prompts, cfg, mode="analytic")
    tensor = tp.simulate(prompts, cfg, mode="tensor")
    for r in (analytic, tensor):
        assert r.requests.loc[0, ["delivered_rows", "output_bytes"]].tolist() == [65, 66_560]
        assert r.corrupted == []
    pd.testing.assert_frame_equal(analytic.steps, tensor.steps)
    assert tensor.outputs[0].shape == (65, 512) and tensor.outputs[0].dtype == torch.bfloat16
    scored = tp.simulate_score([135], [190] * 64, cfg, mode="analytic",
                               template_tokens=12850 - 64 * 191 - 136)
    assert scored.steps["pool_peak_bytes"].tolist() == analytic.steps["pool_peak_bytes"].tolist()
    everything = tp.simulate(prompts, jina_config(max_num_batched_tokens=2048, pooling="ALL"),
                             mode="analytic")
    assert everything.requests.loc[0, "output_bytes"] == 12850 * 1024 * 4 == 52_633_600


def test_marker_rows_need_token_ids_in_every_mode():
    cfg = jina_config()
    for mode in ("analytic", "tensor", "closed_form"):
        with pytest.raises(ValueError, match=r"marker tokens .*give token-id prompts"):
            tp.simulate([12_850], cfg, mode=mode)
    with pytest.raises(ValueError, match="no pooler head"):
        jina_config(use_activation=True)
    with pytest.raises(ValueError, match="no pooler head"):
        tp.SimConfig(pooling="JINA_RANKING", hidden_size=8, head_dtype="float32")
    with pytest.raises(ValueError, match="does not serve task"):
        tp.SimConfig(pooling="JINA_RANKING", hidden_size=8, task="token_classify")
    with pytest.raises(ValueError, match="policy='clone'"):
        tp.SimConfig(pooling="JINA_RANKING", hidden_size=8, policy="vllm")


def test_a_request_s_use_activation_changes_nothing_without_a_head():
    cfg = jina_config(max_num_batched_tokens=64)
    prompts = listwise_prompts([5], [7, 9])
    plain = tp.simulate(prompts, cfg, mode="tensor")
    asked = tp.simulate(prompts, cfg, mode="tensor",
                        pooling_params=tp.PoolingParams(use_activation=True))
    assert torch.equal(plain.outputs[0], asked.outputs[0])
    pd.testing.assert_frame_equal(plain.steps, asked.steps)


@st.composite
def jina_runs(draw):
    """Token-id prompts with markers anywhere, and an engine of any memory model, dtype,
    budget, chunking, scheduling and policy."""
    prompts = draw(st.lists(st.lists(st.sampled_from([0, 5, DOC_TOKEN_ID, QUERY_TOKEN_ID]),
                                     min_size=1, max_size=40), min_size=1, max_size=4))
    memory = draw(st.sampled_from(("one_buffer", "vllm", "eager")))
    engine = ({"output_memory": "one_buffer"} if memory == "one_buffer" else
              {"output_memory": "vllm", "enforce_eager": True} if memory == "eager" else
              {"output_memory": "vllm",
               "max_cudagraph_capture_size": draw(st.sampled_from((1, 4, 16)))})
    chunked = draw(st.booleans())
    budget = draw(st.integers(1, 24))
    if not chunked:
        budget = max(budget, max(len(p) for p in prompts))
    cfg = tp.SimConfig(pooling="JINA_RANKING", hidden_size=draw(st.integers(2, 8)),
                       dtype=draw(st.sampled_from(("bfloat16", "float16", "float32"))),
                       max_num_batched_tokens=budget,
                       max_num_seqs=min(budget, draw(st.integers(1, 4))),
                       enable_chunked_prefill=chunked, async_scheduling=draw(st.booleans()),
                       policy=draw(st.sampled_from(tp.RETENTION_POLICIES)), **engine)
    return cfg, prompts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=jina_runs())
def test_jina_ranking_tensor_equals_analytic(run):
    """Tensor mode (real tensors through JinaRankingPool, every output checked against the
    projected reference rows) and analytic mode agree on every column and on corruption."""
    cfg, prompts = run
    tensor = tp.simulate(prompts, cfg, mode="tensor")
    analytic = tp.simulate(prompts, cfg, mode="analytic")
    pd.testing.assert_frame_equal(tensor.steps, analytic.steps)
    pd.testing.assert_frame_equal(tensor.requests, analytic.requests)
    assert tensor.corrupted == analytic.corrupted
    if cfg.policy != "legacy":
        assert tensor.corrupted == []
    for out, ids in zip(tensor.outputs, prompts, strict=True):
        assert out.shape == (marker_rows(ids), 512) and out.dtype == cfg.dtype


def test_jina_one_shot_projector_peak():
    """One step (the offline LLM class: budget 16,384 on an H100): the one-shot view owns
    nothing; the peak is the gather (alive until the projector returns), the first layer's
    output and the ReLU's (65 x (1024 + 512 + 512), bf16)."""
    r = tp.simulate_score([135], [190] * 64, jina_config(usage="llm"), mode="analytic",
                          template_tokens=12850 - 64 * 191 - 136)
    assert r.peak_pooling_bytes == 65 * (1024 + 512 + 512) * 2


def test_listwise_prompts_as_vllm_builds_them():
    assert [len(p) for p in listwise_prompts([2], [3, 4, 5])] == [3 + 4 + 5 + 3 + 2 + 1]
    pairs = listwise_prompts([[7, 8], [9]], [[1], [2, 3]])
    assert pairs == [[1, DOC_TOKEN_ID, 7, 8, QUERY_TOKEN_ID], [2, 3, DOC_TOKEN_ID, 9,
                                                                QUERY_TOKEN_ID]]
    with pytest.raises(ValueError, match="N:1 is refused"):
        listwise_prompts([1, 2], [3])
    with pytest.raises(TypeError, match="tokenize="):
        listwise_prompts(["what?"], ["a doc"])
    text = jina_prompt_text("q<|rerank_token|>", ["d1", "d2<|embed_token|>"])
    assert text.count("<|embed_token|>") == 2 and text.count("<|rerank_token|>") == 1
    assert 'Rank the passages based on their relevance to query: q\n<passage id="0">' in text
    ids = listwise_prompts(["q"], ["d1", "d2"], tokenize=lambda s: [ord(c) for c in s])[0]
    assert ids == [ord(c) for c in jina_prompt_text("q", ["d1", "d2"])]


def test_jina_pool_chunked_equals_one_shot_and_reference():
    torch.manual_seed(0)
    proj = nn.Sequential(nn.Linear(16, 8, bias=False), nn.ReLU(), nn.Linear(8, 4, bias=False))
    ids = torch.tensor([3, DOC_TOKEN_ID, 4, 5, DOC_TOKEN_ID, QUERY_TOKEN_ID, 6, DOC_TOKEN_ID])
    hidden = torch.randn(8, 16)
    with torch.inference_mode():
        whole = JinaRankingPool(proj)(hidden, tp.build_metadata([8], prompt_token_ids=ids[None]))
        pool = JinaRankingPool(proj)
        first = tp.build_metadata([8], num_scheduled_tokens=[5], seq_lens=[5],
                                  prompt_token_ids=ids[None])
        assert pool(hidden[:5], first) == [None]
        second = tp.build_metadata([8], num_scheduled_tokens=[3], seq_lens=[8],
                                   states=first.pooling_states, prompt_token_ids=ids[None])
        chunked = pool(hidden[5:], second)
        rows = torch.tensor([1, 4, 7, 5])  # documents first, then the query
        assert torch.equal(whole[0], chunked[0])
        assert torch.equal(whole[0], proj(hidden[rows]))


def test_colbert_heads_as_vllm_resolves_them(tmp_path):
    assert late_interaction_head({**COLBERT, "colbert_dim": 96, "dim": 128}).dim == 96
    assert late_interaction_head({**COLBERT, "dim": 128, "projection_dim": 64}).dim == 128
    assert late_interaction_head({**COLBERT, "projection_dim": 64}).dim == 64
    assert late_interaction_head({**COLBERT, "colbert_dim": 0, "dim": 32}).dim == 32  # `or`
    (tmp_path / "config.json").write_text(json.dumps(COLBERT))
    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"}]))
    (tmp_path / "1_Dense").mkdir()
    (tmp_path / "1_Dense" / "config.json").write_text(json.dumps(
        {"in_features": 768, "out_features": 48, "bias": False}))
    assert late_interaction_head(tmp_path).projector is None  # no weights: vLLM skips it
    (tmp_path / "1_Dense" / "model.safetensors").write_bytes(b"")
    head = late_interaction_head(tmp_path)
    assert head.dim == 48 and "1_Dense" in head.projector
    cfg = tp.SimConfig.from_hf_config({**COLBERT, "dim": 128})
    assert cfg.model.declared_tasks == ("token_embed",) and cfg.task == "token_embed"
    r = tp.simulate_score([32], [180] * 3, cfg, mode="analytic")
    assert r.peak_query_cache_bytes == 32 * 128 * 4  # projected rows, float32 head
    # unchunked encoder: the three documents finish in one step and share the query: one
    # flash launch over [32] x [180] * 3 at width 128
    assert r.maxsim[["step", "pairs", "max_q", "max_d"]].values.tolist() == [[1, 3, 32, 180]]
    one = tp.simulate_score([32], [180] * 3, cfg, mode="analytic", flash_late_interaction=False)
    assert one.host_bytes == (32 + 3 * 180) * 128 * 4


def test_bge_m3_token_embed_drops_bos():
    cfg = tp.SimConfig.from_hf_config(BGE_M3)
    assert "token_embed" in cfg.model.declared_tasks and cfg.task == "embed"
    late = tp.SimConfig.from_hf_config(BGE_M3, task="token_embed")
    head = late.model.late_interaction
    assert head.drops_bos and head.dim == 1024
    r = tp.simulate_score([20], [100], late, mode="analytic", flash_late_interaction=False)
    assert list(r.requests["delivered_rows"]) == [19, 99]
    assert r.host_bytes == (19 + 99) * 1024 * 4
    assert any("BOS" in n for n in r.notes)


def test_plain_simulate_runs_a_colbert_head_s_projector_in_every_mode():
    """ColBERT's colbert_linear runs in the head (TokenEmbeddingPoolerHead: cast, projector,
    normalise): 180 rows x 128 float32 delivered, not x 768; the in-step peak holds the
    pooled rows, the projection and its normalisation."""
    cfg = tp.SimConfig.from_hf_config({**COLBERT, "dim": 128})
    runs = {m: tp.simulate([180], cfg, mode=m) for m in ("analytic", "tensor", "closed_form")}
    for r in runs.values():
        assert r.requests.loc[0, "output_bytes"] == 180 * 128 * 4
        assert r.peak_pooling_bytes == 180 * 768 * 4 + 2 * 180 * 128 * 4
    assert runs["tensor"].outputs[0].shape == (180, 128)
    pd.testing.assert_frame_equal(runs["analytic"].steps, runs["tensor"].steps)
    scored = tp.simulate_score([32], [180] * 3, cfg, mode="analytic")
    assert scored.notes == [] and scored.peak_query_cache_bytes == 32 * 128 * 4


def _st_folder(tmp_path, activation):
    (tmp_path / "config.json").write_text(json.dumps(COLBERT))
    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "sentence_transformers.models.Dense"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]))
    for folder, (n_in, n_out, act) in {"1_Dense": (768, 256, activation),
                                       "2_Dense": (256, 64, None)}.items():
        (tmp_path / folder).mkdir()
        layer = {"in_features": n_in, "out_features": n_out, "bias": False}
        if act is not None:
            layer["activation_function"] = act
        (tmp_path / folder / "config.json").write_text(json.dumps(layer))
        (tmp_path / folder / "model.safetensors").write_bytes(b"")
    return tmp_path


@pytest.mark.parametrize("activation, layers", [
    ("torch.nn.modules.activation.Tanh", ((256, True), (256, False), (64, True))),
    ("torch.nn.modules.linear.Identity", ((256, True), (64, True))),
    ("torch.nn.modules.activation.Mish", ()),  # get_act_fn refuses it: vLLM loads no projector
])
def test_sentence_transformers_dense_layers_as_vllm_loads_them(tmp_path, activation, layers):
    head = late_interaction_head(_st_folder(tmp_path, activation))
    assert head.layers == layers and (head.dim == 64 if layers else True)
    if layers:
        cfg = tp.SimConfig.from_hf_config(tmp_path, task="token_embed")
        tensor = tp.simulate([40], cfg, mode="tensor")
        analytic = tp.simulate([40], cfg, mode="analytic")
        assert tensor.outputs[0].shape == (40, 64)
        pd.testing.assert_frame_equal(tensor.steps, analytic.steps)


def test_explain_names_the_marker_rows():
    r = tp.simulate(listwise_prompts([5], [7, 9]), jina_config(), mode="analytic")
    (line,) = r.explain()
    assert "kept its 3 marker rows" in line and "projected to 512" in line
    assert "no head (3,072 B delivered)" in line


@st.composite
def bge_m3_runs(draw):
    lens = draw(st.lists(st.integers(1, 40), min_size=1, max_size=4))
    cfg = tp.SimConfig.from_hf_config(
        {**BGE_M3, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1,
         "intermediate_size": 16}, task="token_embed", max_model_len=64,
        dtype=draw(st.sampled_from(["float32", "bfloat16", "float16"])),
        head_dtype=draw(st.sampled_from(["auto", None, "float32"])),
        use_activation=draw(st.sampled_from([None, False, True])),
        async_scheduling=draw(st.booleans()), policy=draw(st.sampled_from(tp.RETENTION_POLICIES)),
        hardware=draw(st.sampled_from(["CPU", "H100 SXM"])))
    return cfg, lens, draw(st.sampled_from([None, None, 4]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=bge_m3_runs())
def test_bge_m3_drops_its_bos_row_in_every_mode(run):
    """BGE-M3's token_embed: colbert_linear in the head, then BOSEOSFilter's ``[1:]`` (a view;
    late-chunked outputs keep every chunk row): n - 1 rows delivered, tensor == analytic ==
    the closed form, on the CPU platform (no host copy: the view pins its whole tensor) and
    on CUDA (the copy copies the slice)."""
    cfg, lens, chunk = run
    params = tp.PoolingParams(late_chunking_size=chunk) if chunk else None
    tensor = tp.simulate(lens, cfg, mode="tensor", pooling_params=params)
    analytic = tp.simulate(lens, cfg, mode="analytic", pooling_params=params)
    pd.testing.assert_frame_equal(tensor.steps, analytic.steps)
    pd.testing.assert_frame_equal(tensor.requests, analytic.requests)
    for out, n in zip(tensor.outputs, lens, strict=True):
        assert out.shape == (-(-n // chunk) if chunk else n - 1, 8)
    if len(lens) == 1:
        closed = tp.simulate(lens, cfg, mode="closed_form", pooling_params=params)
        assert closed.peak_pooling_bytes == analytic.peak_pooling_bytes
        assert closed.requests["output_bytes"].tolist() == analytic.requests[
            "output_bytes"].tolist()


def test_a_slice_on_the_cpu_platform_is_the_output_and_pins_its_tensor():
    """A Matryoshka slice without activation on vLLM's CPU platform: the user gets the slice
    (5 x 4 float32 = 80 B, in every mode) and the view keeps the whole 5 x 8 tensor (160 B)
    in host memory."""
    cfg = tp.SimConfig(hidden_size=8, hardware="CPU", as_if=True, use_activation=False,
                       dtype="float32")
    runs = [tp.simulate([5], cfg, mode=m, pooling_params=tp.PoolingParams(dimensions=4))
            for m in ("tensor", "analytic")]
    for r in runs:
        assert r.requests["output_bytes"].tolist() == [80]
        assert r.steps["host_bytes"].iloc[-1] == 160


def test_an_overwritten_marker_row_is_corrupted_even_where_the_projector_hides_it():
    """Hidden size 2 projects through ONE ReLU unit: two different negative rows both give 0,
    so the delivered output can equal the reference while its marker row was overwritten
    (legacy views of one buffer row). Tensor mode checks the gathered rows before the
    projector, and agrees with analytic mode's prediction."""
    cfg = tp.SimConfig(pooling="JINA_RANKING", hidden_size=2, dtype="bfloat16",
                       max_num_batched_tokens=1, max_num_seqs=1, policy="legacy",
                       output_memory="one_buffer")
    prompts = [[0, DOC_TOKEN_ID, 0, 0]]
    tensor = tp.simulate(prompts, cfg, mode="tensor")
    analytic = tp.simulate(prompts, cfg, mode="analytic")
    assert tensor.corrupted == analytic.corrupted == [0]
    pd.testing.assert_frame_equal(tensor.requests, analytic.requests)
