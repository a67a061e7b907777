"""What a render function returns: HTML, an optional PNG and an optional table.

Render functions are pure (no widgets, no display) so they can be unit-tested and reused in
scripts; explorers copy a ``View`` into their ``HTML``/``Image`` widgets. A ``View`` is also what
you export: ``view.save("fig.png")``, ``view.save("table.csv")``, ``view.save("page.html")``.
"""

from __future__ import annotations

import base64
import html as _html
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .._args import writable_file

#: PNG resolution of every rendered figure (dots per inch): crisp on HiDPI ("retina") screens.
#: Shown at ``DISPLAY_DPI`` CSS pixels per inch, i.e. at half its pixel width.
PNG_DPI = 200
DISPLAY_DPI = 100


def png_size(png: bytes) -> tuple[int, int]:
    """``(width, height)`` in pixels from a PNG's header.

    Raises:
        ValueError: ``png`` is not a PNG.
    """
    if png[:8] != b"\x89PNG\r\n\x1a\n" or len(png) < 24:
        raise ValueError("png is not PNG data (the first 8 bytes are not the PNG signature)")
    width, height = struct.unpack(">II", png[16:24])
    return int(width), int(height)


def table_html(table: Any, *, max_rows: int = 40) -> str:
    """A DataFrame as compact HTML: integer columns as integers, missing values as ``—``."""
    if not isinstance(table, pd.DataFrame):
        return ""
    shown = table.head(max_rows).copy()
    for col in shown.columns:
        values = shown[col]
        if values.dtype.kind == "f" and values.notna().all() and (values % 1 == 0).all():
            shown[col] = values.astype("int64")  # counts stored as floats print as integers
    more = (f"<div style='color:#555;font-size:11px'>first {max_rows} of {len(table)} rows"
            "</div>") if len(table) > max_rows else ""
    body = shown.to_html(index=False, na_rep="—", border=0, float_format=lambda v: f"{v:.4g}")
    return f"<div style='font-family:sans-serif;font-size:12px;overflow-x:auto'>{body}{more}</div>"


@dataclass(frozen=True)
class View:
    """One rendered state of an explorer (what ``explorer.view`` holds).

    Attributes:
        html: self-contained HTML (inline CSS, no script): text, numbers, coloured tokens.
        png: the figure as PNG bytes at ``PNG_DPI``, or ``None``.
        table: a ``pandas.DataFrame`` the view summarises, or ``None``.
        data: the plain values behind the view (for tests and further analysis).

    Example:
        >>> ex = tp.memory_explorer()
        >>> ex.view.save("memory.png")          # the figure, 200 dpi
        PosixPath('memory.png')
        >>> ex.view.save("memory.csv")          # the table behind it
        PosixPath('memory.csv')
        >>> ex.view.save("memory.html")         # text, figure and table in one file
        PosixPath('memory.html')
    """
    html: str
    png: bytes | None = None
    table: Any = None
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.html, str):
            raise TypeError(f"View html must be a str (HTML), got {type(self.html).__name__}")
        if self.png is not None:
            if not isinstance(self.png, bytes | bytearray):
                raise TypeError(f"View png must be PNG bytes or None, got "
                                f"{type(self.png).__name__}")
            png_size(self.png)  # the PNG signature, else ValueError
        if self.table is not None and not isinstance(self.table, pd.DataFrame):
            raise TypeError(f"View table must be a pandas.DataFrame or None, got "
                            f"{type(self.table).__name__} (build one: pd.DataFrame(...))")

    @property
    def display_width(self) -> int | None:
        """CSS pixel width to show ``png`` at (its pixel width scaled to ``DISPLAY_DPI``)."""
        if self.png is None:
            return None
        return round(png_size(self.png)[0] * DISPLAY_DPI / PNG_DPI)

    def img_html(self) -> str:
        """The figure as an inline ``<img>`` (base64 data URI, no external file)."""
        if self.png is None:
            return ""
        b64 = base64.b64encode(self.png).decode("ascii")
        return (f'<img alt="figure" width="{self.display_width}" style="max-width:100%;'
                f'height:auto" src="data:image/png;base64,{b64}">')

    def to_html(self, *, table: bool = True) -> str:
        """Text, figure and (optionally) the table as one self-contained HTML fragment."""
        return self.html + self.img_html() + (table_html(self.table) if table else "")

    def _repr_html_(self) -> str:
        return self.to_html()

    def save(self, path: str | Path) -> Path:
        """Write the view to ``path``, by suffix: ``.png`` (figure), ``.csv`` (table) or
        ``.html`` (a standalone page with text, figure and table).

        Raises:
            ValueError: an unknown suffix, or a part the view does not have.
        """
        path = writable_file("path", path)
        suffix = path.suffix.lower()
        if suffix == ".png":
            if self.png is None:
                raise ValueError("this view has no figure; save it as .html instead")
            path.write_bytes(self.png)
        elif suffix == ".csv":
            if self.table is None:
                raise ValueError("this view has no table; save it as .png or .html instead")
            self.table.to_csv(path, index=False)
        elif suffix in (".html", ".htm"):
            page = (f"<!doctype html><meta charset='utf-8'><title>{_html.escape(path.stem)}"
                    f"</title><body>{self.to_html()}</body>")
            path.write_text(page, encoding="utf-8")
        else:
            raise ValueError(f"cannot save a view as {suffix or 'a file without suffix'!r}; "
                             "use .png, .csv or .html")
        return path
