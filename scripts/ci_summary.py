"""Close CI's log in one line: every pytest closing line's counts added up, then each stage's
wall time (``.ci/run`` prints ``CI stage: NAME: N s, exit RC`` per stage and keeps them in a
file it passes with ``--stages``)::

    ci: 1520 passed, 0 failed, 40 skipped; install 310 s, make test 1150 s, ..., total 3100 s
"""

from __future__ import annotations

import re
import sys

KINDS = ("passed", "failed", "skipped", "error", "errors", "xfailed", "xpassed")


#: pytest's closing line: counts, then "in 12.3s" (with or without the ``=`` rule around it)
CLOSING = re.compile(r"^=*\s*\d+ (passed|failed|skipped|errors?)\b.* in [\d.]+s")
#: a stage's line from .ci/run
STAGE = re.compile(r"^CI stage: (?P<name>.+): (?P<seconds>\d+) s, exit (?P<rc>\d+)$")


def counts(text: str) -> dict[str, int]:
    """The counts of every pytest closing line in ``text``, added up."""
    total: dict[str, int] = {}
    for line in text.splitlines():
        if CLOSING.match(line.strip()):
            for n, kind in re.findall(r"(\d+) (\w+)", line):
                if kind in KINDS:
                    total[kind] = total.get(kind, 0) + int(n)
    return total


def stages(text: str) -> list[tuple[str, int, int]]:
    """``(name, seconds, exit status)`` of each stage line in ``text``, in order."""
    found = (STAGE.match(line.strip()) for line in text.splitlines())
    return [(m["name"], int(m["seconds"]), int(m["rc"])) for m in found if m]


def summary(text: str, stage_text: str | None = None) -> str:
    """The closing line for the log ``text`` (stage lines from ``stage_text`` where given)."""
    found = counts(text)
    failed = found.get("failed", 0) + found.get("error", 0) + found.get("errors", 0)
    line = (f"ci: {found.get('passed', 0)} passed, {failed} failed, "
            f"{found.get('skipped', 0)} skipped")
    timed = [f"{name} {seconds} s" + ("" if rc == 0 else f" (exit {rc})")
             for name, seconds, rc in stages(text if stage_text is None else stage_text)]
    return line + ("; " + ", ".join(timed) if timed else "")


def _read(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()


def main(argv: list[str]) -> None:
    """``ci_summary.py [--stages FILE] LOG...``: the stage lines from FILE (written as each
    stage ends, so none is still in a pipe), else from the logs."""
    stage_text = None
    if argv[:1] == ["--stages"]:
        stage_text, argv = _read(argv[1]), argv[2:]
    print(summary("\n".join(_read(path) for path in argv), stage_text))


if __name__ == "__main__":
    main(sys.argv[1:])
