"""Parity with vLLM 0.33.0's own late-interaction code, run here on a CPU.

- The query cache: vLLM's ``LateInteractionRunner`` (the worker's) is replayed on tokpool's
  schedule of random score calls — each step, the requests of the batch in batch order, the
  finished ones with real tensors of the delivered shape and dtype, the late-interaction
  parameters vLLM's serving layer builds — and the bytes its ``_query_cache`` holds after every
  step equal ``ScoreResult.steps.query_cache_bytes``; what it hands the host equals
  ``requests.output_bytes``.
- A projector head (ColBERT's ``colbert_linear`` in ``TokenEmbeddingPoolerHead``): its in-step
  peak bytes equal ``head_peak(head_tensors(...))``.
- ``JinaRankingPool`` vs vLLM's ``JinaForRankingPool`` on random hidden states over random
  chunked schedules (``torch.equal``); and the bytes: ``tp.simulate`` of a JINA_RANKING config
  (marker rows from random token-id prompts) has, at every step, the ``pool_peak_bytes`` that
  vLLM's ``JinaForRankingPool`` holds at its highest when replayed on that schedule (every
  floating-point storage it makes, watched by a ``TorchDispatchMode``; its int64 index and
  bool mask tensors, which tokpool does not count, left out).
- The serving rules: ``SCORE_TYPE_MAP``, the pairing check, the data-parallel engine index,
  ColBERT's dimension keys and JinaForRanking's projector width, against vLLM's functions.

Needs vLLM 0.33.0 (``make vllm``); skips with the reason otherwise. Counts are printed in the
terminal summary (``parity_count``).
"""

from __future__ import annotations

import random
from types import SimpleNamespace as NS

import pytest
import torch

import tokpool as tp
from tokpool.pooler.vllm_bridge import VLLM_REFERENCE_VERSION, vllm_unavailable_reason, vllm_version

pytestmark = pytest.mark.parity

_reason = vllm_unavailable_reason()
if _reason is not None:
    pytest.skip(f"vLLM parity layer skipped: {_reason}", allow_module_level=True)
if vllm_version() != VLLM_REFERENCE_VERSION:
    pytest.skip(f"vLLM parity layer skipped: vLLM {vllm_version()} is installed, the rules "
                f"were read in {VLLM_REFERENCE_VERSION}", allow_module_level=True)

import numpy as np  # noqa: E402
from maxsim_alloc import FloatStorages  # noqa: E402
from torch import nn  # noqa: E402
from vllm.config import VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.entrypoints.pooling.scoring.utils import _validate_score_input_lens  # noqa: E402
from vllm.model_executor.models.colbert import ColBERTMixin  # noqa: E402
from vllm.model_executor.models.config import JinaForRankingConfig  # noqa: E402
from vllm.model_executor.models.jina import JinaForRankingPool  # noqa: E402
from vllm.pooling_params import PoolingParams  # noqa: E402
from vllm.tasks import SCORE_TYPE_MAP  # noqa: E402
from vllm.v1.pool.late_interaction import (  # noqa: E402
    build_late_interaction_doc_params,
    build_late_interaction_query_params,
    get_late_interaction_engine_index,
)
from vllm.v1.pool.late_interaction_runner import LateInteractionRunner  # noqa: E402
from vllm.v1.pool.metadata import PoolingMetadata as VMeta  # noqa: E402
from vllm.v1.pool.metadata import PoolingStates as VStates  # noqa: E402

from tokpool.late_interaction import scoring  # noqa: E402
from tokpool.late_interaction.listwise import (  # noqa: E402
    DOC_TOKEN_ID,
    QUERY_TOKEN_ID,
    JinaRankingPool,
    seeded_projector,
)
from tokpool.sim.vllm_rules import scoring_path as paths  # noqa: E402

WORKLOADS = 120


def random_call(rng: random.Random):
    """A score call and an engine, drawn (not tuned): 1:N or N:N, ragged lengths, budgets that
    split prompts or not, few or many slots, sync or async, two dtypes, optional KV limit."""
    if rng.random() < 0.5:
        queries, docs = [rng.randint(1, 90)], [rng.randint(1, 300)
                                                 for _ in range(rng.randint(1, 9))]
    else:
        n = rng.randint(1, 5)
        queries = [rng.randint(1, 90) for _ in range(n)]
        docs = [rng.randint(1, 300) for _ in range(n)]
    cfg = tp.SimConfig(hidden_size=rng.choice([4, 8, 12]), task="token_embed",
                       dtype=rng.choice(["bfloat16", "float32"]),
                       max_num_batched_tokens=rng.choice([32, 64, 128, 1024]),
                       max_num_seqs=rng.choice([1, 2, 3, 16]),
                       async_scheduling=rng.random() < 0.4,
                       kv_cache_blocks=rng.choice([None, None, 40]), block_size=16)
    return queries, docs, cfg


def replay_vllm_runner(result, rng: random.Random, parity_count) -> None:
    """Drive vLLM's ``LateInteractionRunner`` step by step on the result's schedule."""
    runner = LateInteractionRunner(enable_flash=False)
    reqs = result.requests.set_index("request")
    cfg = result.config
    dim = result.head.dim
    steps = result.steps.set_index("step")
    params: dict[int, PoolingParams] = {}
    for res, numbers, offset in zip(result.stages, result.stage_requests,
                                    result.stage_offsets, strict=True):
        by_index = {s.index: s for s in res.schedule}
        for step in res.steps["step"]:
            sched = by_index.get(int(step))
            if sched is not None:
                ids, outs, plist, mask = [], [], [], []
                for local, _start, _stop in sched.chunks:
                    g = numbers[local]
                    rec = reqs.loc[g]
                    if g not in params:  # PoolingRunner.add_request -> register_request
                        p = PoolingParams(task="token_embed")
                        p.late_interaction_params = (
                            build_late_interaction_query_params(rec.key, int(
                                len(reqs[reqs.role == "doc"]) if (reqs.role == "query").sum()
                                == 1 else 1))
                            if rec.role == "query" else build_late_interaction_doc_params(rec.key))
                        params[g] = p
                        runner.register_request(f"req-{g}", p)
                    done = local in sched.finished
                    rows = int(rec.pooled_rows)
                    outs.append(torch.randn(rows, dim).to(cfg.output_dtype) if done else None)
                    ids.append(f"req-{g}")
                    plist.append(params[g])
                    mask.append(done)
                delivered = runner.postprocess_pooler_output(outs, plist, ids, mask)
                storages = {}
                for g_id, out, done in zip(ids, delivered, mask, strict=True):
                    if done:
                        g = int(g_id.removeprefix("req-"))
                        # a 0-d float32: the query's zero, or a view of its MaxSim batch's
                        # [B] scores (unbind) — 4 bytes each, the batch's storage shared
                        assert out.dim() == 0 and out.dtype == torch.float32
                        assert out.numel() * out.element_size() == int(
                            reqs.loc[g, "output_bytes"]) == 4
                        storages[out.untyped_storage().data_ptr()] = (
                            out.untyped_storage().nbytes())
                        parity_count("late-interaction host outputs (0-d float32)")
                assert sum(storages.values()) == 4 * sum(mask)
                runner.on_requests_finished({f"req-{numbers[r]}" for r in sched.finished})
            held = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                    for t in runner._query_cache.values()}
            assert sum(held.values()) == int(steps.loc[int(step) + offset,
                                                       "query_cache_bytes"]), (
                f"step {int(step) + offset}: vLLM's query cache holds {sum(held.values())} B")
            parity_count("query-cache bytes per step (vs LateInteractionRunner)")
    assert not runner._query_cache and not runner._query_uses  # every query released


def test_query_cache_matches_vllms_runner_on_random_calls(parity_count):
    rng = random.Random(38)
    done = 0
    for _ in range(WORKLOADS):
        queries, docs, cfg = random_call(rng)
        result = tp.simulate_score(queries, docs, cfg, mode="analytic")
        replay_vllm_runner(result, rng, parity_count)
        parity_count("random score calls replayed")
        done += 1
    assert done == WORKLOADS


def _vllm_step_meta(step, lens, tokens, states) -> tuple[torch.Tensor, VMeta]:
    """One step of a tokpool schedule as vLLM's pooling sees it: the batch's prompt token ids
    (``[n_requests, longest]`` int64, zero-padded) and a ``PoolingMetadata`` with its cursor
    built over the step's chunks and the requests' ``states``."""
    reqs = [r for r, _, _ in step.chunks]
    ids = torch.zeros((len(reqs), max(lens[r] for r in reqs)), dtype=torch.int64)
    for i, r in enumerate(reqs):
        ids[i, : lens[r]] = torch.as_tensor(tokens[r])
    meta = VMeta(prompt_lens=torch.tensor([lens[r] for r in reqs]), prompt_token_ids=None,
                 prompt_token_ids_cpu=ids,
                 pooling_params=[PoolingParams(task="token_embed") for _ in reqs],
                 pooling_states=[states[r] for r in reqs])
    meta.build_pooling_cursor(np.array([stop - start for _, start, stop in step.chunks]),
                              torch.tensor([stop for _, _, stop in step.chunks]),
                              torch.device("cpu"))
    return ids, meta


def _jina_projector(width: int, gen: torch.Generator) -> nn.Sequential:
    proj = nn.Sequential(nn.Linear(width, width // 2, bias=False), nn.ReLU(),
                         nn.Linear(width // 2, 6, bias=False))
    for layer in (proj[0], proj[2]):
        layer.weight.data.normal_(generator=gen)
    return proj


def test_jina_pool_matches_vllms_on_random_chunked_schedules(parity_count):
    rng = random.Random(151670)
    gen = torch.Generator().manual_seed(151671)
    with set_current_vllm_config(VllmConfig()):
        compared = 0
        for _ in range(WORKLOADS):
            width = rng.choice([4, 8, 16])
            proj = _jina_projector(width, gen)
            lens = [rng.randint(1, 60) for _ in range(rng.randint(1, 4))]
            tokens = [torch.tensor([rng.choice([1, 2, DOC_TOKEN_ID, QUERY_TOKEN_ID])
                                    for _ in range(n)]) for n in lens]
            sim = tp.simulate(lens, tp.SimConfig(hidden_size=width, task="token_embed",
                                                 max_num_batched_tokens=rng.choice([8, 16, 64]),
                                                 max_num_seqs=rng.choice([1, 2, 8])),
                              mode="analytic")
            t_pool, v_pool = JinaRankingPool(proj), JinaForRankingPool(proj)
            t_states, v_states = {}, {}
            done = {r: 0 for r in range(len(lens))}
            for step in sim.schedule:
                reqs = [r for r, _, _ in step.chunks]
                for r, start, _ in step.chunks:
                    if start == 0:
                        t_states[r], v_states[r] = tp.PoolingStates(), VStates()
                scheduled = [stop - start for _, start, stop in step.chunks]
                seq_lens = [stop for _, _, stop in step.chunks]
                ids, vmeta = _vllm_step_meta(step, lens, tokens, v_states)
                hidden = torch.randn(sum(scheduled), width, generator=gen)
                tmeta = tp.build_metadata([lens[r] for r in reqs], num_scheduled_tokens=scheduled,
                                          seq_lens=seq_lens, states=[t_states[r] for r in reqs],
                                          prompt_token_ids=ids)
                with torch.inference_mode():
                    t_out, v_out = t_pool(hidden, tmeta), v_pool(hidden, vmeta)
                for r, t, v in zip(reqs, t_out, v_out, strict=True):
                    assert (t is None) == (v is None)
                    if t is not None:
                        assert torch.equal(t, v), "JinaForRanking rows differ"
                        assert t.shape[0] == int(((tokens[r] == DOC_TOKEN_ID)
                                                  | (tokens[r] == QUERY_TOKEN_ID)).sum())
                        done[r] += 1
                        compared += 1
                        parity_count("JinaForRanking pooled rows (torch.equal)")
            assert all(v == 1 for v in done.values())
        assert compared >= WORKLOADS


def test_jina_ranking_bytes_are_vllms_pool_s_step_by_step(parity_count):
    """``tp.simulate`` with JINA_RANKING pooling: every step's ``pool_peak_bytes`` is the most
    vLLM's ``JinaForRankingPool`` holds at once in that step, replayed on the same schedule
    with the simulator's projector (the AllPool clones and cat, the gather, the projector's
    layers; CPU platform: each output is delivered as it is made)."""
    rng = random.Random(1024)
    gen = torch.Generator().manual_seed(512)
    steps = 0
    with set_current_vllm_config(VllmConfig()):
        for _ in range(WORKLOADS // 3):
            width = rng.choice([8, 16, 64])
            lens = [rng.randint(1, 80) for _ in range(rng.randint(1, 4))]
            tokens = [[rng.choice([1, 2, 3, DOC_TOKEN_ID, QUERY_TOKEN_ID]) for _ in range(n)]
                      for n in lens]
            cfg = tp.SimConfig(pooling="JINA_RANKING", hidden_size=width, hardware="CPU",
                               dtype=rng.choice(["float32", "bfloat16"]),
                               max_num_batched_tokens=rng.choice([8, 16, 64]),
                               max_num_seqs=rng.choice([1, 2, 8]))
            sim = tp.simulate(tokens, cfg, mode="analytic")
            pool = JinaForRankingPool(seeded_projector(width, 512, cfg.dtype))
            states: dict[int, VStates] = {}
            watch = FloatStorages()
            for step, peak in zip(sim.schedule, sim.steps["pool_peak_bytes"], strict=True):
                for r, start, _ in step.chunks:
                    if start == 0:
                        states[r] = VStates()
                scheduled = [stop - start for _, start, stop in step.chunks]
                _, meta = _vllm_step_meta(step, lens, tokens, states)
                hidden = torch.randn(sum(scheduled), width, generator=gen).to(cfg.dtype)
                watch.skip = {hidden.untyped_storage().data_ptr()}
                watch.peak = watch.alive
                with torch.inference_mode(), watch:
                    out = pool(hidden, meta)
                assert watch.peak == peak, (lens, cfg.max_num_batched_tokens, step.index)
                for r in step.finished:
                    del states[r]
                del out  # delivered (the CPU platform hands the tensors over as they are)
                steps += 1
                parity_count("JinaForRanking steps: pool_peak_bytes equal")
    assert steps >= WORKLOADS


def test_a_projector_head_s_bytes_are_vllms_token_embedding_head_s(parity_count):
    """ColBERT's head as vLLM builds it (``TokenEmbeddingPoolerHead`` with ``colbert_linear``
    in the head dtype and ``PoolerNormalize``): the most bytes its ``forward_chunk`` holds
    at once equals ``head_peak(head_tensors(...))`` for the config ``from_hf_config`` reads
    (the cast, the projection, the normalised rows; the normaliser's ``[rows, 1]`` norms,
    which tokpool does not count, left out), and it delivers ``[rows, dim]``."""
    from vllm.model_executor.layers.pooler.activations import PoolerNormalize
    from vllm.model_executor.layers.pooler.tokwise.heads import TokenEmbeddingPoolerHead

    from tokpool.sim.vllm_rules.classifier import head_peak, head_tensors

    rng = random.Random(768)
    compared = 0
    for _ in range(WORKLOADS // 3):
        hidden, dim = rng.choice([8, 32, 96]), rng.choice([4, 16, 128])
        dtype = rng.choice(["float32", "bfloat16", "float16"])
        cfg = tp.SimConfig.from_hf_config({
            "architectures": ["HF_ColBERT"], "model_type": "bert", "hidden_size": hidden,
            "num_hidden_layers": 1, "num_attention_heads": 1, "intermediate_size": 4,
            "vocab_size": 10, "max_position_embeddings": 512, "type_vocab_size": 2,
            "torch_dtype": dtype, "dim": dim})
        head_dtype = cfg.head_dtype if cfg.head_casts else cfg.dtype
        rows = rng.randint(1, 300)
        x = torch.randn(rows, hidden).to(cfg.dtype)
        vhead = TokenEmbeddingPoolerHead(
            head_dtype=head_dtype, activation=PoolerNormalize(),
            projector=nn.Linear(hidden, dim, bias=False, dtype=head_dtype))
        watch = FloatStorages()
        watch.skip = {x.untyped_storage().data_ptr()}
        watch.skip_shape = 1
        with torch.inference_mode(), watch:
            out = vhead.forward_chunk(x, PoolingParams(task="token_embed", use_activation=True))
        made = head_tensors(cfg, rows, hidden)
        assert out.shape == (rows, dim) and (made[-1].rows, made[-1].cols) == (rows, dim)
        assert watch.peak == head_peak(made)[0], (rows, hidden, dim, dtype)
        compared += 1
        parity_count("projector heads: in-step peak bytes equal (TokenEmbeddingPoolerHead)")
    assert compared == WORKLOADS // 3


def test_serving_rules_match_vllms(parity_count):
    assert dict(SCORE_TYPE_MAP) == paths.SCORE_TYPE_MAP
    parity_count("serving rules")
    rng = random.Random(5)
    for _ in range(300):
        nq, nd = rng.randint(0, 4), rng.randint(0, 4)
        try:
            _validate_score_input_lens([None] * nq, [None] * nd)
            theirs = None
        except Exception as err:  # VLLMValidationError
            theirs = str(err)
        try:
            scoring.check_pairing(nq, nd)
            ours = None
        except ValueError as err:
            ours = str(err)
        assert (theirs is None) == (ours is None)
        if theirs is not None:
            assert ours.startswith(theirs), (ours, theirs)
        parity_count("pairing rule (vs _validate_score_input_lens)")
    for i in range(200):
        key = f"late-interaction-{rng.getrandbits(64):x}-query-{i}"
        engines = rng.randint(1, 8)
        p = PoolingParams(task="token_embed")
        p.late_interaction_params = build_late_interaction_query_params(key, 3)
        assert scoring.engine_index(key, engines) == get_late_interaction_engine_index(
            p, engines)
        parity_count("data-parallel engine index")
    for _ in range(200):
        keys = {k: rng.choice([None, 0, rng.randint(1, 512)])
                for k in ("colbert_dim", "dim", "projection_dim")}
        cfg = {"architectures": ["HF_ColBERT"], "hidden_size": 768,
               **{k: v for k, v in keys.items() if v is not None}}
        theirs = ColBERTMixin.get_colbert_dim_from_config(NS(**keys))
        assert paths.late_interaction_head(cfg).dim == (theirs or 768)
        parity_count("ColBERT dimension keys")
    hf = NS()
    JinaForRankingConfig.verify_and_update_model_config(NS(hf_config=hf))
    assert hf.embedding_size == paths.JINA_EMBEDDING_SIZE
    parity_count("serving rules")
