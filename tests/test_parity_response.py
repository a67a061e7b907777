"""Response parity: ``tp.response_bytes`` against vLLM 0.33.0's own response encoders.

On seeded random shapes (1 to 512 rows, 1 to 4,096 columns), tasks, encoding formats, every
``embed_dtype`` and endianness and both endpoints, vLLM's encoders build the answer
(``benchmarks/response_measure.py``: ``ServingPooling.request_output_to_pooling_json_response``,
``encode_pooling_bytes``, ``ServingTokenEmbedding._build_response``) and ``tracemalloc`` measures
their peak. Bytes formats must be exact: the data's length, and the traced peak equal to the
formula's less the torch cast copy (torch's allocator is not traced) within a few hundred bytes
of Python objects. JSON formats must be within the stated ``relative_error``: the data's text
length and the peak. The counts go to the terminal summary (``parity_count``).

Needs vLLM 0.33.0 and orjson (``make vllm``); the module skips with the reason otherwise.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from sweep_sizes import sample_size

import tokpool as tp
from tokpool.sim.vllm_rules.response import EMBED_DTYPE_BYTES, OUTPUT_DTYPE

pytestmark = pytest.mark.parity

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
try:
    from response_measure import _vllm, answer_values, measure

    _vllm()
except Exception as err:  # vLLM or orjson missing
    pytest.skip(f"response parity skipped: {type(err).__name__}: {err} (`make vllm`)",
                allow_module_level=True)

NUM_SHAPES = sample_size(full=400, sample=120)
WIDTHS = (1, 2, 5, 9, 32, 64, 128, 384, 768, 1024, 2048, 4096)
#: Python objects around the bytes (the request output, the metadata dict): not modelled
OBJECT_SLACK = 1024


def test_response_sizes_equal_vllms_encoders(parity_count):
    rng = random.Random(4646)
    failures = []
    seen: dict[str, int] = {}
    for i in range(NUM_SHAPES):
        task = rng.choice(("token_embed", "token_classify", "prm", "score"))
        width = rng.choice(WIDTHS[4:] if task == "token_embed" else WIDTHS)  # embeddings >= 32
        rows = rng.randint(1, max(1, min(512, 262_144 // width)))
        endpoint = "embeddings" if task == "token_embed" and rng.random() < 0.3 else "pooling"
        fmt = "float" if endpoint == "embeddings" else rng.choice(
            ("float", "base64", "bytes", "bytes_only"))
        dtype = rng.choice(tuple(EMBED_DTYPE_BYTES))
        order = rng.choice(("native", "big", "little"))
        kind = "normalized" if task == "token_embed" else "probabilities"
        x = answer_values(kind, rows, width, seed=i)
        shape = (rows, width) if rng.random() < 0.8 or rows > 1 else (width,)
        if len(shape) == 1:
            x = x[0]
        got = tp.response_bytes(shape, fmt, dtype, order, endpoint=endpoint, task=task)
        data, peak, body = measure(x, fmt, dtype, order, endpoint)
        label = f"{i}: {shape} {fmt} {dtype} {order} {endpoint} {task}"
        if fmt in ("bytes", "bytes_only"):
            # traced: NumPy's byte-swapped copy and the bytes; the torch cast is not traced,
            # and is alive only before tobytes(): the formula's peak less it, or the traced
            cast = got.body_bytes if dtype != OUTPUT_DTYPE else 0
            swapped = order not in ("native", sys.byteorder)
            traced = got.body_bytes * (2 if swapped else 1)
            if data != got.body_bytes or len(body) != data:
                failures.append(f"{label}: {data} bytes (vLLM) vs {got.body_bytes}")
            if not 0 <= peak - traced <= OBJECT_SLACK or got.peak_host_bytes != max(
                    traced, cast + (got.body_bytes if swapped else 0) + (
                        0 if swapped else got.body_bytes)):
                failures.append(f"{label}: peak {peak} (vLLM traced) vs {got.peak_host_bytes} "
                                f"(cast {cast})")
        else:
            err = got.relative_error
            if abs(got.body_bytes - data) > err * data + (0 if fmt == "base64" else 1):
                failures.append(f"{label}: data {data} (vLLM) vs {got.body_bytes} ±{err}")
            if abs(got.peak_host_bytes - peak) > err * peak:
                failures.append(f"{label}: peak {peak} (vLLM) vs {got.peak_host_bytes} ±{err}")
        seen[fmt] = seen.get(fmt, 0) + 1
        seen[endpoint] = seen.get(endpoint, 0) + 1
    parity_count("response answers (sizes as vLLM's encoders build them)",
                 NUM_SHAPES - len(failures))
    parity_count("response differences", len(failures))
    assert not failures, f"{len(failures)} of {NUM_SHAPES}:\n" + "\n".join(failures[:8])
    assert min(seen.get(k, 0) for k in ("float", "base64", "bytes", "bytes_only",
                                        "embeddings")) >= 5, seen


def test_base64_peak_holds_at_a_larger_answer():
    """The base64 peak fit at 8 MiB of float32 bytes (2,048 x 1,024), ten times the fitted
    shapes' largest: within its stated error."""
    x = answer_values("normalized", 2048, 1024, seed=1)
    got = tp.response_bytes((2048, 1024), "base64")
    data, peak, _ = measure(x, "base64")
    assert data == got.body_bytes
    assert abs(got.peak_host_bytes - peak) <= got.relative_error * peak


def test_the_fits_are_the_measured_file():
    """The constants in vllm_rules/response.py are benchmarks/results/response_fit.json's."""
    import json

    from tokpool.sim.vllm_rules.response import _FITS

    measured = json.loads((Path(__file__).parents[1] / "benchmarks" / "results" /
                           "response_fit.json").read_text())["fits"]
    assert {k: {c: v[c] for c in _FITS[k]} for k, v in measured.items()} == _FITS
