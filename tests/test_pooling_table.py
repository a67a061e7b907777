"""The AllPool ownership table of DESIGN.md, cell by cell: values AND storage."""

import pytest
import torch

import tokpool as tp


def hidden(n: int, width: int = 3, start: float = 0.0) -> torch.Tensor:
    return torch.arange(n * width, dtype=torch.float32).reshape(n, width) + start


# --- not chunked -------------------------------------------------------------------------


def test_not_chunked_sync_returns_split_views():
    h = hidden(5)
    out = tp.AllPool(enable_chunked_prefill=False)(h, tp.build_metadata([2, 3]))
    assert torch.equal(out[0], h[:2]) and torch.equal(out[1], h[2:])
    assert all(tp.shares_storage(o, h) for o in out)


def test_not_chunked_async_clones():
    h = hidden(5)
    out = tp.AllPool(enable_chunked_prefill=False, async_scheduling=True)(
        h, tp.build_metadata([2, 3])
    )
    assert torch.equal(out[0], h[:2]) and torch.equal(out[1], h[2:])
    assert not any(tp.shares_storage(o, h) for o in out)
    assert not tp.shares_storage(out[0], out[1])


def test_not_chunked_hands_a_split_over_chunk_by_chunk_as_vllm_does():
    """Chunked prefill off, a prompt split anyway (long_prefill_token_threshold): nothing is
    kept, every chunk is returned; the engine delivers the finished request's last chunk."""
    pool = tp.AllPool(enable_chunked_prefill=False)
    h = hidden(4)
    first = tp.build_metadata([4], num_scheduled_tokens=[2], seq_lens=[2])
    out = pool(h[:2], first)
    assert torch.equal(out[0], h[:2]) and tp.shares_storage(out[0], h)
    assert first.pooling_states[0].hidden_states_cache == []  # nothing kept
    last = tp.build_metadata([4], num_scheduled_tokens=[2], seq_lens=[4],
                             states=first.pooling_states)
    out = pool(h[2:], last)
    assert torch.equal(out[0], h[2:])  # the last chunk alone: rows 0-1 are gone
    step = tp.StepPool(enable_chunked_prefill=False)
    ids = torch.tensor([[0, 7, 0, 7]])
    meta = tp.build_metadata([4], num_scheduled_tokens=[2], seq_lens=[4], prompt_token_ids=ids,
                             step_tag_id=7)
    with pytest.raises(ValueError, match=r"vLLM 0\.33\.0's StepPool fails here too"):
        step(h[2:], meta)


# --- chunked -----------------------------------------------------------------------------


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_unfinished_chunk_is_cloned_and_returns_none(async_scheduling):
    h = hidden(2)
    meta = tp.build_metadata([4], num_scheduled_tokens=[2], seq_lens=[2])
    out = tp.AllPool(async_scheduling=async_scheduling)(h, meta)
    assert out == [None]
    (cached,) = meta.pooling_states[0].hidden_states_cache
    assert torch.equal(cached, h) and not tp.shares_storage(cached, h)


def test_sync_one_shot_finish_returns_the_view_and_empties_cache():
    h = hidden(5)
    meta = tp.build_metadata([2, 3])
    out = tp.AllPool()(h, meta)
    assert torch.equal(out[0], h[:2]) and torch.equal(out[1], h[2:])
    assert all(tp.shares_storage(o, h) for o in out)
    assert all(s.hidden_states_cache == [] for s in meta.pooling_states)


def test_async_one_shot_finish_returns_an_owned_clone():
    h = hidden(5)
    meta = tp.build_metadata([2, 3])
    out = tp.AllPool(async_scheduling=True)(h, meta)
    assert torch.equal(out[0], h[:2]) and torch.equal(out[1], h[2:])
    assert not any(tp.shares_storage(o, h) for o in out)
    assert all(s.hidden_states_cache == [] for s in meta.pooling_states)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_final_chunk_appends_view_and_returns_new_concat(async_scheduling):
    pool = tp.AllPool(async_scheduling=async_scheduling)
    buf = hidden(2)
    meta1 = tp.build_metadata([4], num_scheduled_tokens=[2], seq_lens=[2])
    first = buf.clone()
    assert pool(buf, meta1) == [None]
    buf.copy_(hidden(2, start=100.0))  # the engine reuses its buffer for the next step
    second = buf.clone()
    meta2 = tp.build_metadata([4], num_scheduled_tokens=[2], states=meta1.pooling_states)
    state = meta2.pooling_states[0]
    seen_cache: list[torch.Tensor] = []
    pool.probe = lambda event, outs: seen_cache.extend(state.hidden_states_cache)
    (out,) = pool(buf, meta2)
    assert torch.equal(out, torch.cat([first, second]))
    assert not tp.shares_storage(out, buf)  # the concat owns new storage
    # the final chunk was appended as a view (the concat copies it anyway)
    assert any(tp.shares_storage(t, buf) for t in seen_cache)
    assert state.hidden_states_cache == []


def test_mixed_batch_finished_and_unfinished():
    h = hidden(3)
    meta = tp.build_metadata([2, 4], num_scheduled_tokens=[2, 1], seq_lens=[2, 1])
    out = tp.AllPool()(h, meta)
    assert torch.equal(out[0], h[:2]) and tp.shares_storage(out[0], h)
    assert out[1] is None
    assert meta.pooling_states[1].num_cached_tokens == 1


# --- legacy: the same table without any clone --------------------------------------------


def test_legacy_keeps_views_everywhere():
    h = hidden(2)
    meta = tp.build_metadata([4], num_scheduled_tokens=[2], seq_lens=[2])
    tp.AllPool(policy="legacy", async_scheduling=True)(h, meta)
    (cached,) = meta.pooling_states[0].hidden_states_cache
    assert tp.shares_storage(cached, h)
    one_shot = hidden(5)
    out = tp.AllPool(policy="legacy", async_scheduling=True)(one_shot, tp.build_metadata([5]))
    assert tp.shares_storage(out[0], one_shot)  # a view of the step's buffer, even under async
    h5 = hidden(5)
    out = tp.AllPool(policy="legacy", enable_chunked_prefill=False, async_scheduling=True)(
        h5, tp.build_metadata([2, 3])
    )
    assert all(tp.shares_storage(o, h5) for o in out)


def test_legacy_multi_chunk_output_is_corrupted_by_buffer_reuse():
    pool = tp.AllPool(policy="legacy")
    buf = hidden(2)
    meta1 = tp.build_metadata([4], num_scheduled_tokens=[2], seq_lens=[2])
    first = buf.clone()
    pool(buf, meta1)
    buf.copy_(hidden(2, start=100.0))
    meta2 = tp.build_metadata([4], num_scheduled_tokens=[2], states=meta1.pooling_states)
    (out,) = pool(buf, meta2)
    assert not torch.equal(out[:2], first)  # silently wrong: the first chunk was overwritten


# --- prealloc and offload ----------------------------------------------------------------


@pytest.mark.parametrize("policy", ["prealloc", "offload"])
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_buffer_policies_copy_each_chunk_into_one_owned_tensor(policy, async_scheduling):
    pool = tp.AllPool(policy=policy, async_scheduling=async_scheduling)
    buf = torch.empty(3, 4)
    states = None
    expected = []
    for step, (n, seq) in enumerate([(3, 3), (3, 6), (1, 7)]):
        buf[:n] = torch.full((n, 4), float(step))
        expected.append(buf[:n].clone())
        meta = tp.build_metadata([7], num_scheduled_tokens=[n], seq_lens=[seq], states=states)
        (out,) = pool(buf[:n], meta)
        states = meta.pooling_states
        if seq < 7:
            assert out is None
            assert states[0].buffer is not None and states[0].buffer.shape == (7, 4)
            assert states[0].hidden_states_cache == []  # no per-chunk clones
    assert torch.equal(out, torch.cat(expected))
    assert not tp.shares_storage(out, buf)
    assert out.device.type == "cpu"
    assert states[0].buffer is None and states[0].num_cached_tokens == 0


def test_prealloc_one_shot_follows_the_clone_rule():
    h = hidden(4)
    (sync_out,) = tp.AllPool(policy="prealloc")(h, tp.build_metadata([4]))
    (async_out,) = tp.AllPool(policy="prealloc", async_scheduling=True)(h, tp.build_metadata([4]))
    assert tp.shares_storage(sync_out, h) and not tp.shares_storage(async_out, h)
    assert torch.equal(sync_out, h) and torch.equal(async_out, h)


def test_offload_one_shot_always_owns_host_storage():
    h = hidden(4)
    (out,) = tp.AllPool(policy="offload")(h, tp.build_metadata([4]))
    assert torch.equal(out, h) and not tp.shares_storage(out, h)


# --- errors ------------------------------------------------------------------------------


def test_unknown_policy():
    with pytest.raises(ValueError, match="unknown retention policy 'fast'"):
        tp.AllPool(policy="fast")


def test_rows_must_match_the_cursor():
    with pytest.raises(ValueError, match="hidden_states has 4 rows but the cursor schedules 5"):
        tp.AllPool()(hidden(4), tp.build_metadata([2, 3]))
    with pytest.raises(ValueError, match=r"\[n_tokens, hidden\]"):
        tp.AllPool()(torch.zeros(5), tp.build_metadata([5]))
    with pytest.raises(TypeError, match="must be a Tensor"):
        tp.AllPool()([[1.0]], tp.build_metadata([1]))


@pytest.mark.parametrize("policy", ["clone", "legacy", "prealloc", "offload"])
def test_chunk_that_does_not_continue_the_state_is_refused(policy):
    # the second chunk arrives with fresh states: the first chunk would be silently lost
    meta = tp.build_metadata([4], num_scheduled_tokens=[2])
    with pytest.raises(ValueError, match=r"pass the previous step's meta\.pooling_states"):
        tp.AllPool(policy=policy)(hidden(2), meta)
