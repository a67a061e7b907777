"""What a render function returns: HTML, an optional PNG and an optional table.

Render functions are pure (no widgets, no display) so they can be unit-tested and reused in
scripts; explorers copy a ``View`` into their ``HTML``/``Image`` widgets. A ``View`` is also what
you export: ``view.save("fig.png")``, ``"fig.svg"`` or ``"fig.pdf"`` (the figure drawn anew as
vectors), ``view.save("table.csv")`` (with the settings that produced it beside it, in
``table.settings.json``), ``view.save("page.html")``.
"""

from __future__ import annotations

import base64
import html as _html
import json
import platform
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from .._args import writable_file
from .._package import __version__

if TYPE_CHECKING:
    from matplotlib.figure import Figure

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


def captioned_table_html(cells: pd.DataFrame, caption: str) -> str:
    """A table of text cells (index as row headers) with ``caption`` under it."""
    head = "".join(f"<th style='padding:2px 10px'>{_html.escape(str(c))}</th>"
                   for c in cells.columns)
    rows = "".join(
        f"<tr><th style='text-align:left;padding:2px 10px'>{_html.escape(str(i))}</th>"
        + "".join(f"<td style='padding:2px 10px;text-align:right'>{_html.escape(v)}</td>"
                  for v in row)
        + "</tr>"
        for i, row in zip(cells.index, cells.to_numpy(), strict=True)
    )
    return (
        "<table style='font-family:sans-serif;font-size:12px;border-collapse:collapse'>"
        f"<caption style='caption-side:bottom;text-align:left;color:#555;padding-top:4px'>"
        f"{_html.escape(caption)}</caption><tr><th></th>{head}</tr>{rows}</table>"
    )


def _installed(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def provenance() -> dict[str, Any]:
    """The versions a saved result depends on: tokpool, the vLLM release its rules follow,
    the vLLM installed beside it (``None``: none), torch, matplotlib and Python."""
    from ..sim.vllm_rules import VLLM_VERSION  # one place says which vLLM the rules follow

    return {"tokpool": __version__, "vllm_rules": VLLM_VERSION,
            "vllm_installed": _installed("vllm"), "torch": _installed("torch"),
            "matplotlib": _installed("matplotlib"), "python": platform.python_version()}


def _jsonable(value: Any) -> Any:
    """Settings as JSON values: numbers, strings, booleans, lists; anything else as text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        try:
            return _jsonable(value.item())
        except (TypeError, ValueError):
            pass
    return str(value).removeprefix("torch.")


#: The figure formats ``View.save`` writes, with matplotlib's name for each.
VECTOR_FORMATS = {".svg": "svg", ".pdf": "pdf"}


@dataclass(frozen=True)
class View:
    """One rendered state of an explorer (what ``explorer.view`` holds).

    Attributes:
        html: self-contained HTML (inline CSS, no script): text, numbers, coloured tokens.
        png: the figure as PNG bytes at ``PNG_DPI``, or ``None``.
        table: a ``pandas.DataFrame`` the view summarises, or ``None``.
        data: the plain values behind the view (for tests and further analysis).
        settings: what produced the view (model, hardware, flags, ...), written beside every
            saved table and into saved figures and pages, with ``provenance()``'s versions.
        redraw: draws the figure anew as a matplotlib ``Figure`` (for ``.svg``/``.pdf``), or
            ``None`` when the view has only its PNG.

    Example:
        >>> ex = tp.memory_explorer()
        >>> ex.view.save("memory.png")          # the figure, 200 dpi
        PosixPath('memory.png')
        >>> ex.view.save("memory.svg")          # the same figure as vectors (or .pdf)
        PosixPath('memory.svg')
        >>> ex.view.save("memory.csv")          # the table, and memory.settings.json beside it
        PosixPath('memory.csv')
        >>> import json, pathlib
        >>> sorted(json.loads(pathlib.Path("memory.settings.json").read_text()))
        ['saved', 'settings', 'table', 'versions']
        >>> ex.view.save("memory.html")         # text, figure and table in one file
        PosixPath('memory.html')
    """
    html: str
    png: bytes | None = None
    table: Any = None
    data: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    redraw: Callable[[], Figure] | None = field(default=None, repr=False, compare=False)

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
        if not isinstance(self.settings, dict):
            raise TypeError(f"View settings must be a dict, got {type(self.settings).__name__}")
        if self.redraw is not None and not callable(self.redraw):
            raise TypeError("View redraw must be a function that returns a matplotlib Figure, "
                            f"got {type(self.redraw).__name__}")

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
        # at its own size (shrunk, its text would shrink too); a narrow page scrolls sideways
        return (f'<div style="overflow-x:auto;max-width:100%"><img alt="figure" '
                f'width="{self.display_width}" style="max-width:none;height:auto" '
                f'src="data:image/png;base64,{b64}"></div>')

    def to_html(self, *, table: bool = True) -> str:
        """Text, figure and (optionally) the table as one self-contained HTML fragment."""
        return self.html + self.img_html() + (table_html(self.table) if table else "")

    def _repr_html_(self) -> str:
        return self.to_html()

    def record(self) -> dict[str, Any]:
        """What a saved file carries: the view's settings and ``provenance()``'s versions."""
        return {"settings": _jsonable(self.settings), "versions": provenance(),
                "saved": pd.Timestamp.now(tz="UTC").isoformat(timespec="seconds")}

    def settings_html(self) -> str:
        """The settings and versions as one line of small text (saved pages carry it)."""
        record = self.record()
        parts = [f"{k}: {v}" for k, v in record["settings"].items()]
        parts += [f"{k} {v}" for k, v in record["versions"].items() if v is not None]
        return ("<div class='tokpool-settings' style='font-family:sans-serif;font-size:11px;"
                f"color:#555;margin:6px 0'>{_html.escape(' · '.join(parts))}</div>")

    def save(self, path: str | Path) -> Path:
        """Write the view to ``path``, by suffix: ``.png`` (the figure), ``.svg`` or ``.pdf``
        (the figure drawn anew as vectors), ``.csv`` (the table; its settings and versions go
        beside it in ``<name>.settings.json``) or ``.html`` (a standalone page with text,
        figure, table and settings).

        Raises:
            ValueError: an unknown suffix, or a part the view does not have.
        """
        path = writable_file("path", path)
        suffix = path.suffix.lower()
        if suffix == ".png":
            if self.png is None:
                raise ValueError("this view has no figure; save it as .html instead")
            path.write_bytes(self.png)
        elif suffix in VECTOR_FORMATS:
            self._save_vector(path, VECTOR_FORMATS[suffix])
        elif suffix == ".csv":
            if self.table is None:
                raise ValueError("this view has no table; save it as .png or .html instead")
            self.table.to_csv(path, index=False)
            # a sidecar, not comment lines: pd.read_csv(path) still reads the table as it is
            sidecar = path.with_name(f"{path.stem}.settings.json")
            sidecar.write_text(json.dumps({"table": path.name, **self.record()}, indent=1)
                               + "\n", encoding="utf-8")
        elif suffix in (".html", ".htm"):
            page = (f"<!doctype html><meta charset='utf-8'><title>{_html.escape(path.stem)}"
                    f"</title><body>{self.to_html()}{self.settings_html()}</body>")
            path.write_text(page, encoding="utf-8")
        else:
            raise ValueError(f"cannot save a view as {suffix or 'a file without suffix'!r}; "
                             "use .png, .svg, .pdf, .csv or .html")
        return path

    def _save_vector(self, path: Path, fmt: str) -> None:
        if self.redraw is None:
            raise ValueError(f"this view's figure exists only as a PNG; save it as .png"
                             f"{'' if self.png is not None else ' (it has no figure: use .html)'}"
                             f" instead of .{fmt}")
        import matplotlib as mpl

        # with matplotlib, only when a figure is redrawn for svg/pdf
        from ..plots._style import RC, close

        fig = self.redraw()
        record = self.record()
        text = json.dumps({**record["settings"], **record["versions"]})
        # svg: dc metadata; pdf: the document information dictionary
        meta = ({"Title": path.stem, "Description": text} if fmt == "svg"
                else {"Title": path.stem, "Subject": text, "Creator": "tokpool"})
        try:
            with mpl.rc_context({**RC, "svg.hashsalt": "tokpool"}):  # the same file each time
                fig.savefig(path, format=fmt, metadata=meta)
        finally:
            close(fig)
