"""The README's Python examples run as written (docs that match the code)."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples():
    assert len(python_blocks()) >= 5


@pytest.mark.real_model
def test_readme_examples_run_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples write a trace file
    namespace: dict = {}
    for block in python_blocks():
        exec(compile(block, str(README), "exec"), namespace)
    assert (tmp_path / "run.json").exists()


def test_the_first_example_prints_vllms_default_and_its_parts_as_written(capsys):
    # the first number a researcher copies: vLLM's defaults, the peak as what it is made of
    first = python_blocks()[0]
    exec(compile(first, str(README), "exec"), {})
    out = capsys.readouterr().out
    assert "pooling holds 1.25 GiB" in out and "# pooling holds 1.25 GiB" in first
    said = first.split("tp.sim.what_sets_the_peak(run))  # ", 1)[1].splitlines()[0]
    assert said.removeprefix("...").removesuffix("...").strip() in out
    assert "pooled output 256 MiB + float32 cast 512 MiB + activation 512 MiB" in out
    assert "(docs/first_example.png)" in README.read_text()
    assert (README.parent / "docs" / "first_example.png").exists()


def test_the_glossary_defines_the_words_the_figures_use():
    text = README.read_text()
    glossary = text.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in glossary.splitlines()
            if line.startswith("| ") and not line.startswith("| word")}
    for word in ("MRV2", "STEP pooling", "one-shot", "stranded memory", "as_if", "null block",
                 "chunk cache", "async scheduling", "engine step", "float32 head, activation"):
        assert word in rows, word
        assert rows[word].count("|") == 4  # one line: word, meaning, vLLM's name


def test_the_reranker_picture_numbers_are_what_the_example_computes():
    """The Rerankers tour's two runs (the memory picture's points): held and delivered bytes
    as its comments and its prose say them."""
    import matplotlib

    matplotlib.use("Agg")
    (block,) = [b for b in python_blocks() if "late_chunking_size" in b]
    namespace: dict = {}
    exec(compile(block, str(README), "exec"), namespace)
    listwise, late = namespace["listwise"], namespace["late"]
    held, out = listwise.peak_pooling_bytes, listwise.summary()["output_bytes"]
    assert f"# {held:,} B held, {out:,} B out" in block and out == 65 * 512 * 2
    held, out = late.peak_pooling_bytes, late.summary()["output_bytes"]
    assert f"# {held:,} B held, {out:,} B out" in block
    tour = README.read_text().split("### Rerankers", 1)[1].split("\n## ", 1)[0]
    prose = " ".join(tour.split("The memory picture above", 1)[1].split("```", 1)[0].split())
    from tokpool._text import format_bytes

    said = (f"holds {format_bytes(listwise.peak_pooling_bytes, significant=3)} and delivers "
            f"{listwise.summary()['output_bytes']:,} B",
            f"holds {format_bytes(late.peak_pooling_bytes, significant=3)}, every token's row, "
            f"and delivers {late.summary()['output_bytes'] // 2**20} MiB")
    assert all(s in prose for s in said), (said, prose)
    import matplotlib.pyplot as plt

    plt.close("all")
