"""``make test`` leaves a clean checkout clean: the browser tests write their screenshots and
timings to an output folder, and into ``docs/`` and ``benchmarks/results/`` only with
``TOKPOOL_UPDATE_DOCS=1`` (``make docs-screenshots``). No browser here: the folder choice, the
guard each browser module runs when its tests end, and that those modules can reach the
committed folders only through ``tests/artifacts.py``."""

from __future__ import annotations

import ast
from pathlib import Path

import artifacts as art
import pytest

BROWSER_MODULES = ("test_browser.py", "test_browser_explorers.py")
#: What a browser module may take from tests/artifacts.py: no path to a committed folder.
ALLOWED_IMPORTS = {"Artifacts", "Protected", "artifact_dirs", "updating_docs", "committed_json"}


def test_without_the_switch_nothing_lands_in_a_committed_folder(monkeypatch, tmp_path_factory):
    monkeypatch.delenv(art.UPDATE_DOCS, raising=False)
    monkeypatch.delenv(art.ARTIFACTS, raising=False)
    out = art.artifact_dirs(tmp_path_factory)
    for folder in (out.docs, out.results):
        assert folder.is_dir()
        assert not any(art._inside(folder, c) for c in art.PROTECTED), folder
    assert tmp_path_factory.getbasetemp() in out.docs.parents


def test_tokpool_artifacts_picks_the_folder_and_may_not_be_a_committed_one(
        monkeypatch, tmp_path, tmp_path_factory):
    monkeypatch.delenv(art.UPDATE_DOCS, raising=False)
    monkeypatch.setenv(art.ARTIFACTS, str(tmp_path / "shots"))
    out = art.artifact_dirs(tmp_path_factory)
    assert out.docs == (tmp_path / "shots" / "docs").resolve() and out.results.is_dir()
    for inside in (art.DOCS, art.RESULTS / "x", art.ROOT / "benchmarks" / ".." / "docs"):
        monkeypatch.setenv(art.ARTIFACTS, str(inside))
        with pytest.raises(ValueError, match="TOKPOOL_UPDATE_DOCS=1"):
            art.artifact_dirs(tmp_path_factory)
    monkeypatch.setenv(art.ARTIFACTS, str(art.ROOT))  # the checkout holds both folders
    with pytest.raises(ValueError, match="would write into"):
        art.artifact_dirs(tmp_path_factory)


def test_the_switch_points_at_the_committed_folders(monkeypatch, tmp_path_factory):
    monkeypatch.setenv(art.UPDATE_DOCS, "1")
    assert art.artifact_dirs(tmp_path_factory) == art.Artifacts(art.ROOT / "docs",
                                                                art.ROOT / "benchmarks/results")
    monkeypatch.setenv(art.UPDATE_DOCS, "yes")
    with pytest.raises(ValueError, match="must be 1"):
        art.updating_docs()
    monkeypatch.setenv(art.UPDATE_DOCS, "0")
    assert art.updating_docs() is False


def test_the_guard_names_every_file_written_added_or_removed(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "docs" / "a.png").write_bytes(b"a")
    (tmp_path / "docs" / "gone.png").write_bytes(b"g")
    guard = art.Protected((tmp_path / "docs", tmp_path / "results"), root=tmp_path)
    assert guard.changed() == []
    (tmp_path / "docs" / "a.png").write_bytes(b"ab")
    (tmp_path / "docs" / "gone.png").unlink()
    (tmp_path / "results" / "new.json").write_text("{}")
    assert guard.changed() == ["docs/a.png", "docs/gone.png", "results/new.json"]


def _code_strings(tree: ast.Module) -> list[str]:
    """String constants that are not docstrings."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docstrings]


@pytest.mark.parametrize("module", BROWSER_MODULES)
def test_browser_modules_reach_committed_folders_only_through_the_switch(module):
    """No path of their own to docs/ or benchmarks/results/, only the helpers' folders; and
    the guard runs in each (its own fixture, autouse, in the module's namespace)."""
    source = (Path(__file__).parent / module).read_text()
    tree = ast.parse(source)
    segments = {part for text in _code_strings(tree) for part in text.replace("\\", "/").split("/")}
    assert not segments & {"docs", "benchmarks", "results"}, module
    taken = {alias.name for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and node.module == "artifacts"
             for alias in node.names}
    assert taken and taken <= ALLOWED_IMPORTS, taken - ALLOWED_IMPORTS
    uses_guard = any(isinstance(node, ast.ImportFrom | ast.FunctionDef) and (
        node.name == "_writes_nothing_committed" if isinstance(node, ast.FunctionDef)
        else "_writes_nothing_committed" in {a.name for a in node.names})
        for node in ast.walk(tree))
    assert uses_guard, f"{module} does not run the _writes_nothing_committed guard"
    guard = next(n for n in ast.walk(ast.parse((Path(__file__).parent / BROWSER_MODULES[0])
                                               .read_text()))
                 if isinstance(n, ast.FunctionDef) and n.name == "_writes_nothing_committed")
    assert "autouse=True" in ast.unparse(guard.decorator_list[0])
