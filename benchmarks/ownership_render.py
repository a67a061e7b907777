"""The ownership explorer's redraw, before and after, side by side in one run (ratios).

``render_ownership`` of a git ref (default ``main``) is loaded from ``git show`` as a module
beside this checkout's, and both draw every value the explorer's controls take in notebook 02
(workload 20, 6, 9; legacy), alternating A B A B; each time is the best of ``--repeats``.
CPU time of this process (``time.process_time``) is reported beside wall time: on a shared
machine other processes inflate wall time, not our CPU time. The browser adds the widget round
trip and the PNG's transfer on top (``tests/test_browser_explorers.py`` measures that).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/ownership_render.py --before main
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from tokpool.widgets.ownership import render_ownership

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = [20, 6, 9]
BASE = {"max_num_batched_tokens": 16, "policy": "legacy"}
#: control -> the settings it takes (each drawn from BASE with that one change)
CONTROLS: dict[str, list[dict]] = {
    "tokens per step": [{"max_num_batched_tokens": b} for b in (2, 3, 4, 8, 12, 16, 64)],
    "async scheduling": [{"async_scheduling": True}],
    "chunked prefill": [{"enable_chunked_prefill": False, "max_num_batched_tokens": 20}],
    "policy": [{"policy": p} for p in ("clone", "prealloc", "offload")],
    "vLLM's head": [{"vllm_head": True}],
}


def load_before(ref: str):
    """``render_ownership`` as it is at git ``ref``, as a module of this package."""
    source = subprocess.run(["git", "show", f"{ref}:tokpool/widgets/ownership.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    name = "tokpool.widgets._ownership_before"
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "tokpool.widgets"
    sys.modules[name] = module
    exec(compile(source, f"{ref}:tokpool/widgets/ownership.py", "exec"), module.__dict__)
    return module.render_ownership


def best(render, settings: dict, repeats: int) -> tuple[float, float]:
    """(CPU s, wall s), each the best of ``repeats``."""
    cpu, wall = [], []
    for _ in range(repeats):
        c, w = time.process_time(), time.perf_counter()
        render(WORKLOAD, **(BASE | settings))
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return min(cpu), min(wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="main", help="git ref of the 'before' code")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    before = load_before(args.before)
    for render in (before, render_ownership):  # warm: imports, fonts, first simulate
        render(WORKLOAD, **BASE)
    print(f"{'control':18} {'setting':32} {'before cpu':>10} {'after cpu':>9} {'ratio':>6} "
          f"{'before wall':>11} {'after wall':>10}")
    worst = {"before": 0.0, "after": 0.0}
    for control, values in CONTROLS.items():
        for settings in values:
            b = best(before, settings, args.repeats)
            a = best(render_ownership, settings, args.repeats)
            worst["before"], worst["after"] = max(worst["before"], b[0]), max(worst["after"],
                                                                              a[0])
            label = ", ".join(f"{k}={v}" for k, v in settings.items())
            print(f"{control:18} {label[:32]:32} {b[0]:10.3f} {a[0]:9.3f} {a[0] / b[0]:6.2f} "
                  f"{b[1]:11.3f} {a[1]:10.3f}")
    print(f"worst CPU time: before {worst['before']:.3f} s, after {worst['after']:.3f} s "
          f"(ratio {worst['after'] / worst['before']:.2f})")


if __name__ == "__main__":
    main()
