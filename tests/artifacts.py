"""Where the browser tests put what they make: screenshots and the explorers' response times.

A plain ``make test`` must leave a clean checkout clean, so by default the screenshots and the
timing JSON go to an output folder: ``$TOKPOOL_ARTIFACTS`` when set, else a folder under pytest's
temporary directory (kept for the last three runs). Only with ``TOKPOOL_UPDATE_DOCS=1``
(``make docs-screenshots``) do they replace the committed ``docs/*.png`` and
``benchmarks/results/explorer_response_times.json``.

``Protected`` snapshots the committed folders so a browser module can check, when its tests are
done, that it wrote nothing there without the switch.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The switch that lets a test run refresh the committed images and timings.
UPDATE_DOCS = "TOKPOOL_UPDATE_DOCS"
#: Where the images and timings go otherwise (default: pytest's temporary folder).
ARTIFACTS = "TOKPOOL_ARTIFACTS"
DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "results"
PROTECTED = (DOCS, RESULTS)


def updating_docs() -> bool:
    """Whether this run may rewrite the committed images and timings (``TOKPOOL_UPDATE_DOCS=1``)."""
    value = os.environ.get(UPDATE_DOCS, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"{UPDATE_DOCS} must be 1 (refresh docs/ and benchmarks/results/) or 0, "
                         f"got {value!r}")
    return value == "1"


@dataclass(frozen=True)
class Artifacts:
    """The folders a browser test writes into: ``docs`` (screenshots), ``results`` (timings)."""

    docs: Path
    results: Path


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def artifact_dirs(tmp_factory) -> Artifacts:
    """The committed folders with ``TOKPOOL_UPDATE_DOCS=1``; otherwise ``docs/`` and
    ``results/`` under ``$TOKPOOL_ARTIFACTS`` or a fresh folder from ``tmp_factory``
    (a ``pytest.TempPathFactory``)."""
    if updating_docs():
        return Artifacts(DOCS, RESULTS)
    chosen = os.environ.get(ARTIFACTS)
    base = Path(chosen).resolve() if chosen else tmp_factory.mktemp("artifacts")
    for folder in PROTECTED:
        if _inside(base, folder) or _inside(folder, base):
            raise ValueError(f"{ARTIFACTS}={chosen} would write into {folder.relative_to(ROOT)}/;"
                             f" set {UPDATE_DOCS}=1 (make docs-screenshots) to refresh the "
                             "committed files, or pick a folder outside docs/ and benchmarks/")
    artifacts = Artifacts(base / "docs", base / "results")
    artifacts.docs.mkdir(parents=True, exist_ok=True)
    artifacts.results.mkdir(parents=True, exist_ok=True)
    return artifacts


def committed_json(name: str) -> dict:
    """The committed ``benchmarks/results/<name>`` ({} if absent): read, never written here."""
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else {}


class Protected:
    """Every file under ``docs/`` and ``benchmarks/results/`` (tracked or not) with its size and
    modification time, to compare after a module's tests: :meth:`changed` lists what was
    written, added or removed since."""

    def __init__(self, folders: tuple[Path, ...] = PROTECTED, root: Path = ROOT) -> None:
        self.folders, self.root = folders, root
        self.before = self._snapshot()

    def _snapshot(self) -> dict[Path, tuple[int, int]]:
        files = {}
        for folder in self.folders:
            for path in folder.rglob("*"):
                if path.is_file():
                    stat = path.stat()
                    files[path] = (stat.st_size, stat.st_mtime_ns)
        return files

    def changed(self) -> list[str]:
        after = self._snapshot()
        return sorted(str(p.relative_to(self.root)) for p in set(self.before) | set(after)
                      if self.before.get(p) != after.get(p))
