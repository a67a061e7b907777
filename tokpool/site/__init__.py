"""The explorers without a kernel: ``build_site(out)`` writes a static folder (``index.html``,
one page per explorer, the figures beside them) that opens from ``file://`` with no server and
no network. Every state on a page is computed here, at build time, by the ``render_*``
functions the notebooks call; the page's script only chooses which to show.

``tokpool site OUT/`` and ``make site`` build the full site; ``build_site(out, sample=True)``
a small one (the browser test's).
"""

from __future__ import annotations

from .build import SiteSummary, build_site, provenance_line

__all__ = ["SiteSummary", "build_site", "provenance_line"]
