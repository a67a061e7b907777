"""Add up every pytest closing line of CI's log into one line: ``ci: N passed, N failed,
N skipped`` (CI prints it after the test and engine layers)."""

from __future__ import annotations

import re
import sys

KINDS = ("passed", "failed", "skipped", "error", "errors", "xfailed", "xpassed")


#: pytest's closing line: counts, then "in 12.3s" (with or without the ``=`` rule around it)
CLOSING = re.compile(r"^=*\s*\d+ (passed|failed|skipped|errors?)\b.* in [\d.]+s")


def counts(text: str) -> dict[str, int]:
    """The counts of every pytest closing line in ``text``, added up."""
    total: dict[str, int] = {}
    for line in text.splitlines():
        if CLOSING.match(line.strip()):
            for n, kind in re.findall(r"(\d+) (\w+)", line):
                if kind in KINDS:
                    total[kind] = total.get(kind, 0) + int(n)
    return total


def main(paths: list[str]) -> None:
    total = dict.fromkeys(("passed", "failed", "skipped"), 0)
    for path in paths:
        with open(path, errors="replace") as f:
            found = counts(f.read())
        total["passed"] += found.get("passed", 0)
        total["failed"] += found.get("failed", 0) + found.get("error", 0) + found.get("errors", 0)
        total["skipped"] += found.get("skipped", 0)
    print(f"ci: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")


if __name__ == "__main__":
    main(sys.argv[1:])
