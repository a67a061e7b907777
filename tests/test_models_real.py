"""tokpool.models on the real offline models: SmolLM2-135M (GGUF) and all-MiniLM-L6-v2.

Marked ``real_model``: the first run converts SmolLM2's GGUF into tokpool's cache (~20 s once);
later runs load it in a few seconds.
"""

from __future__ import annotations

import os
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub at run time

import pytest
import torch
import torch.nn.functional as F

import tokpool as tp
from tokpool.models.gguf_cache import MARKER

pytestmark = [pytest.mark.real_model, pytest.mark.usefixtures("one_thread")]

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Token-level pooling keeps one hidden state per prompt token.",
    "hi",
]


@pytest.fixture(scope="module")
def smollm2() -> tp.models.PoolingModel:
    return tp.load_model("smollm2-135m")


@pytest.fixture(scope="module")
def minilm() -> tp.models.PoolingModel:
    return tp.load_model("minilm-l6")


@pytest.fixture(scope="module")
def sentence_transformer(minilm):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm.source_path), device="cpu")


# --- SmolLM2 --------------------------------------------------------------------------------


def test_smollm2_is_a_cached_llama_decoder(smollm2):
    assert type(smollm2.hf_model).__name__ == "LlamaForCausalLM"
    assert (smollm2.hidden_size, smollm2.num_layers, smollm2.max_length) == (576, 30, 8192)
    assert smollm2.attn_type == "decoder"
    assert smollm2.supported_tasks == frozenset({"embed", "token_embed"})
    assert (smollm2.source_path / MARKER).is_file()
    assert tp.models.model_cache_dir() in smollm2.source_path.parents


@pytest.mark.parametrize("n", [55, 56, 57])
def test_smollm2_chunked_prefill_matches_full_forward(smollm2, n, record_property):
    """vLLM's chunked-prefill test: token ids 1024.., chunk 10; cosine >= 0.999 in float32."""
    frame = tp.models.compare_chunked(smollm2, [1024 + i for i in range(n)], chunk_sizes=(10,),
                               dtypes=("float32", "bfloat16"))
    summary = tp.models.summarize_chunked(frame).set_index("dtype")
    for dtype in ("float32", "bfloat16"):
        record_property(f"min_cosine_{dtype}", float(summary.loc[dtype, "min_cosine"]))
    assert summary.loc["float32", "min_cosine"] >= 0.999
    assert summary.loc["bfloat16", "min_cosine"] >= 0.99  # vLLM's own threshold
    assert (frame.groupby("dtype").size() == n).all()


def test_smollm2_token_embed_chunked_through_encode(smollm2):
    ids = [1024 + i for i in range(57)]
    (full,) = smollm2.encode([ids], task="token_embed")
    (chunked,) = smollm2.encode([ids], task="token_embed", chunk_size=10, async_scheduling=True)
    assert full.shape == chunked.shape == (57, 576)
    assert F.cosine_similarity(full, chunked, dim=-1).min() >= 0.999
    (last,) = smollm2.encode([ids], task="embed", chunk_size=10)
    assert F.cosine_similarity(last, full[-1], dim=0) >= 0.999


def test_legacy_gate_refuses_smollm2_token_embed(smollm2):
    legacy = sorted(tp.pooler.tasks.runner_tasks(attn_type="decoder", policy="pre_50931"))
    message = (
        f"supports pooling tasks {legacy}, but this model selects 'token_embed' from "
        "['embed', 'token_embed']. Set an explicitly supported task"
    )
    with pytest.raises(tp.UnsupportedTaskError, match=re.escape(message)):
        tp.gate(smollm2.supported_tasks, requested="token_embed", attn_type=smollm2.attn_type,
                policy="pre_50931")
    served = tp.gate(smollm2.supported_tasks, requested="token_embed",
                     attn_type=smollm2.attn_type, policy="current")
    assert served == frozenset({"embed", "token_embed"})
    assert smollm2.encode(TEXTS[:1], task="token_embed")[0].shape[1] == 576


def test_smollm2_too_long_prompt(smollm2):
    with pytest.raises(ValueError, match=r"8193 tokens.*at most 8192"):
        smollm2.encode([[1024] * 8193], task="token_embed")


# --- MiniLM against sentence-transformers ---------------------------------------------------


def test_minilm_is_a_mean_pooling_encoder(minilm):
    assert minilm.attn_type == "encoder_only"
    assert minilm.sequence_pooling == "MEAN"
    assert minilm.supported_tasks == frozenset({"embed", "token_embed"})
    assert minilm.max_length == 256  # sentence_bert_config.json caps the 512 positions


def test_minilm_embed_equals_sentence_transformers(minilm, sentence_transformer):
    ref = sentence_transformer.encode(TEXTS, convert_to_tensor=True, normalize_embeddings=True)
    ours = torch.stack(minilm.encode(TEXTS, task="embed"))
    assert F.cosine_similarity(ours, ref.cpu(), dim=-1).min() >= 0.9999


def test_minilm_token_embed_equals_sentence_transformers(minilm, sentence_transformer):
    refs = sentence_transformer.encode(TEXTS, output_value="token_embeddings")
    ours = minilm.encode(TEXTS, task="token_embed", use_activation=False)
    for ref, out in zip(refs, ours, strict=True):
        assert out.shape == ref.shape
        assert F.cosine_similarity(out, ref.cpu(), dim=-1).min() >= 0.9999
        assert torch.allclose(out, ref.cpu(), atol=1e-4)
    normalised = minilm.encode(TEXTS, task="token_embed")
    assert torch.allclose(normalised[0], F.normalize(refs[0].cpu(), dim=-1), atol=1e-5)


def test_minilm_cannot_be_chunked_or_overlong(minilm):
    with pytest.raises(ValueError, match="bidirectional"):
        minilm.encode(TEXTS, task="token_embed", chunk_size=4)
    with pytest.raises(ValueError, match=r"300 tokens.*at most 256"):
        minilm.encode([[1000] * 300], task="embed")


# --- model-backed simulation ----------------------------------------------------------------


def test_smollm2_simulation_async_legacy_corrupts_clone_does_not(smollm2):
    sim = pytest.importorskip("tokpool.sim", reason="the step simulator is not in this tree")
    simulate = getattr(tp, "simulate", None) or sim.simulate
    source = tp.ModelSource(smollm2, [*TEXTS, "Chunked prefill splits a long prompt " * 4])
    results = {}
    for policy in ("legacy", "clone"):
        config = sim.SimConfig(hidden_size=smollm2.hidden_size, dtype=smollm2.dtype,
                               max_num_batched_tokens=16, async_scheduling=True, policy=policy)
        results[policy] = simulate(source.prompt_lens, config, source=source)
    assert results["clone"].corrupted == []
    assert results["legacy"].corrupted  # real hidden states, overwritten before collection
    assert results["legacy"].steps["num_requests"].max() > 1  # requests interleave in a step
