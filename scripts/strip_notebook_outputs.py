"""Git's clean filter for the notebooks: what is committed carries no outputs.

JupyterLab autosaves, so after `make lab` the notebooks in the working copy hold their outputs.
That is the reader's copy and stays as it is; this filter runs where git reads the file into a
commit (``git add``, ``git diff``), as nbstripout does. ``git status`` first compares the file's
size and time stamp, so a notebook that has run is listed as modified while ``git diff`` is
empty (nothing to commit; ``git add`` clears the listing; the README says so). It reads a
notebook on stdin and writes it on stdout without outputs, execution counts, the stored widget
state and the per-run metadata JupyterLab adds (collapsed/scrolled state, execution times, the
kernel's full ``language_info``), in nbformat's own layout. A clean notebook comes out byte for
byte as it went in.

``.gitattributes`` names the filter (``notebooks/*.ipynb filter=tokpool-strip``); ``make
install`` and ``make lab`` register it in the checkout's git config::

    git config filter.tokpool-strip.clean "python3 scripts/strip_notebook_outputs.py"

Where it is not registered (a clone that has not run ``make install``) git ignores the
attribute and commits the file as it is; ``tests/test_notebooks.py`` checks the committed
files either way. Standard library only: git may run it with any Python 3.

    python3 scripts/strip_notebook_outputs.py < in.ipynb > out.ipynb
    python3 scripts/strip_notebook_outputs.py notebooks/*.ipynb   # in place
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: Cell metadata that records a session, not the notebook (JupyterLab, classic, nbclient).
SESSION_CELL_METADATA = ("collapsed", "scrolled", "execution", "ExecuteTime")
#: Notebook metadata that records a session: the widget state of the last run, a trust mark.
SESSION_NOTEBOOK_METADATA = ("widgets", "signature")


def strip(text: str) -> str:
    """The notebook ``text`` (nbformat 4 JSON) without outputs; other text is returned as is.

    The JSON is written as nbformat (and so JupyterLab) writes it: keys sorted, one-space
    indent, non-ASCII kept, a final newline; a clean notebook so written is unchanged.

    Example:
        >>> cell = {"cell_type": "code", "execution_count": 3, "metadata": {"scrolled": True},
        ...         "outputs": [{"output_type": "stream", "name": "stdout", "text": "4"}],
        ...         "source": "2 + 2"}
        >>> out = json.loads(strip(json.dumps({"cells": [cell], "metadata": {},
        ...                                    "nbformat": 4, "nbformat_minor": 5})))
        >>> [out["cells"][0][key] for key in ("outputs", "execution_count", "metadata")]
        [[], None, {}]
    """
    try:
        nb = json.loads(text)
    except ValueError:  # not JSON (a merge conflict, a half-written file): git keeps it as is
        return text
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return text
    for cell in nb["cells"]:
        if not isinstance(cell, dict):
            continue
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        meta = cell.get("metadata")
        if isinstance(meta, dict):
            for key in SESSION_CELL_METADATA:
                meta.pop(key, None)
    meta = nb.get("metadata")
    if isinstance(meta, dict):
        for key in SESSION_NOTEBOOK_METADATA:
            meta.pop(key, None)
        info = meta.get("language_info")
        if isinstance(info, dict) and "name" in info:  # version, mimetype...: the kernel's
            meta["language_info"] = {"name": info["name"]}
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    if not argv:  # the filter: stdin to stdout, bytes as UTF-8 whatever the locale
        text = sys.stdin.buffer.read().decode("utf-8")
        sys.stdout.buffer.write(strip(text).encode("utf-8"))
        return 0
    for name in argv:
        path = Path(name)
        text = path.read_text(encoding="utf-8")
        if (clean := strip(text)) != text:
            path.write_text(clean, encoding="utf-8")
            print(f"stripped {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
