"""Randomised engine schedules: the retention policies against the one-shot split.

A tiny engine loop (token budget, chunked prefill, one persistent buffer overwritten every step,
optional async collection one step late) drives ``AllPool``. Owned policies must reproduce the
one-shot result exactly; ``legacy`` must be caught corrupting when the buffer is reused.
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tokpool as tp

WIDTH = 3


def reference(request: int, prompt_len: int) -> torch.Tensor:
    """What the model 'computes' for every token of a request: unique per (request, position)."""
    pos = torch.arange(prompt_len, dtype=torch.float32).unsqueeze(1)
    col = torch.arange(WIDTH, dtype=torch.float32)
    return request * 1000.0 + pos + col / 10  # [prompt_len, WIDTH]


def run_engine(prompt_lens, budget, *, policy, async_scheduling, chunked=True):
    """Returns (delivered outputs by request, max cached chunks seen after a finish)."""
    pool = tp.AllPool(enable_chunked_prefill=chunked, async_scheduling=async_scheduling,
                      policy=policy)
    buffer = torch.full((budget, WIDTH), -1.0)  # the persistent hidden-state buffer
    states = {r: tp.PoolingStates() for r in range(len(prompt_lens))}
    done = dict.fromkeys(range(len(prompt_lens)), 0)
    delivered: dict[int, torch.Tensor] = {}
    pending: list[tuple[int, torch.Tensor]] = []  # outputs not yet copied to the host
    leftovers = []
    while len(delivered) + len(pending) < len(prompt_lens) or pending:
        batch, left = [], budget
        for r, n in enumerate(prompt_lens):
            if done[r] < n and left > 0:
                take = min(n - done[r], left) if chunked else n
                if take > left:
                    break
                batch.append((r, done[r], done[r] + take))
                left -= take
        # the next step writes the buffer; with async scheduling this happens BEFORE the
        # previous step's outputs are copied to the host
        if not async_scheduling:
            for r, out in pending:
                delivered[r] = out.clone()
            pending = []
        offset = 0
        for r, start, stop in batch:
            buffer[offset : offset + stop - start] = reference(r, prompt_lens[r])[start:stop]
            offset += stop - start
        if async_scheduling:
            for r, out in pending:
                delivered[r] = out.clone()
            pending = []
        if not batch:
            continue
        meta = tp.build_metadata(
            [prompt_lens[r] for r, _, _ in batch],
            num_scheduled_tokens=[stop - start for _, start, stop in batch],
            seq_lens=[stop for _, _, stop in batch],
            states=[states[r] for r, _, _ in batch],
        )
        outs = pool(buffer[:offset], meta)
        for (r, _, stop), out in zip(batch, outs, strict=True):
            done[r] = stop
            if out is not None:
                pending.append((r, out))
                leftovers.append(states[r].num_cached_tokens)
    return delivered, max(leftovers, default=0)


schedules = st.tuples(
    st.lists(st.integers(1, 40), min_size=1, max_size=5),
    st.integers(1, 24),
    st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(schedules, st.sampled_from(["clone", "prealloc", "offload"]))
def test_owned_policies_reproduce_the_one_shot_split(schedule, policy):
    prompt_lens, budget, async_scheduling = schedule
    delivered, leftover = run_engine(prompt_lens, budget, policy=policy,
                                     async_scheduling=async_scheduling)
    assert sorted(delivered) == list(range(len(prompt_lens)))
    for r, n in enumerate(prompt_lens):
        assert torch.equal(delivered[r], reference(r, n)), (r, n)
    assert leftover == 0  # caches are empty after every finish


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=2, max_size=5), st.booleans(),
       st.sampled_from(["clone", "prealloc", "offload"]))
def test_owned_policies_without_chunking(prompt_lens, async_scheduling, policy):
    budget = sum(prompt_lens)  # everything fits: one step, then nothing reuses the buffer
    delivered, _ = run_engine(prompt_lens, budget, policy=policy,
                              async_scheduling=async_scheduling, chunked=False)
    for r, n in enumerate(prompt_lens):
        assert torch.equal(delivered[r], reference(r, n))


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 60), st.integers(1, 30))
def test_legacy_corrupts_multi_chunk_prompts_even_when_synchronous(prompt_len, budget):
    if prompt_len <= budget:
        prompt_len = budget + 1 + prompt_len  # make it span at least two chunks
    delivered, _ = run_engine([prompt_len], budget, policy="legacy", async_scheduling=False)
    assert not torch.equal(delivered[0], reference(0, prompt_len))


def test_legacy_corrupts_one_shot_outputs_under_async_when_a_later_step_follows():
    # request 0 finishes in one shot in step 0; step 1 (request 1) overwrites the buffer
    # before step 0's output is copied to the host
    delivered, _ = run_engine([4, 4], 4, policy="legacy", async_scheduling=True)
    assert not torch.equal(delivered[0], reference(0, 4))
    sync, _ = run_engine([4, 4], 4, policy="legacy", async_scheduling=False)
    assert torch.equal(sync[0], reference(0, 4))  # synchronous collection is safe here
    owned, _ = run_engine([4, 4], 4, policy="clone", async_scheduling=True)
    assert torch.equal(owned[0], reference(0, 4))
