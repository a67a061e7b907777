"""Run prompts through a real vLLM engine and record what it computed and how it scheduled it.

This file is run as a SCRIPT by the Python that has vLLM (``python driver.py IN OUT``),
usually another virtual environment than tokpool's (``make engine``); it imports vLLM, torch and
safetensors only, never tokpool. ``tokpool.engine.vllm_venv`` writes the request and reads
the answer.

Request (``IN``, JSON)::

    {"model": DIR, "task": "token_embed" | "token_classify",
     "engine": {LLM keyword arguments: max_num_batched_tokens, max_num_seqs, ...},
     "runs": [[[token ids of prompt 0], [token ids of prompt 1], ...], ...],
     "memory": false}

With ``"memory": "cuda"`` it reads the CUDA allocator around each pooler call instead
(``CudaPoolerRecorder``: any runner, Model Runner V2 included). With ``"memory": true`` the
driver measures, per step, the bytes vLLM's own pooling holds
(``MemoryRecorder``): vLLM's objects are wrapped in the engine process — the runner's ``_pool``
(V1 ``GPUModelRunner``, which the CPU runner inherits), the model's pooler, ``AllPool.forward``
(``TokenPoolingMethod``), the token pooler heads, ``PoolerActivation.forward`` and the host copy
``_copy_pooler_output_to_cpu`` — and every storage an op returns inside the pooler is tracked
(a ``TorchDispatchMode`` sees each op's outputs; a ``weakref.finalize`` on the storage sees it
freed). A wrapper that is never called, or a pooling state that is not where V1 keeps it, is an
error (``vllm_changed``), never a silently empty record.

One engine is started; each run is one ``LLM.encode`` call (all its prompts are added before its
first step, so they all arrive at step 0). A request may instead name several engines, started
one after another in this process (``{"engines": [{"model": DIR, "task": ..., "engine": {...},
"runs": [...]}, ...]}``, without ``memory``): vLLM and torch are imported once, each engine is
built, runs its prompts and is freed before the next; the answer then holds ``{"engines":
[result, ...]}`` and the tensors ``"{engine}.{run}.{prompt}"``. ``Scheduler.schedule`` is wrapped
in-process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``): every step that schedules tokens is recorded as
``{prompt index: num_scheduled_tokens}``.

Answer (``OUT``, a directory): ``result.json`` (versions, engine start seconds, KV-cache blocks,
block size, per run the steps, the seconds and, with ``memory``, one record per step:
``MemoryRecorder.step_record``) and ``outputs.safetensors`` (``"{run}.{prompt}"``:
the per-token output ``[n_tokens, width]``, float32). A failure writes ``error.json``
(``{"kind": ..., "message": ...}``) and exits with status 3.

Scoring (``tokpool engine-check --score``): an engine spec may also hold ``"scores"``, a list of
``{"queries": [[ids]...], "docs": [[ids]...], "doc_query": [query index per doc],
"query_keys": [key per query]}``. Each is served as vLLM's two-stage late-interaction flow
(``ServingScores.flash_late_interaction``) on this one engine: an ``encode`` of the queries
with ``PoolingParams(task="token_embed", late_interaction_params=
build_late_interaction_query_params(key, uses))`` (uses: the documents paired with it), then
an ``encode`` of the documents with ``build_late_interaction_doc_params(key)``; the worker's
``LateInteractionRunner`` caches the queries and scores the documents. Then the same queries,
then the same documents, plainly (no late-interaction params: the engine's own token
embeddings, scheduled as the two stages were). ``LateInteractionRunner.
postprocess_pooler_output`` is wrapped: after every call, the bytes its ``_query_cache`` holds
(unique storages), its entries, and the documents it scored (batch order). Answer per score:
``result["scores"][k]`` (each stage's steps, the cache records) and tensors
``"s{k}.score"`` (``[n_docs]`` float32, the worker's scores), ``"s{k}.q.{i}"``,
``"s{k}.d.{j}"`` (the plain token embeddings).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
import weakref
from pathlib import Path

#: What the driver sets before vLLM is imported (a caller's own values win).
ENGINE_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # the engine core in this process: schedule wrappable
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # default binding: ~4 ms waits per op on shared cores
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache on a CPU
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
FAILED = 3


def _fail(out: Path, kind: str, message: str) -> int:
    (out / "error.json").write_text(json.dumps({"kind": kind, "message": message}))
    print(f"vllm driver: {kind}: {message}", file=sys.stderr)
    return FAILED


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:1000]


class VllmChanged(RuntimeError):
    """vLLM's code is not shaped as the memory recorder expects (a wrapper never called, a
    pooling state not where V1 keeps it): the record would be wrong, so there is none."""


class MemoryRecorder:
    """Bytes vLLM's pooling holds, per engine step, measured on vLLM's own objects.

    Tracked storages: every storage an op returns inside the model's pooler (clones, ``cat``,
    the head's cast, classifier and activation outputs, a host copy's copies) that is neither an
    input's storage nor already tracked. Each has a category — the innermost wrapped vLLM call
    running when it was made: ``pool`` (``AllPool.forward``), ``head`` (the pooler head),
    ``act`` (``PoolerActivation.forward``: its output; what it made and freed inside is
    ``act_temp``, e.g. ``F.normalize``'s row norms), ``copy`` (the host copy), ``pooler``
    (anything else inside the pooler: the cursor slices' small bool tensors). Once the runner
    hands a step's outputs over (after the host copy) they are delivered: no longer pooling's.

    Per step (``step_record``): the live requests' ``hidden_states_cache`` (every request the
    runner holds, preempted ones included) as unique storages — owned (tracked) or a view of a
    step's hidden states (its whole storage pinned: ``stranded`` = storage − covered bytes); the
    pooling bytes at the start, the in-step peak (right after every tracked allocation) with and
    without ``act_temp`` and ``pooler``; bytes allocated by category; the host copy's copied
    bytes; output rows per request; RSS.
    """

    def __init__(self, torch, order: dict[str, int]) -> None:
        # torch is the caller's module: imported by main() only after the engine's environment
        from torch.utils._python_dispatch import TorchDispatchMode

        self.torch = torch
        self.order = order  # request id -> prompt index in its run
        self.live: dict[int, list] = {}  # storage ptr -> [nbytes, category, delivered, id]
        self.pooling_live = 0  # bytes of tracked, undelivered storages
        self.events: list[tuple[int, int, str]] = []  # this step: (id, +/- bytes, category)
        self.stack: list[str] = []
        self.records: list[dict] = []
        self.calls = {"pool": 0, "pooler": 0, "allpool": 0, "head": 0, "act": 0, "copy": 0}
        self.hidden_ptrs: dict[int, int] = {}  # step hidden-state storage ptr -> nbytes
        self.pooler = ""  # the model's pooler, as vLLM prints it
        self.copied = 0
        self._temp_ids: set[int] = set()  # this step's act_temp storages
        self._next_id = 0
        self._finalize = weakref.finalize
        self._page = os.sysconf("SC_PAGE_SIZE")
        recorder = self

        class Allocations(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if recorder.stack:
                    recorder._seen(out, args, kwargs or {})
                return out

        self.mode_class = Allocations

    # --- storages -------------------------------------------------------------------------

    def _storages(self, value, into: set[int]) -> None:
        torch = self.torch
        if isinstance(value, torch.Tensor):
            into.add(value.untyped_storage().data_ptr())
        elif isinstance(value, (list, tuple)):
            for v in value:
                self._storages(v, into)
        elif isinstance(value, dict):
            for v in value.values():
                self._storages(v, into)

    def _seen(self, out, args, kwargs) -> None:
        """An op returned ``out``: track every storage it did not get from its inputs."""
        torch = self.torch
        outs = out if isinstance(out, (list, tuple)) else [out]
        inputs: set[int] = set()
        self._storages(args, inputs)
        self._storages(kwargs, inputs)
        category = self.stack[-1]
        for t in outs:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0 or ptr in inputs or ptr in self.live or ptr in self.hidden_ptrs:
                continue
            ident = self._next_id
            self._next_id += 1
            self.live[ptr] = [nbytes, category, False, ident]
            self.pooling_live += nbytes
            self.events.append((ident, nbytes, category))
            self._finalize(storage, self._freed, ptr, ident)

    def _freed(self, ptr: int, ident: int) -> None:
        rec = self.live.get(ptr)
        if rec is None or rec[3] != ident:
            return
        del self.live[ptr]
        if not rec[2]:
            self.pooling_live -= rec[0]
            self.events.append((ident, -rec[0], rec[1]))

    def deliver(self, tensors) -> None:
        """The runner handed these over (after the host copy): no longer pooling's bytes."""
        found: set[int] = set()
        self._storages(tensors, found)
        for ptr in found:
            rec = self.live.get(ptr)
            if rec is not None and not rec[2]:
                rec[2] = True
                self.pooling_live -= rec[0]

    # --- what the runner holds ------------------------------------------------------------

    def caches(self, runner) -> dict[str, list]:
        requests = getattr(runner, "requests", None)
        if not isinstance(requests, dict):
            raise VllmChanged("the model runner has no `requests` dict of CachedRequestState "
                              "(V1 keeps each request's pooling_states there)")
        out = {}
        for req_id, state in requests.items():
            pooling = getattr(state, "pooling_states", None)
            if pooling is None:
                continue
            cache = getattr(pooling, "hidden_states_cache", None)
            if not isinstance(cache, list):
                raise VllmChanged("PoolingStates has no list `hidden_states_cache`")
            out[req_id] = cache
        return out

    def held(self, runner) -> dict:
        """The caches now: unique storages, owned vs views, stranded, per request."""
        seen: dict[int, int] = {}  # storage ptr -> nbytes
        covered: dict[int, int] = {}  # view storages: ptr -> bytes the views cover
        owned = views = 0
        per_request: dict[str, int] = {}
        rows: dict[str, int] = {}
        for req_id, cache in self.caches(runner).items():
            if not cache:
                continue
            mine: set[int] = set()
            rows[self._index(req_id)] = sum(int(t.shape[0]) for t in cache)
            for t in cache:
                storage = t.untyped_storage()
                ptr = storage.data_ptr()
                mine.add(ptr)
                if ptr in self.live:
                    if ptr not in seen:
                        owned += storage.nbytes()
                else:  # a view of a step's hidden states: pins the whole storage
                    covered[ptr] = covered.get(ptr, 0) + t.numel() * t.element_size()
                    if ptr not in seen:
                        views += storage.nbytes()
                seen[ptr] = storage.nbytes()
            per_request[self._index(req_id)] = sum(seen[p] for p in mine)
        stranded = sum(seen[p] - c for p, c in covered.items())
        return {"cache_bytes": owned + views, "cache_owned_bytes": owned,
                "cache_view_bytes": views, "stranded_bytes": stranded,
                "cache_bytes_per_request": per_request, "cache_rows_per_request": rows}

    def _index(self, req_id: str) -> str:
        return str(self.order.get(req_id, req_id))

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page

    # --- one step -------------------------------------------------------------------------

    def begin(self, runner, hidden_states) -> None:
        self.events = []
        self.copied = 0
        storage = hidden_states.untyped_storage()
        self.hidden_ptrs = {storage.data_ptr(): storage.nbytes()}
        self._start_held = self.held(runner)
        self._start_live = self.pooling_live

    def end(self, runner, req_ids: list[str], outputs) -> None:
        # the step's peak, from its start, right after every tracked allocation
        start = self._start_live + self._start_held["cache_view_bytes"]
        temp = self._temp_ids
        level = named = start
        peak = peak_named = start
        allocated: dict[str, int] = {}
        for ident, delta, category in self.events:
            if ident in temp:
                category = "act_temp"
            level += delta
            if category not in ("act_temp", "pooler"):
                named += delta
            if delta > 0:
                allocated[category] = allocated.get(category, 0) + delta
                peak, peak_named = max(peak, level), max(peak_named, named)
        self._temp_ids = set()
        rows, out_bytes = {}, {}
        for req_id, out in zip(req_ids, outputs or [], strict=False):
            if out is not None:
                rows[self._index(req_id)] = int(out.shape[0])
                out_bytes[self._index(req_id)] = out.numel() * out.element_size()
        self.deliver([o for o in outputs or [] if o is not None])
        held = self.held(runner)
        self.records.append({
            "pool_start_bytes": start,
            "pool_bytes": self.pooling_live + held["cache_view_bytes"],
            "pool_peak_bytes": peak, "pool_peak_named_bytes": peak_named,
            "allocated_bytes": allocated, "host_copy_bytes": self.copied,
            "output_rows": rows, "output_bytes": out_bytes,
            "rss_bytes": self.rss(), "batch_order": [self.order.get(r, -1) for r in req_ids],
            **held,
        })
        self.hidden_ptrs = {}

    # --- wrappers around vLLM's own code --------------------------------------------------

    def install(self) -> None:
        """Wrap vLLM's V1 runner, pooling method, heads, activation and host copy."""
        from vllm.model_executor.layers.pooler.activations import PoolerActivation
        from vllm.model_executor.layers.pooler.tokwise.heads import TokenPoolerHead
        from vllm.model_executor.layers.pooler.tokwise.methods import TokenPoolingMethod
        from vllm.v1.worker import gpu_model_runner as gmr

        recorder = self
        mode = self.mode_class()

        def category(name: str, original):
            def wrapped(*args, **kwargs):
                recorder.calls[name] += 1
                recorder.stack.append(name if name != "allpool" else "pool")
                try:
                    return original(*args, **kwargs)
                finally:
                    recorder.stack.pop()
            return wrapped

        for cls, name in ((TokenPoolingMethod, "allpool"), (TokenPoolerHead, "head")):
            for sub in _subclasses(cls):
                if "forward" in vars(sub):
                    sub.forward = category(name, vars(sub)["forward"])

        act_forward = PoolerActivation.forward

        def activation(self_, pooled_data):
            recorder.calls["act"] += 1
            first = len(recorder.events)
            recorder.stack.append("act")
            try:
                out = act_forward(self_, pooled_data)
            finally:
                recorder.stack.pop()
            kept: set[int] = set()
            recorder._storages(out, kept)
            made = {ident for ident, delta, _ in recorder.events[first:] if delta > 0}
            kept_ids = {recorder.live[p][3] for p in kept if p in recorder.live}
            recorder._temp_ids |= made - kept_ids
            return out

        PoolerActivation.forward = activation

        copy = gmr._copy_pooler_output_to_cpu

        def host_copy(raw_pooler_output, finished_mask):
            recorder.calls["copy"] += 1
            recorder.stack.append("copy")
            try:
                out = copy(raw_pooler_output=raw_pooler_output, finished_mask=finished_mask)
            finally:
                recorder.stack.pop()
            before: set[int] = set()
            recorder._storages(raw_pooler_output, before)
            for t in out:
                if t is not None and t.untyped_storage().data_ptr() not in before:
                    recorder.copied += t.numel() * t.element_size()
            return out

        gmr._copy_pooler_output_to_cpu = host_copy
        pool = gmr.GPUModelRunner._pool

        def runner_pool(self_, hidden_states, num_scheduled_tokens, *args, **kwargs):
            recorder.calls["pool"] += 1
            pooler = getattr(getattr(self_, "model", None), "pooler", None)
            if pooler is None:
                raise VllmChanged("the runner's model has no `pooler`")
            if not getattr(pooler, "_tokpool_wrapped", False):
                pooler.forward = category("pooler", pooler.forward)
                pooler._tokpool_wrapped = True
                recorder.pooler = " ".join(str(pooler).split())[:2000]
            req_ids = list(self_.input_batch.req_ids)
            recorder.begin(self_, hidden_states)
            with mode:
                result = pool(self_, hidden_states, num_scheduled_tokens, *args, **kwargs)
            outputs = getattr(result, "pooler_output", None)
            if outputs is None:
                raise VllmChanged(f"_pool returned {type(result).__name__} without "
                                  "`pooler_output` (the CPU runner's synchronous output)")
            recorder.end(self_, req_ids, outputs)
            return result

        gmr.GPUModelRunner._pool = runner_pool

    def check_called(self) -> None:
        """Every wrapper ran (``act`` only where the head has an activation)."""
        missing = [name for name in ("pool", "pooler", "allpool", "head", "copy")
                   if not self.calls[name]]
        if missing:
            raise VllmChanged(f"vLLM never called the wrapped {missing} "
                              f"(calls: {self.calls}): its pooling path changed")


class CudaPoolerRecorder:
    """On a CUDA engine (any runner: Model Runner V2 by default): the CUDA caching allocator's
    REQUESTED bytes (exact tensor sizes, not 512-byte blocks) around each call of the model's
    pooler (the outermost ``Pooler.forward`` subclass call), synchronised: at entry, the peak
    inside it (from entry) and at exit. One record per call, i.e. per step that pooled."""

    def __init__(self, torch) -> None:
        self.torch = torch
        self.records: list[dict] = []
        self.depth = 0

    def _requested(self, key: str) -> int:
        stats = self.torch.cuda.memory_stats()
        return int(stats.get(f"requested_bytes.all.{key}", stats[f"allocated_bytes.all.{key}"]))

    def install(self) -> None:
        from vllm.model_executor.layers.pooler.abstract import Pooler

        recorder, torch = self, self.torch

        def measured(original):
            def forward(*args, **kwargs):
                if recorder.depth:
                    return original(*args, **kwargs)
                torch.cuda.synchronize()
                before = recorder._requested("current")
                torch.cuda.reset_peak_memory_stats()
                recorder.depth += 1
                try:
                    out = original(*args, **kwargs)
                finally:
                    recorder.depth -= 1
                torch.cuda.synchronize()
                rows = [None if t is None else int(t.shape[0]) for t in
                        (out if isinstance(out, list) else list(out))]
                recorder.records.append({
                    "allocated_before": before,
                    "peak_delta": recorder._requested("peak") - before,
                    "net_delta": recorder._requested("current") - before,
                    "output_rows": rows,
                })
                return out
            return forward

        for sub in _subclasses(Pooler):
            if "forward" in vars(sub):
                sub.forward = measured(vars(sub)["forward"])

    def check_called(self) -> None:
        if not self.records:
            raise VllmChanged("the model's pooler (a Pooler subclass's forward) was never "
                              "called: vLLM's pooling path changed")


class QueryCacheRecorder:
    """The worker's late-interaction query cache after every ``postprocess_pooler_output``
    call (vLLM's ``LateInteractionRunner``, wrapped in the engine process): bytes (unique
    storages of ``_query_cache``), entries, and the prompts it scored and cached (batch
    order, as ``order`` numbers them). One record per call, i.e. per step that pooled."""

    def __init__(self, order: dict[str, int]) -> None:
        self.order = order
        self.records: list[dict] = []
        self.calls = 0

    def install(self) -> None:
        from vllm.v1.pool.late_interaction_runner import LateInteractionRunner

        recorder = self
        original = LateInteractionRunner.postprocess_pooler_output

        def postprocess(self_, raw_pooler_output, pooling_params, req_ids, finished_mask):
            out = original(self_, raw_pooler_output, pooling_params, req_ids, finished_mask)
            recorder.calls += 1
            cache = getattr(self_, "_query_cache", None)
            if not isinstance(cache, dict):
                raise VllmChanged("LateInteractionRunner has no dict `_query_cache`")
            storages = {}
            for t in cache.values():
                storage = t.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
            scored, cached = [], []
            for req_id, params, done in zip(req_ids, pooling_params, finished_mask,
                                            strict=True):
                li = getattr(params, "late_interaction_params", None)
                if not done or li is None:
                    continue
                (scored if li.mode == "score_doc" else cached).append(
                    recorder.order.get(req_id, -1))
            recorder.records.append({"bytes": sum(storages.values()), "entries": len(cache),
                                     "scored": scored, "cached": cached})
            return out

        LateInteractionRunner.postprocess_pooler_output = postprocess


def _subclasses(cls) -> list:
    out, todo = [], [cls]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out



def main(argv: list[str]) -> int:
    request_file, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    request = json.loads(request_file.read_text())
    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    try:
        # imported only now: the engine's environment above must be set first
        import torch
        import vllm
        from safetensors.torch import save_file
        from vllm import LLM
        from vllm.config import PoolerConfig
        from vllm.inputs import TokensPrompt
        from vllm.v1.core.sched.scheduler import Scheduler
    except Exception as err:  # ImportError, or a vLLM build that fails to import
        return _fail(out, "no_vllm", _first_line(err))

    steps: list[dict[str, int]] = []
    preempted: list[list[str]] = []
    order: dict[str, int] = {}
    original = Scheduler.schedule

    def recording_schedule(self, *args, **kwargs):
        for req_id in self.requests:  # insertion order = the order encode added them
            order.setdefault(req_id, len(order))
        result = original(self, *args, **kwargs)
        scheduled = dict(result.num_scheduled_tokens)
        if scheduled:
            steps.append(scheduled)
            preempted.append(sorted(getattr(result, "preempted_req_ids", None) or ()))
        return result

    Scheduler.schedule = recording_schedule
    recorder = None
    if request.get("memory") == "cuda":
        recorder = CudaPoolerRecorder(torch)
    elif request.get("memory"):
        recorder = MemoryRecorder(torch, order)
    if recorder is not None:
        try:
            recorder.install()
        except (ImportError, AttributeError) as err:
            return _fail(out, "vllm_changed", f"cannot wrap vLLM's pooling for the memory "
                         f"record ({_first_line(err)})")
    scoring = None
    if any(spec.get("scores") for spec in request.get("engines", [request])):
        scoring = QueryCacheRecorder(order)
        try:
            scoring.install()
        except (ImportError, AttributeError) as err:
            return _fail(out, "vllm_changed", f"cannot wrap vLLM's LateInteractionRunner "
                         f"({_first_line(err)})")
    several = "engines" in request
    if several and recorder is not None:  # its wrappers and live storages span one engine
        return _fail(out, "bad_request", "the memory record measures one engine per process")
    engines = request["engines"] if several else [request]
    results, tensors = [], {}
    for e, spec in enumerate(engines):
        result, engine_tensors = _serve(spec, LLM, PoolerConfig, TokensPrompt, steps, preempted,
                                        order, recorder, torch, vllm, scoring)
        if isinstance(result, str):  # (kind, message): this engine failed
            return _fail(out, result, f"engine {e}: {engine_tensors}" if several
                         else engine_tensors)
        results.append(result)
        tensors.update({(f"{e}.{k}" if several else k): v for k, v in engine_tensors.items()})
        gc.collect()  # the engine just freed (its KV cache, weights) before the next is built
    save_file(tensors, str(out / "outputs.safetensors"))
    answer = {"engines": results} if several else results[0]
    (out / "result.json").write_text(json.dumps(answer, indent=1))
    return 0


def _serve(spec: dict, LLM, PoolerConfig, TokensPrompt, steps: list, preempted: list,
           order: dict, recorder, torch, vllm, scoring=None):
    """Build one engine for ``spec`` (model, task, engine kwargs, runs), encode its runs and
    free it: ``(result, tensors)``, or ``(kind, message)`` where it fails."""
    task = spec["task"]
    start = time.perf_counter()
    try:
        llm = LLM(model=spec["model"], runner="pooling",
                  pooler_config=PoolerConfig(task=task), **spec["engine"])
    except Exception as err:
        kind = "unsupported_task" if "Unsupported task" in str(err) else "model_not_loadable"
        return kind, _first_line(err)
    start_s = time.perf_counter() - start
    config = llm.llm_engine.vllm_config
    max_seqs = config.scheduler_config.max_num_seqs
    tensors: dict[str, torch.Tensor] = {}
    runs = []
    for r, prompts in enumerate(spec["runs"]):
        if len(prompts) > 2 * max_seqs:  # LLM.encode would add the rest as others finish
            return "bad_request", (f"run {r} has {len(prompts)} prompts; at most "
                                   f"2 x max_num_seqs = {2 * max_seqs} all arrive at step 0")
        steps.clear()
        preempted.clear()
        order.clear()
        if recorder is not None:
            recorder.records = []
        t0 = time.perf_counter()
        try:
            results = llm.encode([TokensPrompt(prompt_token_ids=p) for p in prompts],
                                 pooling_task=task, use_tqdm=False)
        except Exception as err:
            kind = "vllm_changed" if "VllmChanged" in _first_line(err) else "encode_failed"
            return kind, _first_line(err)
        seconds = time.perf_counter() - t0
        ids = sorted(order, key=order.get)
        if len(ids) != len(prompts):
            return "bad_schedule", (f"run {r}: {len(prompts)} prompts but the scheduler saw "
                                    f"{len(ids)} requests")
        index = {req_id: i for i, req_id in enumerate(ids)}
        # external id ("7" of "7-ab12cd34") -> prompt: an aborted request returns no output
        prompt_of = {k.split("-", 1)[0]: v for k, v in index.items()}
        done = {prompt_of.get(res.request_id, i): res for i, res in enumerate(results)}
        for i, res in done.items():
            tensors[f"{r}.{i}"] = res.outputs.data.detach().to("cpu", torch.float32).contiguous()
        run = {
            "seconds": round(seconds, 3),
            "steps": [{str(index[k]): v for k, v in step.items()} for step in steps],
            "preempted": [[index[k] for k in step] for step in preempted],
            "output_rows": [int(done[i].outputs.data.shape[0]) if i in done else 0
                            for i in range(len(prompts))],
        }
        if recorder is not None:
            try:
                recorder.check_called()
            except VllmChanged as err:
                return "vllm_changed", str(err)
            if isinstance(recorder, MemoryRecorder) and len(recorder.records) != len(steps):
                return "vllm_changed", (f"run {r}: {len(steps)} scheduled steps but the "
                                        f"runner's _pool ran {len(recorder.records)} times")
            run["memory"] = recorder.records
        runs.append(run)
    scores = []
    for k, work in enumerate(spec.get("scores") or ()):
        answer = _score(llm, k, work, task, TokensPrompt, steps, order, scoring, torch)
        if isinstance(answer[0], str):
            return answer
        scores.append(answer[0])
        tensors.update(answer[1])
    import resource  # Linux: ru_maxrss in KiB

    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cache = config.cache_config
    result = {
        "vllm_version": vllm.__version__, "torch_version": torch.__version__,
        "device": str(config.device_config.device), "start_seconds": round(start_s, 2),
        "num_kv_blocks": cache.num_gpu_blocks, "block_size": cache.block_size,
        "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
        "max_num_seqs": max_seqs,
        "long_prefill_token_threshold": config.scheduler_config.long_prefill_token_threshold,
        "enforce_eager": config.model_config.enforce_eager,
        "dtype": str(config.model_config.dtype).removeprefix("torch."),
        "head_dtype": str(config.model_config.head_dtype).removeprefix("torch."),
        "hidden_size": config.model_config.get_hidden_size(),
        "async_scheduling": bool(config.scheduler_config.async_scheduling),
        "pooler": "" if recorder is None else recorder.pooler,
        "peak_rss_mb": round(peak_rss_mb),
        "runs": runs,
        **({"scores": scores} if scores else {}),
    }
    del llm
    return result, tensors


def _score(llm, k: int, work: dict, task: str, TokensPrompt, steps: list, order: dict,
           scoring: QueryCacheRecorder, torch):
    """One two-stage late-interaction score on ``llm`` (see the module docstring), then the
    same prompts plainly: ``(record, tensors)``, or ``(kind, message)`` where it fails."""
    from vllm.pooling_params import PoolingParams
    from vllm.v1.pool.late_interaction import (
        build_late_interaction_doc_params,
        build_late_interaction_query_params,
    )

    queries, docs, doc_query = work["queries"], work["docs"], work["doc_query"]
    keys = work["query_keys"]
    uses = [sum(1 for q in doc_query if q == i) for i in range(len(queries))]
    stages = [
        ("query", queries, [PoolingParams(task=task, late_interaction_params=
                                          build_late_interaction_query_params(keys[i], uses[i]))
                            for i in range(len(queries))]),
        ("doc", docs, [PoolingParams(task=task, late_interaction_params=
                                     build_late_interaction_doc_params(keys[q]))
                       for q in doc_query]),
        ("plain_query", queries, None),
        ("plain_doc", docs, None),
    ]
    record: dict = {}
    tensors: dict = {}
    for name, prompts, params in stages:
        steps.clear()
        order.clear()
        scoring.records = []
        calls = scoring.calls
        try:
            results = llm.encode([TokensPrompt(prompt_token_ids=p) for p in prompts],
                                 pooling_params=params, pooling_task=task, use_tqdm=False)
        except Exception as err:
            return "encode_failed", f"score {k} {name} stage: {_first_line(err)}"
        if scoring.calls == calls:
            return "vllm_changed", (f"score {k} {name} stage: LateInteractionRunner."
                                    "postprocess_pooler_output was never called: vLLM's "
                                    "late-interaction path changed")
        if len(scoring.records) != len(steps):
            return "vllm_changed", (f"score {k} {name} stage: {len(steps)} scheduled steps but "
                                    f"postprocess_pooler_output ran {len(scoring.records)} "
                                    "times")
        ids = sorted(order, key=order.get)
        index = {req_id: i for i, req_id in enumerate(ids)}
        record[f"{name}_steps"] = [{str(index[r]): v for r, v in step.items()}
                                   for step in steps]
        record[f"{name}_cache"] = scoring.records
        data = [res.outputs.data.detach().to("cpu") for res in results]
        if name.startswith("plain"):
            prefix = "q" if name == "plain_query" else "d"
            for i, t in enumerate(data):
                tensors[f"s{k}.{prefix}.{i}"] = t.to(torch.float32).contiguous()
        else:
            shapes = {tuple(t.shape) for t in data}
            if shapes != {()}:
                return "vllm_changed", (f"score {k} {name} stage: outputs of shapes "
                                        f"{sorted(shapes)}, not the worker's 0-d scalars")
            record[f"{name}_dtypes"] = sorted({str(t.dtype).removeprefix("torch.")
                                               for t in data})
            if name == "query":
                record["query_outputs"] = [float(t) for t in data]
            else:
                tensors[f"s{k}.score"] = torch.stack(data).contiguous()
    return record, tensors


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except SystemExit:
        raise
    except BaseException:  # a driver bug: the traceback goes to stderr for the caller
        traceback.print_exc()
        sys.exit(1)
