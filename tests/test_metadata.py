"""PoolingCursor / PoolingMetadata / build_metadata: derived fields, slicing, errors."""

import pytest
import torch

import tokpool as tp


def test_cursor_fields_follow_vllm():
    meta = tp.build_metadata([5, 3, 4], num_scheduled_tokens=[2, 3, 4], seq_lens=[2, 3, 4])
    c = meta.pooling_cursor
    assert c.num_scheduled_tokens_cpu.tolist() == [2, 3, 4]
    assert c.first_token_indices_gpu.tolist() == [0, 2, 5]
    assert c.last_token_indices_gpu.tolist() == [1, 4, 8]
    assert c.prompt_lens_cpu.tolist() == [5, 3, 4]
    assert c.seq_lens_cpu.tolist() == [2, 3, 4]
    assert c.is_finished().tolist() == [False, True, True]
    assert c.is_partial_prefill()  # batch level: one partial request is enough
    assert c.num_computed_before.tolist() == [0, 0, 0]
    # friendly aliases
    assert torch.equal(c.first_token_indices, c.first_token_indices_gpu)
    assert torch.equal(c.seq_lens, c.seq_lens_cpu)


def test_defaults_schedule_whole_prompts():
    meta = tp.build_metadata([3, 1])
    c = meta.get_pooling_cursor()
    assert not c.is_partial_prefill()
    assert c.is_finished().tolist() == [True, True]
    assert len(meta.pooling_states) == 2
    assert meta.pooling_states[0] is not meta.pooling_states[1]


def test_is_partial_prefill_is_batch_level_even_when_everyone_finishes():
    # a final chunk (2 of 4 tokens) finishes its request but is still a partial prefill
    c = tp.build_metadata([4, 3], num_scheduled_tokens=[2, 3]).pooling_cursor
    assert c.is_finished().tolist() == [True, True]
    assert c.is_partial_prefill()


def test_slicing_recomputes_token_indices_for_the_sub_batch():
    meta = tp.build_metadata([2, 3, 4], prompt_token_ids=[[1, 2], [3, 4, 5], [6, 7, 8, 9]],
                             step_tag_id=[None, 4, 7], task=["embed", "token_classify",
                                                             "token_classify"])
    sub = meta[1:3]
    c = sub.pooling_cursor
    assert c.first_token_indices_gpu.tolist() == [0, 3]
    assert c.last_token_indices_gpu.tolist() == [2, 6]
    assert c.index == [1, 2]
    assert sub.pooling_states == meta.pooling_states[1:3]
    assert sub.step_tag_ids == [4, 7]
    assert sub.tasks == ["token_classify", "token_classify"]
    assert [t.tolist() for t in sub.get_prompt_token_ids_cpu()] == [[3, 4, 5], [6, 7, 8, 9]]


def test_states_continue_requests():
    m1 = tp.build_metadata([4], num_scheduled_tokens=[2], seq_lens=[2])
    m2 = tp.build_metadata([4], num_scheduled_tokens=[2], states=m1.pooling_states)
    assert m2.pooling_states[0] is m1.pooling_states[0]


def test_pooling_states_clean():
    s = tp.PoolingStates()
    s.hidden_states_cache.append(torch.zeros(2, 3))
    assert s.num_cached_tokens == 2 and len(s.tensors()) == 1
    s.clean()
    assert s.hidden_states_cache == [] and s.num_cached_tokens == 0 and s.tensors() == []


def test_empty_batch():
    meta = tp.build_metadata([])
    assert len(meta) == 0 and len(meta.pooling_cursor) == 0
    assert not meta.pooling_cursor.is_partial_prefill()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(prompt_lens=[4], num_scheduled_tokens=[5]), r"request 0: 5 tokens scheduled"),
        (dict(prompt_lens=[4], num_scheduled_tokens=[3], seq_lens=[2]),
         r"request 0: 3 tokens scheduled but only 2 computed"),
        (dict(prompt_lens=[4, 4], seq_lens=[4, 6]), r"request 1: seq_len 6 exceeds prompt_len 4"),
        (dict(prompt_lens=[4, -1]), r"request 1: lengths must be non-negative"),
        (dict(prompt_lens=[4, 4], num_scheduled_tokens=[4]),
         r"num_scheduled_tokens has 1 entries but prompt_lens has 2"),
        (dict(prompt_lens=[4], seq_lens=[4, 4]), r"seq_lens has 2 entries"),
        (dict(prompt_lens=[2], states=[]), r"states has 0 entries for 1 requests"),
        (dict(prompt_lens=[2], prompt_token_ids=[[1, 2, 3]]),
         r"request 0: prompt_token_ids has 3 ids but prompt_len is 2"),
        (dict(prompt_lens=[2, 2], step_tag_id=[1]), r"step_tag_id has 1 entries for 2"),
        (dict(prompt_lens=[2], task=["embed", "embed"]), r"task has 2 entries for 1"),
    ],
)
def test_lengths_that_do_not_add_up(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tp.build_metadata(**kwargs)


def test_type_errors():
    with pytest.raises(TypeError, match="prompt_lens must hold ints"):
        tp.build_metadata([2.5])
    with pytest.raises(TypeError, match="sequence of ints"):
        tp.build_metadata("12")
    with pytest.raises(TypeError, match=r"dtype torch\.float32"):
        tp.build_metadata(torch.tensor([2.0]))
    with pytest.raises(TypeError, match="states must be PoolingStates"):
        tp.build_metadata([2], states=[object()])


def test_step_pool_needs_token_ids():
    meta = tp.build_metadata([2], step_tag_id=5)
    with pytest.raises(ValueError, match="prompt_token_ids="):
        tp.StepPool()(torch.zeros(2, 2), meta)


def test_tensor_inputs_and_device():
    meta = tp.build_metadata(torch.tensor([3, 2]), num_scheduled_tokens=torch.tensor([1, 2]),
                             seq_lens=torch.tensor([1, 2]), device="cpu")
    assert meta.pooling_cursor.first_token_indices_gpu.device.type == "cpu"
    assert meta.prompt_lens.dtype == torch.int64
