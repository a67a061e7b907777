"""Late-interaction scoring on a real vLLM engine against tokpool (``engine-check --score``).

One engine (``token_embed``) serves each workload as vLLM's online ``/score`` does in two stages
(``ServingScores.flash_late_interaction``): an ``encode`` of the queries with late-interaction
query params (the worker clones each query's token embeddings into its query cache), then an
``encode`` of the documents with document params (the worker scores each document against its
cached query with ``compute_maxsim_score_batched`` and returns one float32). The driver
(``tokpool/engine/driver.py``) wraps vLLM's ``LateInteractionRunner.postprocess_pooler_output``
and records, after every step, the bytes its ``_query_cache`` holds and the documents it scored;
then it encodes the same queries and documents plainly (the engine's own token embeddings,
scheduled as the two stages were). ``score_comparison`` then checks:

- (i) the engine's scores against ``tp.late_interaction.maxsim_batched`` over tokpool's own token
embeddings
  (``tp.load_model(...).encode``): within ``score_tolerance`` (see there);
- (ii) the engine's scores against ``tp.late_interaction.maxsim_batched`` over the ENGINE's token
embeddings,
  grouped as the documents finished together in the engine's steps (how the worker batches
  them): ``torch.equal``, group by group;
- (iii) the query-cache bytes at every engine step against ``tp.simulate_score(...).steps
  ["query_cache_bytes"]`` (analytic and tensor modes) for the engine's serve line, and each
  stage's schedule against the simulated one.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from ..late_interaction import maxsim_batched
from ..late_interaction.scoring import plan_requests
from ..late_interaction.simulate_score import ScoreResult, simulate_score
from ..sim import SimConfig
from .compare import ENGINE_ATOL, first_schedule_difference
from .flags import EngineFlags
from .prepare import ENGINE_MODELS, checked_task_and_ids, engine_model_dir, load_checked
from .vllm_venv import (
    ENGINE_TIMEOUT_S,
    EngineCheckError,
    drive,
    engine_python,
    engine_request,
    engine_unavailable_reason,
)

__all__ = [
    "DEFAULT_SCORE_DOCS",
    "DEFAULT_SCORE_QUERIES",
    "EngineScore",
    "ScoreCheck",
    "ScoreComparison",
    "format_score_report",
    "run_vllm_score",
    "score_check",
    "score_comparison",
    "score_tolerance",
]

TASK = "token_embed"
#: Queries and documents ``engine-check --score`` scores by default: 1:N (the first query,
#: every document), then N:N (both queries, the first two documents).
DEFAULT_SCORE_QUERIES = (
    "Why must pooled token rows survive across chunked-prefill steps?",
    "What is the capital of France?",
)
DEFAULT_SCORE_DOCS = (
    "Chunked prefill splits a long prompt into pieces that fit the step's token budget; a "
    "token-level pooler keeps every chunk's hidden states until the request finishes.",
    "Paris is the capital and largest city of France.",
    "The quick brown fox jumps over the lazy dog. " * 4,
    "Late interaction scores a query against a document by the best match of every query "
    "token among the document's tokens, summed over the query tokens.",
)


def score_tolerance(q_len: int, atol: float = ENGINE_ATOL[TASK]) -> float:
    """Largest accepted difference between the engine's MaxSim score of a pair and
    ``tp.late_interaction.maxsim_batched`` over tokpool's token embeddings: ``q_len * atol``, one
    embedding
    tolerance (``ENGINE_ATOL["token_embed"]``, 5e-5) per query token.

    Why: the score sums ``q_len`` terms, each the best ``<q_i, d_j>`` of two unit rows, and
    ``|max_j a_j - max_j b_j| <= max_j |a_j - b_j|``; a term's error is ``<δq, d> + <q, δd>``,
    a sum of ``dim`` element errors (measured up to 7.8e-6, bounded by ``atol``) weighted by
    unit-row elements; with rounding errors of random sign it stays of the order of one
    element error. Measured on this project's CPU (tests/test_engine_score.py, 21 pairs): at
    most 9.5e-6 (a few float32 ulps of scores of 1..25), at most 2.7% of this bound. The
    worst case (Cauchy-Schwarz: ``2 sqrt(dim) atol`` per term, 48x more for SmolLM2's 576
    dims) is not used: it would admit another document's score (random documents' scores
    differ by ~1e-3..1e-2 per query token).

    Example:
        >>> score_tolerance(20)  # 20 query tokens
        0.001
    """
    return q_len * atol


# --- the engine -------------------------------------------------------------------------------


@dataclass
class EngineScore:
    """One workload as the engine served it.

    Attributes:
        scores: ``[n_docs]`` float32: the worker's score of every document.
        query_embs, doc_embs: the engine's own token embeddings ``[n_tokens, dim]`` (a plain
            ``encode``, scheduled as the scoring stages were).
        steps: per stage (``query``, ``doc``, ``plain_query``, ``plain_doc``), per step:
            ``{prompt index within the stage: num_scheduled_tokens}``.
        cache: per stage, per step: ``{"bytes", "entries", "scored", "cached"}`` measured on
            the worker's ``LateInteractionRunner`` after ``postprocess_pooler_output``.
        query_outputs: what the host received for each query (the worker's 0-d zero).
    """
    scores: Tensor
    query_embs: list[Tensor]
    doc_embs: list[Tensor]
    steps: dict[str, list[dict[int, int]]]
    cache: dict[str, list[dict[str, Any]]]
    query_outputs: list[float] = field(default_factory=list)


def score_request(queries: Sequence[Sequence[int]], docs: Sequence[Sequence[int]],
                  query_keys: Sequence[str] | None = None) -> dict[str, Any]:
    """The driver's form of one workload, paired as vLLM pairs it (``plan_requests``: 1:1,
    1:N or N:N; N:1 refused with vLLM's rule).

    Example:
        >>> score_request([[1, 2]], [[3], [4, 5]])["doc_query"]
        [0, 0]
    """
    plan = plan_requests(len(queries), len(docs), query_keys=query_keys)
    n_q = len(queries)
    return {"queries": [[int(t) for t in q] for q in queries],
            "docs": [[int(t) for t in d] for d in docs],
            "doc_query": [r.query for r in plan[n_q:]],
            "query_keys": [r.key for r in plan[:n_q]]}


def run_vllm_score(
    model_dir: str | os.PathLike,
    workloads: Sequence[tuple[Sequence[Sequence[int]], Sequence[Sequence[int]]]],
    flags: EngineFlags | None = None,
    *,
    python: str | os.PathLike | None = None,
    timeout_s: float = ENGINE_TIMEOUT_S,
) -> tuple[dict[str, Any], list[EngineScore]]:
    """Start ONE vLLM engine (task ``token_embed``) and score every ``(queries, docs)``
    workload on it in two stages, then encode the same prompts plainly.

    Returns:
        ``(info, scores)``: the engine's info (versions, KV blocks, block size, ...) and one
        ``EngineScore`` per workload.

    Raises:
        EngineCheckError: no vLLM, a model it cannot load, a wrapper vLLM never called.
        ValueError: a pairing vLLM refuses.
    """
    works = [score_request(q, d) for q, d in workloads]
    if not works:
        raise EngineCheckError("run_vllm_score needs at least one (queries, docs) workload")
    request = {**engine_request(model_dir, TASK, [], flags), "scores": works, "memory": False}
    info, tensors = drive(request, engine_python(python), timeout_s, model_dir, TASK)
    out = []
    for k, (work, rec) in enumerate(zip(works, info.pop("scores"), strict=True)):
        stages = ("query", "doc", "plain_query", "plain_doc")
        out.append(EngineScore(
            scores=tensors[f"s{k}.score"],
            query_embs=[tensors[f"s{k}.q.{i}"] for i in range(len(work["queries"]))],
            doc_embs=[tensors[f"s{k}.d.{j}"] for j in range(len(work["docs"]))],
            steps={s: [{int(r): n for r, n in step.items()} for step in rec[f"{s}_steps"]]
                   for s in stages},
            cache={s: rec[f"{s}_cache"] for s in stages},
            query_outputs=rec["query_outputs"]))
    return info, out


# --- the comparison ---------------------------------------------------------------------------


@dataclass
class ScoreComparison:
    """One workload, engine against tokpool.

    Attributes:
        pairs: one row per document: ``doc``, ``query``, ``q_len``, ``d_len``, ``step``
            (the engine step it was scored in, numbered as ``cache``'s), ``engine_score``,
            ``tokpool_score`` (tokpool's embeddings), ``abs_diff``, ``tolerance``, ``within_tol``,
            ``engine_emb_equal`` (``tp.late_interaction.maxsim_batched`` over the engine's
            embeddings of the
            documents that finished in the same step, in batch order: this pair's score
            ``torch.equal`` to the worker's).
        cache: one row per engine step (query stage, then doc stage): ``step``, ``stage``,
            ``tokens``, ``engine_bytes``, ``entries``, ``analytic_bytes``, ``tensor_bytes``,
            ``equal``.
        schedule_differences: per stage (``query``, ``doc``): ``first_schedule_difference``
            against ``tp.simulate_score``'s stage; ``plain_*``: the plain encodes against the
            scoring stages (same schedule, so the embeddings are what the worker had).
        problems: anything else that disagrees (query outputs not 0, a document not scored
            exactly once, analytic vs tensor), one line each.
        simulated: ``tp.simulate_score``'s result, per mode.
    """
    pairs: pd.DataFrame
    cache: pd.DataFrame
    schedule_differences: dict[str, str | None]
    problems: list[str]
    simulated: dict[str, ScoreResult] = field(repr=False)

    @property
    def passed(self) -> bool:
        return (bool(self.pairs["within_tol"].all()) and bool(self.pairs["engine_emb_equal"]
                .all()) and bool(self.cache["equal"].all()) and not self.problems
                and all(d is None for d in self.schedule_differences.values()))

    def first_difference(self) -> str | None:
        """The first thing that disagrees, in words (``None``: all agree)."""
        if self.problems:
            return self.problems[0]
        for stage, diff in self.schedule_differences.items():
            if diff is not None:
                return f"{stage} stage schedule: {diff}"
        for row in self.pairs.itertuples(index=False):
            if not row.within_tol:
                return (f"doc {row.doc}: engine score {row.engine_score!r}, tokpool "
                        f"{row.tokpool_score!r} (|diff| {row.abs_diff:.3g} > tolerance "
                        f"{row.tolerance:.3g})")
            if not row.engine_emb_equal:
                return (f"doc {row.doc}: engine score {row.engine_score!r} is not "
                        "tp.late_interaction.maxsim_batched over the engine's own "
                        "embeddings bit for bit")
        for row in self.cache.itertuples(index=False):
            if not row.equal:
                return (f"step {row.step} ({row.stage} stage): query cache {row.engine_bytes:,}"
                        f" B in the worker, tp.simulate_score {row.analytic_bytes:,} B "
                        f"(analytic) / {row.tensor_bytes:,} B (tensor)")
        return None


def simulated_stage_steps(result: ScoreResult) -> dict[str, list[dict[int, int]]]:
    """``tp.simulate_score``'s schedule per stage (``query``, ``doc``): per step with tokens,
    ``{prompt index within the stage: num_scheduled_tokens}`` (as the engine numbers them).
    """
    out: dict[str, list[dict[int, int]]] = {}
    for res, global_ids in zip(result.stages, result.stage_requests, strict=True):
        roles = set(result.requests.set_index("request").loc[global_ids, "role"])
        stage = "query" if roles == {"query"} else "doc"
        first = min(global_ids)
        out[stage] = [{int(global_ids[r]) - first: int(stop - start)
                       for r, start, stop in step.chunks}
                      for step in res.schedule if step.chunks]
    return out


def score_comparison(
    queries: Sequence[Sequence[int]],
    docs: Sequence[Sequence[int]],
    engine: EngineScore,
    tokpool_embs: Sequence[Tensor],
    config: SimConfig,
) -> ScoreComparison:
    """Compare one workload's engine answer with tokpool (see the module docstring).

    Args:
        queries, docs: the token ids scored.
        engine: the engine's answer (``run_vllm_score``).
        tokpool_embs: tokpool's token embeddings of ``[*queries, *docs]``, ``[n_tokens, dim]``.
        config: the ``SimConfig`` of the engine's serve line (``score_config``).

    Returns:
        A ``ScoreComparison``.
    """
    work = score_request(queries, docs)
    doc_query, n_q = work["doc_query"], len(queries)
    problems: list[str] = []
    if any(v != 0.0 for v in engine.query_outputs):
        problems.append(f"the host got {engine.query_outputs} for the queries, not the "
                        "worker's 0-d zeros")
    groups = [rec["scored"] for rec in engine.cache["doc"] if rec["scored"]]
    scored = sorted(j for g in groups for j in g)
    if scored != list(range(len(docs))):
        problems.append(f"the worker scored documents {scored}, not each of the {len(docs)} "
                        "once")
    first_doc_step = len(engine.cache["query"])  # steps numbered as the cache table's
    step_of = {j: first_doc_step + s for s, rec in enumerate(engine.cache["doc"])
               for j in rec["scored"]}
    ours_q, ours_d = list(tokpool_embs[:n_q]), list(tokpool_embs[n_q:])
    tokpool_scores = torch.full((len(docs),), float("nan"))
    engine_emb_equal = [False] * len(docs)
    for group in groups:
        mine = maxsim_batched([ours_q[doc_query[j]] for j in group], [ours_d[j] for j in group])
        tokpool_scores[group] = torch.stack(mine)
        theirs = torch.stack(maxsim_batched([engine.query_embs[doc_query[j]] for j in group],
                                            [engine.doc_embs[j] for j in group]))
        for i, j in enumerate(group):  # each pair bit for bit (its group batched as vLLM's)
            engine_emb_equal[j] = torch.equal(theirs[i], engine.scores[j])
    rows = []
    for j in range(len(docs)):
        q_len = len(queries[doc_query[j]])
        diff = abs(float(engine.scores[j]) - float(tokpool_scores[j]))
        tol = score_tolerance(q_len)
        rows.append({"doc": j, "query": doc_query[j], "q_len": q_len, "d_len": len(docs[j]),
                     "step": step_of.get(j, -1), "engine_score": float(engine.scores[j]),
                     "tokpool_score": float(tokpool_scores[j]), "abs_diff": diff,
                     "tolerance": tol, "within_tol": diff <= tol,
                     "engine_emb_equal": engine_emb_equal[j]})
    simulated = {mode: simulate_score([list(q) for q in queries], [list(d) for d in docs],
                                      config, mode=mode, query_keys=work["query_keys"])
                 for mode in ("analytic", "tensor")}
    sim_steps = simulated_stage_steps(simulated["analytic"])
    diffs = {stage: first_schedule_difference(engine.steps[stage], sim_steps.get(stage, []))
             for stage in ("query", "doc")}
    for stage in ("query", "doc"):
        plain = first_schedule_difference(engine.steps[f"plain_{stage}"], engine.steps[stage])
        diffs[f"plain_{stage}"] = plain
    if simulated_stage_steps(simulated["tensor"]) != sim_steps:
        problems.append("tp.simulate_score's analytic and tensor schedules differ")
    cache = _cache_rows(engine, simulated)
    return ScoreComparison(pd.DataFrame(rows), cache, diffs, problems, simulated)


def _cache_rows(engine: EngineScore, simulated: dict[str, ScoreResult]) -> pd.DataFrame:
    frames = {m: r.steps[r.steps["num_scheduled_tokens"] > 0].reset_index(drop=True)
              for m, r in simulated.items()}
    measured = [(stage, step, rec) for stage in ("query", "doc")
                for step, rec in zip(engine.steps[stage], engine.cache[stage], strict=True)]
    rows = []
    for i in range(max(len(measured), *(len(f) for f in frames.values()))):
        got = measured[i] if i < len(measured) else None
        want = {m: (int(f["query_cache_bytes"].iloc[i]) if i < len(f) else None)
                for m, f in frames.items()}
        row = {"step": i, "stage": got[0] if got else "-",
               "tokens": sum(got[1].values()) if got else None,
               "engine_bytes": got[2]["bytes"] if got else None,
               "entries": got[2]["entries"] if got else None,
               "analytic_bytes": want["analytic"], "tensor_bytes": want["tensor"]}
        row["equal"] = row["engine_bytes"] == row["analytic_bytes"] == row["tensor_bytes"]
        rows.append(row)
    return pd.DataFrame(rows)


def score_config(model_dir: str | os.PathLike, flags: EngineFlags,
                 info: dict[str, Any]) -> SimConfig:
    """The ``SimConfig`` of the engine's serve line (``EngineFlags.serve_line``, task
    ``token_embed``), ``hardware="CPU"``, with the engine's KV-cache blocks and block size."""
    try:
        return SimConfig.from_vllm_args(flags.serve_line(model_dir, TASK), model=str(model_dir),
                                        hardware="CPU", kv_cache_blocks=info["num_kv_blocks"],
                                        block_size=info["block_size"])
    except (TypeError, ValueError) as err:
        raise EngineCheckError(f"tp.simulate_score cannot model this engine's serve line "
                               f"({err})") from None


@dataclass
class ScoreCheck:
    """``score_check``'s answer: the engine's info and one comparison per workload."""
    info: dict[str, Any]
    flags: EngineFlags
    comparisons: list[ScoreComparison]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.comparisons)

    def first_difference(self) -> str | None:
        for k, c in enumerate(self.comparisons):
            if (diff := c.first_difference()) is not None:
                return f"workload {k}: {diff}"
        return None

    def figures(self) -> dict[str, Any]:
        """The headline numbers: steps compared and equal, pairs scored, the largest score
        difference against tokpool's embeddings, engine-embedding MaxSim bit-equal pairs."""
        pairs = pd.concat([c.pairs for c in self.comparisons], ignore_index=True)
        cache = pd.concat([c.cache for c in self.comparisons], ignore_index=True)
        return {"workloads": len(self.comparisons), "pairs": len(pairs),
                "max_abs_diff": float(pairs["abs_diff"].max()),
                "max_diff_over_tolerance": float((pairs["abs_diff"] / pairs["tolerance"]).max()),
                "engine_emb_equal": int(pairs["engine_emb_equal"].sum()),
                "steps": len(cache), "cache_equal": int(cache["equal"].sum()),
                "peak_cache_bytes": int(cache["engine_bytes"].fillna(0).max())}


def score_check(
    model_dir: str | os.PathLike,
    workloads: Sequence[tuple[Sequence[Sequence[int]], Sequence[Sequence[int]]]],
    flags: EngineFlags | None = None,
    *,
    tp_model=None,
    python: str | os.PathLike | None = None,
) -> ScoreCheck:
    """Score every ``(queries, docs)`` workload (token ids) on one engine and compare each
    with tokpool (``score_comparison``).

    Args:
        model_dir: a folder vLLM and ``tp.load_model`` both load, serving ``token_embed``.
        workloads: ``(queries, docs)`` pairs of token-id lists, 1:1, 1:N or N:N.
        flags: the engine (default ``EngineFlags()``; float32).
        tp_model: tokpool's model of ``model_dir`` (loaded when ``None``).
        python: the Python with vLLM.

    Raises:
        EngineCheckError: the engine cannot run, or tokpool refuses its serve line.
    """
    flags = EngineFlags() if flags is None else flags
    for queries, docs in workloads:
        score_request(queries, docs)  # vLLM's pairing rule, before any engine starts
        if max(len(queries), len(docs)) > 2 * flags.max_num_seqs:
            raise EngineCheckError(f"{len(queries)} queries, {len(docs)} documents: at most "
                                   f"2 x max_num_seqs = {2 * flags.max_num_seqs} per stage "
                                   "(LLM.encode adds more only as others finish, which "
                                   "tp.simulate_score's arrival at the stage's start would "
                                   "not match)")
    info, answers = run_vllm_score(model_dir, workloads, flags, python=python)
    if tp_model is None:
        tp_model = load_checked(Path(model_dir), os.fspath(model_dir))
    config = score_config(model_dir, flags, info)
    comparisons = []
    for (queries, docs), engine in zip(workloads, answers, strict=True):
        prompts = [list(p) for p in (*queries, *docs)]
        ours = tp_model.encode(prompts, task=TASK, chunk_size=flags.chunk_size)
        comparisons.append(score_comparison(queries, docs, engine, ours, config))
    return ScoreCheck(info, flags, comparisons)


# --- the report and the command line ----------------------------------------------------------


def format_score_report(check: ScoreCheck) -> str:
    """``score_check``'s answer as text (what ``tokpool engine-check --score`` prints)."""
    info, lines = check.info, []
    lines.append(f"vLLM {info.get('vllm_version')} on {info.get('device')}, task token_embed, "
                 f"two-stage late interaction (budget {check.flags.max_num_batched_tokens}, "
                 f"threshold {check.flags.long_prefill_token_threshold or 'none'}, "
                 f"{info.get('num_kv_blocks')} KV blocks of {info.get('block_size')})")
    for k, c in enumerate(check.comparisons):
        n_q = c.pairs["query"].nunique()
        lines.append(f"workload {k}: {n_q} quer{'y' if n_q == 1 else 'ies'} x "
                     f"{len(c.pairs)} documents")
        shown = c.pairs.assign(
            engine_score=c.pairs["engine_score"].map(lambda v: f"{v:.6f}"),
            tokpool_score=c.pairs["tokpool_score"].map(lambda v: f"{v:.6f}"),
            abs_diff=c.pairs["abs_diff"].map(lambda v: f"{v:.2e}"),
            tolerance=c.pairs["tolerance"].map(lambda v: f"{v:.2e}"),
            engine_emb_equal=c.pairs["engine_emb_equal"].map({True: "yes", False: "NO"}),
        ).drop(columns=["within_tol"])
        lines.append(shown.to_string(index=False))
        cache = c.cache.assign(equal=c.cache["equal"].map({True: "yes", False: "NO"}))
        lines.append("query-cache bytes per engine step (worker / tp.simulate_score):")
        lines.append(cache.to_string(index=False))
        for stage, diff in c.schedule_differences.items():
            if diff is not None:
                lines.append(f"{stage} schedule differs: {diff}")
        lines.extend(f"problem: {p}" for p in c.problems)
    f = check.figures()
    lines.append(
        f"{f['pairs']} pairs scored: max |engine - tokpool| {f['max_abs_diff']:.2e} "
        f"({f['max_diff_over_tolerance']:.1%} of its tolerance); engine-embedding MaxSim "
        f"torch.equal on {f['engine_emb_equal']} of {f['pairs']}; query-cache bytes equal on "
        f"{f['cache_equal']} of {f['steps']} steps; "
        + ("all agree" if check.passed else f"FIRST DIFFERENCE: {check.first_difference()}"))
    return "\n".join(lines)


def _texts(values, default, name: str) -> list[str]:
    texts = list(values or default)
    for i, t in enumerate(texts):
        if not t.strip():
            raise EngineCheckError(f"--{name} {i}: empty text; give words to score")
    return texts


def cli_score(args: argparse.Namespace,
              progress: Callable[[str], None] | None = print) -> int:
    """``tokpool engine-check --score``: score the queries against the documents on one
    engine, compare with tokpool, print the report.

    Returns:
        0 when every comparison agrees, 1 otherwise (the first difference is printed).

    Raises:
        EngineCheckError: bad options or a check that cannot run (the CLI prints one line).
    """
    for flag, value in (("--prompt", args.prompt), ("--memory", args.memory or None)):
        if value:
            raise EngineCheckError(f"{flag} is not used with --score; give --query and --doc "
                                   "texts (or none: the built-in ones)")
    if args.task not in (None, TASK):
        raise EngineCheckError(f"--task {args.task!r} with --score: late interaction scores "
                               f"token embeddings; use --task {TASK} (or leave it out)")
    if args.dtype != "float32":
        raise EngineCheckError(f"--dtype {args.dtype} with --score: scores are compared with "
                               "tokpool's within a float32 bound; use --dtype float32")
    sizes = ("0" if args.chunk_sizes is None else args.chunk_sizes).split(",")
    try:
        threshold = int(sizes[0]) if len(sizes) == 1 else None
    except ValueError:
        threshold = None
    if threshold is None or threshold < 0:
        raise EngineCheckError(f"--chunk-sizes {args.chunk_sizes!r} with --score: give one "
                               "threshold (one engine), e.g. 16 (0: none)")
    if args.budget < args.max_num_seqs:
        raise EngineCheckError(f"--budget ({args.budget}) must be at least --max-num-seqs "
                               f"({args.max_num_seqs}), as vLLM requires")
    queries = _texts(args.query, DEFAULT_SCORE_QUERIES[:1] if not args.query and args.doc
                     else DEFAULT_SCORE_QUERIES, "query")
    docs = _texts(args.doc, DEFAULT_SCORE_DOCS, "doc")
    if not args.query and not args.doc:  # the built-in: 1:N, then N:N
        text_works = [(queries[:1], docs), (queries, docs[:len(queries)])]
    else:
        text_works = [(queries, docs)]
        plan_requests(len(queries), len(docs))  # vLLM's pairing rule, in its words
    name = os.fspath(args.model)
    if name in ENGINE_MODELS:
        if ENGINE_MODELS[name] != TASK:
            raise EngineCheckError(f"{name} serves {ENGINE_MODELS[name]}, not {TASK}: --score "
                                   "needs a token_embed model (smollm2-135m)")
    elif not (Path(name).expanduser() / "config.json").is_file():
        raise EngineCheckError(f"model: {name!r} is not a built-in engine model "
                               f"({[m for m, t in ENGINE_MODELS.items() if t == TASK]}) or a "
                               "model folder with a config.json")
    engine_python(args.python)
    reason = engine_unavailable_reason(args.python)
    if reason is not None:
        raise EngineCheckError(reason)
    folder = engine_model_dir(name) if name in ENGINE_MODELS else Path(name).expanduser()
    tp_model = load_checked(folder, name)
    workloads = [(checked_task_and_ids(tp_model, name, TASK, q),
                  checked_task_and_ids(tp_model, name, TASK, d)) for q, d in text_works]
    longest = max(len(p) for q, d in workloads for p in (*q, *d))
    flags = EngineFlags(max_num_batched_tokens=args.budget, max_num_seqs=args.max_num_seqs,
                        long_prefill_token_threshold=threshold, max_model_len=max(512, longest),
                        num_gpu_blocks_override=args.num_gpu_blocks_override)
    if progress is not None:
        progress(f"starting vLLM: {len(workloads)} score workloads, budget {args.budget}, "
                 f"threshold {threshold or 'none'}")
    check = score_check(folder, workloads, flags, tp_model=tp_model, python=args.python)
    print(format_score_report(check))
    return 0 if check.passed else 1
