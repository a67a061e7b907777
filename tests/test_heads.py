"""Heads: order (cast → projector/classifier → Matryoshka → calibration → activation) and
their errors; SPLADE and the BGE-M3-style combination."""

import pytest
import torch
import torch.nn.functional as F

import tokpool as tp
from tokpool.pooler import heads

X = torch.tensor([[3.0, 4.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.bfloat16)


def test_embedding_head_casts_to_float32_and_normalises():
    out = heads.TokenEmbeddingHead()(X)
    assert out.dtype == torch.float32
    assert torch.allclose(out, torch.tensor([[0.6, 0.8, 0.0], [1.0, 0.0, 0.0]]))


def test_embedding_head_order_projector_then_matryoshka_then_normalise():
    proj = torch.nn.Linear(3, 4, bias=False)
    with torch.no_grad():
        proj.weight.copy_(torch.tensor([[1.0, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]]))
    head = heads.TokenEmbeddingHead(projector=proj)
    out = head(X, dimensions=2)
    expected = F.normalize(proj(X.float())[..., :2], dim=-1)
    assert out.shape == (2, 2) and torch.allclose(out, expected)
    raw = head(X, use_activation=False)
    assert torch.allclose(raw, proj(X.float()))


def test_embedding_head_keeps_dtype_when_head_dtype_is_none_and_maps_lists():
    head = heads.TokenEmbeddingHead(head_dtype=None)
    outs = head([X, None])
    assert outs[0].dtype == torch.bfloat16 and outs[1] is None
    assert head(None) is None


@pytest.mark.parametrize("dims", [0, 4, -1])
def test_matryoshka_dimensions_out_of_range(dims):
    with pytest.raises(ValueError, match=r"outside \[1, 3\]"):
        heads.TokenEmbeddingHead()(X, dimensions=dims)


def test_matryoshka_dimensions_type():
    with pytest.raises(TypeError, match="dimensions must be an int"):
        heads.TokenEmbeddingHead()(X, dimensions=2.0)


def test_classifier_head_softmax_for_two_labels_sigmoid_for_one():
    logits = torch.tensor([[1.0, 3.0], [0.0, 0.0]])
    assert torch.allclose(heads.TokenClassifierHead()(logits), torch.softmax(logits, -1))
    one = torch.tensor([[0.5], [-2.0]])
    assert torch.allclose(heads.TokenClassifierHead()(one), torch.sigmoid(one))
    assert torch.equal(heads.TokenClassifierHead()(one, use_activation=False), one)


def test_classifier_head_order_with_calibration():
    clf = torch.nn.Linear(3, 2)
    head = heads.TokenClassifierHead(classifier=clf, logit_mean=0.5, logit_sigma=2.0)
    out = head(X)
    expected = torch.softmax((clf(X.float()) - 0.5) / 2.0, dim=-1)
    assert out.dtype == torch.float32 and torch.allclose(out, expected)


def test_classifier_head_errors():
    with pytest.raises(ValueError, match=r"logit_sigma must be > 0, got 0.0"):
        heads.TokenClassifierHead(logit_sigma=0.0)
    with pytest.raises(ValueError, match="unknown activation"):
        heads.TokenClassifierHead(activation="relu")
    bad = heads.TokenClassifierHead(classifier=lambda x: x.sum())
    with pytest.raises(ValueError, match="num_labels>=1"):
        bad(X)
    with pytest.raises(ValueError, match=r"\[n_tokens, width\]"):
        heads.TokenClassifierHead()(torch.zeros(2, 2, 2))


def test_dtype_resolution():
    assert heads.resolve_dtype("bf16") is torch.bfloat16
    assert heads.resolve_dtype("torch.float16") is torch.float16
    assert heads.resolve_dtype(None) is None
    assert heads.dtype_size("bfloat16") == 2 and heads.dtype_size(torch.float32) == 4
    with pytest.raises(ValueError, match="unknown head_dtype 'int4'"):
        heads.TokenEmbeddingHead(head_dtype="int4")
    with pytest.raises(ValueError, match="floating-point"):
        heads.resolve_dtype(torch.int64)
    with pytest.raises(TypeError):
        heads.resolve_dtype(3)


# --- SPLADE ------------------------------------------------------------------------------


def test_splade_max_over_kept_tokens_strips_cls_and_sep():
    torch.manual_seed(0)
    mlm = torch.nn.Linear(4, 6)
    h = torch.randn(7, 4)
    ids = [[101, 5, 6, 102], [101, 102], [7, 8, 9]]
    meta = tp.build_metadata([4, 2, 1 + 0], prompt_token_ids=[ids[0], ids[1], [7]])
    out = heads.SpladeSparsePooler(mlm)(h, meta)
    assert out.shape == (3, 6)
    expected0 = torch.log1p(torch.relu(mlm(h[1:3]))).amax(0)
    assert torch.allclose(out[0], expected0)
    assert torch.equal(out[1], torch.zeros(6))  # only CLS/SEP: nothing kept
    assert torch.allclose(out[2], torch.log1p(torch.relu(mlm(h[6:7]))).amax(0))


def test_splade_rejects_partial_prefill():
    meta = tp.build_metadata([4], num_scheduled_tokens=[2], prompt_token_ids=[[1, 2, 3, 4]])
    with pytest.raises(RuntimeError, match="partial prefill"):
        heads.SpladeSparsePooler(torch.nn.Linear(2, 3))(torch.zeros(2, 2), meta)
    with pytest.raises(ValueError, match="'max' or 'sum'"):
        heads.SpladeSparsePooler(torch.nn.Linear(2, 3), pooling="mean")


# --- BGE-M3 ------------------------------------------------------------------------------


def test_bge_m3_dense_cls_then_sparse_weight_per_non_special_token():
    torch.manual_seed(0)
    sparse = torch.nn.Linear(4, 1)
    h = torch.randn(5, 4)
    meta = tp.build_metadata([5], prompt_token_ids=[[0, 11, 12, 13, 2]])
    (out,) = heads.BgeM3Pooler(sparse)(h, meta)
    dense = F.normalize(h[0], dim=-1)
    weights = torch.relu(sparse(h[1:4])).reshape(-1)
    assert out.shape == (4 + 3,)
    assert torch.allclose(out, torch.cat([dense, weights]))


def test_bge_m3_sparse_width_must_be_one():
    meta = tp.build_metadata([3], prompt_token_ids=[[0, 5, 2]])
    with pytest.raises(ValueError, match=r"\[n, 1\]"):
        heads.BgeM3Pooler(torch.nn.Linear(4, 2))(torch.randn(3, 4), meta)


def test_pooler_declares_intersection_and_dispatch_routes_by_task():
    embed = tp.pooler.poolers.Pooler(tp.AllPool(), heads.TokenEmbeddingHead())
    assert embed.get_supported_tasks() == {"token_embed"}
    seq = tp.pooler.poolers.Pooler(tp.LastPool(), heads.TokenEmbeddingHead(),
                            tasks=frozenset({"embed"}))
    dispatch = tp.pooler.poolers.DispatchPooler({"token_embed": embed, "embed": seq})
    assert dispatch.get_supported_tasks() == {"token_embed", "embed"}
    h = torch.arange(12.0).reshape(4, 3)
    meta = tp.build_metadata([1, 3], task=["embed", "token_embed"])
    out = dispatch(h, meta)
    assert torch.allclose(out[0], F.normalize(h[0], dim=-1))
    assert out[1].shape == (3, 3) and torch.allclose(out[1], F.normalize(h[1:], dim=-1))
    with pytest.raises(tp.UnsupportedTaskError, match=r"Unsupported task: 'classify'"):
        dispatch(h, tp.build_metadata([4], task="classify"))
    with pytest.raises(ValueError, match="does not support task 'classify'"):
        tp.pooler.poolers.DispatchPooler({"classify": embed})
