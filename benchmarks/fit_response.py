"""Fit ``tp.response_bytes``'s JSON formulas on vLLM 0.33.0's own encoders (CPU, tracemalloc).

For each endpoint and kind of values (``normalized`` token embeddings, ``probabilities`` from a
classifier head) it runs vLLM's encoders (``benchmarks/response_measure.py``) on ``ANSWERS``
random shapes (1 to 512 rows, 1 to 4,096 columns; base64 over every embed dtype and
endianness), then fits by least squares (relative error):

- the data's JSON text: ``n * (a + b * log2(width))`` (normalized rows: their values shrink as
  the width grows, so the text gains digits), ``n * a`` for probabilities; base64's string is
  exact (``4 * ceil(bytes / 3)``);
- the peak of Python objects and buffers while the answer is built:
  ``data * g + n * e + rows * f``: the data's text and orjson's output buffer go with the
  data, the Python objects (``tolist()``, pydantic's copy) with the values and the rows.
  orjson's buffer doubles as it grows (it is the power of two at or above what was written),
  so where an answer's length falls between two powers of two moves its peak by up to 2x of
  the buffer: the stated error is what the measured answers show (about 0.2 to 0.5). For
  base64, whose string length is exact, ``pow2(8 * data + 128) * g + data * e + f`` follows
  that buffer (it grows to about 8 bytes a character of the string; a few answers land one
  doubling away);

and states each fit's largest relative error over the measured answers of at least
``MIN_VALUES`` values, plus a tenth (``MARGIN``) (larger than that is the fit's domain;
smaller ones get the error over all). Writes ``benchmarks/results/response_fit.json``; the
constants in ``tokpool/sim/vllm_rules/response.py`` are copied from it.

Run: ``python benchmarks/fit_response.py`` (about a minute on one core; needs ``make vllm``).
"""

from __future__ import annotations

import json
import math
import platform
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from response_measure import answer_values, measure

MIN_VALUES = 16_384
OUT = Path(__file__).parent / "results" / "response_fit.json"
WIDTHS = (1, 2, 5, 9, 32, 64, 128, 384, 768, 1024, 2048, 4096)
EMBED_WIDTHS = WIDTHS[4:]  # a token embedding is at least 32 wide
DTYPES = ("float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2")
ANSWERS = 400  # random answers per fit
MARGIN = 1.1  # the stated error: the largest measured one, plus a tenth
BASE64_HEAD = 128  # the response's bytes before the base64 string (about 100)


def _answers(rng: random.Random, kind: str, fmt: str, endpoint: str) -> list[dict]:
    """Random shapes (1 to 512 rows; at most 262,144 values), as tests/test_parity_response.py
    draws them; base64 over every embed dtype and endianness."""
    points = []
    for _ in range(ANSWERS):
        width = rng.choice(WIDTHS if kind != "normalized" else EMBED_WIDTHS)
        rows = rng.randint(1, max(1, min(512, 262_144 // width)))
        dtype = rng.choice(DTYPES) if fmt == "base64" else "float32"
        order = rng.choice(("native", "big", "little")) if fmt == "base64" else "native"
        x = answer_values("normalized" if kind == "any" else kind, rows, width,
                          seed=rng.randrange(1 << 30))
        data, peak, _ = measure(x, fmt, dtype, order, endpoint)
        points.append({"rows": rows, "width": width, "n": rows * width, "data": data,
                       "peak": peak})
    return points


def pow2(x: np.ndarray) -> np.ndarray:
    """The power of two at or above each length (orjson's doubling buffer)."""
    return 2.0 ** np.ceil(np.log2(np.maximum(x, 1)))


def _up(error: float) -> float:
    """An error as stated: the largest measured one plus a tenth (``MARGIN``: answers outside
    the fit's draw land a little past it), rounded UP to 0.001."""
    return math.ceil(float(error) * MARGIN * 1000) / 1000


def _peak_fit(x: np.ndarray, peak: np.ndarray, big: np.ndarray) -> tuple[np.ndarray, float]:
    """Least squares in relative terms over the domain; the coefficients and the max error."""
    coef = np.linalg.lstsq((x / peak[:, None])[big], np.ones_like(peak)[big], rcond=None)[0]
    return coef, float((np.abs(x @ coef - peak) / peak)[big].max())


def _fit(points: list[dict], kind: str, fmt: str) -> dict:
    n = np.array([p["n"] for p in points], float)
    t = np.array([p["rows"] for p in points], float)
    w = np.array([p["width"] for p in points], float)
    d = np.array([p["data"] for p in points], float)
    peak = np.array([p["peak"] for p in points], float)
    if fmt == "base64":
        a, b = 0.0, 0.0
        pred_d = d  # exact: 4 * ceil(bytes / 3)
    elif kind == "normalized":
        a, b = np.linalg.lstsq(np.stack([n, n * np.log2(w)], 1) / d[:, None],
                               np.ones_like(d), rcond=None)[0]
        pred_d = n * (a + b * np.log2(w))
    else:
        a, b = float(d.sum() / n.sum()), 0.0
        pred_d = n * a
    # peak = data * g + n * e + rows * f: the data's text and orjson's doubling buffer go with
    # the data, the Python objects (tolist, pydantic's copy) with the values and the rows
    # base64 (its length exact): orjson reserves room for 8 bytes a character of a string,
    # after the ~100 bytes of envelope before it, in a buffer that doubles:
    # peak = pow2(8 * data + 128) * g + data * e + f
    big = n >= MIN_VALUES
    if fmt == "base64":
        x = np.stack([pow2(8 * d + BASE64_HEAD), d, np.ones_like(d)], 1)
        reserve = 8
    else:  # smooth: the data's text and orjson's buffer with the data, objects with n, rows
        reserve = 0
        x = np.stack([d, n, t], 1)
    (g, e, f), _ = _peak_fit(x, peak, big)
    pred_p = (x if fmt == "base64" else np.stack([pred_d, n, t], 1)) @ np.array([g, e, f])
    rel_d = np.abs(pred_d - d) / d
    rel_p = np.abs(pred_p - peak) / peak
    return {"a": round(float(a), 4), "b": round(float(b), 4), "reserve": reserve,
            "g": round(float(g), 4),
            "e": round(float(e), 4),
            "f": round(float(f), 2),
            "data_error": _up(rel_d[big].max()), "peak_error": _up(rel_p[big].max()),
            "data_error_small": _up(rel_d.max()), "peak_error_small": _up(rel_p.max()),
            "answers": len(points), "answers_in_domain": int(big.sum())}


def main() -> None:
    import orjson
    import vllm

    fits: dict = {}
    rng = random.Random(2026)
    for endpoint, formats in (("pooling", ("float", "base64")), ("embeddings", ("float",))):
        for fmt in formats:
            # base64 does not depend on the values: one fit over every kind ("any")
            for kind in (("any",) if fmt == "base64" else ("normalized", "probabilities")):
                points = _answers(rng, kind, fmt, endpoint)
                fits[f"{endpoint}/{kind}/{fmt}"] = _fit(points, kind, fmt)
                print(endpoint, kind, fmt, fits[f"{endpoint}/{kind}/{fmt}"], flush=True)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({
        "what": "tp.response_bytes JSON fits on vLLM's own encoders (tracemalloc peaks)",
        "vllm": vllm.__version__, "orjson": orjson.__version__,
        "python": platform.python_version(), "machine": platform.machine(),
        "min_values": MIN_VALUES, "fits": fits,
        "note": "float32 answers (the engine's head dtype); base64 data is exact "
                "(4 * ceil(bytes / 3)), its peak fitted on both kinds' shapes ('any')",
    }, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
