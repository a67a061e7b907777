"""``python -m tokpool.docs_figures`` keeps working (the README's pictures come from it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokpool import docs_figures

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_simulator_figures_are_written(tmp_path: Path) -> None:
    names = ["task_gate", "ownership_schedule", "memory_vs_prompt_length"]
    written = docs_figures.make_figures(tmp_path, only=names, models=False)
    assert [p.name for p in written] == [f"{n}.png" for n in names]
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in written)


def test_model_figures_are_skipped_without_models(tmp_path: Path) -> None:
    assert docs_figures.make_figures(tmp_path, only=["token_pca"], models=False) == []


def test_unknown_figure_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown figure"):
        docs_figures.make_figures(tmp_path, only=["nope"])
