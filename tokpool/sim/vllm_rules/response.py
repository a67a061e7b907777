"""The answer itself: what vLLM 0.33.0's API process builds from a pooling output.

After the engine, the API server turns the output tensor into the response
(vllm/entrypoints/pooling/utils.py, vllm/utils/serial_utils.py,
vllm/entrypoints/serve/utils/api_utils.py ``create_json_response``):

- ``encoding_format="float"`` on ``/pooling`` (``endpoint="pooling"``):
  ``encode_pooling_output_float`` -> ``output.data.tolist()``, a Python float object (24 bytes)
  and a list slot per value, copied again by pydantic's ``model_dump``, then ``orjson.dumps``
  writes each value as the shortest text of a float64 (a float32 value: ~17 significant
  digits). The token-embedding endpoint (``endpoint="embeddings"``,
  ``ServingTokenEmbedding._build_response``) hands the NumPy array to ``orjson`` instead
  (``OPT_SERIALIZE_NUMPY``: the float32 shortest text, ~9 digits, no Python objects); it answers
  floats only.
- ``base64``: ``tensor2binary`` (cast to ``embed_dtype``, byte-swapped for a non-native
  ``endianness``, ``tobytes()``), ``pybase64.b64encode`` and ``.decode()``: a string of
  ``4 * ceil(bytes / 3)`` characters, then the JSON response around it.
- ``bytes`` / ``bytes_only``: ``encode_pooling_bytes`` -> ``tensor2binary``: the raw
  ``values * embed_dtype bytes``, streamed (``bytes`` adds a JSON metadata header,
  ``bytes_only`` none).

``response_bytes(shape, ...)`` answers ``.body_bytes`` (the data alone: the JSON text of the
values, the base64 string, or the raw bytes; no response envelope) and ``.peak_host_bytes``
(the API process's most bytes alive at once while it builds the answer, beyond the output
tensor it received). Bytes formats are exact, by formula from the code above: the cast copy
(torch, when ``embed_dtype`` is not the output's dtype), the byte-swapped copy, the ``bytes``
object. JSON float text and the JSON builders' peaks depend on the values and on orjson's
buffers: they are FITS of measurements of vLLM's own functions (``tracemalloc`` over
``benchmarks/response_measure.py``; ``benchmarks/fit_response.py`` writes
``benchmarks/results/response_fit.json``, whose constants are copied below) on the values a
head makes (L2-normalised embedding rows; softmax / sigmoid probabilities), each with its
largest relative error over the measured answers (``.relative_error``). Checked against vLLM's
encoders on random shapes, dtypes and endiannesses in tests/test_parity_response.py.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..._args import as_whole

__all__ = [
    "EMBED_DTYPE_BYTES",
    "ENCODING_FORMATS",
    "ENDIANNESS",
    "RESPONSE_ENDPOINTS",
    "ResponseSize",
    "response_bytes",
]

EncodingFormat = Literal["float", "base64", "bytes", "bytes_only"]
ENCODING_FORMATS: tuple[str, ...] = ("float", "base64", "bytes", "bytes_only")
#: vLLM's ``EMBED_DTYPES`` (vllm/utils/serial_utils.py): bytes per value on the wire.
EMBED_DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2,
                                     "fp8_e4m3": 1, "fp8_e5m2": 1}
ENDIANNESS: tuple[str, ...] = ("native", "big", "little")
RESPONSE_ENDPOINTS: tuple[str, ...] = ("pooling", "embeddings")
#: tasks whose answers are L2-normalised rows; the others answer probabilities / scores
_NORMALIZED_TASKS = ("token_embed", "embed")
_TASKS = ("token_embed", "embed", "token_classify", "classify", "score", "prm")
#: The engine's pooling head dtype (vLLM's default for pooling models): the output's dtype.
OUTPUT_DTYPE = "float32"

#: Answers of at least this many values are the fits' domain (their stated error); smaller
#: ones get the error over every measured answer.
MIN_FIT_VALUES = 16_384
#: benchmarks/results/response_fit.json (vLLM 0.33.0, orjson 3.13.0, CPython 3.11, x86_64;
#: 400 random answers per fit): data = n * (a + b * log2(width)) (base64: exact);
#: peak = data * g + n * e + rows * f (base64: pow2(8 * data + 128) * g + data * e + f, pow2
#: the power of two at or above: orjson's doubling buffer, about 8 bytes a character; a few
#: answers land one doubling away); errors: the largest relative error measured in / out of
#: the domain, plus a tenth.
_FITS: dict[str, dict[str, float]] = {
    "pooling/normalized/float": dict(a=19.7243, b=0.144, g=22.3934, e=-403.2867, f=1151.85,
        data_error=0.002, peak_error=0.343, data_error_small=0.007, peak_error_small=0.61),
    "pooling/probabilities/float": dict(a=22.066, b=0.0, g=6.9944, e=-81.3459, f=526.37,
        data_error=0.061, peak_error=0.455, data_error_small=0.107, peak_error_small=1.458),
    "pooling/any/base64": dict(a=0.0, b=0.0, g=0.9766, e=1.1877, f=639.43, data_error=0.0,
        peak_error=0.513, data_error_small=0.0, peak_error_small=0.959),
    "embeddings/normalized/float": dict(a=10.9985, b=0.1424, g=1.437, e=-1.1485, f=127.0,
        data_error=0.003, peak_error=0.368, data_error_small=0.011, peak_error_small=0.52),
    "embeddings/probabilities/float": dict(a=13.3027, b=0.0, g=1.7126, e=-4.51, f=211.56,
        data_error=0.103, peak_error=0.48, data_error_small=0.195, peak_error_small=1.068),
}


@dataclass(frozen=True)
class ResponseSize:
    """One answer's size on the wire and the API process's peak host memory to build it.

    Attributes:
        shape: the output's shape (``[rows, width]``, or ``[width]``).
        encoding_format, embed_dtype, endianness, endpoint, task: as asked.
        body_bytes: the data alone (the values' JSON text, the base64 string, or the raw
            bytes), without the response envelope.
        peak_host_bytes: the most bytes the API process holds at once while building it,
            beyond the output tensor it received from the engine.
        relative_error: the stated error of an estimate (the fit's largest relative error
            over vLLM's measured answers, body or peak, whichever is larger); 0.0 when exact.
        how: where the numbers come from, one line.
    """

    shape: tuple[int, ...]
    encoding_format: str
    embed_dtype: str
    endianness: str
    endpoint: str
    task: str
    body_bytes: int
    peak_host_bytes: int
    relative_error: float
    how: str

    @property
    def estimated(self) -> bool:
        """Whether the numbers are a fit (``relative_error`` > 0) rather than exact."""
        return self.relative_error > 0


def _choice(name: str, value: object, options: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name}={value!r} is not one vLLM 0.33.0 offers; use one of "
                         f"{list(options)}")
    return value


def _shape(shape: object) -> tuple[int, int, tuple[int, ...]]:
    """``(rows, width, shape)`` of a 1-D or 2-D output shape, refused in words otherwise."""
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise TypeError(f"shape must be the output's shape, (rows, width) or (width,), got "
                        f"{type(shape).__name__}")
    dims = [as_whole(d) for d in shape]
    if not 1 <= len(dims) <= 2 or any(d is None or d < 1 for d in dims):
        raise ValueError(f"shape must be (rows, width) or (width,) of whole numbers >= 1, got "
                         f"{tuple(shape)!r}")
    full = tuple(int(d) for d in dims)  # type: ignore[arg-type]
    rows, width = (1, full[0]) if len(full) == 1 else full
    return rows, width, full


def response_bytes(
    shape: Sequence[int],
    encoding_format: EncodingFormat = "float",
    embed_dtype: str = "float32",
    endianness: str = "native",
    *,
    endpoint: Literal["pooling", "embeddings"] = "pooling",
    task: str = "token_embed",
) -> ResponseSize:
    """The size of one pooling answer and the API process's peak host memory to build it.

    Args:
        shape: the output's shape: ``(prompt_len, width)`` for ``token_embed`` /
            ``token_classify`` / PRM rows, ``(width,)`` for one vector, ``(n_pairs,)`` for
            scores.
        encoding_format: vLLM's ``encoding_format``: ``"float"``, ``"base64"``, ``"bytes"``
            or ``"bytes_only"``.
        embed_dtype: vLLM's ``embed_dtype`` (base64 and bytes formats): ``float32``,
            ``float16``, ``bfloat16``, ``fp8_e4m3``, ``fp8_e5m2``.
        endianness: ``"native"``, ``"big"`` or ``"little"`` (a non-native one is byte-swapped,
            one more copy).
        endpoint: ``"pooling"`` (``/pooling``: float values via ``tolist()``) or
            ``"embeddings"`` (the token-embedding endpoint: NumPy to orjson; floats only).
        task: what the values are (``token_embed`` / ``embed``: L2-normalised rows;
            ``token_classify``, ``classify``, ``score``, ``prm``: probabilities): JSON text
            length depends on them.

    Returns:
        A ``ResponseSize`` (``body_bytes``, ``peak_host_bytes``, ``relative_error``).

    Raises:
        ValueError: an option vLLM does not offer, a bad shape, or a bytes/base64 format on
            the token-embedding endpoint.
        TypeError: a shape that is not a sequence of whole numbers.

    Example:
        >>> r = response_bytes((32_768, 4_096), "bytes")
        >>> r.body_bytes, r.peak_host_bytes, r.relative_error
        (536870912, 536870912, 0.0)
        >>> response_bytes((32_768, 4_096), "bytes", "float16", "big").peak_host_bytes
        536870912
    """
    rows, width, full = _shape(shape)
    fmt = _choice("encoding_format", encoding_format, ENCODING_FORMATS)
    dtype = _choice("embed_dtype", embed_dtype, tuple(EMBED_DTYPE_BYTES))
    order = _choice("endianness", endianness, ENDIANNESS)
    where = _choice("endpoint", endpoint, RESPONSE_ENDPOINTS)
    what = _choice("task", task, _TASKS)
    if where == "embeddings" and fmt != "float":
        raise ValueError(f"encoding_format={fmt!r} on endpoint='embeddings': vLLM 0.33.0's "
                         "token-embedding endpoint answers floats only "
                         "(ServingTokenEmbedding._build_response); use endpoint='pooling' "
                         "for base64 and bytes answers")
    n = rows * width
    if fmt == "float":
        kind = "normalized" if what in _NORMALIZED_TASKS else "probabilities"
        fit = _FITS[f"{where}/{kind}/float"]
        data = n * (fit["a"] + fit["b"] * math.log2(width))
        peak = data * fit["g"] + n * fit["e"] + rows * fit["f"]
        return _estimate(full, fmt, dtype, order, where, what, data, peak, fit, n,
                         f"FIT of vLLM's own {where} float encoder on {kind} values "
                         "(benchmarks/results/response_fit.json)")
    raw, raw_peak = _binary(n, dtype, order)
    if fmt in ("bytes", "bytes_only"):
        return ResponseSize(full, fmt, dtype, order, where, what, raw, raw_peak, 0.0,
                            "exact: tensor2binary's cast, byte swap and tobytes()")
    text = 4 * math.ceil(raw / 3)  # pybase64.b64encode
    fit = _FITS["pooling/any/base64"]
    # orjson reserves 8 bytes a character of the string, after ~100 bytes of envelope, in a
    # buffer that doubles (the power of two at or above)
    buffer = 1 << max(0, (8 * text + 128 - 1).bit_length())
    peak = max(raw_peak, buffer * fit["g"] + text * fit["e"] + fit["f"])
    return _estimate(full, fmt, dtype, order, where, what, text, peak, fit, n,
                     "string exact (4 * ceil(bytes / 3)); peak a FIT of vLLM's base64 "
                     "response (benchmarks/results/response_fit.json)")


def _binary(n: int, dtype: str, order: str) -> tuple[int, int]:
    """``tensor2binary``: ``(bytes, peak)``: the cast (a torch copy unless the output is
    already ``dtype``), then a byte-swapped NumPy copy (non-native order) while the cast is
    alive, then ``tobytes()`` while the swapped copy is alive."""
    size = n * EMBED_DTYPE_BYTES[dtype]
    cast = size if dtype != OUTPUT_DTYPE else 0  # tensor.to(dtype) returns itself if equal
    swapped = size if order not in ("native", sys.byteorder) else 0
    if swapped:
        return size, max(cast + swapped, swapped + size)
    return size, cast + size


def _estimate(full, fmt, dtype, order, where, what, data, peak, fit, n, how) -> ResponseSize:
    small = n < MIN_FIT_VALUES
    error = max(fit["data_error_small" if small else "data_error"],
                fit["peak_error_small" if small else "peak_error"])
    return ResponseSize(full, fmt, dtype, order, where, what, round(data),
                        round(max(peak, data)), float(error),
                        how + ("" if not small else f"; under {MIN_FIT_VALUES:,} values the "
                               "error is the largest over every measured answer"))
