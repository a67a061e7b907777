"""One prompt, one number per named deployment, wherever a reader meets it (issue 48).

The jina-reranker-v3 prompt (64 documents, 12,850 tokens) and the 32K-token ``token_embed``
prompt on Qwen3-Embedding-8B are quoted in the README's tour and in notebooks 05 and 06. Each
place's number comes from running that place's own calls (the README's code blocks, the
notebook cells' assignments), grouped by the deployment the call configures (usage context,
hardware, budget): one deployment, one number. The default deployment is `vllm serve`'s
(``usage="server"``); the offline ``LLM`` class is named where used (``usage="llm"``).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import matplotlib
import nbformat
import pytest

import tokpool as tp
from tokpool._text import format_bytes

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NOTEBOOKS = ROOT / "notebooks"
JINA_TOKENS, LONG_TOKENS = 12_850, 32_768


def _readme_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def _notebook_calls(name: str, wanted: set[str]) -> dict:
    """Run a notebook's imports and the assignments to ``wanted`` names, cell by cell, in order
    (the notebook's own calls, without its figures and tables)."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    namespace: dict = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source.replace("%config", "#%config"))
        keep = []
        for node in tree.body:
            names = {n.id for t in getattr(node, "targets", ()) for n in ast.walk(t)
                     if isinstance(n, ast.Name)}
            if isinstance(node, ast.Import | ast.ImportFrom) or names & wanted:
                keep.append(node)
        if keep:
            exec(compile(ast.Module(body=keep, type_ignores=[]), name, "exec"), namespace)
    return namespace


def _deployment(config: tp.SimConfig) -> tuple:
    return (config.usage, config.hardware.name, config.max_num_batched_tokens)


@pytest.fixture(scope="module")
def quoted() -> dict[str, dict[tuple, set[int]]]:
    """prompt → deployment → the peak pooling bytes each place computes for it."""
    found: dict[str, dict[tuple, set[int]]] = {"jina": defaultdict(set),
                                                "32K": defaultdict(set)}
    import matplotlib.pyplot as plt

    # the README: its first example (32K token_embed) and the Rerankers tour
    first: dict = {}
    exec(compile(_readme_blocks()[0], str(README), "exec"), first)
    found["32K"][_deployment(first["cfg"])].add(first["run"].peak_pooling_bytes)
    (tour_block,) = [b for b in _readme_blocks() if "late_chunking_size" in b]
    tour: dict = {}
    exec(compile(tour_block, str(README), "exec"), tour)
    found["jina"][_deployment(tour["jina"])].add(tour["listwise"].peak_pooling_bytes)
    # notebook 05: the jina run drawn over the curves, the 32K run drawn by its parts
    nb05 = _notebook_calls("05_memory_vs_prompt_length",
                           {"QUICK", "lens", "vllm_default", "JINA", "jina", "n_docs", "chunk",
                            "listwise", "run_32k"})
    found["jina"][_deployment(nb05["jina"])].add(nb05["listwise"].peak_pooling_bytes)
    found["32K"][_deployment(nb05["vllm_default"])].add(nb05["run_32k"].peak_pooling_bytes)
    # notebook 06: the listwise prompt beside the rerank cost
    nb06 = _notebook_calls("06_late_interaction", {"JINA", "jina", "listwise"})
    found["jina"][_deployment(nb06["jina"])].add(nb06["listwise"].peak_pooling_bytes)
    for ns in (tour, nb05, nb06):
        assert int(ns["listwise"].requests["prompt_len"].iloc[0]) == JINA_TOKENS
    assert first["run"].prompt_lens[0] == nb05["run_32k"].prompt_lens[0] == LONG_TOKENS
    plt.close("all")
    return found


def test_each_prompt_has_one_number_per_deployment(quoted):
    for prompt, by_deployment in quoted.items():
        for deployment, values in by_deployment.items():
            assert len(values) == 1, (prompt, deployment, values)


def test_every_place_uses_vllm_serve_by_default(quoted):
    # no place sets a budget of its own without saying so: all run `vllm serve`'s defaults
    for prompt, by_deployment in quoted.items():
        for usage, _, budget in by_deployment:
            assert usage == "server", prompt
            assert budget == 8192, (prompt, budget)  # `vllm serve` on an H100/H200
    (jina,) = quoted["jina"].values()
    assert format_bytes(next(iter(jina)), significant=3) == "41.1 MiB"
    assert {next(iter(v)) for v in quoted["32K"].values()} == {5 * 2**28}  # 1.25 GiB


def test_the_prose_names_the_deployment_beside_each_number(quoted):
    (served,) = {next(iter(v)) for v in quoted["jina"].values()}
    jina_json = _notebook_calls("05_memory_vs_prompt_length", {"JINA"})["JINA"]
    prompts = tp.late_interaction.listwise.listwise_prompts(
        [135], [190] * 64, template_tokens=JINA_TOKENS - 64 * 191 - 136)
    offline = tp.SimConfig.from_hf_config(jina_json, hardware="H100 SXM", usage="llm")
    llm = tp.simulate(prompts, offline, mode="analytic").peak_pooling_bytes  # the LLM class
    tour = " ".join(README.read_text().split("### Rerankers", 1)[1].split("```", 2)[2]
                    .split("```", 1)[0].split())
    nb05 = nbformat.read(NOTEBOOKS / "05_memory_vs_prompt_length.ipynb", as_version=4)
    prose05 = " ".join(" ".join(c.source for c in nb05.cells if c.cell_type == "markdown")
                       .split())
    for text in (tour, prose05):
        served_at = text.index(f"holds {format_bytes(served, significant=3)}")
        assert "`vllm serve`" in text[max(0, served_at - 200):served_at], text[:300]
        llm_at = text.index(f"holds {format_bytes(llm, significant=3)}")
        assert "`LLM` class" in text[max(0, llm_at - 200):llm_at]
    nb06 = nbformat.read(NOTEBOOKS / "06_late_interaction.ipynb", as_version=4)
    (cell,) = [c for c in nb06.cells if "JinaForRanking" in c.source and c.cell_type == "code"]
    assert "vllm serve" in cell.source and "max_num_batched_tokens" not in cell.source
