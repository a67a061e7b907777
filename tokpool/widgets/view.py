"""What a render function returns: HTML, an optional PNG and an optional table.

Render functions are pure (no widgets, no display) so they can be unit-tested and reused in
scripts; explorers copy a ``View`` into their ``HTML``/``Image`` widgets.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class View:
    """One rendered state of an explorer.

    Attributes:
        html: self-contained HTML (inline CSS, no script): text, numbers, coloured tokens.
        png: a figure as PNG bytes, or ``None``.
        table: a ``pandas.DataFrame`` the view summarises, or ``None``.
        data: the plain values behind the view (for tests and further analysis).
    """

    html: str
    png: bytes | None = None
    table: Any = None
    data: dict[str, Any] = field(default_factory=dict)

    def _repr_html_(self) -> str:
        img = ""
        if self.png is not None:
            b64 = base64.b64encode(self.png).decode("ascii")
            img = f'<img alt="figure" style="max-width:100%" src="data:image/png;base64,{b64}">'
        return self.html + img
