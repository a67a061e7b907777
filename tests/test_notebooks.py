"""The notebooks: committed clean, and each runs top to bottom in quick mode (``TOKPOOL_QUICK=1``).

Executed as ``jupyter nbconvert --to html --execute`` does it (nbconvert's ExecutePreprocessor
with its defaults, widget state stored, then the HTML exporter), in a real kernel, from
``notebooks/`` as the working directory, so they behave as they do in JupyterLab. An error in
any cell fails the test with the cell's traceback. In the exported HTML every explorer must show
its static snapshot (figure included) outside any script, so it shows offline, where the widget
library (loaded from a CDN) cannot render. No output may carry warning text.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import nbformat
import pytest
from notebook_numbers import run_notebook

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
EXPECTED = (
    "01_task_gate.ipynb",
    "02_chunked_prefill_ownership.ipynb",
    "03_token_embeddings.ipynb",
    "04_prm_step_rewards.ipynb",
    "05_memory_vs_prompt_length.ipynb",
    "06_late_interaction.ipynb",
)
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))
#: A cell whose displayed value is an explorer (``tp.token_explorer(...)`` or ``explorer``).
EXPLORER_CALL = re.compile(r"tp\.\w+_explorer\(")
PLOT_CALL = re.compile(r"tp\.(viz\.)?plot_")
#: Warning text in an output: a warning class name (``DeprecationWarning``, ``UserWarning``,
#: nbformat's ``MissingIDFieldWarning``...), Python's ``warnings`` line format, a logging
#: library's WARNING level (vLLM's log lines, ``WARNING:name:msg``), or a glog-style line as
#: torch 2.14 logs them (``W1201 18:44:46.838 12345 file.py:6] message``; I/W/E/F levels).
WARNING_TEXT = re.compile(
    r"\b[A-Z]\w*Warning\b|warnings\.warn|^\S+:\d+: |\bWARNING\b|\bWARN\b"
    r"|^[IWEF]\d{4} \d{2}:\d{2}:\d{2}(\.\d+)? +(\d+ +)?\S+:\d+\] ",
    re.MULTILINE)
#: Log lines recorded from the ``scheduler="vllm"`` cell of notebook 02 under torch 2.14.1 (the
#: torch ``make lab`` installs by default), and logging's formats: each must be caught.
RECORDED_LOG_LINES = (
    "W1201 18:44:46.838000 12345 torch/_opaque_base.py:6] torch._opaque_base is deprecated",
    "W1201 18:44:46.838 12345 file.py:6] message",
    "W1201 18:44:47.102000 12345 torch/utils/cpp_extension.py:178] No CUDA runtime is found, "
    "using CUDA_HOME='/usr/local/cuda'",
    "I1201 18:44:46.838 12345 vllm/platforms/__init__.py:230] Automatically detected platform",
    "WARNING:torch.utils.cpp_extension:No CUDA runtime is found",
    "WARNING 12-01 18:44:46 [__init__.py:12] vLLM's own format",
    "/x/vllm/foo.py:12: FutureWarning: deprecated",
)
SCRIPT = re.compile(r"<script\b.*?</script>", re.DOTALL | re.IGNORECASE)
#: Per-notebook execution limit (seconds); quick mode stays far below it.
CELL_TIMEOUT = int(os.environ.get("TOKPOOL_NOTEBOOK_TIMEOUT", "600"))


def test_the_warning_check_recognises_log_formats() -> None:
    for line in RECORDED_LOG_LINES:
        assert WARNING_TEXT.search("some output\n" + line + "\nmore"), line
    for clean in ("2 of 20 positions wrong", "peak 1.25 GiB at 32,768 tokens",
                  "W1201 is not a log line", "steps (request: tokens): [{0: 5}]"):
        assert WARNING_TEXT.search(clean) is None, clean


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def test_the_five_notebooks_exist() -> None:
    present = {p.name for p in NOTEBOOKS}
    missing = [name for name in EXPECTED if name not in present]
    assert not missing, f"missing notebooks: {missing}"


def _committed_text(path: Path) -> str:
    """What git holds for ``path``: the staged blob (``git show :path``, the next commit's
    file; the working copy may carry outputs, the clean filter keeps them out). Outside a git
    checkout, or for a file git does not track yet, the file itself."""
    import subprocess

    root = NOTEBOOK_DIR.parent
    try:
        done = subprocess.run(["git", "show", f":{path.relative_to(root).as_posix()}"],
                              cwd=root, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return path.read_text(encoding="utf-8")
    if done.returncode != 0:
        return path.read_text(encoding="utf-8")
    return done.stdout.decode("utf-8")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_committed_without_outputs(path: Path) -> None:
    text = _committed_text(path)
    nb = nbformat.reads(text, as_version=4)
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert not dirty, (
        f"{path.name}: code cells {dirty} carry outputs or execution counts in git; `make "
        "install` registers the filter that strips them on `git add` (then `git add` it again), "
        "or clear them (JupyterLab: Edit > Clear Outputs of All Cells)"
    )
    nbformat.validate(nb)
    raw = json.loads(text)
    no_id = [i for i, cell in enumerate(raw["cells"]) if "id" not in cell]
    assert not no_id, f"{path.name}: cells {no_id} have no id (nbformat 4.5 needs one per cell)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_starts_with_a_title(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.lstrip().startswith("# "), (
        f"{path.name} must open with a markdown '# Title' cell"
    )


def _run(path: Path, monkeypatch: pytest.MonkeyPatch) -> nbformat.NotebookNode:
    """Execute ``path`` as ``jupyter nbconvert --to html --execute`` does (its defaults), once
    per session: ``test_notebook_numbers.py`` checks the same run's stated numbers."""
    return run_notebook(path)[0]


def _output_types(nb: nbformat.NotebookNode) -> set[str]:
    kinds: set[str] = set()
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            kinds.add(out["output_type"])
            kinds.update(out.get("data", {}))
    return kinds


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_runs_in_quick_mode(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = _run(path, monkeypatch)
    kinds = _output_types(nb)
    assert "error" not in kinds
    assert "image/png" in kinds, f"{path.name} drew no figure"
    for i, cell in enumerate(nb.cells):
        outputs = cell.get("outputs", [])
        for out in outputs:
            text = out.get("text", "") if out["output_type"] == "stream" else ""
            assert "Traceback" not in text, f"{path.name} printed a traceback:\n{text}"
        if cell.cell_type == "code" and PLOT_CALL.search(cell.source):
            shown = any("image/png" in out.get("data", {}) for out in outputs)
            assert shown, f"{path.name}, cell {i}: a plot call displayed no figure"
        for out in outputs:
            text = out.get("text", "") + out.get("data", {}).get("text/plain", "")
            found = WARNING_TEXT.search(text)
            assert found is None, f"{path.name}, cell {i} shows warning text: {text[:600]}"
    # the only widgets are the explorers: no tqdm widget bars, which read "Error displaying
    # widget: model not found" once the notebook is saved and reopened
    widgets = [i for i, cell in enumerate(nb.cells) for out in cell.get("outputs", [])
               if "application/vnd.jupyter.widget-view+json" in out.get("data", {})]
    explorers = [i for i, c in enumerate(nb.cells)
                 if c.cell_type == "code" and EXPLORER_CALL.search(c.source)]
    assert widgets == explorers, f"{path.name}: widget outputs in cells {widgets}"
    _check_export(nb, path)


def _check_export(nb: nbformat.NotebookNode, path: Path) -> None:
    """The HTML of the plain nbconvert command shows each explorer's snapshot, offline."""
    from nbconvert import HTMLExporter

    page, _ = HTMLExporter().from_notebook_node(nb)
    explorers = [c for c in nb.cells if c.cell_type == "code" and EXPLORER_CALL.search(c.source)]
    if explorers:  # the live widgets are stored too (what made the snapshots vanish before)
        assert "application/vnd.jupyter.widget-state+json" in nb.metadata.get("widgets", {})
    # offline, scripts do nothing: what is left is what a reader sees
    visible = SCRIPT.sub("", page)
    snapshots = re.findall(r'<div class="tokpool-static" data-explorer="(\w+)"', visible)
    assert len(snapshots) == len(explorers), (
        f"{path.name}: {len(explorers)} explorer cell(s) but {len(snapshots)} visible static "
        "snapshot(s) in the exported HTML"
    )
    assert not re.search(r"\.tokpool-fallback-\w+\{display:none", visible), (
        f"{path.name}: a snapshot is hidden outside the live widget")
    for name in snapshots:
        block = visible.split(f'data-explorer="{name}"', 1)[1][:400_000]
        assert "data:image/png;base64," in block, f"{path.name}: {name} snapshot has no figure"
    assert "OwnershipExplorer(children=" not in page and "HBox(children=" not in page


@pytest.mark.notebook
def test_plain_nbconvert_command_keeps_the_explorer_snapshot(tmp_path: Path) -> None:
    """The command users type, as typed: ``jupyter nbconvert --to html --execute``."""
    import subprocess
    import sys

    source = tmp_path / "02.ipynb"
    source.write_bytes((NOTEBOOK_DIR / "02_chunked_prefill_ownership.ipynb").read_bytes())
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"} | {"TOKPOOL_QUICK": "1"}
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--execute",
                    str(source)], check=True, env=env, cwd=tmp_path, capture_output=True,
                   timeout=CELL_TIMEOUT)
    visible = SCRIPT.sub("", (tmp_path / "02.html").read_text(encoding="utf-8"))
    assert visible.count('data-explorer="OwnershipExplorer"') == 1
    block = visible.split('data-explorer="OwnershipExplorer"', 1)[1]
    assert "data:image/png;base64," in block[:400_000]
