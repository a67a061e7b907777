"""StepPool (columns, then rows, then head), CLS/LAST/MEAN and the method factory."""

import pytest
import torch

import tokpool as tp


def test_step_pool_selects_rows_at_the_step_tag():
    h = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    meta = tp.build_metadata([4], prompt_token_ids=[[10, 99, 10, 20]], step_tag_id=10)
    (out,) = tp.StepPool(enable_chunked_prefill=False)(h, meta)
    assert torch.equal(out, torch.tensor([[1.0, 2.0], [5.0, 6.0]]))


def test_step_pool_columns_then_rows():
    h = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    meta = tp.build_metadata([3], prompt_token_ids=[[99, 10, 99]], step_tag_id=10,
                             returned_token_ids=[0, 2])
    (out,) = tp.StepPool()(h, meta)
    assert torch.equal(out, torch.tensor([[4.0, 6.0]]))


def test_step_pool_columns_only_and_no_filter():
    h = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    meta = tp.build_metadata([2], prompt_token_ids=[[10, 20]], returned_token_ids=[0, 2])
    assert torch.equal(tp.StepPool()(h, meta)[0], torch.tensor([[1.0, 3.0], [4.0, 6.0]]))
    plain = tp.build_metadata([2], prompt_token_ids=[[10, 20]])
    assert torch.equal(tp.StepPool()(h, plain)[0], h)


def test_step_pool_no_matching_tag_gives_empty_rows():
    h = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    meta = tp.build_metadata([2], prompt_token_ids=[[10, 20]], step_tag_id=999)
    (out,) = tp.StepPool()(h, meta)
    assert out.shape == (0, 2)


def test_step_pool_chunked_propagates_none_then_selects():
    pool = tp.StepPool(async_scheduling=True)
    ids = [[10, 20, 10, 40]]
    h = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    m1 = tp.build_metadata([4], num_scheduled_tokens=[2], seq_lens=[2], prompt_token_ids=ids,
                           step_tag_id=10)
    assert pool(h[:2].clone(), m1) == [None]
    m2 = tp.build_metadata([4], num_scheduled_tokens=[2], states=m1.pooling_states,
                           prompt_token_ids=ids, step_tag_id=10)
    (out,) = pool(h[2:].clone(), m2)
    assert torch.equal(out, torch.tensor([[1.0, 2.0], [5.0, 6.0]]))


def test_step_pool_per_request_tags_and_bad_columns():
    h = torch.arange(10.0).reshape(5, 2)
    meta = tp.build_metadata([2, 3], prompt_token_ids=[[1, 2], [3, 3, 4]], step_tag_id=[2, 3])
    a, b = tp.StepPool()(h, meta)
    assert torch.equal(a, h[1:2]) and torch.equal(b, h[2:4])
    bad = tp.build_metadata([2], prompt_token_ids=[[1, 2]], returned_token_ids=[5])
    with pytest.raises(ValueError, match=r"returned_token_ids \[5\] are outside the pooled"):
        tp.StepPool()(h[:2], bad)


def test_step_then_head_softmax_over_selected_columns():
    logits = torch.tensor([[0.0, 1.0, 5.0], [2.0, 0.0, 9.0]])
    meta = tp.build_metadata([2], prompt_token_ids=[[7, 8]], step_tag_id=8,
                             returned_token_ids=[0, 1])
    pooler = tp.pooler.poolers.Pooler(tp.StepPool(), tp.pooler.heads.TokenClassifierHead())
    (probs,) = pooler(logits, meta)
    assert torch.allclose(probs, torch.softmax(torch.tensor([[2.0, 0.0]]), dim=-1))


# --- sequence poolers --------------------------------------------------------------------

H5 = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0], [9.0, 10.0]])


def test_cls_last_mean():
    meta = tp.build_metadata([2, 3])
    assert torch.equal(tp.CLSPool()(H5, meta), torch.tensor([[1.0, 2.0], [5.0, 6.0]]))
    assert torch.equal(tp.LastPool()(H5, meta), torch.tensor([[3.0, 4.0], [9.0, 10.0]]))
    mean = tp.MeanPool()(H5, meta)
    assert mean.dtype == torch.float32
    assert torch.allclose(mean, torch.tensor([[2.0, 3.0], [7.0, 8.0]]))


def test_partial_prefill_rules():
    meta = tp.build_metadata([3], num_scheduled_tokens=[2])
    with pytest.raises(RuntimeError, match="partial prefill"):
        tp.CLSPool()(H5[:3], meta)
    with pytest.raises(RuntimeError, match="partial prefill"):
        tp.MeanPool()(H5[:2], meta)
    partial = tp.build_metadata([4], num_scheduled_tokens=[2])
    assert torch.equal(tp.LastPool()(H5[:2], partial), H5[1:2])  # last *scheduled* token


def test_mean_accumulates_in_float32_from_half_and_in_chunks(monkeypatch):
    h = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float16)
    out = tp.MeanPool()(h, tp.build_metadata([2]))
    assert out.dtype == torch.float32 and torch.equal(out, torch.tensor([[2.0, 3.0]]))
    import tokpool.pooler.pooling as pooling

    monkeypatch.setattr(pooling, "_MEAN_POOL_ACCUMULATION_CHUNK_BYTES", 16)
    x = torch.arange(20, dtype=torch.float32).reshape(5, 4)
    out = tp.MeanPool()(x, tp.build_metadata([3, 2]))
    assert torch.allclose(out, torch.stack([x[:3].mean(0), x[3:].mean(0)]))


@pytest.mark.parametrize("method", [tp.CLSPool(), tp.LastPool(), tp.MeanPool()])
def test_empty_batch(method):
    out = method(torch.empty((0, 8)), tp.build_metadata([]))
    assert out.shape == (0, 8)


def test_get_pooling_method():
    assert isinstance(tp.pooler.pooling.get_pooling_method("ALL"), tp.AllPool)
    step = tp.pooler.pooling.get_pooling_method("STEP", async_scheduling=True, policy="prealloc")
    assert isinstance(step, tp.StepPool) and step.async_scheduling and step.policy == "prealloc"
    assert isinstance(tp.pooler.pooling.get_pooling_method("CLS"), tp.CLSPool)
    assert isinstance(tp.pooler.pooling.get_pooling_method("LAST"), tp.LastPool)
    assert isinstance(tp.pooler.pooling.get_pooling_method("MEAN"), tp.MeanPool)
    with pytest.raises(NotImplementedError, match="UNKNOWN"):
        tp.pooler.pooling.get_pooling_method("UNKNOWN")
    with pytest.raises(TypeError, match="takes no options"):
        tp.pooler.pooling.get_pooling_method("CLS", policy="clone")


def test_declared_tasks():
    assert tp.AllPool().get_supported_tasks() == {"token_embed", "token_classify"}
    # vLLM 0.33.0: StepPool inherits AllPool's task set
    assert tp.StepPool().get_supported_tasks() == {"token_embed", "token_classify"}
    assert "embed" in tp.MeanPool().get_supported_tasks()
