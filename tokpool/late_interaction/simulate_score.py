"""``tp.simulate_score``: vLLM 0.33.0's online scoring flow (``/score``, ``/rerank``) on the
step simulator.

The flow is the serving layer's (entrypoints/pooling/scoring/serving.py); the engine runs it
as any other requests, so each stage IS a ``tp.simulate`` run through the one step loop, and
this module adds what the scoring layer changes about the bytes, as ledger entries:

- **two stages** (late interaction with ``--enable-flash-late-interaction``, the default):
  the queries run first; each finished query's output is CLONED into the worker's query cache
  (``LateInteractionRunner``: "``output`` can be a view into the current step's hidden-states
  buffer, so clone it before storing across scheduling steps") and the host gets a 0-d float32
  zero. When every query is delivered, the documents run; each finished document is scored in
  the worker against its cached query (MaxSim: ``tp.late_interaction.maxsim_plan``'s scratch for
  the documents
  finishing together, in batch order; the flash kernel on CUDA when they share one query) and
  the host gets one float32 score, 4 bytes. A query's rows stay cached until its
  ``query_uses`` documents are scored (``query_cache.QueryCache``).
- **one stage** (``flash_late_interaction=False``, the bi-encoder, and the listwise
  JinaForRanking path): every request at once, every output to the API process (MaxSim or
  cosine runs there).

Ledger (``ScoreResult.steps``, per engine): the simulator's columns with each finished
request's output replaced, from the moment vLLM replaces it, by what vLLM keeps and delivers
(4 bytes in two stages; the projected rows for ColBERT heads, BGE-M3 without its BOS row;
JinaForRanking's marker rows are the simulator's own ``JINA_RANKING`` pooling), plus
``query_cache_bytes`` (alive at the end of the step; in ``pool_bytes`` and
``pool_peak_bytes``), ``maxsim_scratch_bytes`` (the worker's MaxSim peak in the step, in
``pool_peak_bytes``) and ``stage``.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Literal

import pandas as pd

from .._args import whole
from ..pooler.pooling_params import PoolingParams, per_request_params
from ..sim import SimConfig, SimResult, simulate
from ..sim.backends.loop import copies_at_finish
from ..sim.memory.ledger import REQUEST_COLUMNS, STEP_COLUMNS
from ..sim.vllm_rules import engine_checks
from ..sim.vllm_rules.classifier import drops_bos, projector_layers
from ..sim.vllm_rules.cpu_platform import host_copy_copies, is_cpu
from ..sim.vllm_rules.scoring_path import LateInteractionHead, ScoringPath, scoring_path
from .listwise import listwise_prompts
from .maxsim import maxsim_plan
from .query_cache import QueryCache
from .scoring import ScoreRequest, plan_requests

__all__ = ["SCORE_STEP_COLUMNS", "ScoreResult", "simulate_score"]

ScoreMode = Literal["tensor", "analytic"]
#: Bytes vLLM hands the host for a late-interaction request in two stages: a 0-d float32
#: (the query's zero, the document's score).
SCALAR_BYTES = 4

#: Columns ``ScoreResult.steps`` adds to ``tokpool.sim.STEP_COLUMNS``.
SCORE_STEP_COLUMNS: dict[str, str] = {
    "engine": "data-parallel engine (zlib.crc32(query_key) % num_engines)",
    "stage": "1: the queries (two stages) or every request (one stage); 2: the documents",
    "query_cache_bytes": "bytes of cloned query rows in the worker's query cache at the end "
                         "of the step (included in pool_bytes; at its start in "
                         "pool_peak_bytes)",
    "maxsim_scratch_bytes": "the worker's MaxSim peak in the step "
                            "(tp.late_interaction.maxsim_plan: padded "
                            "float32 batches and score matrices, or the flash kernel's "
                            "ESTIMATE), for the documents finishing together, in batch order; "
                            "included in pool_peak_bytes",
}


@dataclass
class ScoreResult:
    """One simulated score call.

    Attributes:
        path: the scoring path (``ScoringPath``: name, task, vLLM's io processor, stages, why).
        config: the engine.
        mode: ``"tensor"`` or ``"analytic"`` (the same bytes).
        steps: one row per engine iteration, per engine: ``tokpool.sim.STEP_COLUMNS`` plus
            ``SCORE_STEP_COLUMNS``.
        requests: one row per engine request (queries first, then documents; a listwise
            prompt per query): ``role`` (``"query"``, ``"doc"``, ``"listwise"``),
            ``query``, ``engine``, ``stage``, ``key``, ``pooled_rows`` (rows pooling gathered),
            then ``tokpool.sim.REQUEST_COLUMNS`` (steps global per engine; ``output_bytes``
            and ``delivered_rows`` as vLLM delivers them).
        stages: the ``SimResult`` of every (engine, stage) run, as ``tp.simulate`` gave it.
        stage_requests: for each of ``stages``, the score call's request number of each of
            its requests (its ``prompt_lens`` order).
        stage_offsets: for each of ``stages``, the ``steps.step`` of its first iteration.
        maxsim: one ``tp.late_interaction.maxsim_plan`` frame per step that scored documents in the
        worker
            (``engine``, ``step`` columns added); empty in one stage.
        head: the late-interaction head the delivered rows follow.
        peak_pooling_bytes: max of ``steps.pool_peak_bytes`` over engines.
        peak_query_cache_bytes: max of ``steps.query_cache_bytes``.
        peak_maxsim_scratch_bytes: max of ``steps.maxsim_scratch_bytes``.
        host_bytes: bytes delivered to the API process, all requests.
        api_maxsim_bytes: one stage, late interaction: the largest ``[q_len, d_len]`` float32
            score matrix the API process's ``compute_maxsim_score`` makes (0 otherwise).
        prompts: listwise: the token ids of each prompt built.
        notes: what is approximate, one line each.
        aborts: with ``cancel_step``: one row per aborted engine request (the call's request
            number, ``engine``, ``stage``, global ``step``; ``tp.simulate``'s abort columns);
            ``None`` otherwise.
    """

    path: ScoringPath
    config: SimConfig
    mode: str
    steps: pd.DataFrame
    requests: pd.DataFrame
    stages: list[SimResult] = field(repr=False)
    stage_requests: list[list[int]] = field(repr=False)
    stage_offsets: list[int] = field(repr=False)
    maxsim: pd.DataFrame = field(repr=False)
    head: LateInteractionHead = field(repr=False)
    peak_pooling_bytes: int = 0
    peak_query_cache_bytes: int = 0
    peak_maxsim_scratch_bytes: int = 0
    host_bytes: int = 0
    api_maxsim_bytes: int = 0
    prompts: list[list[int]] | None = field(default=None, repr=False)
    notes: list[str] = field(default_factory=list, repr=False)
    aborts: pd.DataFrame | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return (f"ScoreResult(path={self.path.name!r}, stages={2 if self.path.two_stage else 1},"
                f" requests={len(self.requests)}, steps={len(self.steps)}, "
                f"peak_pooling_bytes={self.peak_pooling_bytes:,}, "
                f"peak_query_cache_bytes={self.peak_query_cache_bytes:,}, "
                f"host_bytes={self.host_bytes:,})")

    def summary(self) -> dict:
        """The call as one flat row."""
        return {"path": self.path.name, "io_processor": self.path.io_processor,
                "two_stage": self.path.two_stage, "num_requests": len(self.requests),
                "num_steps": len(self.steps),
                "peak_pooling_bytes": self.peak_pooling_bytes,
                "peak_query_cache_bytes": self.peak_query_cache_bytes,
                "peak_maxsim_scratch_bytes": self.peak_maxsim_scratch_bytes,
                "host_bytes": self.host_bytes, "api_maxsim_bytes": self.api_maxsim_bytes,
                "corrupted": bool(self.requests["corrupted"].any())}

    def explain(self) -> list[str]:
        """The path and why, then one sentence per request: the simulator's story of its
        chunks, then what the scoring layer did with its output."""
        lines = [f"scoring path: {self.path.name} ({self.path.io_processor}): "
                 f"{self.path.reason}"]
        if self.head.projector or self.head.drops_bos:
            lines.append(f"head ({self.head.architecture or 'model'}): rows of width "
                         f"{self.head.dim}" + (f", {self.head.projector}" if self.head.projector
                                               else "")
                         + ("; the BOS row is dropped (BOSEOSFilter)" if self.head.drops_bos
                            else ""))
        stories = {}
        for res, local_to_global in zip(self.stages, self.stage_requests, strict=True):
            for local, line in enumerate(res.explain()):
                stories[local_to_global[local]] = line.split(": ", 1)[-1]
        for rec in self.requests.itertuples(index=False):
            story = stories.get(rec.request, "")
            lines.append(f"{rec.role} {rec.request} (engine {rec.engine}, stage {rec.stage}, "
                         f"{rec.prompt_len} tokens): {story} {_fate(self, rec)}")
        if self.peak_query_cache_bytes:
            at = self.steps.loc[self.steps["query_cache_bytes"].idxmax()]
            lines.append(f"query cache: at most {self.peak_query_cache_bytes:,} B of cloned "
                         f"query rows held across steps (engine {int(at['engine'])}, step "
                         f"{int(at['step'])}); freed as the last document of each query is "
                         "scored")
        if self.peak_maxsim_scratch_bytes:
            lines.append(f"MaxSim in the worker: at most {self.peak_maxsim_scratch_bytes:,} B "
                         "of scratch in one step (tp.late_interaction.maxsim_plan)")
        if self.api_maxsim_bytes:
            lines.append(f"MaxSim in the API process: a {self.api_maxsim_bytes:,} B float32 "
                         "score matrix for the largest pair (compute_maxsim_score)")
        lines.extend(f"note: {n}" for n in self.notes)
        return lines


def _fate(result: ScoreResult, rec) -> str:
    path = result.path
    if path.two_stage and rec.role == "query":
        return (f"→ its {rec.pooled_rows} rows cloned into the query cache (key {rec.key!r}); "
                f"the host gets a 0-d float32 ({rec.output_bytes} B)")
    if path.two_stage:
        return (f"→ scored in the worker against query {rec.query}; the host gets one float32 "
                f"score ({rec.output_bytes} B)")
    if path.name == "listwise":
        return (f"→ {rec.delivered_rows} marker rows × {result.head.dim} delivered in the "
                f"model dtype ({rec.output_bytes:,} B)")
    return f"→ {rec.delivered_rows} rows delivered to the API process ({rec.output_bytes:,} B)"


def simulate_score(
    queries: Sequence,
    docs: Sequence,
    config: SimConfig | None = None,
    *,
    mode: ScoreMode = "tensor",
    flash_late_interaction: bool = True,
    query_keys: Sequence[str] | None = None,
    num_engines: int = 1,
    flash_maxsim_kernel: bool = True,
    head: LateInteractionHead | None = None,
    tokenize: Callable[[str], list[int]] | None = None,
    template_tokens: int = 0,
    scheduler: Literal["tokpool", "vllm"] = "tokpool",
    pooling_params: PoolingParams | Sequence[PoolingParams | None] | None = None,
    cancel_step: int | None = None,
) -> ScoreResult:
    """Simulate one ``/score`` (or ``/rerank``) call as vLLM 0.33.0's server runs it.

    Args:
        queries: the queries, as lengths (ints) or token ids (lists of ints); listwise
            (JinaForRanking): texts with ``tokenize``, or lengths / ids.
        docs: the documents, in the same form.
        config: the engine (default ``SimConfig(task="token_embed")``); its ``task`` is the
            task the engine serves (``SimConfig.from_vllm_args`` selects it as vLLM does), its
            model decides the listwise path and the head.
        mode: ``"tensor"`` or ``"analytic"`` (every stage; the same bytes).
        flash_late_interaction: the frontend flag ``--enable/--disable-flash-late-interaction``:
            two stages (default) or one.
        query_keys: one key per query (vLLM's carry a uuid; the data-parallel engine is
            ``zlib.crc32(key) % num_engines``). Default ``"query-<i>"``.
        num_engines: data-parallel engines (two stages only: one-stage requests carry no
            query key, and vLLM balances them by load, which tokpool does not model).
        flash_maxsim_kernel: ``PoolerConfig.enable_flash_late_interaction`` (Model Runner
            V2; V1's runner always tries the kernel): the Triton kernel scores a step's
            documents on CUDA when they share one query.
        head: the delivered rows' head (default: the model preset's ``late_interaction``,
            read from its files by ``from_hf_config``; else the pooled width, no projector).
        tokenize, template_tokens: listwise prompts (``listwise.listwise_prompts``).
        scheduler: ``tp.simulate``'s scheduler.
        pooling_params: vLLM's per-request options (``tp.PoolingParams``: ``dimensions``,
            ``use_activation``, truncation, late chunking): one for every engine request
            (a score request carries one set), or one (or ``None``) per engine request in
            ``requests`` order (queries, then documents; listwise: one per prompt). In two
            stages each request also carries the scoring path's ``late_interaction_mode``
            (``"cache_query"`` / ``"score_doc"``), so vLLM's refusals apply as vLLM applies
            them (late chunking cannot be combined with late-interaction scoring).
        cancel_step: the client hangs up: the call is cancelled right before this engine
            step (``steps.step``, every engine). vLLM's scoring layer
            (``ServingScores._cleanup_flash_late_interaction``) aborts the call's queries and
            documents (``tp.simulate``'s ``aborts``: ``Scheduler.finish_requests``) and then
            releases its query keys on every worker (``release_late_interaction_query_cache``
            -> ``LateInteractionRunner.release_queries``): the query cache is empty from that
            step. Cancelled during the first stage, the documents never run. ``aborts`` of
            the result says what each abort did; after the call's end it is a no-op.

    Returns:
        A ``ScoreResult``.

    Raises:
        ValueError: a pairing vLLM refuses (N:1, empty lists), token ids outside the
            vocabulary, a prompt over ``max_model_len`` (vLLM's refusal, naming the
            query or document), a task with no scoring API, ``mode="closed_form"``.
        TypeError: prompts that are neither lengths nor token ids, or a mix.

    Example:
        >>> import tokpool as tp
        >>> cfg = tp.SimConfig(hidden_size=64, max_num_batched_tokens=256, task="token_embed")
        >>> r = tp.simulate_score([32], [512] * 3, cfg, mode="analytic")
        >>> r.path.name, r.path.two_stage, r.host_bytes  # 4 B per request
        ('late-interaction', True, 16)
        >>> r.peak_query_cache_bytes  # 32 rows × 64 × float32, cloned
        8192
        >>> tp.simulate_score([32], [512] * 3, cfg, mode="analytic",
        ...                   flash_late_interaction=False).host_bytes  # every row
        401408
    """
    config = SimConfig(task="token_embed") if config is None else config
    if not isinstance(config, SimConfig):
        raise TypeError(f"config must be a SimConfig, got {type(config).__name__}")
    if mode not in ("tensor", "analytic"):
        raise ValueError(f"mode={mode!r}: simulate_score needs every step (the query cache "
                         "lives across them); use 'tensor' or 'analytic' (closed forms solve "
                         "one request without steps)")
    path = scoring_path(config, flash_late_interaction=flash_late_interaction)
    _check_options(flash_maxsim_kernel, tokenize, template_tokens)
    head = _head(config, head)
    if not path.two_stage and num_engines != 1:
        raise ValueError(f"num_engines={num_engines!r} with the {path.io_processor!r} flow: "
                         "its requests carry no late-interaction query key, so vLLM's "
                         "data-parallel client balances them by load (not modelled); simulate "
                         "one engine (num_engines=1)")
    q_items, d_items = _items(queries, "queries"), _items(docs, "docs")
    plan = plan_requests(len(q_items), len(d_items), query_keys=query_keys,
                         num_engines=num_engines)
    prompts = None
    if path.name == "listwise":
        prompts = listwise_prompts(q_items, d_items, tokenize=tokenize,
                                   template_tokens=template_tokens)
        entries = [(ScoreRequest(i, "listwise", i, plan[i].key, 0, 0), p)
                   for i, p in enumerate(prompts)]
    else:
        entries = list(zip(plan, [*q_items, *d_items], strict=True))
    _check_prompts(entries, config)
    params = _request_params(pooling_params, entries, path)
    if cancel_step is not None:
        cancel_step = whole("cancel_step", cancel_step, minimum=0)
    abort_frames = []
    stages_out, maps, offsets, step_frames, req_frames, maxsim_frames = [], [], [], [], [], []
    for engine in sorted({r.engine for r, _ in entries}):
        mine = [(r, p) for r, p in entries if r.engine == engine]
        groups = ([[e for e in mine if e[0].role == "query"],
                   [e for e in mine if e[0].role == "doc"]] if path.two_stage else [mine])
        ledger = _Ledger(config, path, head, engine, flash_maxsim_kernel, params)
        ledger.cancel_step = cancel_step
        offset = 0
        for stage, group in enumerate(groups, start=1):
            if not group:
                continue
            if cancel_step is not None and stage > 1 and cancel_step < offset:
                break  # cancelled in the first stage: the documents are never sent
            aborts = None if cancel_step is None else {
                i: max(0, cancel_step - offset) for i in range(len(group))}
            res = simulate([p for _, p in group], config, mode=mode, scheduler=scheduler,
                           pooling_params=[params[r.request] for r, _ in group],
                           aborts=aborts)
            if res.aborts is not None:
                abort_frames.append(res.aborts.assign(
                    request=[group[i][0].request for i in res.aborts["request"]],
                    step=res.aborts["step"] + offset, engine=engine, stage=stage,
                    finish_step=[f + offset if f >= 0 else -1
                                 for f in res.aborts["finish_step"]]))
            stages_out.append(res)
            maps.append([r.request for r, _ in group])
            offsets.append(offset)
            ledger.add_stage(res, [r for r, _ in group], stage, offset)
            offset += len(res.steps)
        step_frames.append(ledger.steps_frame())
        req_frames.append(ledger.requests_frame())
        maxsim_frames.extend(ledger.maxsim)
    steps = pd.concat(step_frames, ignore_index=True)
    requests = pd.concat(req_frames).sort_values("request", kind="stable").reset_index(drop=True)
    api = 0
    if path.name == "late-interaction" and not path.two_stage:
        rows = dict(zip(requests["request"], requests["delivered_rows"], strict=True))
        api = max(rows[r.query] * rows[r.request] * 4 for r, _ in entries if r.role == "doc")
    out = ScoreResult(
        aborts=(pd.concat(abort_frames, ignore_index=True) if abort_frames else None),
        path=path, config=config, mode=mode, steps=steps, requests=requests,
        stages=stages_out, stage_requests=maps, stage_offsets=offsets,
        maxsim=pd.concat(maxsim_frames, ignore_index=True) if maxsim_frames else pd.DataFrame(),
        head=head, peak_pooling_bytes=int(steps["pool_peak_bytes"].max()),
        peak_query_cache_bytes=int(steps["query_cache_bytes"].max()),
        peak_maxsim_scratch_bytes=int(steps["maxsim_scratch_bytes"].max()),
        host_bytes=int(requests["output_bytes"].sum()), api_maxsim_bytes=api, prompts=prompts,
        notes=_notes(config, head, path))
    return out


def _request_params(pooling_params, entries, path: ScoringPath) -> list[PoolingParams | None]:
    """Each engine request's ``tp.PoolingParams`` (``requests`` order), with the scoring
    path's ``late_interaction_mode`` in two stages (``ServingScores`` builds the
    late-interaction parameters of every query and document request)."""
    params = per_request_params(pooling_params, len(entries))
    if not path.two_stage:
        return params
    out = []
    for (r, _), p in zip(entries, params, strict=True):
        mode = "cache_query" if r.role == "query" else "score_doc"
        out.append(PoolingParams(late_interaction_mode=mode) if p is None
                   else p.replace(late_interaction_mode=mode))
    return out


def _head(config: SimConfig, head: LateInteractionHead | None) -> LateInteractionHead:
    if head is not None:
        if not isinstance(head, LateInteractionHead):
            raise TypeError(f"head must be a LateInteractionHead, got {type(head).__name__}")
        return head
    found = getattr(config.model, "late_interaction", None)
    if found is not None:
        return found
    return LateInteractionHead(getattr(config.model, "architecture", "") or "",
                               config.width, None)


def _notes(config: SimConfig, head: LateInteractionHead, path: ScoringPath) -> list[str]:
    notes = []
    ran = projector_layers(config)
    if head.projector and head.head_dtype and path.name != "bi-encoder" and not ran:
        notes.append(f"the head's own in-step tensors are the simulator's (cast and "
                     f"normalise at width {config.width}, no projector in the config's "
                     f"model); the projection to {head.dim} is applied to what is cached, "
                     "scored and delivered")
    if len(ran) > 1:
        notes.append("the projector's intermediate outputs are counted alive until its last "
                     "one exists (nn.Sequential frees each as the next is made): an upper "
                     "bound on the head's in-step peak")
    if head.drops_bos:
        notes.append("every prompt is taken to start with BOS (BOSEOSFilter drops row 0 only "
                     "when it is the BOS token)")
    return notes


def _items(prompts, name: str) -> list:
    if not isinstance(prompts, (list, tuple)) and getattr(prompts, "ndim", None) != 1:
        raise TypeError(f"{name} must be a list of lengths (ints) or of token-id lists, in "
                        f"order, got {type(prompts).__name__}")
    return list(prompts)


def _check_options(flash_maxsim_kernel, tokenize, template_tokens) -> None:
    if not isinstance(flash_maxsim_kernel, bool):
        raise TypeError(f"flash_maxsim_kernel must be True or False, got "
                        f"{flash_maxsim_kernel!r}")
    if tokenize is not None and not callable(tokenize):
        raise TypeError(f"tokenize must be a function text -> token ids (or None), got "
                        f"{type(tokenize).__name__}")
    if isinstance(template_tokens, bool) or not isinstance(template_tokens, int) \
            or template_tokens < 0:
        raise ValueError(f"template_tokens must be an int >= 0, got {template_tokens!r}")


def _check_prompts(entries, config: SimConfig) -> None:
    """Token ids inside the vocabulary, every prompt of one form, none over max_model_len —
    each named by its role and index."""
    forms = {isinstance(p, int) and not isinstance(p, bool) for _, p in entries}
    ids_form = [not isinstance(p, int) for _, p in entries]
    if len(forms) > 1:
        raise TypeError("give every query and document as a length (an int) or every one as "
                        "token ids (a list of ints), not a mix")
    vocab = getattr(config.model, "vocab_size", None)
    for r, p in entries:
        who = f"{r.role} {r.request}"
        if isinstance(p, bool) or not (isinstance(p, (int, list, tuple))
                                       or getattr(p, "ndim", 0) == 1):
            raise TypeError(f"{who} is {type(p).__name__}: give a length (int) or token ids")
        if isinstance(p, int):
            if p < 1:
                raise ValueError(f"{who} has length {p}; every prompt needs >= 1 token")
            continue
        ids = [int(t) for t in p]
        if not ids:
            raise ValueError(f"{who} is empty: give at least one token id")
        if vocab is not None:
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                raise ValueError(f"{who} has token ids {bad[:3]} outside the vocabulary "
                                 f"[0, {vocab}) of {config.model_name}; vLLM's input processor "
                                 "rejects them (tokenize with the model's tokenizer)")
    if any(ids_form) and not all(ids_form):
        raise TypeError("give every prompt as lengths or every one as token ids, not a mix")
    if not config.as_if:  # as_if: tp.simulate looks past it and says so
        lens = [p if isinstance(p, int) else len(p) for _, p in entries]
        try:
            engine_checks.check_prompts_fit(lens, config.max_model_len, name=config.model_name)
        except engine_checks.EngineRefusal as err:
            first = next(r for (r, _), n in zip(entries, lens, strict=True)
                         if n > (config.max_model_len or n))
            raise engine_checks.EngineRefusal(
                f"{first.role} {first.request}: {err} (the score call's requests are numbered "
                "queries first, then documents)", follows=err.follows) from None


class _Ledger:
    """One engine's score ledger: the stages' frames, the scoring layer's bytes added."""

    def __init__(self, config, path, head, engine, flash_kernel, params) -> None:
        self.cfg, self.path, self.head, self.engine = config, path, head, engine
        self.params = params  # per score-call request: its tp.PoolingParams or None
        self.flash_kernel = flash_kernel
        self.cache = QueryCache()
        self.rows: list[dict] = []
        self.reqs: list[dict] = []
        self.maxsim: list[pd.DataFrame] = []
        self.host_base = 0  # host bytes delivered by earlier stages (the API process keeps them)
        self.query_rows: dict[int, int] = {}  # query -> rows it caches / MaxSim reads
        self.out_size = config.output_dtype.itemsize
        self.copies = host_copy_copies(config.hardware)
        # the ledger category of an output awaiting its host copy (the head's, or pooling's)
        self.output_column = ("pool_head_bytes" if config.head_casts or config.use_activation
                              else "pool_output_bytes")
        self.cuda = not is_cpu(config.hardware)
        self.cancel_step: int | None = None  # the call's cancellation (release its queries)

    # --- what vLLM keeps and delivers of one finished request ----------------------------

    def _delivered(self, req: ScoreRequest, sim_rows: int,
                   sim_bytes: int) -> tuple[int, int, int, int]:
        """``(rows, row_bytes, kept_bytes, host_bytes)``: rows of the head's output, the
        bytes of one, the bytes that stay on the device until the host copy, and the bytes
        delivered. The simulator's own delivery where it runs the model's pooler and head
        (listwise marker rows, projector, ``dimensions``, late chunking); the head given to
        ``simulate_score`` otherwise."""
        head = self.head
        if self.path.name in ("listwise", "bi-encoder"):
            return sim_rows, sim_bytes // max(sim_rows, 1), sim_bytes, sim_bytes
        params = self.params[req.request]
        chunked = params is not None and params.late_chunking_size is not None
        # BOSEOSFilter drops row 0 (BGE-M3), not for late-chunked outputs; the simulator's
        # head already does for the config's own model (classifier.drops_bos)
        dropped_here = head.drops_bos and not drops_bos(self.cfg)
        rows = sim_rows - (1 if dropped_here and sim_rows and not chunked else 0)
        ran = projector_layers(self.cfg) or (params is not None and params.dimensions)
        row_bytes = (sim_bytes // sim_rows if ran and sim_rows
                     else head.dim * self.out_size)  # [rows, dim] in the head dtype
        if self.path.two_stage:
            return rows, row_bytes, SCALAR_BYTES, SCALAR_BYTES
        return rows, row_bytes, rows * row_bytes, rows * row_bytes

    def add_stage(self, res: SimResult, group: list[ScoreRequest], stage: int,
                  offset: int) -> None:
        cfg = self.cfg
        frame, reqs = res.steps, res.requests
        by_step = {s.index: s for s in res.schedule}
        owned = self._owned_outputs(res)
        records = reqs.to_dict("records")  # one dict per request (iloc per row is slow)
        info = {}
        for local, r in enumerate(group):
            rec = SimpleNamespace(**records[local])
            rows, row_bytes, kept, host = self._delivered(r, int(rec.delivered_rows),
                                                          int(rec.output_bytes))
            if int(rec.finish_step) < 0:  # aborted (cancel_step): nothing pooled or sent
                kept = host = 0
            info[local] = dict(req=r, rows=rows, row_bytes=row_bytes, kept=kept, host=host,
                               owned=owned[local],
                               sim_host=int(rec.output_bytes), finish=int(rec.finish_step),
                               delivered=int(rec.delivered_step))
            if r.role == "query":
                self.query_rows[r.request] = rows
        async_ = cfg.async_scheduling
        # Requests by the steps they matter in (a scan of every request per step is
        # quadratic in a call's documents): delivered at, carried over (finished, not yet
        # delivered), and the host bytes the delivered ones hold back, cumulated by step.
        delivered_at: dict[int, list[dict]] = defaultdict(list)
        carried_at: dict[int, list[dict]] = defaultdict(list)
        held_back: dict[int, int] = defaultdict(int)
        for i in info.values():
            if i["delivered"] >= 0:
                delivered_at[i["delivered"]].append(i)
                held_back[i["delivered"]] += i["sim_host"] - i["host"]
            for t in range(max(i["finish"], -1), i["delivered"]):
                carried_at[t].append(i)
        held_steps = sorted(held_back)
        held_cumsum = list(itertools.accumulate(held_back[t] for t in held_steps))
        for row in frame.itertuples(index=False):
            s = int(row.step)
            step = by_step.get(s)
            fin = [info[r] for r in (step.finished if step is not None else ())]
            delivered_now = delivered_at.get(s, [])
            pending = [i for i in delivered_now if i["finish"] < s]
            carried = carried_at.get(s, []) if s >= 0 else [
                i for i in info.values() if i["finish"] <= s < i["delivered"]]
            cancelled = self.cancel_step is not None and s + offset >= self.cancel_step
            if cancelled and self.cache.nbytes:  # release_late_interaction_query_cache
                self.cache.release(list(self.cache.entries))
            qc_before = self.cache.nbytes
            extra, written, scratch = self._post_head(fin, s + offset)
            base = int(row.pool_bytes) + sum(i["owned"] for i in (pending if async_ else fin))
            shift = sum(i["kept"] - i["owned"] for i in pending) if async_ else 0
            peak = max(int(row.pool_peak_bytes), base + extra) + shift + qc_before
            end_shift = sum(i["kept"] - i["owned"] for i in carried) if async_ else 0
            n_held = bisect.bisect_right(held_steps, s)  # delivered at or before step s
            held_so_far = held_cumsum[n_held - 1] if n_held else 0
            values = row._asdict()
            values.update(
                step=s + offset, engine=self.engine, stage=stage,
                pool_bytes=int(row.pool_bytes) + end_shift + self.cache.nbytes,
                pool_peak_bytes=peak,
                host_bytes=self.host_base + int(row.host_bytes) - held_so_far,
                d2h_bytes=int(row.d2h_bytes) - (sum(i["sim_host"] - i["host"]
                                                    for i in delivered_now)
                                                if self.copies else 0),
                copy_bytes=int(row.copy_bytes) + written,
                query_cache_bytes=self.cache.nbytes, maxsim_scratch_bytes=scratch)
            values[self.output_column] = int(values[self.output_column]) + end_shift
            self.rows.append(values)
        if self.rows:
            self.host_base = self.rows[-1]["host_bytes"]
        for local, i in info.items():
            rec = dict(records[local])
            r = i["req"]
            rec.update(request=r.request, role=r.role, query=r.query, engine=self.engine,
                       stage=stage, key=r.key, pooled_rows=int(rec["delivered_rows"]),
                       delivered_rows=0 if self.path.two_stage else i["rows"],
                       output_bytes=i["host"])
            for name in ("first_step", "finish_step", "delivered_step"):
                if rec[name] >= 0:
                    rec[name] += offset
            self.reqs.append(rec)

    def _owned_outputs(self, res: SimResult) -> list[int]:
        """Device bytes each request's delivered output owns (0: a view of output memory
        handed over as it is: one-shot, no head copy)."""
        out = []
        viewed = not copies_at_finish(self.cfg)
        last_action: dict[tuple[int, int], str] = {}  # (request, step) -> its last chunk's
        if viewed:
            chunks = res.chunks
            for r, step, action in zip(chunks["request"].tolist(), chunks["step"].tolist(),
                                       chunks["action"].tolist(), strict=True):
                last_action[(r, step)] = action
        for local, rec in enumerate(res.requests.itertuples(index=False)):
            nbytes = int(rec.output_bytes)
            if viewed and last_action.get((local, int(rec.finish_step))) in ("view", "offload"):
                nbytes = 0
            out.append(nbytes)
        return out

    def _post_head(self, fin: list[dict], step: int) -> tuple[int, int, int]:
        """What the scoring layer allocates in a step after the head, for the requests
        finishing in it (batch order): ``(peak above the head's outputs, bytes written,
        MaxSim scratch)``; updates the query cache."""
        if not fin:
            return 0, 0, 0
        # listwise: the simulator's JINA_RANKING kind already ran the marker rows and the
        # projector (tokpool.sim.vllm_rules.pooling_kind.JinaRankingKind)
        if not self.path.two_stage:
            return 0, 0, 0
        queries = [i for i in fin if i["req"].role == "query"]
        docs = [i for i in fin if i["req"].role == "doc"]
        clones = 0
        for i in queries:  # output.clone(), then a 0-d float32 zero for the host
            full = i["rows"] * i["row_bytes"]  # output.clone() of [rows, dim]
            clones += self.cache.store(i["req"].key, nbytes=full, uses=i["req"].uses)
        peak = clones + SCALAR_BYTES * len(queries) if queries else 0
        scratch = 0
        if docs:
            q_lens = [self.query_rows[i["req"].query] for i in docs]
            d_lens = [i["rows"] for i in docs]
            shared = len({i["req"].key for i in docs}) == 1
            flash = self.cuda and self.flash_kernel and shared
            width = docs[0]["row_bytes"] // self.out_size  # the head's dim, or `dimensions`
            plan = _maxsim_plan(tuple(q_lens), tuple(d_lens), width, self.cfg.output_dtype,
                                flash).copy()  # the copy keeps attrs; the cache stays clean
            plan.insert(0, "step", step)
            plan.insert(0, "engine", self.engine)
            self.maxsim.append(plan)
            scratch = int(plan.attrs["peak_scratch_bytes"])
            for i in docs:
                self.cache.score(i["req"].key)
            peak = max(peak, scratch)
        return peak, clones, scratch

    def steps_frame(self) -> pd.DataFrame:
        cols = ["engine", "stage", *STEP_COLUMNS, "query_cache_bytes", "maxsim_scratch_bytes"]
        frame = pd.DataFrame(self.rows)[cols]
        return frame.astype({c: "int64" for c in cols if not c.startswith("est_")})

    def requests_frame(self) -> pd.DataFrame:
        cols = ["request", "role", "query", "engine", "stage", "key", "pooled_rows",
                *[c for c in REQUEST_COLUMNS if c != "request"]]
        return pd.DataFrame(self.reqs)[cols]


@functools.lru_cache(maxsize=256)
def _maxsim_plan(q_lens: tuple[int, ...], d_lens: tuple[int, ...], width: int, dtype,
                 flash: bool) -> pd.DataFrame:
    """``maxsim_plan`` per distinct step (a call's steps repeat the same mini-batches: the
    explorers redraw them on every control)."""
    return maxsim_plan(q_lens, d_lens, width, dtype=dtype, device="cuda" if flash else "cpu",
                       path="flash" if flash else "reference")
