"""The shipped retrieval set and the quality table: the set is what its builder makes, metrics
are exact on ranks worked out by hand, MaxSim over all documents at once equals
maxsim_batched, pooled rows and bytes are what pool_tokens and
multivector_index_bytes say,
and a real MiniLM run's dense vectors are MiniLM's own embed output."""

from __future__ import annotations

import json
import platform

import numpy as np
import pytest
import torch
from torch.nn.functional import normalize

import tokpool as tp
from tokpool.late_interaction import (
    EncodedSet,
    RetrievalSet,
    bootstrap_ci,
    build_retrieval_set,
    load_retrieval_set,
    maxsim_batched,
    method_scores,
    mrr_at_k,
    ranks_of_relevant,
    recall_at_k,
    retrieval_quality,
)
from tokpool.late_interaction.retrieval import default_dir


def test_shipped_set_has_one_relevant_document_per_query_in_the_corpus():
    s = load_retrieval_set()
    assert (len(s.queries), len(s.docs)) == (150, 600)
    ids = [d["id"] for d in s.docs]
    assert len(set(ids)) == len(ids) and len({q["id"] for q in s.queries}) == 150
    assert all(len(q["relevant"]) == 1 and q["relevant"][0] in s.doc_index for q in s.queries)
    assert {q["source"] for q in s.queries} == {"stdlib", "numpy"}
    assert all(q["text"] not in d["text"] for q in s.queries for d in s.docs
               if d["id"] == q["relevant"][0])  # the summary is not inside its own passage


def test_shipped_set_is_what_the_builder_makes_with_the_recorded_versions():
    s = load_retrieval_set()
    if (s.meta["python"], s.meta["numpy"]) != (platform.python_version(), np.__version__):
        pytest.skip(f"the set was built with Python {s.meta['python']} / NumPy "
                    f"{s.meta['numpy']}; their docstrings differ from this install's")
    built = build_retrieval_set()
    assert built.queries == s.queries and built.docs == s.docs and built.meta == s.meta
    assert json.loads((default_dir() / "meta.json").read_text())["seed"] == 39


def test_subset_keeps_every_relevant_document():
    s = load_retrieval_set().subset(10, 30)
    assert (len(s.queries), len(s.docs)) == (10, 30)
    assert all(q["relevant"][0] in s.doc_index for q in s.queries)
    with pytest.raises(ValueError, match="cannot hold the 10 relevant documents"):
        load_retrieval_set().subset(10, 5)


def test_metrics_on_ranks_worked_out_by_hand():
    assert mrr_at_k([1, 3, 12], k=10) == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert mrr_at_k([2, 2], k=1) == 0.0
    assert recall_at_k([1, 3, 12, 5], 5) == 0.75
    scores = np.array([0.5, 0.9, 0.5, 0.1])
    assert ranks_of_relevant(scores, [0]) == 3  # a tie counts against the relevant document
    assert ranks_of_relevant(scores, [1]) == 1
    assert ranks_of_relevant(scores, [3, 0]) == 3
    low, high = bootstrap_ci([1] * 20, mrr_at_k)
    assert (low, high) == (1.0, 1.0)
    ranks = [1, 2, 1, 50, 3, 1, 8, 1, 20, 1]
    low, high = bootstrap_ci(ranks, mrr_at_k, n_boot=500, seed=1)
    assert low < mrr_at_k(ranks) < high


def _synthetic(seed: int) -> tuple[RetrievalSet, EncodedSet]:
    g = torch.Generator().manual_seed(seed)
    docs = [normalize(torch.randn(int(n), 16, generator=g), dim=-1)
            for n in torch.randint(2, 30, (15,), generator=g)]
    queries = [d[1 : 1 + min(4, d.shape[0] - 1)] + 0.05 * torch.randn(min(4, d.shape[0] - 1), 16,
               generator=g) for d in docs[:6]]  # query i is a noisy piece of document i
    rset = RetrievalSet(
        queries=[{"id": f"q{i}", "text": "", "source": "x", "relevant": [f"d{i}"]}
                 for i in range(6)],
        docs=[{"id": f"d{i}", "text": "", "source": "x"} for i in range(15)])
    enc = EncodedSet(q_dense=normalize(torch.stack([q.mean(0) for q in queries]), dim=-1),
                     d_dense=normalize(torch.stack([d.mean(0) for d in docs]), dim=-1),
                     q_tokens=queries, d_tokens=docs, model="synthetic", seconds=0.0)
    return rset, enc


@pytest.mark.parametrize("seed", range(3))
def test_maxsim_over_all_documents_at_once_equals_maxsim_batched(seed):
    _, enc = _synthetic(seed)
    scores = method_scores(enc, enc.d_tokens)
    for i, q in enumerate(enc.q_tokens):
        ref = torch.stack(maxsim_batched([q] * len(enc.d_tokens), enc.d_tokens)).numpy()
        np.testing.assert_allclose(scores[i], ref, rtol=0, atol=1e-5)
    dense = method_scores(enc)
    np.testing.assert_allclose(dense, (enc.q_dense @ enc.d_dense.T).numpy())


def test_quality_table_counts_vectors_and_bytes_and_finds_the_planted_answers():
    rset, enc = _synthetic(0)
    table = retrieval_quality(rset, enc, pool_factors=(2, 4), ks=(1, 3), n_boot=100)
    assert list(table["method"]) == ["dense (mean-pooled)", "MaxSim", "MaxSim, pool 2",
                                     "MaxSim, pool 4"]
    lens = [d.shape[0] for d in enc.d_tokens]
    rows = table.set_index("method")
    assert rows.loc["dense (mean-pooled)", "vectors"] == 15
    assert rows.loc["dense (mean-pooled)", "bytes_fp16"] == 15 * 16 * 2
    assert rows.loc["MaxSim", "vectors"] == sum(lens)
    assert rows.loc["MaxSim", "bytes_fp16"] == sum(lens) * 16 * 2
    pooled = [d.shape[0] for d in tp.late_interaction.pool_tokens(enc.d_tokens, pool_factor=4)]
    assert rows.loc["MaxSim, pool 4", "vectors"] == sum(pooled)
    assert rows.loc["MaxSim, pool 4", "bytes_plaid"] == tp.late_interaction.multivector_index_bytes(
        pooled, 16, nbits=2, layout="colbert").total_bytes
    assert rows.loc["MaxSim", "mrr@10"] == 1.0 and rows.loc["MaxSim", "ranks"] == [1] * 6
    for name, row in rows.iterrows():
        assert row["mrr@10_low"] <= row["mrr@10"] <= row["mrr@10_high"], name
        assert row["recall@1"] <= row["recall@3"]


@pytest.mark.parametrize("kwargs, error, words", [
    ({"pool_factors": (1,)}, ValueError, "pool_factors[0] must be a whole number >= 2"),
    ({"ks": (0,)}, ValueError, "ks[0] must be a whole number >= 1"),
    ({"ks": 5}, TypeError, "ks must be a list"),
])
def test_bad_options_are_refused_in_words(kwargs, error, words):
    rset, enc = _synthetic(1)
    with pytest.raises(error) as info:
        retrieval_quality(rset, enc, n_boot=10, **kwargs)
    assert words in str(info.value)


def test_an_encoding_of_another_set_is_refused():
    rset, enc = _synthetic(1)
    other = RetrievalSet(queries=rset.queries[:2], docs=rset.docs)
    with pytest.raises(ValueError, match="encode this set"):
        retrieval_quality(other, enc)


@pytest.mark.real_model
def test_minilm_dense_vectors_are_its_own_embed_output():
    model = tp.load_model("minilm-l6")
    s = load_retrieval_set().subset(2, 3)
    enc = tp.late_interaction.encode_retrieval_set(model, s)
    embed = model.encode([d["text"] for d in s.docs], task="embed")
    torch.testing.assert_close(enc.d_dense, torch.stack(embed), rtol=0, atol=1e-6)
    tokens = model.encode([d["text"] for d in s.docs], task="token_embed")
    for a, b in zip(enc.d_tokens, tokens, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
