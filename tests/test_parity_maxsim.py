"""MaxSim parity: ``maxsim`` / ``maxsim_batched`` /
``maxsim_plan`` against vLLM
0.33.0's own ``compute_maxsim_score`` (the API server) and ``compute_maxsim_score_batched``
(the worker), run here on the CPU.

On seeded ragged random cases (pair counts, lengths, widths, dtypes and both limits drawn, not
tuned: batches that split on the element limit, single pairs larger than it, empty queries,
an empty document beside full ones) every score is ``torch.equal``; the mini-batches vLLM forms
(read from its ``bmm`` calls) are ``maxsim_plan``'s rows, and the bytes vLLM's
function
holds while each batch runs (every tensor it creates, watched by ``AllocWatch``) are the
plan's ``peak_scratch_bytes``. Bad input: vLLM's ``ValueError``s in vLLM's order, beginning
with its words; where vLLM fails with a raw error, tokpool refuses in words.

Needs vLLM 0.33.0 (``make vllm``); the module skips with the reason otherwise. The counts are
printed in the terminal summary (``parity_count``).
"""

from __future__ import annotations

import random

import pytest
import torch
from maxsim_alloc import AllocWatch

from tokpool.late_interaction import maxsim, maxsim_batched, maxsim_plan
from tokpool.pooler.vllm_bridge import VLLM_REFERENCE_VERSION, vllm_unavailable_reason, vllm_version

pytestmark = pytest.mark.parity

_reason = vllm_unavailable_reason()
if _reason is not None:
    pytest.skip(f"MaxSim parity skipped: {_reason}", allow_module_level=True)
if vllm_version() != VLLM_REFERENCE_VERSION:
    pytest.skip(f"MaxSim parity skipped: vLLM {vllm_version()} is installed, the rules were "
                f"read in {VLLM_REFERENCE_VERSION} (`make vllm` installs it)",
                allow_module_level=True)

from vllm.entrypoints.pooling.scoring.utils import compute_maxsim_score  # noqa: E402
from vllm.v1.pool.late_interaction import compute_maxsim_score_batched  # noqa: E402

CASES = 240
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def random_case(rng: random.Random):
    """One workload: pairs, tensors and limits, all drawn."""
    n = rng.choice((1, 2, rng.randint(1, 12), rng.randint(1, 150)))
    dim = rng.choice((1, 3, 8, rng.randint(1, 96)))
    dtype = rng.choice(DTYPES)
    q_lens = [rng.choice((0, 1, rng.randint(1, 40))) if rng.random() < 0.1 else
              rng.randint(1, 40) for _ in range(n)]
    d_lens = [rng.randint(1, rng.choice((8, 64, 400))) for _ in range(n)]
    if n > 1 and rng.random() < 0.1:
        d_lens[rng.randrange(n)] = 0  # an empty document beside full ones
    mbs = rng.choice((1, 2, rng.randint(1, 16), 64, rng.randint(1, 200)))
    # element limits from below one pair's matrix to far above a whole batch's
    mse = rng.choice((rng.randint(1, 100), rng.randint(100, 20_000),
                      rng.randint(20_000, 2_000_000), 64_000_000))
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    q = [torch.randn(k, dim, generator=g).to(dtype) for k in q_lens]
    d = [torch.randn(k, dim, generator=g).to(dtype) for k in d_lens]
    return q, d, dtype, mbs, mse


def test_maxsim_batched_plan_and_peaks_are_vllms(parity_count, capsys):
    rng = random.Random(3838)
    scores = batches = refused = split_on_limit = lone_over_limit = 0
    for case in range(CASES):
        q, d, dtype, mbs, mse = random_case(rng)
        watch = AllocWatch(q + d)
        try:
            with watch:
                ref = compute_maxsim_score_batched(q, d, mbs, mse)
        except IndexError:  # a mini-batch of empty documents: vLLM's amax fails
            with pytest.raises(ValueError, match="no tokens at all"):
                maxsim_batched(q, d, max_batch_size=mbs, max_score_matrix_elements=mse)
            refused += 1
            continue
        ours = maxsim_batched(q, d, max_batch_size=mbs, max_score_matrix_elements=mse)
        assert len(ours) == len(ref), case
        for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
            assert a.dtype == b.dtype and a.shape == b.shape == (), (case, i)
            assert torch.equal(a, b), (case, i, a, b)
        scores += len(ref)
        plan = maxsim_plan([len(x) for x in q], [len(x) for x in d], q[0].shape[1],
                              max_batch_size=mbs, max_score_matrix_elements=mse, dtype=dtype)
        assert list(zip(plan.pairs, plan.max_q, plan.max_d, strict=True)) == watch.batches, case
        assert plan.start.tolist() == [0, *plan.end.tolist()[:-1]]
        assert plan.end.iloc[-1] == len(q)
        assert plan.peak_scratch_bytes.tolist() == watch.peaks, (case, watch.peaks)
        assert plan.score_matrix_bytes.tolist() == [b * mq * md * 4 for b, mq, md in
                                                    watch.batches]
        batches += len(plan)
        full = (plan.pairs < mbs) & (plan.end < len(q))
        split_on_limit += int(full.sum())
        lone_over_limit += int(((plan.pairs == 1) & (plan.max_q * plan.max_d > mse)).sum())
    assert split_on_limit > 20 and lone_over_limit > 20, (split_on_limit, lone_over_limit)
    assert refused < CASES // 10
    parity_count("MaxSim scores (compute_maxsim_score_batched)", scores)
    parity_count("MaxSim mini-batches and their peak bytes", batches)
    with capsys.disabled():
        print(f"\nMaxSim parity: {CASES} cases, {scores} scores torch.equal, {batches} "
              f"mini-batches and peaks equal ({split_on_limit} cut by the element limit, "
              f"{lone_over_limit} single pairs over it), {refused} refused as vLLM fails")


def test_maxsim_is_the_api_servers(parity_count):
    rng = random.Random(38)
    n = 0
    for _ in range(CASES):
        q, d, *_ = random_case(rng)
        for a, b in zip(q, d, strict=True):
            if len(b) == 0:
                continue
            assert torch.equal(maxsim(a, b), compute_maxsim_score(a, b))
            n += 1
    parity_count("MaxSim scores (compute_maxsim_score)", n)


def _vllm_error(call):
    try:
        call()
    except Exception as err:  # the exception is what is compared
        return err
    return None


M = torch.device("meta")
T2 = torch.ones(2, 4)
BAD = {  # q_embs, d_embs, max_batch_size, max_score_matrix_elements
    "lengths differ": ([T2, T2], [T2], 64, 64_000_000),
    "lengths differ before a bad limit": ([T2], [], 0, 0),
    "max_batch_size 0": ([T2], [T2], 0, 64_000_000),
    "max_batch_size -3 before a 1-D tensor": ([torch.ones(4)], [T2], -3, 64_000_000),
    "max_score_matrix_elements 0": ([T2], [T2], 64, 0),
    "both limits bad: max_batch_size first": ([T2], [T2], 0, -1),
    "a 1-D query": ([torch.ones(4)], [T2], 64, 64_000_000),
    "a 3-D document": ([T2], [torch.ones(1, 2, 4)], 64, 64_000_000),
    "widths differ": ([T2, T2], [T2, torch.ones(3, 5)], 64, 64_000_000),
    "devices differ": ([T2], [torch.ones(2, 4, device=M)], 64, 64_000_000),
    "widths differ before a later 1-D": ([torch.ones(2, 3), torch.ones(4)], [T2, T2], 1, 1),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_gets_vllms_error(name, parity_count):
    q, d, mbs, mse = BAD[name]
    theirs = _vllm_error(lambda: compute_maxsim_score_batched(q, d, mbs, mse))
    assert isinstance(theirs, ValueError), theirs
    with pytest.raises(ValueError) as ours:
        maxsim_batched(q, d, max_batch_size=mbs, max_score_matrix_elements=mse)
    assert type(ours.value) is type(theirs)
    assert str(ours.value).startswith(str(theirs)), (str(ours.value), str(theirs))
    parity_count("MaxSim refusals", 1)


def test_no_pairs_is_an_empty_list_whatever_the_limits():
    assert compute_maxsim_score_batched([], [], 0, 0) == []
    assert maxsim_batched([], [], max_batch_size=0, max_score_matrix_elements=0) == []


RAW = {  # where vLLM fails with a raw error, tokpool says what is wrong
    "a list of floats": (([[1.0, 2.0]], [T2], 64, 10), TypeError, r"q_embs\[0\]"),
    "a document of numbers": (([T2], [5], 64, 10), TypeError, r"d_embs\[0\]"),
    "max_batch_size 1.5": (([T2, T2], [T2, T2], 1.5, 10), TypeError, "max_batch_size"),
    "only empty documents": (([T2], [torch.ones(0, 4)], 64, 10), ValueError, "no tokens"),
    "not a sequence": ((5, 5, 64, 10), TypeError, "q_embs"),
}


@pytest.mark.parametrize("name", sorted(RAW))
def test_where_vllm_fails_raw_tokpool_says_why(name):
    (q, d, mbs, mse), kind, words = RAW[name]
    theirs = _vllm_error(lambda: compute_maxsim_score_batched(q, d, mbs, mse))
    assert theirs is not None and not isinstance(theirs, ValueError), theirs
    with pytest.raises(kind, match=words):
        maxsim_batched(q, d, max_batch_size=mbs, max_score_matrix_elements=mse)
