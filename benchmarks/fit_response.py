"""Fit ``tp.response_bytes``'s JSON formulas on vLLM 0.33.0's own encoders (CPU, tracemalloc).

For each endpoint and kind of values (``normalized`` token embeddings, ``probabilities`` from a
classifier head) it runs vLLM's encoders (``benchmarks/response_measure.py``) on shapes from 8 to
2,048 rows and 1 to 8,192 columns, then fits by least squares (relative error):

- the data's JSON text: ``n * (a + b * log2(width))`` (normalized rows: their values shrink as
  the width grows, so the text gains digits), ``n * a`` for probabilities;
- the peak of Python objects and buffers while the answer is built, beyond the data's own
  text: ``n * e + rows * f`` (float), ``L * e + f`` (base64, ``L`` the string's length);

and states each fit's largest relative error over the measured answers of at least
``MIN_VALUES`` values (larger than that is the fit's domain; smaller ones get the error over
all). Writes ``benchmarks/results/response_fit.json``; the constants in
``tokpool/sim/vllm_rules/response.py`` are copied from it.

Run: ``python benchmarks/fit_response.py`` (about a minute on one core; needs ``make vllm``).
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from response_measure import answer_values, measure

MIN_VALUES = 16_384
OUT = Path(__file__).parent / "results" / "response_fit.json"
SHAPES = {
    "normalized": [(t, w) for w in (32, 128, 512, 1024, 2048, 4096, 8192) for t in (8, 32, 64)],
    "probabilities": [(t, w) for w in (1, 2, 5, 9, 32) for t in (64, 512, 2048)],
}


def _fit(points: list[dict], kind: str, fmt: str) -> dict:
    n = np.array([p["n"] for p in points], float)
    t = np.array([p["rows"] for p in points], float)
    w = np.array([p["width"] for p in points], float)
    d = np.array([p["data"] for p in points], float)
    peak = np.array([p["peak"] for p in points], float)
    if fmt == "base64":
        a, b = 0.0, 0.0
        pred_d = d  # exact: 4 * ceil(bytes / 3)
        x = np.stack([d, np.ones_like(d)], 1)
    else:
        if kind == "normalized":
            a, b = np.linalg.lstsq(np.stack([n, n * np.log2(w)], 1) / d[:, None],
                                   np.ones_like(d), rcond=None)[0]
        else:
            a, b = float(d.sum() / n.sum()), 0.0
        pred_d = n * (a + b * np.log2(w))
        x = np.stack([n, t], 1)
    big = n >= MIN_VALUES
    e, f = np.linalg.lstsq((x / peak[:, None])[big], (1 - d / peak)[big], rcond=None)[0]
    pred_p = pred_d + x @ np.array([e, f])
    rel_d = np.abs(pred_d - d) / d
    rel_p = np.abs(pred_p - peak) / peak
    return {"a": round(float(a), 4), "b": round(float(b), 4), "e": round(float(e), 4),
            "f": round(float(f), 2),
            "data_error": round(float(rel_d[big].max()), 4),
            "peak_error": round(float(rel_p[big].max()), 4),
            "data_error_small": round(float(rel_d.max()), 4),
            "peak_error_small": round(float(rel_p.max()), 4),
            "answers": len(points), "answers_in_domain": int(big.sum())}


def main() -> None:
    import orjson
    import vllm

    fits: dict = {}
    for endpoint, formats in (("pooling", ("float", "base64")), ("embeddings", ("float",))):
        for fmt in formats:
            # base64 does not depend on the values: one fit over both kinds' shapes
            groups = ({"any": [s for shapes in SHAPES.values() for s in shapes]}
                      if fmt == "base64" else SHAPES)
            for kind, shapes in groups.items():
                points = []
                for rows, width in shapes:
                    x = answer_values("normalized" if kind == "any" else kind, rows, width,
                                      seed=rows * 7 + width)
                    data, peak, _ = measure(x, fmt, "float32", "native", endpoint)
                    points.append({"rows": rows, "width": width, "n": rows * width,
                                   "data": data, "peak": peak})
                fits[f"{endpoint}/{kind}/{fmt}"] = _fit(points, kind, fmt)
                print(endpoint, kind, fmt, fits[f"{endpoint}/{kind}/{fmt}"])
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
