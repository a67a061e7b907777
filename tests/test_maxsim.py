"""MaxSim without vLLM: maxsim / maxsim_batched /
maxsim_plan against the definition,
against each other, and against the bytes maxsim_batched itself holds
(``AllocWatch``).
Parity with vLLM's own functions: tests/test_parity_maxsim.py."""

from __future__ import annotations

import random

import pytest
import torch
from maxsim_alloc import AllocWatch

from tokpool.late_interaction import maxsim, maxsim_batched, maxsim_batches, maxsim_plan


def definition(q, d):
    """sum over query tokens of the best dot product with any document token (float64)."""
    if len(q) == 0:
        return 0.0
    return float((q.double() @ d.double().T).max(dim=1).values.sum())


def test_maxsim_is_the_definition():
    g = torch.Generator().manual_seed(0)
    for lq, ld, dim in [(1, 1, 1), (5, 9, 16), (0, 3, 4), (31, 2, 7)]:
        q, d = torch.randn(lq, dim, generator=g), torch.randn(ld, dim, generator=g)
        got = maxsim(q, d)
        assert got.dtype == torch.float32 and got.shape == ()
        assert abs(float(got) - definition(q, d)) < 1e-4


def test_batched_equals_the_pairwise_definition_and_the_plan_is_what_it_holds():
    rng = random.Random(7)
    for _ in range(40):
        n, dim = rng.randint(1, 40), rng.randint(1, 24)
        dtype = rng.choice((torch.float32, torch.bfloat16))
        q = [torch.randn(rng.randint(1, 12), dim).to(dtype) for _ in range(n)]
        d = [torch.randn(rng.randint(1, 90), dim).to(dtype) for _ in range(n)]
        mbs, mse = rng.randint(1, 20), rng.choice((10, 500, 5_000, 64_000_000))
        watch = AllocWatch(q + d)
        with watch:
            got = maxsim_batched(q, d, max_batch_size=mbs, max_score_matrix_elements=mse)
        for a, qi, di in zip(got, q, d, strict=True):
            assert abs(float(a) - definition(qi.float(), di.float())) < 1e-3 * (1 + abs(
                float(a)))
        plan = maxsim_plan([len(x) for x in q], [len(x) for x in d], dim,
                              max_batch_size=mbs, max_score_matrix_elements=mse, dtype=dtype)
        assert list(zip(plan.pairs, plan.max_q, plan.max_d, strict=True)) == watch.batches
        # the first batch holds what vLLM's holds; later ones less: tokpool's mini-batch is a
        # function whose buffers go when it returns, vLLM's loop keeps the last batch's
        # buffers bound until the next batch's replace them (the plan prices vLLM's)
        assert watch.peaks[0] == plan.peak_scratch_bytes[0]
        assert all(w <= p for w, p in zip(watch.peaks, plan.peak_scratch_bytes, strict=True))


def test_the_plan_and_the_arithmetic_share_one_batching_rule():
    q_lens, d_lens = [8, 8, 8, 1, 50], [100, 100, 400, 1, 50]
    plan = maxsim_plan(q_lens, d_lens, 4, max_score_matrix_elements=2_000)
    batches = maxsim_batches(q_lens, d_lens, max_score_matrix_elements=2_000)
    assert [(b.start, b.end, b.max_q, b.max_d) for b in batches] == list(
        zip(plan.start, plan.end, plan.max_q, plan.max_d, strict=True))
    # 2 x 8 x 100 fits 2,000; adding 8 x 400 does not; the lone 8 x 400 pair is over the
    # limit and still scored alone; then 1 x 1 and 50 x 50 (2 x 50 x 50 = 5,000 > 2,000)
    assert [(b.start, b.end) for b in batches] == [(0, 2), (2, 3), (3, 4), (4, 5)]


def test_one_32k_pair_is_a_4_gib_score_matrix_and_never_split():
    plan = maxsim_plan([32_768], [32_768], 128)
    assert plan.score_matrix_bytes.tolist() == [32_768 * 32_768 * 4] == [4 * 2**30]


def test_a_bf16_head_adds_the_cast_temporary():
    # one query token, a 64-wide 10-token document: the float32 cast of the document
    # (2,560 B) outweighs the 40 B score matrix, so it sets the peak
    f32 = maxsim_plan([1], [10], 64)
    bf16 = maxsim_plan([1], [10], 64, dtype="bfloat16")
    assert f32.cast_bytes.tolist() == [0] and bf16.cast_bytes.tolist() == [10 * 64 * 4]
    padded = (1 + 10) * 64 * 4 + (1 + 10)  # q_batch, d_batch and the masks
    assert bf16.peak_scratch_bytes.tolist() == [padded + 10 * 64 * 4]
    q, d = torch.ones(1, 64, dtype=torch.bfloat16), torch.ones(10, 64, dtype=torch.bfloat16)
    watch = AllocWatch([q, d])
    with watch:
        maxsim_batched([q], [d])
    assert watch.peaks == bf16.peak_scratch_bytes.tolist()


def test_the_flash_path_is_one_launch_labelled_an_estimate():
    flash = maxsim_plan([32] * 3, [10, 20, 30], 96, device="cuda", path="flash",
                           dtype=torch.bfloat16)
    assert flash.attrs["estimate"] and flash.estimate.tolist() == [True]
    assert len(flash) == 1 and flash.score_matrix_bytes.tolist() == [0]
    packed, half = 60 * 96 * 2, 60 * 96 * 2  # torch.cat in bf16, then .half()
    q_half, q_pad = 32 * 96 * 2, 32 * 128 * 2  # width 96 pads to 128
    assert flash.peak_scratch_bytes.tolist() == [packed + half + q_half + q_pad + 3 * 4 * 3]
    assert not maxsim_plan([32], [10], 8).attrs["estimate"]


def test_an_empty_document_beside_a_full_one_scores_minus_inf_as_in_vllm():
    got = maxsim_batched([torch.ones(2, 3), torch.ones(1, 3)],
                            [torch.ones(0, 3), torch.ones(4, 3)])
    assert got[0] == float("-inf") and got[1] == 3.0


@pytest.mark.parametrize("call, kind, words", [
    (lambda: maxsim([[1.0]], torch.ones(1, 1)), TypeError, "q must be a torch.Tensor"),
    (lambda: maxsim(torch.ones(2, 3), torch.ones(0, 3)), ValueError, "d has no tokens"),
    (lambda: maxsim(torch.ones(2, 3), torch.ones(2, 4)), ValueError,
     "d is 4"),
    (lambda: maxsim(torch.ones(3), torch.ones(2, 3)), ValueError, r"q has shape \(3,\)"),
    (lambda: maxsim(torch.ones(1, 2, dtype=torch.complex64), torch.ones(1, 2)), TypeError,
     "complex"),
    (lambda: maxsim_batched("ab", "ab"), TypeError, "q_embs must be a sequence"),
    (lambda: maxsim_batched({torch.ones(1, 1)}, [torch.ones(1, 1)]), TypeError, "q_embs"),
    (lambda: maxsim_batched([torch.ones(1, 1)], [torch.ones(1, 1)], max_batch_size=True),
     TypeError, "max_batch_size must be a whole number"),
    (lambda: maxsim_batched([torch.ones(1, 1)], [torch.ones(1, 1)],
                               max_score_matrix_elements=6.4e7), TypeError,
     "max_score_matrix_elements must be a whole number"),
    (lambda: maxsim_plan([1], [1, 2], 4), ValueError, "got 1 and 2"),
    (lambda: maxsim_plan([-1], [1], 4), ValueError, r"q_lens\[0\]"),
    (lambda: maxsim_plan([1], [1.5], 4), TypeError, r"d_lens\[0\]"),
    (lambda: maxsim_plan([1], [1], 0), ValueError, "dim"),
    (lambda: maxsim_plan([1], [1], 4, dtype="int8"), ValueError, "unknown dtype"),
    (lambda: maxsim_plan([1], [1], 4, dtype=None), TypeError, "dtype"),
    (lambda: maxsim_plan([1], [1], 4, device="tpu"), ValueError, "device"),
    (lambda: maxsim_plan([1], [1], 4, path="fast"), ValueError, "path"),
    (lambda: maxsim_plan([1], [1], 4, path="flash"), ValueError, "only when"),
    (lambda: maxsim_plan([1, 2], [1, 1], 4, path="flash", device="cuda"), ValueError,
     "one shared query"),
    (lambda: maxsim_plan([1], [1], 4, max_batch_size=0), ValueError,
     "max_batch_size must be greater than 0"),
])
def test_bad_input_is_refused_in_words(call, kind, words):
    with pytest.raises(kind, match=words):
        call()


def test_a_batch_the_memory_guard_cannot_hold_is_refused_before_it_is_made(monkeypatch):
    monkeypatch.setenv("TOKPOOL_MEMORY_LIMIT", "1M")
    q, d = torch.ones(600, 4), torch.ones(600, 4)  # a 1.37 MiB score matrix
    with pytest.raises(ValueError, match="MaxSim over 1 pairs"):
        maxsim_batched([q], [d])
    monkeypatch.setenv("TOKPOOL_MEMORY_LIMIT", "off")
    assert maxsim_batched([q], [d])[0] == 600 * 4.0
