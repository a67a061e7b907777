"""Parity for a model named by its Hub id: ``vllm serve <id> ...`` lines resolve in tokpool
(``SimConfig.from_vllm_args``) as vLLM 0.33.0's own serve parser and ``create_engine_config``
resolve them, from the SAME test-built Hub cache, offline (``hub_cache.py``).

vLLM runs in a subprocess (``hub_serve_facts.py``) whose environment points ``HF_HUB_CACHE``
at the cache with ``HF_HUB_OFFLINE=1`` before it imports anything (huggingface_hub, transformers
and vLLM read both when imported). Fields compared: max_model_len, max_num_batched_tokens,
max_num_seqs, chunked prefill, prefix caching, the selected pooling task, dtype, head dtype,
attention type, the runner (vLLM's CPU platform: tokpool's ``hardware="CPU"``).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hub_cache import MODELS, build_hub_cache

from tokpool.sim import SimConfig
from tokpool.sim.vllm_run import vllm_scheduler_unavailable_reason

pytestmark = pytest.mark.parity

_reason = vllm_scheduler_unavailable_reason()
if _reason is not None:
    pytest.skip(f"Hub-id parity skipped: {_reason}", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
FLAG_SETS = (
    (),
    ("--max-num-batched-tokens", "512", "--max-num-seqs", "16"),
    ("--max-model-len", "1000", "--no-enable-prefix-caching"),
    ("--runner", "pooling", "--no-enable-chunked-prefill"),
)
#: phrases of vLLM's refusals that tokpool's refusals quote
REASONS = ("is smaller than max_model_len", "User-specified max_model_len",
           "must be greater than or equal to max_num_seqs")
LINES = [[repo_id, *flags] for repo_id in sorted(MODELS) for flags in FLAG_SETS]
#: every tp.recipe's serve line (filled by the fixture: the recipes read the built cache)
RECIPE_LINES: list[list[str]] = []


def _tokpool_facts(tokens: list[str]) -> dict:
    cfg = SimConfig.from_vllm_args(["vllm", "serve", *tokens], hardware="CPU",
                                   gpu_memory_utilization=None)
    return {
        "runner_type": "pooling",
        "dtype": str(cfg.dtype).removeprefix("torch."),
        "max_model_len": cfg.max_model_len,
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
        "max_num_seqs": cfg.max_num_seqs,
        "enable_chunked_prefill": cfg.enable_chunked_prefill,
        "head_dtype": str(cfg.head_dtype).removeprefix("torch."),
        "attn_type": cfg.model.attn_type,
        "enable_prefix_caching": cfg.enable_prefix_caching,
        "selected_task": cfg.task,
    }


def _recipe_lines(cache) -> list[list[str]]:
    """Every ``tp.recipe`` the tests check, its serve line's tokens after ``vllm serve``."""
    from test_recipe import all_recipes

    saved = {k: os.environ.get(k) for k in ("HF_HUB_CACHE", "HF_HUB_OFFLINE")}
    os.environ.update(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")
    try:
        return [shlex.split(r.serve_line)[2:] for r in all_recipes()]
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.update({key: value})


@pytest.fixture(scope="module")
def vllm_facts(tmp_path_factory):
    cache = build_hub_cache(tmp_path_factory.mktemp("hub"))
    RECIPE_LINES[:] = _recipe_lines(cache)
    LINES.extend(line for line in RECIPE_LINES if line not in LINES)
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "hub_serve_facts.py")],
                         input=json.dumps(LINES), capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=900)
    assert run.returncode == 0 and "@@FACTS@@" in run.stdout, run.stderr[-3000:]
    facts = json.loads(run.stdout.rsplit("@@FACTS@@", 1)[1])
    return cache, dict(zip(map(tuple, LINES), facts, strict=True))


def test_serve_lines_with_a_hub_id_match_vllm(vllm_facts, monkeypatch, parity_count):
    cache, facts = vllm_facts
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    differences = []
    for tokens in LINES:
        theirs = facts[tuple(tokens)]
        if "refused" in theirs:  # refused by both, for the same reason
            try:
                mine = _tokpool_facts(tokens)
            except ValueError as err:
                mine = str(err)
            reason = next((r for r in REASONS if r in theirs["refused"]), None)
            if not (isinstance(mine, str) and reason is not None and reason in mine):
                differences.append((tokens, theirs, mine))
            parity_count("vllm serve <Hub id> lines: refused by both, same reason")
            continue
        keep = ("runner_type", "dtype", "max_model_len", "max_num_batched_tokens",
                "max_num_seqs", "enable_chunked_prefill", "head_dtype", "attn_type",
                "enable_prefix_caching", "selected_task")
        theirs = {k: theirs[k] for k in keep}
        try:
            mine = _tokpool_facts(tokens)
        except ValueError as err:
            mine = str(err)
        if isinstance(mine, dict) and mine["head_dtype"] == "None":
            # JinaForRanking: vLLM's TokenPooler runs no head, so ModelConfig.head_dtype
            # (float32) is never used; tokpool says None (test_listwise.py)
            assert tokens[0] == "jinaai/jina-reranker-v3", tokens
            mine["head_dtype"] = theirs["head_dtype"]
        if mine != theirs:
            differences.append((tokens, theirs, mine))
        parity_count("vllm serve <Hub id> lines: resolved equal from the same cache")
        if tokens in RECIPE_LINES:
            parity_count("tp.recipe serve lines: resolved equal in vLLM")
    assert not differences, "\n\n".join(map(str, differences[:4]))


def test_qwen3_embedding_0_6b_serves_8192_in_vllm(vllm_facts):
    """The issue's example, by vLLM's own code: the sentence-transformers max_seq_length."""
    _, facts = vllm_facts
    assert facts[("Qwen/Qwen3-Embedding-0.6B",)]["max_model_len"] == 8192
