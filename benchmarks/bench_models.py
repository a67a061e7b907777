"""Benchmark — real models: chunked vs full prefill, pooling overhead, first vs cached load.

Three ratios on SmolLM2-135M (float32, CPU), each measured with both sides in one process:

- ``chunked_vs_full``: wall time of ``encode(task="token_embed", chunk_size=C)`` over the same
  call without chunks, on one T-token prompt (runs interleaved, ratio of medians). Chunking
  re-reads the KV cache and runs the weights once per chunk; the ratio says what that costs.
- ``pooling_overhead``: inside those same runs, seconds in metadata + ``AllPool`` + head over
  seconds in the transformer (the engine loop times both halves of every step).
- ``load``: first load (GGUF dequantization + writing the cache, in a fresh temporary cache
  directory) over a cached load of the same entry, both for ``load_model`` alone and for
  ``load_model`` plus a first 16-token encode (the cached weights are memory-mapped, so the
  first forward pays part of the load). transformers is imported beforehand, so neither side
  pays for it.

Runs use one intra-op thread: on a shared machine a second OpenMP thread that gets descheduled
stalls every op at its barrier (we saw 10x swings), and one thread keeps the ratios stable.
Absolute seconds depend on the machine and its load; read the ratios.
"""

from __future__ import annotations

import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

import tokpool as tp
from tokpool.models import StepTimes

MODEL = "smollm2-135m"
RESULTS = Path(__file__).parent / "results" / "models.csv"


def _row(benchmark: str, case: str, numerator: str, num_s: float, denominator: str,
         den_s: float, repeats: int, **extra) -> dict:
    return {
        "benchmark": benchmark,
        "model": MODEL,
        "case": case,
        "numerator": numerator,
        "numerator_s": num_s,
        "denominator": denominator,
        "denominator_s": den_s,
        "ratio": num_s / den_s if den_s else float("nan"),
        "repeats": repeats,
        **extra,
    }


def bench_prefill(model: tp.models.PoolingModel, *, prompt_len: int, chunk_size: int,
                  repeats: int) -> list[dict]:
    """Chunked vs full wall time, and pooling vs forward time inside the same runs."""
    ids = [1024 + (i % 8192) for i in range(prompt_len)]
    model.encode([ids[:16]], task="token_embed")  # warm-up: page in the mmapped weights
    walls: dict[str, list[float]] = {"full": [], "chunked": []}
    times: dict[str, list[StepTimes]] = {"full": [], "chunked": []}
    for _ in range(repeats):
        for side, chunk in (("full", None), ("chunked", chunk_size)):
            gc.collect()
            steps = StepTimes()
            t0 = time.perf_counter()
            model.encode([ids], task="token_embed", chunk_size=chunk, times=steps)
            walls[side].append(time.perf_counter() - t0)
            times[side].append(steps)
    case = f"T={prompt_len} C={chunk_size} {str(model.dtype).removeprefix('torch.')}"
    rows = [_row("chunked_vs_full", case, "chunked", statistics.median(walls["chunked"]),
                 "full", statistics.median(walls["full"]), repeats,
                 prompt_len=prompt_len, chunk_size=chunk_size)]
    for side in ("full", "chunked"):
        pooling = statistics.median(t.pooling_s for t in times[side])
        forward = statistics.median(t.forward_s for t in times[side])
        rows.append(_row("pooling_overhead", f"{case} {side}", "AllPool+head", pooling,
                         "forward", forward, repeats, prompt_len=prompt_len,
                         chunk_size=chunk_size if side == "chunked" else prompt_len,
                         steps=times[side][0].n_steps))
    return rows


def _load(cache: str) -> tuple[float, float]:
    """Seconds to ``load_model``, and to load plus pool a first 16-token prompt (the weights
    are memory-mapped, so part of a load is paid by the first forward)."""
    t0 = time.perf_counter()
    model = tp.load_model(MODEL, cache_dir=cache)
    loaded = time.perf_counter() - t0
    model.encode([[1024 + i for i in range(16)]], task="token_embed")
    return loaded, time.perf_counter() - t0


def bench_load(repeats: int) -> list[dict]:
    """First load (conversion into a fresh cache) vs cached loads of the same entry."""
    import transformers  # noqa: F401  (imported before timing: neither side pays for it)

    with tempfile.TemporaryDirectory(prefix="tokpool-bench-cache-") as cache:
        first = _load(cache)
        cached = []
        for _ in range(repeats):
            gc.collect()
            cached.append(_load(cache))
    return [
        _row("load", "load_model only", "first (GGUF conversion)", first[0], "cached",
             statistics.median(c[0] for c in cached), repeats),
        _row("load", "load_model + first 16-token encode", "first (GGUF conversion)", first[1],
             "cached", statistics.median(c[1] for c in cached), repeats),
    ]


def run(quick: bool = False, progress: Callable[[str], None] | None = None) -> list[dict]:
    """All three benchmarks; one row per ratio.

    Args:
        quick: 512 tokens in chunks of 128, one repeat (a smoke run); else 2048 in 256, three.
        progress: called with a line before each benchmark.
    """
    say = progress or (lambda _msg: None)
    prompt_len, chunk, repeats = (512, 128, 1) if quick else (2048, 256, 3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # see the module docstring; restored below
    try:
        say(f"{MODEL}: loading (cached)")
        model = tp.load_model(MODEL)
        say(f"{MODEL}: chunked vs full prefill, T={prompt_len}, C={chunk}")
        rows = bench_prefill(model, prompt_len=prompt_len, chunk_size=chunk, repeats=repeats)
        del model
        say(f"{MODEL}: first vs cached load")
        rows.extend(bench_load(repeats=1 if quick else 3))
    finally:
        torch.set_num_threads(threads)
    return [{**row, "threads": 1} for row in rows]


def main(quick: bool = False) -> None:
    import pandas as pd

    df = pd.DataFrame(run(quick=quick, progress=print))
    for column in ("prompt_len", "chunk_size", "steps", "repeats", "threads"):
        df[column] = df[column].astype("Int64")  # NaN-able ints print as ints
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(RESULTS, index=False)
    print(df.drop(columns=["model"]).to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main(quick=os.environ.get("TOKPOOL_QUICK") == "1")
