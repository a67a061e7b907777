"""The site's pages beside the explorers: the README's first example, computed at build time,
and the Glossary, read from the README's table (each word, what it means, vLLM's name).
"""

from __future__ import annotations

import html
from pathlib import Path

from ..plots import plot_memory_timeline
from ..plots._style import figure_png
from ..sim import SimConfig, simulate, what_sets_the_peak

__all__ = ["FIRST_EXAMPLE", "first_example", "glossary_rows"]

#: The README's first example, as the page shows it (the lines the page runs below).
FIRST_EXAMPLE = """import tokpool as tp
cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H200")  # model + vLLM's defaults
run = tp.simulate([32_768], cfg, mode="analytic")  # one 32K-token token_embed prompt
print(f"pooling holds {run.peak_pooling_bytes / 2**30:.2f} GiB")
tp.plot_memory_timeline(run)                       # its bytes, step by step
print("\\n".join(run.explain()))
print(tp.sim.what_sets_the_peak(run))"""


def first_example() -> tuple[str, bytes]:
    """The first example run by the library: ``(printed text, the figure as PNG)``."""
    cfg = SimConfig.for_model("Qwen3-Embedding-8B", hardware="H200")
    run = simulate([32_768], cfg, mode="analytic")
    printed = "\n".join([f"pooling holds {run.peak_pooling_bytes / 2**30:.2f} GiB",
                         *run.explain(), what_sets_the_peak(run)])
    png = figure_png(plot_memory_timeline(run).figure)
    return printed, png


def example_body(printed: str, image: str, width: int) -> str:
    """The first example's page body: the code, what it prints, what it draws."""
    return ("<p>The README's first example, run when this site was built: one 32K-token "
            "token_embed prompt on Qwen3-Embedding-8B under vLLM's defaults.</p>"
            f"<pre style='background:#f6f8fa;padding:8px'>{html.escape(FIRST_EXAMPLE)}</pre>"
            f"<h3>It prints</h3><pre id='printed' style='white-space:pre-wrap'>"
            f"{html.escape(printed)}</pre><h3>It draws</h3>"
            f"<div class='figure'><img id='figure' src='{image}' width='{width}' "
            "alt='memory timeline of the first example'></div>")


def glossary_rows(readme: Path) -> list[tuple[str, str, str]]:
    """The README's Glossary table as ``(word, meaning, in vLLM)`` rows (``[]`` without it)."""
    if not readme.is_file():
        return []
    text = readme.read_text(encoding="utf-8")
    if "## Glossary" not in text:
        return []
    section = text.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("word", "") and not set(cells[0]) <= set("-:"):
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def _code(text: str) -> str:
    """Markdown's inline code as <code>, everything else escaped."""
    parts = text.split("`")
    return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else html.escape(p)
                   for i, p in enumerate(parts))


def glossary_body(rows: list[tuple[str, str, str]]) -> str:
    """The Glossary page's body: one table row per word."""
    body = "".join(f"<tr><td><b>{_code(w)}</b></td><td>{_code(m)}</td><td>{_code(v)}</td></tr>"
                   for w, m, v in rows)
    return ("<p>The words the notebooks, figures and messages use, with vLLM 0.33.0's name "
            "(the README's Glossary).</p><table id='glossary' style='border-collapse:collapse;"
            "font-size:14px' cellpadding='4'><tr><th align='left'>word</th><th align='left'>"
            "what it means</th><th align='left'>in vLLM</th></tr>" + body + "</table>")
