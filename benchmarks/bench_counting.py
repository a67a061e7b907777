"""Benchmark 3b — the counting engine ("analytic" mode) costs O(steps).

One long request (plus two short ones) at a 16-token budget, so the step count is the prompt
length / 16: the same workload at S and 4·S steps, per policy, under async scheduling with
vLLM's output memory (captured replays) and with eager steps (every view pins its step's
tensor). Each size is the best of ``repeats`` runs, interleaved, so a busy machine hurts both
sizes alike. Target: 4x the steps costs at most 5x the time.
"""

from __future__ import annotations

import gc
import time

import tokpool as tp

POLICIES = ("legacy", "clone", "prealloc", "offload")


def _seconds(prompt_lens, config) -> float:
    gc.collect()
    t0 = time.perf_counter()
    tp.simulate(prompt_lens, config, mode="analytic")
    return time.perf_counter() - t0


def run(quick: bool = False, repeats: int = 3) -> list[dict]:
    small = 1_000 if quick else 5_000
    rows = []
    for memory in ("graph replays", "eager steps"):
        for policy in POLICIES:
            cfg = tp.SimConfig(hidden_size=64, max_num_batched_tokens=16, policy=policy,
                               async_scheduling=True, enforce_eager=memory == "eager steps")
            best = {}
            for _ in range(repeats):
                for steps in (small, 4 * small):
                    t = _seconds([16 * steps, 100, 300], cfg)
                    best[steps] = min(best.get(steps, t), t)
            rows.append({
                "output_memory": memory, "policy": policy, "steps": small,
                "steps_x4": 4 * small, "seconds": best[small], "seconds_x4": best[4 * small],
                "time_ratio": best[4 * small] / best[small],
            })
    return rows
