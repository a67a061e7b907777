"""What the bad-input checks cost (issue 13): side-by-side ratios, written to a CSV.

- heads: ``check_finite=True`` vs ``False`` on the same bf16 rows (cast to float32, then the
  head), best of N interleaved runs of each;
- token pooling: ``AllPool`` with its input check vs the same call with the check replaced by a
  no-op, one step of many short requests (where a per-request check weighs most).

Run: ``python -m benchmarks.bench_checks [--quick]`` → ``benchmarks/results/checks.csv``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch

import tokpool as tp
from tokpool.pooler import pooling

RESULTS = Path(__file__).parent / "results" / "checks.csv"


def _pair(f: Callable[[], object], g: Callable[[], object], n: int) -> tuple[float, float]:
    """Best-of-``n`` seconds of ``f`` and ``g``, run alternately (noise only adds time)."""
    a = b = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        a = min(a, time.perf_counter() - t0)
        t0 = time.perf_counter()
        g()
        b = min(b, time.perf_counter() - t0)
    return a, b


def _row(what: str, a_name: str, b_name: str, a: float, b: float) -> dict:
    return {"what": what, "a": a_name, "b": b_name, "a_s": a, "b_s": b, "a_over_b": a / b}


def bench_heads(quick: bool) -> list[dict]:
    rows = []
    for n_rows in (1024,) if quick else (4096, 32768):
        x = torch.randn(n_rows, 1024, dtype=torch.bfloat16)
        for cls in (tp.pooler.heads.TokenEmbeddingHead, tp.pooler.heads.TokenClassifierHead):
            on, off = cls(), cls(check_finite=False)
            a, b = _pair(lambda on=on, x=x: on(x), lambda off=off, x=x: off(x),
                         5 if quick else 20)
            rows.append(_row(f"{cls.__name__} [{n_rows}, 1024] bf16", "check_finite=True",
                             "check_finite=False", a, b))
    return rows


def bench_pool_call(quick: bool) -> list[dict]:
    n = 32 if quick else 256
    hidden = torch.randn(8 * n, 1024)
    pool = tp.AllPool()

    def checked():
        pool(hidden, tp.build_metadata([8] * n))

    def unchecked():
        saved = pooling.check_token_call
        pooling.check_token_call = lambda *args: None
        try:
            pool(hidden, tp.build_metadata([8] * n))
        finally:
            pooling.check_token_call = saved

    a, b = _pair(checked, unchecked, 10 if quick else 50)
    return [_row(f"AllPool, one step of {n} requests x 8 tokens (incl. build_metadata)",
                 "with input check", "check replaced by a no-op", a, b)]


def run(quick: bool = False) -> pd.DataFrame:
    torch.set_num_threads(1)
    return pd.DataFrame(bench_heads(quick) + bench_pool_call(quick))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    df = run(quick=args.quick)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(RESULTS, index=False)
    print(df.to_string(index=False))
    print(f"written to {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
