"""How ranges and sizes are written for a reader, in one place (figures, tables, sentences)."""

from __future__ import annotations


def format_range(start: int, stop: int) -> str:
    """A half-open range ``[start, stop)`` written the way the text and figures write ranges:
    inclusive, ``(0, 8) -> '0–7'`` (rows 0 to 7, both included); one item -> ``'5'``.

    Python slices stay half-open (``rows[0:8]``); every range written for a reader goes
    through this function, so "0–7" means the same thing in every figure and sentence.
    """
    if stop <= start:
        raise ValueError(f"empty range: start={start}, stop={stop}")
    return f"{start}" if stop - start == 1 else f"{start}–{stop - 1}"


def format_bytes(n: float, *, significant: int | None = None) -> str:
    """A byte count in binary units: ``1536 -> '1.50 KiB'`` (two decimals, thousands
    separators: messages and tables), or ``significant`` digits (``1.5 KiB``: axis labels)."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            break
        n /= 1024
    if significant is not None:
        return f"{n:.0f} {unit}" if unit == "B" else f"{n:.{significant}g} {unit}"
    return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
