"""Four simulator timings of the checkout on PYTHONPATH, as JSON (best of a few runs): used to
compare two checkouts side by side, alternating A B A B in one shell session, e.g. before and
after a restructuring (ratios, not absolute times, are what survive a shared machine):

    for i in 1 2 3; do for tree in ../base ../main; do
        PYTHONPATH=$tree OMP_NUM_THREADS=1 python benchmarks/sim_timings.py; done; done
"""

from __future__ import annotations

import json
import time

import numpy as np

import tokpool as tp


def best(run, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> dict[str, float]:
    sweep_cfg = tp.SimConfig(hidden_size=1024, max_num_batched_tokens=2048, max_num_seqs=64)
    lens = list(range(1000, 201000))
    workload = np.random.default_rng(0).integers(1, 4000, 400).tolist()
    small = tp.SimConfig(hidden_size=64, max_num_batched_tokens=256, max_num_seqs=8)
    return {
        "sweep_closed_form_200k": best(
            lambda: tp.sweep(lens, sweep_cfg, policies=("clone", "prealloc"), progress=False)),
        "analytic_400_requests": best(lambda: tp.simulate(workload, small, mode="analytic")),
        "counting_20k_steps": best(
            lambda: tp.simulate([256 * 20000], small, mode="analytic"), 2),
        "tensor_60_requests": best(
            lambda: tp.simulate(workload[:60], small, mode="tensor"), 2),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
