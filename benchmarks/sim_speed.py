"""Issue 49: analytic ``tp.simulate`` against vLLM's own Scheduler, and its cost per engine step.

On random ``token_embed`` traces (prompt lengths uniform in 16..32,768, ``numpy`` seed 0,
every request waiting from step 0) under ``SimConfig()``'s deployment (``vllm serve``'s
defaults: H100 SXM, ``max_num_batched_tokens`` 8192, ``max_num_seqs`` 1024, chunked prefill,
synchronous scheduling, ``clone``):

1. the same 1,000-request trace through ``tp.simulate(mode="analytic")`` and
   ``tp.simulate(mode="analytic", scheduler="vllm")`` (vLLM 0.33.0's V1 ``Scheduler`` driven on
   the CPU), interleaved in this process, best of ``--repeats`` each: the ratio, wall and CPU
   time (and the two step tables compared, exactly);
2. requests per second and the cost per engine step at 1,000, 10,000 and 100,000 requests.

With ``--before PATH`` (a checkout of tokpool, e.g. ``git archive <commit> tokpool | tar -x
-C PATH``) part 2 also runs that checkout in a child process, alternating with this one, so the
before/after ratios come from the same minutes of the machine's load. Every measurement keeps
the 1-minute load average before and after it (the machine's 2 cores are shared). Writes
``benchmarks/results/sim_speed.json``.

    OMP_NUM_THREADS=1 python -m benchmarks.sim_speed [--before /tmp/base] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "sim_speed.json"
TARGETS = {"vs_vllm": 200.0, "requests_per_s_at_load_le_2": 10_000.0, "step_cost_100k_vs_1k": 1.5}
SIZES = (1_000, 10_000, 100_000)


def trace(n: int) -> list[int]:
    """``n`` random token_embed prompt lengths, 16..32,768 (seed 0)."""
    import numpy as np

    return np.random.default_rng(0).integers(16, 32_769, n).tolist()


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def timed(n: int, scheduler: str = "tokpool", repeats: int = 1) -> dict:
    """Best of ``repeats`` analytic runs of the ``n``-request trace: wall and CPU seconds."""
    import tokpool as tp

    lens, cfg = trace(n), tp.SimConfig()
    best: dict = {}
    for _ in range(repeats):
        load0 = _load()
        wall, cpu = time.perf_counter(), time.process_time()
        result = tp.simulate(lens, cfg, mode="analytic", scheduler=scheduler)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        if not best or wall < best["wall_s"]:
            steps = len(result.steps)
            best = {"requests": n, "steps": steps, "wall_s": wall, "cpu_s": cpu,
                    "requests_per_s": n / wall, "requests_per_cpu_s": n / cpu,
                    "us_per_step": 1e6 * wall / steps, "cpu_us_per_step": 1e6 * cpu / steps,
                    "load_before": load0, "load_after": _load()}
    return best


def _child(tree: str, n: int, repeats: int) -> dict:
    """``timed(n)`` for the checkout at ``tree`` (its ``tokpool`` first on the path)."""
    code = (f"import json, sys; sys.path.insert(0, {tree!r}); sys.path.insert(1, {str(ROOT)!r}); "
            f"from benchmarks.sim_speed import timed; print(json.dumps(timed({n}, repeats="
            f"{repeats})))")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKPOOL_MAX_STEPS": "off"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def versus_vllm(n: int, repeats: int) -> dict:
    """Part 1: tokpool's analytic loop and vLLM's scheduler on the same trace, interleaved."""
    import pandas as pd

    import tokpool as tp

    lens, cfg = trace(n), tp.SimConfig()
    ours = tp.simulate(lens, cfg, mode="analytic")
    theirs = tp.simulate(lens, cfg, mode="analytic", scheduler="vllm")  # warms vLLM's config
    pd.testing.assert_frame_equal(ours.steps, theirs.steps, check_exact=True)
    tok, vllm = [], []
    for _ in range(repeats):  # interleaved: the machine's load hits both alike
        tok.append(timed(n, "tokpool"))
        vllm.append(timed(n, "vllm"))
    best_tok = min(tok, key=lambda r: r["wall_s"])
    best_vllm = min(vllm, key=lambda r: r["wall_s"])
    return {"requests": n, "steps": len(ours.steps), "same_step_table": True,
            "tokpool": best_tok, "vllm": best_vllm,
            "ratio_wall": best_vllm["wall_s"] / best_tok["wall_s"],
            "ratio_cpu": best_vllm["cpu_s"] / best_tok["cpu_s"],
            "all_tokpool": tok, "all_vllm": vllm}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="a tokpool checkout to time beside this one")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    os.environ["TOKPOOL_MAX_STEPS"] = "off"  # 100,000 requests are 300,000 records
    sizes = (200, 1_000) if args.quick else SIZES
    report: dict = {
        "deployment": "tp.SimConfig() defaults: vllm serve, H100 SXM, max_num_batched_tokens "
                      "8192, max_num_seqs 1024, chunked prefill, synchronous, policy clone; "
                      "token_embed; the analytic mode (exact bytes; times are this CPU's)",
        "trace": "numpy default_rng(0).integers(16, 32769, n): prompt lengths 16..32,768, all "
                 "arriving at step 0",
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical "
                   f"cores shared with other work; Python {platform.python_version()}",
        "targets": TARGETS,
    }
    report["vs_vllm"] = versus_vllm(sizes[0] if args.quick else 1_000, args.repeats)
    rows = []
    for n in sizes:
        repeats = 1 if n >= 100_000 else args.repeats
        row = {"requests": n, "after": timed(n, repeats=repeats)}
        if args.before:
            row["before"] = _child(args.before, n, repeats)
            row["speedup_wall"] = row["before"]["wall_s"] / row["after"]["wall_s"]
            row["speedup_cpu"] = row["before"]["cpu_s"] / row["after"]["cpu_s"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    report["sizes"] = rows
    first, last = rows[0]["after"], rows[-1]["after"]
    report["step_cost_last_vs_first"] = {
        "wall": last["us_per_step"] / first["us_per_step"],
        "cpu": last["cpu_us_per_step"] / first["cpu_us_per_step"]}
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("step_cost_last_vs_first",)}),
          json.dumps({k: v for k, v in report["vs_vllm"].items() if not k.startswith("all")}))
    return report


if __name__ == "__main__":
    main()
