"""Execute notebooks top to bottom and save them as self-contained HTML (``tokpool report``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

QUICK_ENV = "TOKPOOL_QUICK"


def execute_notebook(path: str | Path, *, quick: bool = False, timeout: int = 1800,
                     cwd: str | Path | None = None):
    """Run one notebook in a fresh kernel and return the executed ``nbformat`` node.

    Args:
        path: the ``.ipynb`` file.
        quick: set ``TOKPOOL_QUICK=1`` for the kernel (small prompts, fewer points).
        timeout: seconds allowed per cell.
        cwd: working directory of the kernel (default: the notebook's folder).

    Raises:
        nbclient.exceptions.CellExecutionError: a cell failed (the message shows which).
    """
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    previous = os.environ.get(QUICK_ENV)
    os.environ[QUICK_ENV] = "1" if quick else "0"
    try:  # the kernel inherits this process's environment
        # each explorer shows its static snapshot as its own HTML output (see
        # widgets.base); the widget state is not stored, so the page carries no copy of
        # every figure in widget JSON that only a CDN-loaded widget library could show
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(cwd or path.parent)}},
                                store_widget_state=False)
        client.execute()
    finally:
        if previous is None:
            os.environ.pop(QUICK_ENV, None)
        else:
            os.environ[QUICK_ENV] = previous
    return nb


def execute_notebooks(
    notebooks: str | Path = "notebooks",
    out_dir: str | Path = "reports",
    *,
    quick: bool = False,
    timeout: int = 1800,
    progress: Callable[[str], None] | None = None,
) -> list[Path]:
    """Execute every notebook in ``notebooks`` (sorted) and write ``out_dir/<name>.html``.

    Returns:
        The HTML files written.

    Raises:
        FileNotFoundError: no notebooks found.
    """
    from nbconvert import HTMLExporter

    folder = Path(notebooks)
    paths = sorted(folder.glob("*.ipynb")) if folder.is_dir() else [folder]
    paths = [p for p in paths if p.exists()]
    if not paths:
        raise FileNotFoundError(f"no notebooks found at {folder}; pass --notebooks DIR")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter()
    written = []
    for path in paths:
        if progress:
            progress(f"executing {path.name}{' (quick)' if quick else ''} ...")
        nb = execute_notebook(path, quick=quick, timeout=timeout)
        html, _ = exporter.from_notebook_node(nb)
        target = out / f"{path.stem}.html"
        target.write_text(html, encoding="utf-8")
        written.append(target)
    return written
