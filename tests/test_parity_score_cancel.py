"""A cancelled rerank call (``tp.simulate_score(..., cancel_step=s)``) against vLLM 0.33.0's
``LateInteractionRunner``, replayed on tokpool's schedules.

vLLM's scoring layer cancels a late-interaction call by aborting its queries and documents
(``engine_client.abort``: ``Scheduler.finish_requests``; tests/test_parity_aborts.py checks the
scheduler side) and then releasing its query keys on every worker
(``release_late_interaction_query_cache`` -> ``LateInteractionRunner.release_queries``). On
seeded random score calls (tests/test_parity_late_interaction.py's ``random_call``) each cancelled
at a random step, vLLM's runner is driven step by step: documents registered when first
scheduled, every finished query / document through ``postprocess_pooler_output``,
``on_requests_finished`` for the finished and the aborted ids, and ``release_queries`` at the
cancel step; after every step its query cache holds the bytes ``steps.query_cache_bytes`` says,
and nothing is left once the call is cancelled.

Needs vLLM 0.33.0 (``make vllm``); skips with the reason otherwise.
"""

from __future__ import annotations

import random

import pytest
import torch
from sweep_sizes import sample_size
from test_parity_late_interaction import random_call

import tokpool as tp

pytestmark = pytest.mark.parity

from vllm.pooling_params import PoolingParams  # noqa: E402
from vllm.v1.pool.late_interaction import (  # noqa: E402
    build_late_interaction_doc_params,
    build_late_interaction_query_params,
)
from vllm.v1.pool.late_interaction_runner import LateInteractionRunner  # noqa: E402

NUM_CALLS = sample_size(full=300, sample=100)


def replay_with_cancel(result, cancel: int, parity_count) -> int:
    """Drive vLLM's runner through the (cancelled) call; returns the steps compared."""
    runner = LateInteractionRunner(enable_flash=False)
    reqs = result.requests.set_index("request")
    dim, dtype = result.head.dim, result.config.output_dtype
    steps = result.steps.set_index("step")
    aborted = {} if result.aborts is None else {
        int(a.request): int(a.step) for a in result.aborts.itertuples()
        if a.outcome == "aborted"}
    n_docs = int((reqs.role == "doc").sum())
    one_query = int((reqs.role == "query").sum()) == 1
    registered: set[int] = set()
    query_keys = [str(k) for k in reqs[reqs.role == "query"]["key"]]
    compared = 0
    for res, numbers, offset in zip(result.stages, result.stage_requests, result.stage_offsets,
                                    strict=True):
        by_index = {s.index: s for s in res.schedule}
        for step in res.steps["step"]:
            g_step = int(step) + offset
            gone = {f"req-{r}" for r, s in aborted.items() if s == g_step}
            if gone:  # the aborts, then the release of the call's query keys
                runner.on_requests_finished(gone)
            if g_step >= cancel:
                runner.release_queries(query_keys)
            sched = by_index.get(int(step))
            if sched is not None:
                ids, outs, plist, mask = [], [], [], []
                for local, _start, _stop in sched.chunks:
                    g = numbers[local]
                    rec = reqs.loc[g]
                    p = PoolingParams(task="token_embed")
                    p.late_interaction_params = (
                        build_late_interaction_query_params(
                            rec.key, n_docs if one_query else 1)
                        if rec.role == "query" else build_late_interaction_doc_params(rec.key))
                    if g not in registered:
                        runner.register_request(f"req-{g}", p)
                        registered.add(g)
                    done = local in sched.finished
                    outs.append(torch.randn(int(rec.pooled_rows), dim).to(dtype)
                                if done else None)
                    ids.append(f"req-{g}")
                    plist.append(p)
                    mask.append(done)
                runner.postprocess_pooler_output(outs, plist, ids, mask)
                runner.on_requests_finished({f"req-{numbers[r]}" for r in sched.finished})
            held = sum(t.untyped_storage().nbytes() for t in runner._query_cache.values())
            assert held == int(steps.loc[g_step, "query_cache_bytes"]), (g_step, held)
            compared += 1
            parity_count("query-cache bytes per step of a cancelled call (vs vLLM's runner)")
    if result.aborts is not None and (result.aborts["outcome"] == "aborted").any():
        assert not runner._query_cache  # a cancelled call leaves no query behind
    return compared


def test_a_cancelled_call_releases_the_query_cache_as_vllm(parity_count):
    rng = random.Random(4600)
    compared = cancelled = 0
    for _ in range(NUM_CALLS):
        queries, docs, cfg = random_call(rng)
        full = tp.simulate_score(queries, docs, cfg, mode="analytic")
        cancel = rng.randint(0, max(0, int(full.steps["step"].max()) + 1))
        result = tp.simulate_score(queries, docs, cfg, mode="analytic", cancel_step=cancel)
        compared += replay_with_cancel(result, cancel, parity_count)
        cancelled += result.aborts is not None and bool(
            (result.aborts["outcome"] == "aborted").any())
    parity_count("cancelled score calls replayed (vs LateInteractionRunner)", NUM_CALLS)
    assert cancelled >= NUM_CALLS // 2 and compared > NUM_CALLS
