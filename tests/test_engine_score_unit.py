"""``tokpool.engine.score`` without an engine: the pairing, the tolerance, the comparison and
its report on a synthetic engine answer, and ``engine-check --score``'s refusals (one line, exit
2, before any engine is looked for). The engine stage itself: tests/test_engine_score.py."""

from __future__ import annotations

import pytest
import torch

import tokpool as tp
from tokpool.cli import main
from tokpool.engine.compare import ENGINE_ATOL
from tokpool.engine.flags import EngineFlags
from tokpool.engine.score import (
    EngineScore,
    ScoreCheck,
    format_score_report,
    score_comparison,
    score_request,
    score_tolerance,
    simulated_stage_steps,
)
from tokpool.late_interaction import maxsim_batched

CFG = tp.SimConfig(hidden_size=8, max_num_batched_tokens=16, task="token_embed")


def test_score_request_pairs_as_vllm_does():
    assert score_request([[1]], [[2], [3], [4]])["doc_query"] == [0, 0, 0]
    work = score_request([[1], [2]], [[3], [4]])
    assert work["doc_query"] == [0, 1] and work["query_keys"] == ["query-0", "query-1"]
    with pytest.raises(ValueError, match="1:1, 1:N or N:N"):
        score_request([[1], [2]], [[3]])


def test_score_tolerance_is_one_embedding_tolerance_per_query_token():
    assert score_tolerance(1) == ENGINE_ATOL["token_embed"]
    assert score_tolerance(31) == pytest.approx(31 * 5e-5)


def _unit(n: int, seed: int) -> torch.Tensor:
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(seed))
    return torch.nn.functional.normalize(x, dim=-1)


def _engine_like(queries, docs) -> tuple[EngineScore, list[torch.Tensor]]:
    """An engine answer that agrees with tokpool by construction: the simulator's schedule
    and query-cache bytes, documents grouped by the step they finish in (batch order), and
    scores computed as the worker does (``maxsim_batched`` per group)."""
    work = score_request(queries, docs)
    sim = tp.simulate_score(queries, docs, CFG, mode="analytic")
    steps = simulated_stage_steps(sim)
    embs = [_unit(len(p), i) for i, p in enumerate([*queries, *docs])]
    q_embs, d_embs = embs[:len(queries)], embs[len(queries):]
    frame = sim.steps[sim.steps["num_scheduled_tokens"] > 0].reset_index(drop=True)
    n_q_steps = len(steps["query"])
    finish = sim.requests.set_index("request")["finish_step"]
    offset = sim.stage_offsets[1]
    cache = {"query": [], "doc": []}
    for i, row in frame.iterrows():
        stage = "query" if i < n_q_steps else "doc"
        scored = [j for j in range(len(docs))
                  if stage == "doc" and finish[len(queries) + j] == row["step"]]
        cache[stage].append({"bytes": int(row["query_cache_bytes"]), "entries": 0,
                             "scored": scored, "cached": []})
    assert offset == n_q_steps
    scores = torch.zeros(len(docs))
    for rec in cache["doc"]:
        if rec["scored"]:
            got = maxsim_batched([q_embs[work["doc_query"][j]] for j in rec["scored"]],
                                    [d_embs[j] for j in rec["scored"]])
            scores[rec["scored"]] = torch.stack(got)
    engine = EngineScore(scores=scores, query_embs=q_embs, doc_embs=d_embs,
                         steps={**steps, "plain_query": steps["query"],
                                "plain_doc": steps["doc"]},
                         cache={**cache, "plain_query": [], "plain_doc": []},
                         query_outputs=[0.0] * len(queries))
    return engine, embs


QUERIES, DOCS = [[1] * 5, [2] * 9], [[3] * 20, [4] * 3]


def test_an_agreeing_answer_passes_and_its_report_says_so():
    engine, embs = _engine_like(QUERIES, DOCS)
    c = score_comparison(QUERIES, DOCS, engine, embs, CFG)
    assert c.passed and c.first_difference() is None, (c.pairs, c.cache, c.problems)
    assert c.pairs["engine_emb_equal"].all() and (c.pairs["abs_diff"] == 0).all()
    assert len(c.cache) == len(engine.steps["query"]) + len(engine.steps["doc"])
    check = ScoreCheck({"vllm_version": "x", "device": "cpu", "num_kv_blocks": 1,
                        "block_size": 16}, EngineFlags(), [c])
    report = format_score_report(check)
    assert report.endswith("all agree")
    assert ("2 pairs scored" in report and "torch.equal on 2 of 2" in report
            and f"equal on {len(c.cache)} of {len(c.cache)} steps" in report)


def test_a_wrong_score_is_the_first_difference():
    engine, embs = _engine_like(QUERIES, DOCS)
    engine.scores[1] += 1e-2
    c = score_comparison(QUERIES, DOCS, engine, embs, CFG)
    assert not c.passed
    assert not c.pairs["within_tol"].iloc[1] and not c.pairs["engine_emb_equal"].iloc[1]
    assert c.first_difference().startswith("doc 1: engine score")
    engine.scores[1] -= 1e-2
    engine.scores[1] = torch.nextafter(engine.scores[1], torch.tensor(100.0))  # one ulp
    c = score_comparison(QUERIES, DOCS, engine, embs, CFG)
    assert c.pairs["within_tol"].all() and not c.pairs["engine_emb_equal"].iloc[1]
    assert "bit for bit" in c.first_difference()


def test_wrong_cache_bytes_and_schedules_are_named():
    engine, embs = _engine_like(QUERIES, DOCS)
    engine.cache["doc"][0]["bytes"] += 4
    c = score_comparison(QUERIES, DOCS, engine, embs, CFG)
    assert not c.passed and c.first_difference().startswith("step ")
    assert "query cache" in c.first_difference()
    engine, embs = _engine_like(QUERIES, DOCS)
    engine.steps["plain_doc"] = engine.steps["plain_doc"][:-1]
    c = score_comparison(QUERIES, DOCS, engine, embs, CFG)
    assert c.first_difference().startswith("plain_doc stage schedule")
    engine, embs = _engine_like(QUERIES, DOCS)
    engine.query_outputs = [0.0, 1.0]
    assert "not the worker's 0-d zeros" in score_comparison(QUERIES, DOCS, engine, embs,
                                                            CFG).first_difference()


@pytest.mark.parametrize("argv, expected", [
    (["engine-check", "--score", "--memory"], "--memory is not used with --score"),
    (["engine-check", "--score", "--prompt", "hi"], "--prompt is not used with --score"),
    (["engine-check", "--query", "hi"], "--query is used with --score only"),
    (["engine-check", "--score", "--task", "token_classify"], "--task 'token_classify'"),
    (["engine-check", "--score", "--dtype", "bfloat16"], "use --dtype float32"),
    (["engine-check", "--score", "--chunk-sizes", "16,48"], "give one threshold"),
    (["engine-check", "--score", "--chunk-sizes", ""], "give one threshold"),
    (["engine-check", "--score", "--query", "a", "--query", "b", "--doc", "c"],
     "1:1, 1:N or N:N"),
    (["engine-check", "--score", "--doc", " "], "--doc 0: empty text"),
    (["engine-check", "--score", "smollm2-prm"], "needs a token_embed model"),
    (["engine-check", "--score", "--budget", "4", "--max-num-seqs", "8"],
     "--budget (4) must be at least --max-num-seqs (8)"),
])
def test_cli_score_bad_input_is_one_line_exit_2(argv, expected, capsys):
    assert main(argv) == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("tokpool engine-check: error: "), lines
    assert expected in lines[0], lines[0]
