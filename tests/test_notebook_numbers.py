"""Every number a notebook states is computed in the same run (``notebook_numbers``).

The static test needs no kernel: every number in a notebook's markdown and shown text is
covered by a claim (or is a name, a version, a section number, or a quote with its source).
The executed test runs each notebook once (shared with ``test_notebooks.py``) and compares each
claim's numbers, at the precision written, with the value its expression computes there.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from notebook_numbers import (
    CLAIMS,
    NOTEBOOK_DIR,
    QUOTED,
    agrees,
    check,
    run_notebook,
    stated_numbers,
    value_of,
)

NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def test_every_notebook_has_a_claims_table() -> None:
    assert sorted(CLAIMS) == [p.stem for p in NOTEBOOKS]
    assert set(QUOTED) <= set(CLAIMS)


def test_numbers_are_read_as_prose_writes_them() -> None:
    text = ("Qwen3-Embedding-8B on an H100 (80 GiB) in float32, vLLM 0.33.0, PR #50931, "
            "notebook 05, rows `0…7`, 9,216 bytes, −1…1, F1 0.456 [0.395, 0.512].")
    assert [n for _, _, n in stated_numbers(text)] == [
        "80", "9,216", "−1", "1", "0.456", "0.395", "0.512"]
    assert [n for _, _, n in stated_numbers("## 4. Several requests\n1. **One buffer**")] == []
    assert value_of("9,216") == (9216.0, 0) and value_of("−1") == (-1.0, 0)
    assert agrees("0.594", 0.59375) and agrees("14", 14.09) and not agrees("23", 0.594)
    assert not agrees("0.456", 0.4575)


def _claims_free(nb: nbformat.NotebookNode, name: str) -> list[str]:
    """Numbers stated but claimed by nothing (values are not needed to see this)."""
    values = dict.fromkeys(CLAIMS[name], "not run")
    uncovered, wrong, _ = check(name, nb, values)
    return uncovered + [w for w in wrong if "stated nowhere" in w]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_every_stated_number_has_a_claim(path: Path) -> None:
    problems = _claims_free(nbformat.read(path, as_version=4), path.stem)
    assert not problems, (
        f"{path.name}: numbers typed without a claim (add the phrase and the expression that "
        "computes it to tests/notebook_numbers.py CLAIMS, or compute it in the notebook):\n"
        + "\n".join(problems))


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_every_stated_number_is_the_computed_one(path: Path) -> None:
    nb, values = run_notebook(path)
    uncovered, wrong, checked = check(path.stem, nb, values)
    assert not uncovered and not wrong, f"{path.name}:\n" + "\n".join(uncovered + wrong)
    expected = sum(len(stated_numbers(p)) for p in CLAIMS[path.stem])
    assert checked >= expected, (path.name, checked, expected)
