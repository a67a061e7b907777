"""``tp.recipe``: for a Hub id (a test-built cache, offline), the serve line, the ``LLM`` call and
one request body; every serve line round-trips through ``SimConfig.from_vllm_args`` with no
refusal and no flag set aside, and a task the model does not declare gets vLLM's refusal."""

from __future__ import annotations

import shlex

import pytest
from hub_cache import build_hub_cache

import tokpool as tp
from tokpool.sim import SimConfig
from tokpool.sim.vllm_rules.engine_checks import EngineRefusal

#: (model, task asked) -> (task served, kind, endpoint)
CASES = {
    ("Qwen/Qwen3-Embedding-8B", None): ("embed", "embed", "POST /v1/embeddings"),
    ("Qwen/Qwen3-Embedding-8B", "token_embed"): ("token_embed", "late_interaction",
                                                 "POST /score"),
    ("Qwen/Qwen3-Embedding-0.6B", None): ("embed", "embed", "POST /v1/embeddings"),
    ("BAAI/bge-m3", None): ("embed", "embed", "POST /v1/embeddings"),
    ("BAAI/bge-m3", "token_embed"): ("token_embed", "late_interaction", "POST /score"),
    ("jinaai/jina-reranker-v3", None): ("token_embed", "listwise", "POST /rerank"),
    ("Qwen/Qwen2.5-Math-PRM-7B", None): ("token_classify", "token_classify", "POST /pooling"),
    ("colbert-ir/colbertv2.0", None): ("token_embed", "late_interaction", "POST /score"),
}


@pytest.fixture
def hub(tmp_path, monkeypatch):
    cache = build_hub_cache(tmp_path / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def all_recipes() -> list[tp.deploy.Recipe]:
    """Every recipe the tests check (and the parity layer validates against vLLM)."""
    out = [tp.recipe(model, task) for model, task in CASES]
    out.append(tp.recipe("BAAI/bge-m3", "token_embed", late_chunking=512))
    out.append(tp.recipe("Qwen/Qwen3-Embedding-0.6B", "token_embed", late_chunking=256,
                         max_model_len=4096))
    return out


@pytest.mark.parametrize("model, task", list(CASES))
def test_each_recipe_round_trips(hub, model, task):
    r = tp.recipe(model, task)
    assert (r.task, r.kind, r.endpoint) == CASES[model, task]
    assert str(r) == r.serve_line and "\n" not in r.serve_line
    assert r.serve_line.startswith(f"vllm serve {model} ")
    again = SimConfig.from_vllm_args(r.serve_line)  # 0 refusals
    assert again.task == r.task and again.ignored_flags == ()
    assert again == r.config
    assert shlex.split(r.serve_line)[2] == model
    assert f"LLM(model={model!r}" in r.llm_call and r.request_body["model"] == model


def test_the_issues_example_is_served_at_8192(hub):
    assert tp.recipe("Qwen/Qwen3-Embedding-0.6B").config.max_model_len == 8192


def test_late_chunking_and_the_prm_bodies(hub):
    r = tp.recipe("BAAI/bge-m3", "token_embed", late_chunking=512)
    assert r.kind == "token_embed" and r.request_body["late_chunking_params"] == {
        "chunk_size": 512}
    prm = tp.recipe("Qwen/Qwen2.5-Math-PRM-7B")
    assert prm.request_body["task"] == "token_classify"
    assert prm.request_body["input"].count("<extra_0>") == 2
    assert prm.notes == ("STEP pooling keeps the rows of step tag 151651",)


def test_math_shepherd_gets_its_pooler_config_offline():
    """No files in the cache: the preset answers (said), and the serve line carries the step
    tag and the token pair vLLM's PoolerConfig needs."""
    with pytest.warns(Warning, match="preset"):
        r = tp.recipe("peiyi9979/math-shepherd-mistral-7b-prm")
    assert '"step_tag_id":12902' in r.serve_line and '"returned_token_ids":[648,387]' in (
        r.serve_line)
    assert r.config.returned_token_ids == (648, 387) and r.config.pooling == "STEP"


def test_an_undeclared_task_gets_vllms_refusal(hub):
    with pytest.raises(EngineRefusal, match="Unsupported task: 'token_classify'"):
        tp.recipe("Qwen/Qwen3-Embedding-0.6B", "token_classify")
    with pytest.raises(ValueError, match="not a pooling task"):
        tp.recipe("BAAI/bge-m3", "generate")
    with pytest.raises(ValueError, match="late_chunking is for a token_embed model"):
        tp.recipe("jinaai/jina-reranker-v3", late_chunking=64)


def test_plan_says_the_verdict_first(hub, capsys):
    from tokpool.cli import main
    from tokpool.sim.startup import startup_refusal

    found = tp.plan("Qwen/Qwen3-Embedding-0.6B", gpu="H200", prompt_len=32768)
    assert not found.serves and found.verdict.startswith("NO: vLLM 0.33.0 starts this engine")
    assert "max_model_len=8,192" in found.refusals[0]
    assert str(found).splitlines()[0] == found.verdict
    assert "vllm serve (OpenAI API server defaults), 1x H200" in found.deployment
    ok = tp.plan("Qwen/Qwen3-Embedding-8B", task="token_embed", prompt_len=32768)
    cfg = SimConfig.from_vllm_args(ok.recipe.serve_line, hardware="H100")
    assert ok.serves and startup_refusal(cfg, 32768) == ()
    assert sum(ok.peak_parts.values()) > 0 and ok.concurrent_requests >= 1
    assert tp.plan("BAAI/bge-m3", prompt_len=4096).concurrent_requests is None  # encoder-only
    assert main(["plan", "Qwen/Qwen3-Embedding-0.6B", "--prompt-len", "8K", "--json"]) == 0
    assert '"serves": true' in capsys.readouterr().out
    assert main(["plan", "Qwen/Qwen3-Embedding-0.6B", "--prompt-len", "32Q"]) == 2
    assert "32Q" in capsys.readouterr().err
    assert main(["plan", "Qwen/Qwen3-Embedding-0.6B", "--gpu", "B999"]) == 2
    assert "unknown hardware 'B999'" in capsys.readouterr().err


def test_plan_judges_a_given_serve_line(hub):
    line = ("vllm serve Qwen/Qwen3-Embedding-8B --runner pooling --max-num-batched-tokens 8192 "
            "-tp 4 --pooler-config.task token_embed")
    found = tp.plan(serve_line=line, gpu="H100 SXM", prompt_len=32_768)
    assert found.serves and "on 4x H100 SXM" in found.verdict
    assert found.serve_line == line and found.recipe.task == "token_embed"
    cfg = SimConfig.from_vllm_args(line, hardware="H100 SXM")
    assert sum(found.peak_parts.values()) == tp.simulate([32_768], cfg,
                                                         mode="analytic").peak_pooling_bytes
    with pytest.raises(ValueError, match="names no model"):
        tp.plan(serve_line="--max-num-seqs 8")
