"""Fonts for token labels: Chinese, Japanese, Korean and emoji glyphs instead of boxes.

Matplotlib's DejaVu fonts have no CJK or emoji glyphs: "東京" or "🎉" in a tick label is drawn
as boxes (tofu). Two PyPI packages ship Noto fonts as plain files under the SIL Open Font
License 1.1 — ``manimgx-fonts-cjk`` (Noto Sans CJK) and ``manimgx-fonts`` (Noto Emoji, Noto
Sans Symbols) — and tokpool depends on both. ``font_family(texts)`` registers them with
matplotlib the first time a label needs them and returns a family list that falls back to them
(matplotlib's per-glyph fallback, 3.6+); labels that need no fallback keep the plain family,
which lays out faster. ``missing_glyphs(texts)`` names the characters no font has, so a figure
can say why a box is a box.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from collections.abc import Iterable
from pathlib import Path

#: Fallback fonts: (package, file in it, family name matplotlib registers it under).
FALLBACK_FONTS: tuple[tuple[str, str, str], ...] = (
    ("manimgx_fonts_cjk", "NotoSansCJK-VF.otf.ttc", "Noto Sans CJK SC"),
    ("manimgx_fonts", "NotoEmoji[wght].ttf", "Noto Emoji"),
    ("manimgx_fonts", "NotoSansSymbols[wght].ttf", "Noto Sans Symbols"),
)
#: The pip packages that hold them (named in the figure when they are missing).
FONT_PACKAGES = ("manimgx-fonts-cjk", "manimgx-fonts")


def _package_file(package: str, name: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / name
    return path if path.is_file() else None


@functools.cache
def fallback_families() -> tuple[str, ...]:
    """Register the installed fallback fonts with matplotlib (once) and return their family
    names; empty when neither package is installed.

    The variable fonts' default instance is registered at weight 400 ("normal"): their first
    face calls itself Thin, and matplotlib would log "Failed to find font weight normal" on
    every lookup otherwise.
    """
    from matplotlib import font_manager

    manager = font_manager.fontManager
    families: list[str] = []
    for package, name, family in FALLBACK_FONTS:
        path = _package_file(package, name)
        if path is None:
            continue
        known = {entry.fname for entry in manager.ttflist}
        if str(path) not in known:
            manager.addfont(str(path))
        manager.ttflist[:] = [dataclasses.replace(e, weight=400) if e.fname == str(path)
                              else e for e in manager.ttflist]
        families.append(family)
    cached = getattr(manager, "_findfont_cached", None)  # lookups made before the change
    if cached is not None and hasattr(cached, "cache_clear"):
        cached.cache_clear()
    return tuple(families)


@functools.cache
def _coverage(family: str) -> frozenset[int]:
    """Code points the font matplotlib picks for ``family`` has glyphs for."""
    from matplotlib import font_manager, ft2font

    path = font_manager.findfont(font_manager.FontProperties(family=family),
                                 fallback_to_default=True)
    return frozenset(ft2font.FT2Font(path).get_charmap())


def _needed(texts: Iterable[str]) -> set[str]:
    return {ch for text in texts for ch in text if not ch.isspace() and ord(ch) > 0x7E}


def font_family(texts: Iterable[str], base: str = "monospace") -> str | list[str]:
    """The family to draw ``texts`` in: ``base`` alone when its font has every glyph, else
    ``base`` followed by the fallback fonts (registered on first use)."""
    needed = _needed(texts)
    if not needed or all(ord(ch) in _coverage(base) for ch in needed):
        return base
    return [base, *fallback_families()]


def missing_glyphs(texts: Iterable[str], base: str = "monospace") -> list[str]:
    """Characters of ``texts`` that neither ``base`` nor any fallback font has (drawn as
    boxes), in order of first appearance."""
    families = [base, *fallback_families()] if _needed(texts) else [base]
    covered = [_coverage(f) for f in families]
    seen: dict[str, None] = {}
    for text in texts:
        for ch in text:
            if (not ch.isspace() and ord(ch) > 0x7E and ch not in seen
                    and not any(ord(ch) in c for c in covered)):
                seen[ch] = None
    return list(seen)


def box_note(texts: Iterable[str], base: str = "monospace") -> str:
    """A sentence saying which characters show as boxes and why ("" when none do)."""
    texts = list(texts)
    missing = missing_glyphs(texts, base)
    if not missing:
        return ""
    shown = " ".join(missing[:8]) + (" …" if len(missing) > 8 else "")
    if len(fallback_families()) < len(FALLBACK_FONTS):
        why = (f"install {' and '.join(FONT_PACKAGES)} (pip; tokpool's dependencies) for "
               "Noto's CJK and emoji fonts")
    else:
        why = "no font tokpool ships (DejaVu, Noto Sans CJK, Noto Emoji, Noto Symbols) has them"
    return f"Characters drawn as boxes in the labels: {shown} — {why}."
