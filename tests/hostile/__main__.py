"""``python -m tests.hostile``: every hostile case, each in a forked child with a time and
memory cap; a table of outcomes per area, and (``--json``) every report.

Set ``OMP_NUM_THREADS=1`` in the environment first (the test does): forking after OpenMP has
started its threads can hang the child.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

if os.environ.get("OMP_NUM_THREADS") != "1":  # must precede the torch import
    sys.exit("python -m tests.hostile needs OMP_NUM_THREADS=1 in its environment")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TOKPOOL_QUICK", "1")

from . import cases_issue, properties, surface
from .runner import ACCEPTABLE, OUTCOMES, run_cases, summarise
from .world import World


def extremes(reports) -> list[str]:
    """The slowest refused case and the refused case that took the most memory: seconds,
    the memory it added to the forked process, and that process's peak resident size."""
    refused = [r for r in reports if r["outcome"] == "clear"]
    lines = []
    for what, key in (("slowest refused case", "seconds"),
                      ("most memory of a refused case", "peak_bytes")):
        r = max(refused, key=lambda r, key=key: r.get(key, 0), default=None)
        if r is not None:
            lines.append(f"{what}: [{r['area']}] {r['name'][:100]}: {r['seconds']:.2f} s, "
                         f"+{r.get('peak_bytes', 0) / 2**20:.1f} MiB (peak RSS of its process "
                         f"{r.get('peak_rss', 0) / 2**20:.0f} MiB, "
                         f"{r.get('rss_at_start', 0) / 2**20:.0f} MiB shared at the fork)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.hostile")
    parser.add_argument("--json", help="write every case's report here")
    parser.add_argument("--area", action="append", help="only these areas (repeatable)")
    parser.add_argument("--match", help="only cases whose name contains this")
    parser.add_argument("--examples", type=int, default=None,
                        help="hypothesis examples per property (default: properties.EXAMPLES)")
    parser.add_argument("--workers", type=int, default=2, help="cases run at once (default 2)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    world = World().prepare()
    cases = [*cases_issue.all_cases(world), *surface.all_cases(world)]
    uncovered = surface.every_control_is_covered(world, cases)
    if args.area:
        cases = [c for c in cases if c.area in args.area]
    if args.match:
        cases = [c for c in cases if args.match in c.name]
    names = [(c.area, c.name) for c in cases]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    prepared = time.perf_counter() - start
    def show(report) -> None:
        if not args.quiet and report["outcome"] not in ACCEPTABLE:
            print(f"{report['outcome'].upper():7} [{report['area']}] {report['name']}: "
                  f"{report.get('why', '')} | {report.get('error', '')}: "
                  f"{report.get('message', '')[:300]}", flush=True)

    reports = run_cases(cases, workers=args.workers, on_report=show)
    if not args.area or any(a.endswith("(property)") for a in args.area):
        reports += properties.run_all(world, examples=args.examples, areas=args.area,
                                      workers=args.workers, on_report=show)
    table = summarise(reports)
    width = max(len(a) for a in table) if table else 10
    print(f"{'area':{width}}  cases  " + "  ".join(f"{o:>7}" for o in OUTCOMES))
    for area, row in table.items():
        print(f"{area:{width}}  {row['cases']:5}  " + "  ".join(f"{row[o]:7}" for o in OUTCOMES))
    for line in extremes(reports):
        print(line)
    elapsed = time.perf_counter() - start
    print(f"{len(reports)} cases in {elapsed:.1f} s (fixtures {prepared:.1f} s)")
    if uncovered:
        print(f"explorer controls no case sets: {uncovered}")
    if duplicates:
        print(f"duplicate case names: {duplicates}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"reports": reports, "table": table, "uncovered": uncovered,
                   "duplicates": duplicates, "seconds": elapsed, "extremes": extremes(reports),
                   "cases": len(reports)}, f, indent=1)
    bad = sum(r["outcome"] not in ACCEPTABLE for r in reports)
    return 1 if bad or uncovered or duplicates else 0


if __name__ == "__main__":
    sys.exit(main())
