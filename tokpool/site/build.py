"""``build_site(out)``: every explorer's states computed and written as a static folder.

The folder holds ``index.html``, one page per explorer (states inlined as JSON) and ``img/``
(the figures, named by their content's hash, so a picture two states share is stored once).
Links are relative: it opens from ``file://`` and publishes as it is (GitHub Pages: push the
folder to a ``gh-pages`` branch, or point Pages at it).
"""

from __future__ import annotations

import hashlib
import html
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._args import flag
from .._package import __version__
from ..sim import SimConfig
from ..sim.vllm_rules import VLLM_VERSION
from ..widgets.view import DISPLAY_DPI, PNG_DPI, png_size
from .extras import example_body, first_example, glossary_body, glossary_rows
from .figures import FIGURES
from .page import control_spec, explorer_page, index_page, page
from .states import EXPLORERS, shrink_png

__all__ = ["SiteSummary", "build_site", "provenance_line"]


def provenance_line(config: SimConfig | None = None) -> str:
    """The line at the top of every page: tokpool's and vLLM's versions and the deployment
    whose defaults made the states (``SimConfig``'s default unless ``config`` says).

    Example:
        >>> provenance_line(tp.SimConfig(usage="server"))
        'tokpool 0.1.0 · vLLM 0.33.0 · vllm serve defaults'
    """
    usage = (config or SimConfig()).usage
    deployment = "vllm serve defaults" if usage == "server" else "offline LLM defaults"
    return f"tokpool {__version__} · vLLM {VLLM_VERSION} · {deployment}"


@dataclass(frozen=True)
class SiteSummary:
    """What ``build_site`` wrote: the folder, its size, the states per explorer, the time."""
    path: Path
    size_bytes: int
    states: dict[str, int]
    images: int
    seconds: float

    def record(self) -> dict[str, Any]:
        """As JSON-ready data."""
        return {"path": str(self.path), "size_bytes": self.size_bytes, "states": self.states,
                "images": self.images, "seconds": round(self.seconds, 1)}


def _bar(done: int, total: int, t0: float) -> None:
    width = 30
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\rtokpool site [{'#' * filled}{'.' * (width - filled)}] "
                     f"{done}/{total} states, {time.perf_counter() - t0:.0f} s")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def build_site(out: str | Path, *, sample: bool = False, progress: bool = True) -> SiteSummary:
    """Compute every explorer's states and write the static site to ``out``.

    Args:
        out: the folder to write (created; files of the same names are replaced).
        sample: a small grid per explorer (a few states: the tests' site) instead of the
            full one (``make site``).
        progress: a progress bar on stderr.

    Returns:
        ``SiteSummary``: the folder, its size in bytes, states per explorer, images, seconds.

    Raises:
        TypeError: ``sample`` or ``progress`` is not a bool.
        ValueError: ``out`` exists and is not a folder.
    """
    flag("sample", sample)
    flag("progress", progress)
    root = Path(out)
    if root.exists() and not root.is_dir():
        raise ValueError(f"out = {str(root)!r} is a file; pass a folder to write the site into")
    (root / "img").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    header = provenance_line()
    total = sum(e.count(sample) for e in EXPLORERS)
    done = 0
    images: set[str] = set()
    counts: dict[str, int] = {}
    for explorer in EXPLORERS:
        controls = explorer.controls(sample)
        position = [{v: i for i, v in enumerate(c.values)} for c in controls]
        states = []
        for state in explorer.states(sample):
            entry: dict[str, Any] = {
                "k": [position[j][state.key[c.name]] for j, c in enumerate(controls)],
                "html": state.html}
            if state.points is not None:
                entry["p"] = state.points
            if state.png is not None:
                png = shrink_png(state.png)
                name = f"img/{hashlib.sha256(png).hexdigest()[:16]}.png"
                if name not in images:
                    (root / name).write_bytes(png)
                    images.add(name)
                entry["img"] = name
                entry["w"] = round(png_size(state.png)[0] * DISPLAY_DPI / PNG_DPI)
            states.append(entry)
            done += 1
            if progress:
                _bar(done, total, t0)
        counts[explorer.name] = len(states)
        (root / f"{explorer.name}.html").write_text(explorer_page(
            title=explorer.title, header=header, blurb=explorer.blurb,
            controls=[control_spec(c.name, c.label, c.values) for c in controls],
            states=states), encoding="utf-8")
    printed, png = first_example()
    small = shrink_png(png)
    name = f"img/{hashlib.sha256(small).hexdigest()[:16]}.png"
    (root / name).write_bytes(small)
    images.add(name)
    width = round(png_size(png)[0] * DISPLAY_DPI / PNG_DPI)
    (root / "example.html").write_text(page("The README's first example", header,
                                            example_body(printed, name, width)), encoding="utf-8")
    sections = []
    for notebook, caption, draw in FIGURES:
        png = draw()
        small = shrink_png(png)
        name = f"img/{hashlib.sha256(small).hexdigest()[:16]}.png"
        (root / name).write_bytes(small)
        images.add(name)
        width = round(png_size(png)[0] * DISPLAY_DPI / PNG_DPI)
        sections.append(f"<h2 id='{notebook}'>notebooks/{notebook}.ipynb</h2>"
                        f"<p>{html.escape(caption)}</p><div class='figure'>"
                        f"<img src='{name}' width='{width}' alt='{notebook}'></div>")
    (root / "figures.html").write_text(page("The notebooks' key figures", header, (
        "<p>Drawn when this site was built, by the plot functions the notebooks call. "
        "Notebooks 03, 04 and 06 need real model weights and are not here.</p>"
        + "".join(sections))), encoding="utf-8")
    rows = glossary_rows(Path(__file__).resolve().parents[2] / "README.md")
    if rows:  # a checkout (an installed package has no README beside it)
        (root / "glossary.html").write_text(page("Glossary", header, glossary_body(rows)),
                                            encoding="utf-8")
    extra = ("<ul><li><a href='example.html'>The README's first example</a>, run at build "
             "time</li><li><a href='figures.html'>The notebooks' key figures</a></li>"
             + ("<li><a href='glossary.html'>Glossary</a></li>" if rows else "") + "</ul>")
    (root / "index.html").write_text(index_page(header=header, entries=[
        (f"{e.name}.html", e.title, e.blurb, counts[e.name]) for e in EXPLORERS], extra=extra),
        encoding="utf-8")
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return SiteSummary(path=root, size_bytes=size, states=counts, images=len(images),
                       seconds=time.perf_counter() - t0)
