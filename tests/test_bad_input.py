"""Bad input never gives a wrong answer: the catalogue for the core API (issue 13).

One row per failure class, in ``CASES``: a realistic mistake, the exception it must raise, and a
pattern the message must contain — always the offending value, so the user sees what was wrong.
Property tests (hypothesis) follow for the classes whose inputs can be generated. The models,
the memory guard and the CLI have their own catalogues in ``test_bad_input_models.py`` and
``test_bad_input_cli.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tokpool as tp
from tokpool.pooler import heads
from tokpool.pooler.heads import NonFiniteError, apply_classifier_activation

H = torch.arange(12, dtype=torch.float32).reshape(6, 2)  # 6 tokens, width 2
NAN, INF = float("nan"), float("inf")


def _first_chunk(dtype=torch.float32, width=8, prompt_len=4):
    """A request whose first 2 tokens are cached by a clone AllPool; returns (pool, states)."""
    pool = tp.AllPool()
    meta = tp.build_metadata([prompt_len], num_scheduled_tokens=[2], seq_lens=[2])
    pool(torch.zeros(2, width, dtype=dtype), meta)
    return pool, meta.pooling_states


def _dtype_change():
    pool, states = _first_chunk(torch.bfloat16)
    meta = tp.build_metadata([4], num_scheduled_tokens=[2], states=states)
    return pool(torch.zeros(2, 8, dtype=torch.float32), meta)


def _width_change():
    pool, states = _first_chunk(width=8)
    meta = tp.build_metadata([4], num_scheduled_tokens=[2], states=states)
    return pool(torch.zeros(2, 6), meta)


def _swapped_states():
    # requests of 4 and 6 tokens, both 2 tokens in: the states are handed back swapped
    pool = tp.AllPool()
    meta = tp.build_metadata([4, 6], num_scheduled_tokens=[2, 2], seq_lens=[2, 2])
    pool(torch.zeros(4, 3), meta)
    states = meta.pooling_states[::-1]
    meta2 = tp.build_metadata([4, 6], num_scheduled_tokens=[2, 2], seq_lens=[4, 4],
                              states=states)
    return pool(torch.zeros(4, 3), meta2)


def _shared_state():
    meta = tp.build_metadata([2, 2])
    meta.pooling_states[1] = meta.pooling_states[0]
    return tp.AllPool()(torch.zeros(4, 3), meta)


def _zero_token_cursor(method):
    # metadata assembled by hand (bypassing build_metadata) with an empty request first
    meta = tp.build_metadata([1, 3])
    cursor = tp.PoolingCursor.build(torch.tensor([0, 3]), torch.tensor([1, 3]),
                                    torch.tensor([1, 3]))
    meta.pooling_cursor = cursor
    return method()(H[:3], meta)


# (id, call, exception type, pattern that names the offending value)
CASES = [
    # --- build_metadata: zero tokens, wrong numbers, non-integers ---------------------------
    ("zero-token prompt", lambda: tp.build_metadata([0, 3]), ValueError,
     r"request 0 has zero tokens \(prompt_len=0"),
    ("zero tokens scheduled", lambda: tp.build_metadata([4], num_scheduled_tokens=[0],
                                                        seq_lens=[2]),
     ValueError, r"request 0 has zero tokens \(prompt_len=4, num_scheduled_tokens=0"),
    ("more scheduled than the prompt", lambda: tp.build_metadata([4], num_scheduled_tokens=[5]),
     ValueError, r"request 0: 5 tokens scheduled but its prompt_len is 4"),
    ("scheduled beyond seq_len", lambda: tp.build_metadata([8], num_scheduled_tokens=[3],
                                                           seq_lens=[2]),
     ValueError, r"3 tokens scheduled but only 2 computed .* leave -1 computed before"),
    ("float token id", lambda: tp.build_metadata([2], prompt_token_ids=[[9.4, 3]]),
     TypeError, r"prompt_token_ids\[0\] must hold int token ids, got \[9\.4\]"),
    ("float token id tensor",
     lambda: tp.build_metadata([2], prompt_token_ids=torch.tensor([[9.4, 3.0]])),
     TypeError, r"integer token ids, got dtype torch\.float32"),
    ("bool token id", lambda: tp.build_metadata([2], prompt_token_ids=[[True, 3]]),
     TypeError, r"got \[True\]"),
    ("negative token id", lambda: tp.build_metadata([2], prompt_token_ids=[[-1, 3]]),
     ValueError, r"holds -1; token ids are >= 0"),
    ("float step tag", lambda: tp.build_metadata([2], step_tag_id=9.4), TypeError,
     r"step_tag_id must be an int.*got 9\.4"),
    ("negative step tag", lambda: tp.build_metadata([2], step_tag_id=-3), ValueError,
     r"step_tag_id must be a token id >= 0, got -3"),
    ("float column", lambda: tp.build_metadata([2], returned_token_ids=[1.5]), TypeError,
     r"returned_token_ids must hold int column indices.*1\.5"),
    ("string columns", lambda: tp.build_metadata([2], returned_token_ids="12"), TypeError,
     r"returned_token_ids must be a list .*'12'"),
    ("unknown task", lambda: tp.build_metadata([2], task="embedd"), ValueError,
     r"unknown pooling task\(s\) \['embedd'\]"),
    ("float prompt length", lambda: tp.build_metadata([2.0]), TypeError,
     r"prompt_lens must hold ints, got \[2\.0\]"),
    ("float numpy lengths", lambda: tp.build_metadata(np.array([2.5])), TypeError,
     r"prompt_lens must hold integers, got a NumPy array of float64"),
    ("states given as a string", lambda: tp.build_metadata([2], states="ab"), TypeError,
     r"states must be a list of PoolingStates .*got str"),
    ("one state for two requests",
     lambda: tp.build_metadata([2, 2], states=[tp.PoolingStates()] * 2),
     ValueError, r"one PoolingStates object for two requests"),
    # --- pooling methods --------------------------------------------------------------------
    ("chunked prefill flag 'no'", lambda: tp.AllPool(enable_chunked_prefill="no"), TypeError,
     r"enable_chunked_prefill must be True or False, got 'no'"),
    ("async flag 1", lambda: tp.StepPool(async_scheduling=1), TypeError,
     r"async_scheduling must be True or False, got 1"),
    ("policy not a string", lambda: tp.AllPool(policy=None), TypeError,
     r"policy must be a string .*got None"),
    ("metadata not PoolingMetadata", lambda: tp.AllPool()(H, [6]), TypeError,
     r"metadata a PoolingMetadata .*got list"),
    ("bf16 chunk then fp32 chunk", _dtype_change, ValueError,
     r"torch\.float32 \[n, 8\] but its earlier chunks are torch\.bfloat16"),
    ("chunk of another width", _width_change, ValueError,
     r"\[n, 6\] but its earlier chunks are torch\.float32 \[n, 8\]"),
    ("states of another request", _swapped_states, ValueError,
     r"request 0 has prompt_len 4 but its pooling state was started for a request of "
     r"prompt_len 6"),
    ("one state shared in a batch", _shared_state, ValueError,
     r"requests 0 and 1 share one PoolingStates"),
    ("CLS on a zero-token request", lambda: _zero_token_cursor(tp.CLSPool), ValueError,
     r"CLSPool: request\(s\) \[0\] have 0 tokens"),
    ("LAST on a zero-token request", lambda: _zero_token_cursor(tp.LastPool), ValueError,
     r"LastPool: request\(s\) \[0\] have 0 tokens"),
    ("MEAN on a zero-token request", lambda: _zero_token_cursor(tp.MeanPool), ValueError,
     r"MeanPool: request\(s\) \[0\] have 0 tokens"),
    ("SPLADE rows vs metadata",
     lambda: heads.SpladeSparsePooler(lambda x: x)(H[:5], tp.build_metadata([2])), ValueError,
     r"SpladeSparsePooler: hidden_states has 5 rows but the metadata holds 2 tokens"),
    ("BGE-M3 rows vs metadata",
     lambda: heads.BgeM3Pooler(lambda x: x[:, :1])(H, tp.build_metadata([2, 3])), ValueError,
     r"BgeM3Pooler: hidden_states has 6 rows but the metadata holds 5 tokens"),
    ("metadata device typo", lambda: tp.build_metadata([2], device="gpu9"), ValueError,
     r"device='gpu9' is not a torch device"),
    ("Pooler of a non-method", lambda: tp.pooler.poolers.Pooler(object()), TypeError,
     r"method must be a pooling method .*got <object object"),
    ("DispatchPooler of a string", lambda: tp.pooler.poolers.DispatchPooler("embed"), TypeError,
     r"poolers_by_task must map task names to poolers.*got str"),
    ("shares_storage with None", lambda: tp.shares_storage(None, H), TypeError,
     r"a must be a torch\.Tensor, got NoneType"),
    ("owned_bytes of strings", lambda: tp.owned_bytes(["a"]), TypeError,
     r"tensors\[0\] must be a torch\.Tensor, got str \('a'\)"),
    # --- heads ------------------------------------------------------------------------------
    ("negative logit_sigma", lambda: heads.TokenClassifierHead(logit_sigma=-1), ValueError,
     r"logit_sigma must be > 0, got -1"),
    ("NaN logit_mean", lambda: heads.TokenClassifierHead(logit_mean=NAN), ValueError,
     r"logit_mean must be finite, got nan"),
    ("string logit_sigma", lambda: heads.TokenClassifierHead(logit_sigma="2"), TypeError,
     r"logit_sigma must be a real number or None, got '2'"),
    ("unknown activation name", lambda: apply_classifier_activation(H, "relu"), ValueError,
     r"unknown activation 'relu'"),
    ("projector of another width",
     lambda: heads.TokenEmbeddingHead(projector=torch.nn.Linear(3, 4))(torch.zeros(2, 5)),
     ValueError, r"projector takes rows of width 3 but the pooled rows have width 5"),
    ("classifier of another width",
     lambda: heads.TokenClassifierHead(classifier=torch.nn.Linear(3, 2))(torch.zeros(2, 5)),
     ValueError, r"classifier takes rows of width 3 but the pooled rows have width 5"),
    ("use_activation 'no'", lambda: heads.TokenEmbeddingHead()(H, use_activation="no"),
     TypeError, r"use_activation must be True or False, got 'no'"),
    ("NaN into a classifier head",
     lambda: heads.TokenClassifierHead()(torch.tensor([[0.0, 1.0], [NAN, 1.0]])),
     NonFiniteError, r"1 of 4 values are NaN or Inf \(first: nan at row 1\)"),
    ("Inf into an embedding head",
     lambda: heads.TokenEmbeddingHead()(torch.tensor([[INF, 1.0]])),
     NonFiniteError, r"first: inf at row 0"),
    ("float16 head cast overflows",
     lambda: heads.TokenEmbeddingHead(head_dtype="float16")(torch.tensor([[1e6, 1.0]])),
     NonFiniteError, r"casting torch\.float32 to head dtype torch\.float16 overflowed"),
    ("classifier that outputs Inf",
     lambda: heads.TokenClassifierHead(classifier=lambda x: x * INF)(torch.ones(2, 3)),
     NonFiniteError, r"TokenClassifierHead logits .*first: inf at row 0"),
    # --- tasks ------------------------------------------------------------------------------
    ("architectures given as a string",
     lambda: tp.select_task({"embed", "token_classify"},
                            architectures="Qwen2ForTokenClassification"),
     TypeError, r"not the string 'Qwen2ForTokenClassification'"),
    ("requested given as a list", lambda: tp.select_task({"embed"}, requested=["embed"]),
     TypeError, r"requested must be one task name or None, got \['embed'\]"),
    ("model_tasks None", lambda: tp.gate(None), TypeError,
     r"model_tasks must be a collection of task names, got NoneType"),
    # --- rewards (NaN/Inf policy) -----------------------------------------------------------
    ("NaN reward", lambda: tp.prm.first_error_from_rewards([0.9, NAN, 0.1]), NonFiniteError,
     r"reward of step 1 is nan"),
    ("Inf reward", lambda: tp.prm.first_error_from_rewards([INF, 0.9]), NonFiniteError,
     r"reward of step 0 is inf"),
    ("NaN threshold", lambda: tp.prm.first_error_from_rewards([0.1], threshold=NAN), ValueError,
     r"threshold must be finite, got nan"),
    ("string threshold", lambda: tp.prm.first_error_from_rewards([0.1], threshold="0.5"),
     TypeError, r"threshold must be a real number, got '0\.5'"),
    ("NaN first-error prediction", lambda: tp.prm.processbench_f1([NAN, -1], [0, -1]), TypeError,
     r"pred_first_error must hold integer step indices .*got dtype float64"),
    ("NaN step score", lambda: tp.prm.step_auroc([NAN, 0.5], [1, 0]), ValueError,
     r"scores must be finite \(got nan or inf\)"),
    ("rewards as a matrix", lambda: tp.prm.first_error_from_rewards([[0.1, 0.2], [0.3, 0.4]]),
     ValueError, r"rewards must be 1-D \(one per step\), got shape \(2, 2\)"),
]


@pytest.mark.parametrize(("call", "error", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_catalogue(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_catalogue_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_metadata_on_cuda_without_cuda():
    with pytest.raises(ValueError, match=r"device='cuda' but CUDA is not available"):
        tp.build_metadata([2], device="cuda")


def test_nonfinite_error_is_a_value_error():
    assert issubclass(NonFiniteError, ValueError)


# --- the checks do not change valid results -------------------------------------------------


def test_a_state_is_reusable_after_its_request_finishes():
    pool, states = _first_chunk(prompt_len=4)
    meta = tp.build_metadata([4], num_scheduled_tokens=[2], states=states)
    (out,) = pool(torch.ones(2, 8), meta)
    assert out.shape == (4, 8) and states[0].prompt_len is None  # cleaned: free for reuse
    meta = tp.build_metadata([6], num_scheduled_tokens=[2], seq_lens=[2], states=states)
    assert pool(torch.ones(2, 8), meta) == [None]


def test_heads_let_nan_through_when_asked():
    head = heads.TokenClassifierHead(check_finite=False)
    assert torch.isnan(head(torch.tensor([[NAN, 1.0]]))).all()


def test_large_finite_values_are_not_mistaken_for_inf():
    x = torch.full((64, 4), 60_000.0, dtype=torch.float16)  # finite; their fp16 sum overflows
    out = heads.TokenClassifierHead(head_dtype=None, activation="none")(x)
    assert out is x


def test_first_error_still_reports_errors_and_no_error():
    assert tp.prm.first_error_from_rewards([0.9, 0.3, 0.8]) == 1
    assert tp.prm.first_error_from_rewards(np.array([0.9, 0.8])) == -1
    assert tp.prm.first_error_from_rewards(torch.tensor([0.9, 0.1]), threshold=0.2) == 1
    assert tp.prm.first_error_from_rewards([]) == -1


def test_numpy_lengths_are_accepted():
    meta = tp.build_metadata(np.array([3, 2]), num_scheduled_tokens=[np.int64(1), 2],
                             seq_lens=np.array([1, 2]))
    assert meta.prompt_lens.tolist() == [3, 2]


# --- property tests ----------------------------------------------------------------------------

lengths = st.lists(st.integers(-2, 6), min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(lengths, st.data())
def test_build_metadata_raises_or_describes_every_request(prompt_lens, data):
    """Any integer lengths: a clear ValueError naming the request, or metadata whose rows add up
    so that every request owns at least one row."""
    n = len(prompt_lens)
    scheduled = data.draw(st.lists(st.integers(-1, 7), min_size=n, max_size=n))
    seqs = data.draw(st.lists(st.integers(-1, 7), min_size=n, max_size=n))
    try:
        meta = tp.build_metadata(prompt_lens, num_scheduled_tokens=scheduled, seq_lens=seqs)
    except ValueError as err:
        assert "request " in str(err)
        return
    cursor = meta.pooling_cursor
    assert all(s >= 1 for s in cursor.num_scheduled_tokens.tolist())
    hidden = torch.arange(sum(scheduled), dtype=torch.float32).unsqueeze(1)  # row i holds i
    rows = tp.LastPool()(hidden, meta).squeeze(1).tolist()
    starts = cursor.first_token_indices.tolist()
    for i, (row, start, count) in enumerate(zip(rows, starts, scheduled, strict=True)):
        assert row == start + count - 1, i  # its own last row, never a neighbour's


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6,
                          max_value=1e6), min_size=1, max_size=8))
def test_non_integer_token_ids_are_refused_never_truncated(ids):
    has_fraction = any(v != math.floor(v) for v in ids)
    if has_fraction:
        with pytest.raises(TypeError, match="must hold int token ids"):
            tp.build_metadata([len(ids)], prompt_token_ids=[ids])
    with pytest.raises(TypeError, match=r"dtype torch\.float64"):
        tp.build_metadata([len(ids)], prompt_token_ids=torch.tensor([ids], dtype=torch.float64))


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.data(),
       st.sampled_from([NAN, INF, -INF]), st.sampled_from(["embed", "classify"]))
def test_heads_refuse_any_nonfinite_value_and_name_its_row(rows, width, data, bad, kind):
    x = torch.randn(rows, width)
    r, c = data.draw(st.integers(0, rows - 1)), data.draw(st.integers(0, width - 1))
    x[r, c] = bad
    head = heads.TokenEmbeddingHead() if kind == "embed" else heads.TokenClassifierHead()
    with pytest.raises(NonFiniteError) as info:
        head(x)
    first_bad_row = int((~torch.isfinite(x)).nonzero()[0, 0])
    assert f"at row {first_bad_row})" in str(info.value)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=10), st.data(),
       st.sampled_from([NAN, INF, -INF]))
def test_a_broken_reward_never_reads_as_no_error(rewards, data, bad):
    i = data.draw(st.integers(0, len(rewards) - 1))
    rewards[i] = bad
    with pytest.raises(NonFiniteError, match=rf"reward of step {i} is"):
        tp.prm.first_error_from_rewards(rewards)
