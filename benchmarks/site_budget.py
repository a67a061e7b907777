"""The static site's budgets, measured: size, states per explorer, build time, browser time.

Builds the full site (``tokpool site``) into a temporary folder, records its size, the states of
each explorer and the build's wall and CPU time (with the machine's load average and CPU count:
the build runs on whatever else the machine does), then opens every page in headless Chromium
from ``file://`` with the network off and moves every control through each of its values: the
time from the control's input event to the picture loaded (``window.tokpoolShown``, measured by
the page itself) is the time a reader waits. Writes ``benchmarks/results/site_budget.json``.

    OMP_NUM_THREADS=1 python -m benchmarks.site_budget            # the full site
    OMP_NUM_THREADS=1 python -m benchmarks.site_budget --sample   # the sample (a smoke run)

Budgets (issue 47): site <= 30 MB, build <= 300 s on 2 cores, any control -> picture <= 100 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "site_budget.json"
BUDGETS = {"size_bytes": 30_000_000, "build_seconds": 300, "control_ms": 100}


def _browser_times(site: Path) -> dict[str, dict[str, float]]:
    sys.path.insert(0, str(ROOT / "tests"))
    from playwright.sync_api import sync_playwright
    from test_browser import CHROMIUM_ARGS, _chromium

    from tokpool.site.states import EXPLORERS

    out: dict[str, dict[str, float]] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(offline=True)
            page = context.new_page()
            for explorer in EXPLORERS:
                page.goto((site / f"{explorer.name}.html").resolve().as_uri())
                n = page.evaluate("document.querySelectorAll('.controls input').length")
                for j in range(n):
                    top = page.evaluate(f"document.querySelectorAll('.controls input')[{j}].max")
                    for v in [*range(1, int(top) + 1), 0]:
                        count = page.evaluate("window.tokpoolShown.length")
                        page.evaluate("""([j, v]) => {
                            const e = document.querySelectorAll('.controls input')[j];
                            e.value = v; e.dispatchEvent(new Event('input')); }""", [j, v])
                        page.wait_for_function(f"window.tokpoolShown.length > {count}")
                times = [t["ms"] for t in page.evaluate("window.tokpoolShown")[1:]]
                out[explorer.name] = {"moves": len(times),
                                      "median_ms": round(statistics.median(times), 2),
                                      "max_ms": round(max(times), 2)}
        finally:
            browser.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", action="store_true", help="the sample site (smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    from tokpool.site import build_site, provenance_line

    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        cpu0 = time.process_time()
        summary = build_site(Path(tmp) / "site", sample=args.sample)
        cpu = time.process_time() - cpu0
        browser = _browser_times(summary.path)
    record = {
        "what": "tokpool site: the full static site" if not args.sample else "the sample site",
        "made_by": provenance_line(),
        "machine": {"cpus": os.cpu_count(), "load_average_before": [round(x, 2) for x in load],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()],
                    "python": platform.python_version(), "platform": platform.platform()},
        "size_bytes": summary.size_bytes, "images": summary.images, "states": summary.states,
        "build_seconds": round(summary.seconds, 1), "build_cpu_seconds": round(cpu, 1),
        "browser": {"engine": "Debian chromium, headless, file://, network off",
                    "per_explorer": browser,
                    "max_ms": max(b["max_ms"] for b in browser.values())},
        "budgets": BUDGETS,
    }
    record["within_budgets"] = (record["size_bytes"] <= BUDGETS["size_bytes"]
                                and record["build_seconds"] <= BUDGETS["build_seconds"]
                                and record["browser"]["max_ms"] <= BUDGETS["control_ms"])
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
