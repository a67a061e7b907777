"""multivector_index_bytes: raw storage and the two PLAID layouts, part by
part, worked out
by hand from colbert-ai's and fast-plaid's sources; the pooled vector count equals what
tp.late_interaction.pool_tokens really returns; refusals in words."""

from __future__ import annotations

import pytest
import torch

import tokpool as tp
from tokpool.late_interaction import multivector_index_bytes, plaid_partitions
from tokpool.late_interaction.index_files import (
    MERGED_HEADER,
    PICKLED_ARRAY_BYTES,
    TORCH_SAVE_BYTES,
)


def test_raw_storage_is_rows_times_dim_times_itemsize():
    b = multivector_index_bytes([3, 5, 8], 16, dtype="float32")
    assert (b.layout, b.n_docs, b.n_tokens, b.n_vectors) == ("raw", 3, 16, 16)
    assert b.parts == {"vectors": 16 * 16 * 4}
    assert b.total_bytes == 1024 and b.dense_bytes == 3 * 16 * 4
    assert b.bytes_per_vector == 64.0
    half = multivector_index_bytes([3, 5, 8], 16, dtype=torch.bfloat16)
    assert half.total_bytes == 512 and half.dtype == "bfloat16"


def test_colbert_layout_int32_codes_packed_residuals_fp16_centroids():
    # 20 docs x 50 tokens = 1,000 vectors; 16 * sqrt(1000) = 505.96 -> K = 2^8 = 256
    b = multivector_index_bytes([50] * 20, 128, nbits="default", layout="colbert")
    assert (b.nbits, b.partitions) == (1, 256)
    pt = TORCH_SAVE_BYTES  # each part is whole torch.save files (issue 48: the whole folder)
    assert b.parts == {"codes": 1000 * 4 + pt, "residuals": 1000 * 16 + pt,
                       "centroids": 256 * 128 * 2 + pt, "ivf": b.ivf_bytes,
                       "small files": b.small_bytes}
    assert b.total_bytes == 4000 + 16000 + 65536 + 3 * pt + b.ivf_bytes + b.small_bytes
    b2 = multivector_index_bytes([50] * 20, 128, nbits=2, layout="colbert")
    assert b2.residual_bytes == 1000 * 32 + pt and b2.codes_bytes == 4000 + pt


def test_fast_plaid_layout_int64_codes_four_bits_by_default():
    b = multivector_index_bytes([50] * 20, 128, nbits="default", layout="fast-plaid")
    assert (b.nbits, b.partitions) == (4, 256)
    h = MERGED_HEADER  # fast-plaid 1.7's merged files (no padding: every document is 50 long)
    assert {p: b.parts[p] for p in ("codes", "residuals", "centroids")} == {
        "codes": 1000 * 8 + h, "residuals": 1000 * 64 + h, "centroids": 256 * 128 * 2 + 80}
    assert set(b.parts) == {"codes", "residuals", "centroids", "ivf", "vectors", "small files"}
    assert b.vector_bytes == 1000 * 128 * 2 + round(20 * PICKLED_ARRAY_BYTES) + 200  # fp16 copy


def test_partitions_follow_the_power_of_two_rule_capped_at_the_vectors():
    assert [plaid_partitions(n) for n in (1, 2, 255, 256, 257, 4096, 10**6)] == [
        1, 2, 128, 256, 256, 1024, 8192]
    # the rule's steps: 2^floor(log2(16 sqrt(N)))
    assert plaid_partitions(16_384) == 2048 and plaid_partitions(16_383) == 1024


def test_pooled_vector_count_is_what_pool_tokens_returns():
    g = torch.Generator().manual_seed(1)
    lens = [1, 2, 3, 7, 30, 64]
    docs = [torch.nn.functional.normalize(torch.randn(n, 8, generator=g), dim=-1) for n in lens]
    for factor in (1, 2, 3, 4):
        pooled = tp.late_interaction.pool_tokens(docs, pool_factor=factor)
        b = multivector_index_bytes(lens, 8, pool_factor=factor)
        assert b.n_vectors == sum(d.shape[0] for d in pooled), factor
        assert b.vector_bytes == b.n_vectors * 8 * 2


def test_pooling_then_compression_and_against_dense():
    lens = [512] * 100
    raw = multivector_index_bytes(lens, 384)
    pooled = multivector_index_bytes(lens, 384, pool_factor=4, nbits=2, layout="colbert")
    assert raw.times_dense == 512.0
    assert pooled.n_vectors == 100 * (1 + 511 // 4)
    assert pooled.total_bytes < raw.total_bytes / 10
    assert set(pooled.as_row()) >= {"total_bytes", "times_dense", "codes_bytes", "layout"}


@pytest.mark.parametrize("args, kwargs, error, words", [
    (([], 128), {}, ValueError, "doc_lens is empty"),
    (("512", 128), {}, TypeError, "doc_lens must be a list of token counts"),
    (([4, 0], 128), {}, ValueError, "doc_lens[1] must be a whole number >= 1, got 0"),
    (([4, 2.5], 128), {}, TypeError, "doc_lens[1] must be a whole number"),
    (([4], 0), {}, ValueError, "dim must be a whole number >= 1"),
    (([4], 128), {"dtype": "int8"}, ValueError, "unknown dtype 'int8'"),
    (([4], 128), {"pool_factor": 0}, ValueError, "pool_factor must be a whole number >= 1"),
    (([4], 128), {"nbits": 3}, ValueError, "nbits must be one of [1, 2, 4, 8]"),
    (([4], 128), {"nbits": 0}, ValueError, "nbits must be a whole number from 1 to 8"),
    (([4], 128), {"nbits": 2, "layout": "faiss"}, ValueError,
     "layout must be one of ['colbert', 'fast-plaid', 'pylate']"),
    (([4], 100), {"nbits": 1}, ValueError, "dim must be a multiple of 8"),
    (([4], 96), {"nbits": 8, "layout": "colbert"}, ValueError, "divisible by 8 · nbits = 64"),
])
def test_bad_values_are_refused_in_words(args, kwargs, error, words):
    with pytest.raises(error) as info:
        multivector_index_bytes(*args, **kwargs)
    assert words in str(info.value)


def test_fast_plaid_packs_any_multiple_of_eight():
    b = multivector_index_bytes([4], 96, nbits=8, layout="fast-plaid")
    assert b.residual_bytes == 4 * 96 + MERGED_HEADER


def test_an_integer_array_of_lengths_counts_as_the_list_does():
    import numpy as np

    lens = [3, 7, 7, 1, 512, 9]
    for kwargs in ({}, {"pool_factor": 3}, {"nbits": 2, "layout": "fast-plaid"}):
        ref = multivector_index_bytes(lens, 64, **kwargs)
        assert multivector_index_bytes(np.array(lens), 64, **kwargs) == ref
        assert multivector_index_bytes(torch.tensor(lens), 64, **kwargs) == ref
    with pytest.raises(ValueError, match=r"doc_lens\[2\] must be a whole number >= 1, got 0"):
        multivector_index_bytes(np.array([4, 5, 0]), 64)
    with pytest.raises(ValueError, match="doc_lens is empty"):
        multivector_index_bytes(np.array([], dtype=np.int64), 64)
    big = multivector_index_bytes(np.full(10**7, 128), 128, nbits=2)  # ten million documents
    assert big.n_vectors == 128 * 10**7  # 400 chunk files of 25,000 documents
    assert big.codes_bytes == 4 * 128 * 10**7 + 400 * TORCH_SAVE_BYTES


def test_index_plot_draws_one_line_per_option_and_refuses_other_frames():
    import matplotlib.pyplot as plt
    import pandas as pd

    table = tp.late_interaction.index_bytes_table([2**16, 2**20], 128, 128)
    ax = tp.viz.plot_index_bytes(table)
    try:
        assert len(ax.get_lines()) == table["option"].nunique() == 7
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    finally:
        plt.close(ax.figure)
    with pytest.raises(TypeError, match="must be a pandas DataFrame"):
        tp.viz.plot_index_bytes([1, 2])
    with pytest.raises(ValueError, match="needs the columns"):
        tp.viz.plot_index_bytes(pd.DataFrame({"x": [1]}))


def test_tradeoff_plot_marks_each_method_with_its_interval():
    import matplotlib.pyplot as plt
    import pandas as pd

    table = pd.DataFrame({"method": ["dense (mean-pooled)", "MaxSim", "MaxSim, pool 2"],
                          "mrr@10": [0.6, 0.7, 0.65], "mrr@10_low": [0.5, 0.6, 0.55],
                          "mrr@10_high": [0.7, 0.8, 0.75], "bytes_fp16": [1e3, 1e5, 5e4],
                          "bytes_plaid": [None, 2e4, 1e4]})
    ax = tp.viz.plot_pooling_tradeoff(table)
    try:
        late = ax.get_lines()[-2]
        assert list(late.get_ydata()) == [0.7, 0.65]
    finally:
        plt.close(ax.figure)
    ax = tp.viz.plot_pooling_tradeoff(table, bytes_column="bytes_plaid")
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="needs the columns"):
        tp.viz.plot_pooling_tradeoff(table, metric="recall@5")
