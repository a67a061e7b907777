"""Benchmark 3 — simulator speed.

* Analytic sweep throughput: points (prompt length × policy × scheduling mode) per second.
* Tensor mode against the pooling it wraps: ``tp.simulate(mode="tensor")`` versus replaying the
  same schedule calling ``AllPool`` alone (metadata built per step, nothing else), and versus the
  minimal engine (the same source filling the buffer, AllPool, the host copy), run interleaved.
  The gap is the simulator's own work: the exact reference, the two oracle comparisons and the
  storage-level ledger.
"""

from __future__ import annotations

import gc
import statistics
import time

import torch

import tokpool as tp
from tokpool.sim.schedule.scheduler import schedule
from tokpool.sim.simulation import default_source


def sweep_throughput(quick: bool = False) -> dict:
    lens = list(range(1_000, 1_000 + (20_000 if quick else 400_000)))
    config = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H200")
    policies, modes = ("clone", "prealloc", "offload"), (False, True)
    tp.sweep(lens[:1000], config, policies=policies, async_scheduling=modes, progress=False)
    t0 = time.perf_counter()
    df = tp.sweep(lens, config, policies=policies, async_scheduling=modes, progress=False)
    seconds = time.perf_counter() - t0
    return {"points": len(df), "seconds": seconds, "points_per_s": len(df) / seconds}


def _replay_allpool(lens, config, steps, buffer, *, fill_source=None, host_copy=False) -> float:
    pool = tp.AllPool(enable_chunked_prefill=config.enable_chunked_prefill,
                      async_scheduling=config.async_scheduling, policy=config.policy)
    states: dict[int, tp.PoolingStates] = {}
    elapsed = 0.0
    for step in steps:
        n = sum(b - a for _, a, b in step.chunks)
        hidden = buffer[:n]
        t0 = time.perf_counter()
        if fill_source is not None:
            fill_source.fill(hidden, step.chunks)
        batch = [r for r, _, _ in step.chunks]
        for r, a, _ in step.chunks:
            if a == 0:
                states[r] = tp.PoolingStates()
        meta = tp.build_metadata([lens[r] for r in batch],
                                 num_scheduled_tokens=[b - a for _, a, b in step.chunks],
                                 seq_lens=[b for _, _, b in step.chunks],
                                 states=[states[r] for r in batch])
        outs = pool(hidden, meta)
        if host_copy:
            for out in outs:
                if out is not None:
                    torch.empty(out.shape, dtype=out.dtype).copy_(out)
        elapsed += time.perf_counter() - t0
    return elapsed


def tensor_mode_overhead(quick: bool = False, repeats: int = 5) -> list[dict]:
    workloads = {
        "one 32k prompt": [32_768],
        "mixed batch": [20_000, 5_000, 3_000, 9_000, 700],
    }
    if quick:
        workloads = {"mixed batch": [6_000, 1_500, 700]}
    rows = []
    for name, lens in workloads.items():
        for policy in ("clone", "prealloc"):
            config = tp.SimConfig(hidden_size=1024, dtype="float32",
                                  max_num_batched_tokens=2048, policy=policy,
                                  async_scheduling=True)
            steps = schedule(lens, max_num_batched_tokens=config.max_num_batched_tokens,
                             max_num_seqs=config.max_num_seqs, enable_chunked_prefill=True)
            buffer = torch.randn(config.max_num_batched_tokens, config.width)
            source = default_source(config)
            source.prepare(lens)
            times: dict[str, list[float]] = {"sim": [], "allpool": [], "engine": []}
            for _ in range(repeats):
                gc.collect()
                t0 = time.perf_counter()
                tp.simulate(lens, config, mode="tensor")
                times["sim"].append(time.perf_counter() - t0)
                gc.collect()
                times["allpool"].append(_replay_allpool(lens, config, steps, buffer))
                gc.collect()
                times["engine"].append(_replay_allpool(lens, config, steps, buffer,
                                                       fill_source=source, host_copy=True))
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append({
                "workload": name, "policy": policy, "tokens": sum(lens),
                "sim_ms": med["sim"] * 1e3, "allpool_ms": med["allpool"] * 1e3,
                "engine_ms": med["engine"] * 1e3,
                "sim_vs_allpool": med["sim"] / med["allpool"],
                "sim_vs_engine": med["sim"] / med["engine"],
            })
    return rows


def run(quick: bool = False) -> dict:
    return {"sweep": sweep_throughput(quick), "tensor": tensor_mode_overhead(quick)}


if __name__ == "__main__":
    import pandas as pd

    out = run(quick=True)
    print(out["sweep"])
    print(pd.DataFrame(out["tensor"]).to_string())
