"""``tp.response_bytes`` (vLLM 0.33.0's answer size and API-process peak) and the result's
``responses()`` table; the comparison with vLLM's own encoders is tests/test_parity_response.py."""

from __future__ import annotations

import pytest

import tokpool as tp

SHAPE = (32_768, 4_096)  # one 32,768-token token_embed answer of width 4,096


def test_bytes_formats_are_exact_for_the_long_answer():
    n = SHAPE[0] * SHAPE[1]
    for fmt in ("bytes", "bytes_only"):
        r = tp.response_bytes(SHAPE, fmt)
        assert (r.body_bytes, r.peak_host_bytes, r.relative_error) == (4 * n, 4 * n, 0.0)
    swapped = tp.response_bytes(SHAPE, "bytes", "float32", "big")
    assert swapped.peak_host_bytes == 8 * n  # the byte-swapped copy, then tobytes()
    cast = tp.response_bytes(SHAPE, "bytes", "fp8_e4m3")
    assert (cast.body_bytes, cast.peak_host_bytes) == (n, 2 * n)  # the cast, then tobytes()
    b64 = tp.response_bytes(SHAPE, "base64", "float16")
    assert b64.body_bytes == 4 * -(-2 * n // 3) and b64.estimated


def test_json_is_an_estimate_with_its_error_and_the_numpy_endpoint_is_smaller():
    pooling = tp.response_bytes(SHAPE)
    numpy_path = tp.response_bytes(SHAPE, endpoint="embeddings")
    assert 0 < pooling.relative_error < 1 and pooling.estimated
    assert numpy_path.body_bytes < pooling.body_bytes
    assert numpy_path.peak_host_bytes < pooling.peak_host_bytes
    assert pooling.peak_host_bytes > 3 * pooling.body_bytes  # Python floats and lists
    assert "FIT" in pooling.how


@pytest.mark.parametrize("kwargs, words", [
    ({"encoding_format": "json"}, "encoding_format='json'"),
    ({"embed_dtype": "int8"}, "embed_dtype='int8'"),
    ({"endianness": "middle"}, "endianness='middle'"),
    ({"endpoint": "embeddings", "encoding_format": "bytes"}, "answers floats only"),
])
def test_options_vllm_does_not_offer_are_refused(kwargs, words):
    with pytest.raises(ValueError, match=words):
        tp.response_bytes((4, 8), **kwargs)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="shape must be"):
        tp.response_bytes((0, 8))
    with pytest.raises(TypeError, match="shape must be"):
        tp.response_bytes("4x8")


def test_the_result_lists_each_finished_answer():
    cfg = tp.SimConfig(hidden_size=64, max_num_batched_tokens=1024)
    r = tp.simulate([3000, 500], cfg, mode="analytic", aborts={1: 1})
    table = r.responses()
    assert table["request"].unique().tolist() == [0]  # request 1 was aborted: no answer
    assert table["encoding_format"].tolist() == ["float", "base64", "bytes", "bytes_only"]
    exact = table.set_index("encoding_format").loc["bytes"]
    assert exact.body_bytes == tp.response_bytes((3000, 64), "bytes").body_bytes == 3000 * 64 * 4


def test_the_response_memory_plot_follows_the_convention():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = tp.sim.response_sweep([1024, 4096], 256)
    fig, ax = plt.subplots()
    assert tp.viz.plot_response_memory(frame, device={1024: 1 << 20, 4096: 1 << 22}, ax=ax) is ax
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "bytes (exact)" in labels and "device: pooling peak" in labels
    assert any("ESTIMATE" in t for t in labels)
    plt.close(fig)
    with pytest.raises(ValueError, match="response_sweep"):
        tp.viz.plot_response_memory(frame.drop(columns="relative_error"))
