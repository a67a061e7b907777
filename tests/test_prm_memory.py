"""Pooling memory per PRM convention as vLLM 0.33.0 serves it, from the simulator's analytic mode:
score-head conventions pool fresh float32 logits computed after the compiled backbone
(vllm/model_executor/models/qwen2_rm.py, Qwen2RewardBaseModel.forward); the token-pair
convention pools the backbone's hidden rows, as a pooling model loads no LM head
(vllm/model_executor/models/adapters.py, _create_pooling_model_cls)."""

import pytest

import tokpool as tp

T, C, EVERY = 32_768, 8_192, 64


@pytest.fixture(scope="module")
def table():
    # chunked at 8,192 tokens, a 32,768-token prompt: what chunking WOULD cost (vLLM never
    # chunks a STEP model, and Qwen2.5-Math-PRM-7B's context is 4,096; both lifted on purpose)
    return tp.prm.prm_memory_table([T], max_num_batched_tokens=C, step_tag_every=EVERY,
                               enable_chunked_prefill=True, max_model_len=T, as_if=True)


def test_vllm_serves_a_prm_unchunked_within_its_context():
    with pytest.raises(ValueError, match="max_model_len=4096"):
        tp.prm.prm_memory_table([T])
    n, m = 4_096, 4_096 // EVERY
    table = tp.prm.prm_memory_table([n], step_tag_every=EVERY).set_index("convention")
    assert not table["chunked"].any()
    for convention, row in table.iterrows():
        k = row.returned_width
        # AllPool hands over a VIEW of the step's rows (sync, one shot): pooling owns only
        # the selections and the head's outputs
        if convention == "token_pair":  # bf16 hidden rows: columns, tag rows, cast, softmax
            columns, rows = n * k * 2, m * k * 2
            assert row.peak_pooling_bytes == max(columns + rows, rows + 2 * m * k * 4)
        else:  # float32 logits: the tag rows and the softmax (no cast: already float32)
            assert row.peak_pooling_bytes == m * k * 4 + m * k * 4, convention


def test_widths_per_convention(table):
    hidden = tp.MODEL_PRESETS["Qwen2.5-Math-PRM-7B"].hidden_size
    rows = table.set_index("convention")
    assert rows.loc["two_class", ["pooled_width", "returned_width"]].tolist() == [2, 2]
    assert rows.loc["token_pair", ["pooled_width", "returned_width"]].tolist() == [hidden, 2]
    assert rows.loc["value_head", ["pooled_width", "returned_width"]].tolist() == [1, 1]
    # float32 logits, bf16 hidden rows
    assert rows["bytes_per_token"].tolist() == [2 * 4, hidden * 2, 1 * 4]


def test_clone_peak_is_the_design_formula_with_the_convention_width(table):
    # clone: the finishing cat allocates T rows while T - L rows of cache are alive
    last = T - (T // C - 1) * C
    for row in table.itertuples():
        assert row.peak_pooling_bytes == (2 * T - last) * row.bytes_per_token, row.convention
        # what the host receives is tiny: one float32 row of returned_width per step
        assert row.output_bytes == (T // EVERY) * row.returned_width * 4
        assert row.num_steps == T // EVERY


def test_token_pair_pays_for_the_hidden_rows_before_selection(table):
    peak = table.set_index("convention")["peak_pooling_bytes"]
    hidden = tp.MODEL_PRESETS["Qwen2.5-Math-PRM-7B"].hidden_size
    assert peak["token_pair"] == peak["two_class"] * (hidden * 2) // (2 * 4)
    assert peak["two_class"] == 2 * peak["value_head"]
    assert 0 < table.set_index("convention").loc["token_pair", "share_of_hbm"] < 1


def test_offload_keeps_nothing_on_the_device_and_several_lengths():
    t = tp.prm.prm_memory_table([4_096, T], policy="offload", conventions=["token_pair"],
                            max_model_len=T, as_if=True)
    assert t["prompt_len"].tolist() == [4_096, T]
    assert (t["peak_pooling_bytes"] == 0).all()


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown conventions"):
        tp.prm.prm_memory_table([T], conventions=["softmax"])
    with pytest.raises(ValueError, match="unknown model"):
        tp.prm.prm_memory_table([T], model="gpt-9")
