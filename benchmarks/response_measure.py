"""Run vLLM 0.33.0's own response encoders on a tensor and measure what they build.

``measure(tensor, encoding_format, embed_dtype, endianness, endpoint)`` builds the answer the
way vLLM's API process does and returns ``(data_bytes, peak_host_bytes, body)``:

- ``endpoint="pooling"`` (``/pooling``): ``ServingPooling.request_output_to_pooling_json_response``
  (``float``: ``output.data.tolist()``; ``base64``: ``tensor2binary`` then ``pybase64``) and
  ``create_json_response`` (pydantic ``model_dump`` then ``orjson.dumps``), or
  ``encode_pooling_bytes`` for ``bytes`` / ``bytes_only`` (the streaming response's content);
- ``endpoint="embeddings"`` (the token-embedding endpoint, ``ServingTokenEmbedding.
  _build_response``): the NumPy array handed to ``orjson.dumps(OPT_SERIALIZE_NUMPY)``.

``data_bytes`` is the data alone: ``orjson.dumps`` of what vLLM's encoder returned (the float
list, the NumPy array, the base64 string, quotes excluded) or the raw bytes; the peak is
``tracemalloc``'s (Python objects and NumPy buffers; the output tensor itself arrives from the
engine and is not counted). Used by tests/test_parity_response.py and
benchmarks/fit_response.py. Needs vLLM 0.33.0 and orjson (``make vllm``).
"""

from __future__ import annotations

import tracemalloc
import types

import torch

_M: dict = {}


def _vllm() -> dict:
    if not _M:
        from tokpool.pooler.vllm_bridge import prepare_vllm_environment, quiet_vllm_import

        prepare_vllm_environment()
        with quiet_vllm_import():
            import orjson
            from vllm.entrypoints.pooling.pooling.serving import ServingPooling
            from vllm.entrypoints.pooling.token_embed.serving import ServingTokenEmbedding
            from vllm.entrypoints.pooling.utils import encode_pooling_bytes
            from vllm.outputs import PoolingOutput, PoolingRequestOutput
        _M.update(orjson=orjson, ServingPooling=ServingPooling,
                  ServingTokenEmbedding=ServingTokenEmbedding,
                  encode_pooling_bytes=encode_pooling_bytes, PoolingOutput=PoolingOutput,
                  PoolingRequestOutput=PoolingRequestOutput)
    return _M


def measure(t: torch.Tensor, encoding_format: str = "float", embed_dtype: str = "float32",
            endianness: str = "native", endpoint: str = "pooling") -> tuple[int, int, bytes]:
    """``(data_bytes, peak_host_bytes, response body bytes)`` of one answer holding ``t``."""
    m = _vllm()
    out = m["PoolingRequestOutput"]("r", m["PoolingOutput"](t), [1] * max(1, t.shape[0]), 0,
                                    True)
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        if encoding_format in ("bytes", "bytes_only"):
            content, _items = m["encode_pooling_bytes"]([out], embed_dtype, endianness)
            body = b"".join(content)
            data = len(content[0])
        elif endpoint == "pooling":
            resp = m["ServingPooling"].request_output_to_pooling_json_response(
                None, [out], "id", 0, "m", encoding_format, embed_dtype, endianness)
            body = bytes(resp.body)
            data = None
        else:
            ctx = types.SimpleNamespace(final_res_batch=[out], request_id="id", created_time=0,
                                        model_name="m")
            resp = m["ServingTokenEmbedding"]._build_response(None, ctx)
            body = bytes(resp.body)
            data = None
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    if data is None:  # the data alone, as orjson writes it inside the body
        orjson = m["orjson"]
        if endpoint == "pooling" and encoding_format == "float":
            text = orjson.dumps(t.tolist())
        elif endpoint == "pooling":
            text = orjson.dumps(_base64(t, embed_dtype, endianness))[1:-1]  # no quotes
        else:
            text = orjson.dumps(t.contiguous().numpy(), option=orjson.OPT_SERIALIZE_NUMPY)
        if text not in body:
            raise AssertionError("the data's JSON text is not in vLLM's response body")
        data = len(text)
    return data, peak, body


def _base64(t: torch.Tensor, embed_dtype: str, endianness: str) -> str:
    from vllm.entrypoints.pooling.utils import encode_pooling_output_base64

    out = _vllm()["PoolingRequestOutput"]("r", _vllm()["PoolingOutput"](t), [1], 0, True)
    return encode_pooling_output_base64(out, embed_dtype, endianness)


def answer_values(kind: str, rows: int, width: int, seed: int) -> torch.Tensor:
    """What an answer holds (float32, the engine's head dtype): ``"normalized"`` rows (a
    ``token_embed`` head's L2-normalised embeddings) or ``"probabilities"`` (a
    ``token_classify`` / PRM head's softmax over ``width`` labels; a score per row with
    width 1: a sigmoid)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=g)
    if kind == "normalized":
        return torch.nn.functional.normalize(x, dim=-1)
    if width == 1:
        return torch.sigmoid(x)
    return torch.softmax(x, dim=-1)
