"""``python scripts/docs_figures.py`` keeps working (the README's pictures come from it)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "docs_figures.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _load():
    spec = importlib.util.spec_from_file_location("docs_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


docs_figures = _load()


def test_the_script_lives_outside_the_package() -> None:
    assert not (SCRIPT.parents[1] / "tokpool" / "docs_figures.py").exists()


def test_simulator_figures_are_written(tmp_path: Path) -> None:
    names = ["task_gate", "ownership_schedule", "memory_vs_prompt_length"]
    written = docs_figures.make_figures(tmp_path, only=names, models=False)
    assert [p.name for p in written] == [f"{n}.png" for n in names]
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in written)


def test_script_runs_from_the_command_line(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--only", "task_gate", "--no-models",
                          "--out", str(tmp_path)], capture_output=True, text=True, check=True)
    assert "wrote" in out.stdout and (tmp_path / "task_gate.png").exists()
    assert "DeprecationWarning" not in out.stderr


def test_model_figures_are_skipped_without_models(tmp_path: Path) -> None:
    assert docs_figures.make_figures(tmp_path, only=["token_pca"], models=False) == []


def test_unknown_figure_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown figure"):
        docs_figures.make_figures(tmp_path, only=["nope"])


def test_the_memory_figure_draws_the_two_reranker_runs_as_simulated() -> None:
    """The listwise prompt and the late-chunked document come from tp.simulate, not typed in:
    65 marker rows x 512 in bf16 delivered; 64 chunk means of a 4,096-wide float32 head."""
    import tokpool as tp

    config = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H100 SXM")
    listwise, chunked = docs_figures.reranker_points(config)
    assert listwise["prompt_len"] == 12_850 and listwise["output_bytes"] == 65 * 512 * 2
    assert chunked["prompt_len"] == 32_768 and chunked["output_bytes"] == 64 * 4096 * 4
    for row in (listwise, chunked):
        assert row["output_bytes"] < row["peak_pooling_bytes"]
    assert "another model" in listwise["label"] and "65 rows" in listwise["label"]
    assert chunked["label"].startswith("Qwen3-Embedding-8B") and "64 rows" in chunked["label"]
