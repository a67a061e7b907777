"""Step rewards in the three PRM conventions against direct reference computations, the step
tag handling (format_steps) and its errors."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tokpool as tp

TAG = 7


def _prompt(n_tokens: int, tag_rows: list[int], vocab: int = 50, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(8, vocab, (n_tokens,), generator=g)  # never the tag
    ids[tag_rows] = TAG
    return ids


def _logits(n_tokens: int, width: int, seed: int = 1, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n_tokens, width, generator=g) * 3).to(dtype)


ROWS = [3, 9, 10, 15]


# --- the three conventions against hand-written references ---------------------------------

def test_two_class_is_softmax_index_1_at_tag_rows():
    ids, logits = _prompt(16, ROWS), _logits(16, 2)
    rewards = tp.prm.step_rewards(logits, ids, step_tag_id=TAG, convention="two_class")
    x = logits[ROWS].double()
    expected = torch.exp(x[:, 1]) / (torch.exp(x[:, 0]) + torch.exp(x[:, 1]))
    assert rewards.dtype == torch.float32 and rewards.shape == (len(ROWS),)
    torch.testing.assert_close(rewards.double(), expected, rtol=1e-6, atol=1e-7)


def test_token_pair_is_softmax_over_good_bad_columns_index_0():
    vocab, good, bad = 40, 12, 30
    ids, logits = _prompt(16, ROWS, vocab), _logits(16, vocab)
    rewards = tp.prm.step_rewards(logits, ids, step_tag_id=TAG, convention="token_pair",
                              returned_token_ids=[good, bad])
    g, b = logits[ROWS, good].double(), logits[ROWS, bad].double()
    expected = torch.exp(g) / (torch.exp(g) + torch.exp(b))  # the other columns play no part
    torch.testing.assert_close(rewards.double(), expected, rtol=1e-6, atol=1e-7)


def test_value_head_is_sigmoid_of_the_scalar_at_tag_rows():
    ids, logits = _prompt(16, ROWS), _logits(16, 1)
    expected = 1 / (1 + torch.exp(-logits[ROWS, 0].double()))
    for per_token in (logits, logits[:, 0]):  # [n, 1] and [n]
        rewards = tp.prm.step_rewards(per_token, ids, step_tag_id=TAG, convention="value_head")
        torch.testing.assert_close(rewards.double(), expected, rtol=1e-6, atol=1e-7)


def test_pooled_rows_are_exactly_the_tag_rows_and_columns():
    vocab = 40
    ids, logits = _prompt(16, ROWS, vocab), _logits(16, vocab, dtype=torch.bfloat16)
    kept = tp.prm.step_logits(logits, ids, step_tag_id=TAG, convention="token_pair",
                          returned_token_ids=(5, 2))
    assert torch.equal(kept, logits[ROWS][:, [5, 2]])
    two = _logits(16, 2, dtype=torch.bfloat16)
    assert torch.equal(tp.prm.step_logits(two, ids.tolist(), step_tag_id=TAG,
                                      convention="two_class"), two[ROWS])


def test_bf16_logits_are_scored_in_float32_like_the_engine_head():
    ids, logits = _prompt(16, ROWS), _logits(16, 2, dtype=torch.bfloat16)
    rewards = tp.prm.step_rewards(logits, ids, step_tag_id=TAG, convention="two_class")
    assert rewards.dtype == torch.float32
    assert torch.equal(rewards, torch.softmax(logits[ROWS].float(), dim=-1)[:, 1])


@settings(max_examples=40, deadline=None)
@given(
    n_tokens=st.integers(1, 40),
    data=st.data(),
    convention=st.sampled_from(["two_class", "token_pair", "value_head"]),
)
def test_one_reward_in_unit_interval_per_tag(n_tokens, data, convention):
    rows = sorted(data.draw(st.sets(st.integers(0, n_tokens - 1), min_size=1)))
    width = {"two_class": 2, "token_pair": 20, "value_head": 1}[convention]
    ids, logits = _prompt(n_tokens, rows, seed=n_tokens), _logits(n_tokens, width) * 10
    cols = [4, 9] if convention == "token_pair" else None
    rewards = tp.prm.step_rewards(logits, ids, step_tag_id=TAG, convention=convention,
                              returned_token_ids=cols)
    assert rewards.shape == (len(rows),)
    assert bool(((rewards >= 0) & (rewards <= 1)).all())


def test_first_error_from_rewards():
    assert tp.prm.first_error_from_rewards([0.9, 0.8, 0.2, 0.1]) == 2
    assert tp.prm.first_error_from_rewards(torch.tensor([0.9, 0.6]), threshold=0.5) == -1
    assert tp.prm.first_error_from_rewards([0.9, 0.6], threshold=0.7) == 1


# --- errors ------------------------------------------------------------------------------

def test_no_tag_in_prompt_explains_how_to_format_steps():
    with pytest.raises(ValueError, match="format_steps"):
        tp.prm.step_rewards(_logits(5, 2), [10, 11, 12, 13, 14], step_tag_id=TAG,
                        convention="two_class")


@pytest.mark.parametrize(
    ("convention", "width", "cols", "match"),
    [
        ("two_class", 3, None, "2 logits"),
        ("two_class", 1, None, "value_head"),
        ("value_head", 2, None, "1 value"),
        ("token_pair", 30, None, "returned_token_ids"),
        ("token_pair", 30, [1, 2, 3], "exactly 2"),
        ("token_pair", 30, [4, 4], "distinct"),
        ("token_pair", 30, [4, 30], "outside"),
        ("two_class", 2, [0, 1], "only applies to convention='token_pair'"),
        ("softmax", 2, None, "unknown convention"),
    ],
)
def test_widths_and_columns_that_do_not_fit_the_convention(convention, width, cols, match):
    ids = _prompt(8, [2, 7])
    with pytest.raises(ValueError, match=match):
        tp.prm.step_rewards(_logits(8, width), ids, step_tag_id=TAG, convention=convention,
                        returned_token_ids=cols)


def test_lengths_and_types_that_do_not_fit():
    ids = _prompt(8, [2, 7])
    with pytest.raises(ValueError, match="8 ids"):
        tp.prm.step_rewards(_logits(9, 2), ids, step_tag_id=TAG, convention="two_class")
    with pytest.raises(ValueError, match="one at a time"):
        tp.prm.step_rewards(_logits(8, 2)[None], ids, step_tag_id=TAG, convention="two_class")
    with pytest.raises(TypeError, match="Tensor"):
        tp.prm.step_rewards([[0.0, 1.0]] * 8, ids, step_tag_id=TAG, convention="two_class")
    with pytest.raises(TypeError, match="not text"):
        tp.prm.step_rewards(_logits(8, 2), "12345678", step_tag_id=TAG, convention="two_class")
    with pytest.raises(TypeError, match="step_tag_id"):
        tp.prm.step_rewards(_logits(8, 2), ids, step_tag_id="7", convention="two_class")
    # a numpy/tensor scalar id is fine
    out = tp.prm.step_rewards(_logits(8, 2), ids, step_tag_id=torch.tensor(TAG),
                          convention="two_class")
    assert out.shape == (2,)


# --- format_steps --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_tokenizer():
    """A word-level fast tokenizer with Qwen's ``<extra_0>`` as a special token."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[UNK]", "<extra_0>", "<sep>", "<", ">", "step", "tag", "_", "0", "1", "2", "3",
             "4", "5", "6", "7", "8", "9", "20", "+", "-", "*", "=", ".", "?", ":", "what", "is",
             "so", "the", "answer", "mia", "has", "apples", "she", "buys", "more"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    tok.add_special_tokens({"additional_special_tokens": ["<extra_0>", "<sep>"]})
    return tok


def test_format_steps_puts_one_tag_after_each_step(tiny_tokenizer):
    steps = ["2 + 3 = 5 .", "5 * 4 = 20 .", "so the answer is 20 ."]
    out = tp.prm.format_steps("what is 2 + 3 * 4 ?", steps, tokenizer=tiny_tokenizer)
    assert out.tag == "<extra_0>"  # the first default candidate this tokenizer keeps whole
    ids, tag_id = out  # unpacks as (token_ids, step_tag_id)
    assert tag_id == tiny_tokenizer.convert_tokens_to_ids("<extra_0>")
    assert [i for i, t in enumerate(ids) if t == tag_id] == out.tag_positions
    assert out.num_steps == 3 and out.num_tokens == len(ids)
    for (start, stop), step, pos in zip(out.step_spans, steps, out.tag_positions, strict=True):
        assert stop == pos + 1
        assert tiny_tokenizer.decode(ids[start:pos]) == step
    # the rewards of a formatted prompt: one per step
    rewards = tp.prm.step_rewards(torch.zeros(len(ids), 2), ids, step_tag_id=tag_id,
                              convention="two_class")
    assert torch.equal(rewards, torch.full((3,), 0.5))


def test_format_steps_accepts_an_explicit_single_token_tag(tiny_tokenizer):
    out = tp.prm.format_steps("what is 2 ?", ["2 ."], tokenizer=tiny_tokenizer, tag="<sep>",
                          separator="")
    assert out.step_tag_id == tiny_tokenizer.convert_tokens_to_ids("<sep>")
    assert out.text.endswith("2 .<sep>")


def test_a_tag_that_splits_is_refused_with_its_pieces_and_alternatives(tiny_tokenizer):
    with pytest.raises(ValueError, match="3 tokens") as info:
        tp.prm.format_steps("what ?", ["1 ."], tokenizer=tiny_tokenizer, tag="<step>")
    message = str(info.value)
    assert "'<'" in message and "'step'" in message  # the pieces
    assert "<extra_0>" in message  # an alternative


def test_tag_already_in_the_text_and_bad_steps_are_refused(tiny_tokenizer):
    with pytest.raises(ValueError, match="already occurs in step 1;"):
        tp.prm.format_steps("what ?", ["1 .", "2 <extra_0> ."], tokenizer=tiny_tokenizer)
    with pytest.raises(ValueError, match="at least one step"):
        tp.prm.format_steps("what ?", [], tokenizer=tiny_tokenizer)
    with pytest.raises(ValueError, match="empty"):
        tp.prm.format_steps("what ?", ["1 .", "  "], tokenizer=tiny_tokenizer)
    with pytest.raises(TypeError, match="list of strings"):
        tp.prm.format_steps("what ?", "1 .", tokenizer=tiny_tokenizer)


@pytest.mark.real_model
def test_smollm2_tokenizer_default_tag_and_refusal():
    tok = tp.load_model("smollm2-135m").tokenizer
    out = tp.prm.format_steps("Mia has 3 apples. She buys 4 more. How many?",
                          ["3 + 4 = 7.", "So the answer is 7."], tokenizer=tok)
    assert out.tag == "<file_sep>" and out.num_steps == 2
    assert "<|im_start|>assistant" in out.text  # the chat template is used
    with pytest.raises(ValueError, match="2 tokens") as info:
        tp.prm.format_steps("x", ["y"], tokenizer=tok, tag="ки")
    assert "'к'" in str(info.value) and "<file_sep>" in str(info.value)


def test_reward_math_is_not_nan_on_extreme_logits():
    ids = _prompt(4, [1, 3])
    logits = torch.tensor([[0.0, 0.0], [1e4, -1e4], [0.0, 0.0], [-1e4, 1e4]])
    rewards = tp.prm.step_rewards(logits, ids, step_tag_id=TAG, convention="two_class")
    assert rewards.tolist() == [0.0, 1.0] and not any(math.isnan(r) for r in rewards.tolist())
