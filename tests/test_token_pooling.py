"""tp.late_interaction.pool_tokens: hierarchical token pooling as PyLate 1.6.0 /
Sentence-Transformers v6 and
colpali-engine do it — exact outputs on inputs whose clusters are known, Sentence-Transformers'
own module as the oracle on random documents, the unchanged cases, and refusals in words."""

from __future__ import annotations

import pytest
import torch
from torch.nn.functional import normalize

import tokpool as tp
from tokpool.late_interaction import pooled_length, token_clusters

#: Two directions, rows 1-2 and 3-4 each identical: with row 0 protected and factor 2 the two
#: clusters can only be {1, 2} and {3, 4}.
TWO_GROUPS = torch.tensor([[1., 0.], [0., 1.], [0., 1.], [1., 0.], [1., 0.]])


def _random_doc(g: torch.Generator, n: int, dim: int) -> torch.Tensor:
    return normalize(torch.randn(n, dim, generator=g), dim=-1)  # [n, dim], unit rows


def test_known_clusters_give_their_means_after_the_protected_row():
    out = tp.late_interaction.pool_tokens(TWO_GROUPS, pool_factor=2)
    assert torch.equal(out, torch.tensor([[1., 0.], [0., 1.], [1., 0.]]))
    assert torch.equal(token_clusters(TWO_GROUPS, 2), torch.tensor([0, 0, 1, 1]))


def test_cluster_mean_is_the_plain_mean_not_renormalised():
    x = torch.tensor([[1., 0.], [1., 0.], [0.8, 0.6], [0., 1.], [0., 1.]])  # [5, 2]
    # factor 2 over rows 1-4: cosine distances 1-2 0.2, 2-3 0.4, 3-4 0: the Ward tree joins
    # 3+4, then 1+2 -> 2 clusters
    out = tp.late_interaction.pool_tokens(x, pool_factor=2, protected_tokens=1)
    assert out.shape == (3, 2)
    assert torch.equal(out[0], x[0])
    means = {tuple(r.tolist()) for r in out[1:]}
    assert means == {tuple(((x[1] + x[2]) / 2).tolist()), (0.0, 1.0)}
    assert out[1:].norm(dim=-1).min() < 0.96  # (1, 0) and (0.8, 0.6) average to length 0.949


def test_protected_rows_stay_in_front_untouched():
    g = torch.Generator().manual_seed(3)
    x = _random_doc(g, 20, 8)
    out = tp.late_interaction.pool_tokens(x, pool_factor=3, protected_tokens=4)
    assert torch.equal(out[:4], x[:4])
    assert out.shape[0] == 4 + 16 // 3


def test_cluster_count_rule_and_pooled_length():
    g = torch.Generator().manual_seed(4)
    for n in (1, 2, 3, 4, 5, 9, 33):
        for factor in (1, 2, 3, 4):
            for p in (0, 1, 2):
                x = _random_doc(g, n, 6)
                out = tp.late_interaction.pool_tokens(x, factor, p)
                q = min(p, n)
                k = max((n - q) // factor, 1)
                expect = q + k if k < n - q else n
                assert pooled_length(n, factor, p) == expect
                assert out.shape == (expect, 6), (n, factor, p)


@pytest.mark.parametrize("n, factor, p", [(5, 1, 1), (2, 2, 1), (1, 4, 0), (3, 2, 3), (0, 2, 1)])
def test_nothing_to_reduce_returns_the_rows_themselves(n, factor, p):
    x = torch.randn(n, 4)
    out = tp.late_interaction.pool_tokens(x, factor, p)
    assert out is x
    assert token_clusters(x, factor, p) is None


def test_matches_sentence_transformers_module_on_random_documents():
    st = pytest.importorskip("sentence_transformers.multi_vector_encoder.modules.token_pooling")
    g = torch.Generator().manual_seed(0)
    several, one = 0, 0
    for _ in range(150):
        n = int(torch.randint(1, 50, (1,), generator=g))
        dim = int(torch.randint(2, 24, (1,), generator=g))
        factor = int(torch.randint(1, 5, (1,), generator=g))
        p = int(torch.randint(0, 3, (1,), generator=g))
        x = _random_doc(g, n, dim)
        ref = st.HierarchicalTokenPooling(pool_factor=factor, num_protected_tokens=p,
                                          normalize_embeddings=False).pool([x])[0]
        got = tp.late_interaction.pool_tokens(x, factor, p)
        if max((n - min(p, n)) // factor, 1) == 1 and n - min(p, n) > 1:
            # one cluster: PyLate's scatter_add sum (followed here) and Sentence-Transformers'
            # Tensor.sum add in different orders -- the same mean to rounding
            one += 1
            torch.testing.assert_close(got, ref, rtol=0, atol=1e-6)
        else:
            several += 1
            assert torch.equal(got, ref), (n, dim, factor, p)
    assert several > 100 and one > 3


def test_half_precision_is_clustered_in_float32_and_returned_in_its_dtype():
    g = torch.Generator().manual_seed(5)
    x = _random_doc(g, 30, 16).to(torch.bfloat16)
    out = tp.late_interaction.pool_tokens(x, 2)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, tp.late_interaction.pool_tokens(x.float(), 2).to(torch.bfloat16))


def test_a_list_gives_a_list_each_document_on_its_own():
    g = torch.Generator().manual_seed(6)
    docs = [_random_doc(g, n, 5) for n in (7, 1, 12)]
    out = tp.late_interaction.pool_tokens(docs, pool_factor=2)
    assert [d.shape[0] for d in out] == [4, 1, 6]
    for d, o in zip(docs, out, strict=True):
        assert torch.equal(o, tp.late_interaction.pool_tokens(d, pool_factor=2))
    assert tp.late_interaction.pool_tokens([], 2) == []


def test_colpali_has_no_protected_rows_and_renormalises_its_means():
    x = torch.tensor([[1., 0.], [0.8, 0.6], [0., 1.], [0., 1.]])  # [4, 2]
    out = tp.late_interaction.pool_tokens(x, pool_factor=2, method="colpali")
    assert out.shape == (2, 2)
    labels = token_clusters(x, 2, method="colpali")
    assert labels.tolist() in ([0, 0, 1, 1], [1, 1, 0, 0])
    first = normalize((x[0] + x[1]) / 2, dim=-1)
    rows = {tuple(r.tolist()) for r in out}
    assert rows == {tuple(first.tolist()), (0.0, 1.0)}
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(2))
    # PyLate's variant with no protected row keeps the plain (shorter) mean
    plain = tp.late_interaction.pool_tokens(x, pool_factor=2, protected_tokens=0)
    assert plain.norm(dim=-1).min() < 0.96


def test_colpali_clusters_the_distance_matrix_rows_not_the_distances():
    # the two methods build different Ward trees: on random documents their labels differ
    g = torch.Generator().manual_seed(7)
    differ = 0
    for _ in range(20):
        x = _random_doc(g, 24, 6)
        a = token_clusters(x, 3, 0, method="pylate")
        b = token_clusters(x, 3, 0, method="colpali")
        same_partition = {frozenset((a == c).nonzero().flatten().tolist()) for c in a.unique()} \
            == {frozenset((b == c).nonzero().flatten().tolist()) for c in b.unique()}
        differ += not same_partition
    assert differ > 0


@pytest.mark.parametrize("kwargs, error, words", [
    ({"pool_factor": 0}, ValueError, "pool_factor must be a whole number >= 1, got 0"),
    ({"pool_factor": 2.0}, TypeError, "pool_factor must be a whole number"),
    ({"pool_factor": True}, TypeError, "pool_factor must be a whole number"),
    ({"protected_tokens": -1}, ValueError, "protected_tokens must be a whole number >= 0"),
    ({"method": "ward"}, ValueError, "method must be one of ['pylate', 'colpali']"),
    ({"method": "colpali", "protected_tokens": 1}, ValueError, "has no protected rows"),
])
def test_bad_options_are_refused_in_words(kwargs, error, words):
    with pytest.raises(error, match=None) as info:
        tp.late_interaction.pool_tokens(TWO_GROUPS, **kwargs)
    assert words in str(info.value)


@pytest.mark.parametrize("embs, error, words", [
    ("text", TypeError, "embs must be a Tensor [n_tokens, dim] or a list of them"),
    (torch.zeros(2, 3, 4), ValueError, "pass a padded batch as a list"),
    (torch.zeros(3, dtype=torch.int64), ValueError, "must be 2-D"),
    (torch.ones(3, 2, dtype=torch.int64), TypeError, "floating-point"),
    (torch.tensor([[1., 0.], [float("nan"), 1.], [0., 1.]]), ValueError, "non-finite"),
    ([torch.ones(3, 2), "x"], TypeError, "embs[1] must be a Tensor"),
])
def test_bad_rows_are_refused_in_words(embs, error, words):
    with pytest.raises(error) as info:
        tp.late_interaction.pool_tokens(embs, 2)
    assert words in str(info.value)
