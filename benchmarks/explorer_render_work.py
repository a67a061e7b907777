"""Each explorer control's render work alone: CPU time of one redraw, which load does not
inflate (issue 48). The browser adds the widget round trip and the PNG's transfer on top
(``tests/test_browser_explorers.py`` measures that, in wall time).

Every control of the memory and rerank explorers is moved to each of a few values; each
redraw's CPU time (``time.process_time``) is the best of ``--repeats``, with the rerank
explorer's simulation cache emptied before each redraw (the whole work of a value not seen
before) and again with it kept (a value seen before, or the path control: a redraw only).
Results go to
``benchmarks/results/explorer_render_work.json`` (quoted in the README).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/explorer_render_work.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import tokpool as tp

OUT = Path(__file__).resolve().parent / "results" / "explorer_render_work.json"

#: explorer → control → values it is moved to (the first value is where it goes back).
CONTROLS = {
    "memory": {
        "budget": [4096, 16384, 8192],
        "prompt_len": [(1024, 1 << 20), (1024, 32768)],
        "activation": ["off", "default"],
        "head_dtype": ["same", "default"],
        "hardware": ["H200", "H100 SXM"],
    },
    "rerank": {
        "documents": [400, 100],
        "doc_len": [2048, 512],
        "query_len": [256, 32],
        "stages": ["one", "two"],
    },
}


def _explorer(name: str):
    if name == "memory":
        return tp.memory_explorer(model="Qwen3-Embedding-8B", hardware="H100 SXM")
    return tp.rerank_explorer()


def _clear_caches() -> None:
    from tokpool.late_interaction.simulate_score import _maxsim_plan
    from tokpool.widgets.late_interaction import _both_paths

    _both_paths.cache_clear()
    _maxsim_plan.cache_clear()


def measure(repeats: int, *, cached: bool = False) -> dict:
    out: dict = {}
    for name, controls in CONTROLS.items():
        ex = _explorer(name)
        for control, values in controls.items():
            widget = getattr(ex, control)
            for value in values:  # warm-up: every value once, each must draw
                widget.value = value
                assert ex.error is None, (name, control, value, ex.error)
            worst = 0.0
            for value in values:  # the slowest value, best of repeats each
                times = []
                for _ in range(repeats):
                    widget.value = values[-1] if value != values[-1] else values[0]
                    if not cached:
                        _clear_caches()
                    start = time.process_time()
                    widget.value = value
                    times.append(time.process_time() - start)
                worst = max(worst, min(times))
            out[f"{name}.{control}"] = round(worst, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    result = {"cpu_s_per_redraw_slowest_value": measure(args.repeats),
              "cpu_s_per_redraw_seen_value": measure(args.repeats, cached=True),
              "repeats": args.repeats, "machine": platform.machine(),
              "python": platform.python_version(), "matplotlib": matplotlib.__version__,
              "load_average_before_after": [load_before,
                                            [round(x, 2) for x in os.getloadavg()]],
              "note": "CPU time of the render work alone (process_time), best of repeats, "
                      "the slowest value per control; no browser. slowest_value: caches "
                      "emptied first (a value not seen before); seen_value: caches kept"}
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    seen = result["cpu_s_per_redraw_seen_value"]
    for key, seconds in result["cpu_s_per_redraw_slowest_value"].items():
        print(f"{key:24} {seconds:.3f} s CPU (a value seen before: {seen[key]:.3f} s)")


if __name__ == "__main__":
    main()
