"""The schedule as the installed vLLM computes it: its own V1 ``Scheduler`` driven on the CPU.

``vllm_schedule(prompt_lens, ...)`` builds vLLM's ``Scheduler`` (or ``AsyncScheduler``) and
``KVCacheManager`` from ``EngineArgs(...).create_engine_config()`` (a ``config.json`` and no
weights in a temporary folder), adds one pooling request per prompt and runs the engine core's
loop step by step with fake model outputs: each step's ``ModelRunnerOutput`` carries a pooler
output exactly for the requests whose last prompt token that step computes, as the model
runner does. What vLLM decides comes back as tokpool ``ScheduledStep``s, so every backend of
``tp.simulate`` runs on it unchanged.

The engine-core loop is ``EngineCore.step`` (sync: schedule, execute, ``update_from_output``)
or ``EngineCore.step_with_batch_queue`` (async scheduling: a queue of
``VllmConfig.max_concurrent_batches`` = 2 steps, so step N+1 is scheduled before step N's
output is processed), replayed here without threads. vLLM's CPU platform switches async
scheduling off (``CpuPlatform.check_and_update_config``); with ``async_scheduling=True`` it is
switched back on after the config is built and vLLM's ``AsyncScheduler`` is used, as on a GPU
(vLLM's own ``tests/v1/core/utils.py`` does the same).

Step indices: the k-th ``schedule()`` call is step k; a request with arrival step a is added
right before call a. While the engine holds no request the index jumps to the next arrival;
calls that schedule no token (async: waiting for a step's output) are not listed, so step
indices can jump (``tokpool.sim.schedule.scheduler.engine_steps`` then adds the collect-only
iterations); a preemption made in such a call is listed with the next step.

Fixed choices (tokpool's scheduler models them the same way): FCFS policy, no speculative
decoding, ``kv_cache_blocks`` = vLLM's ``num_gpu_blocks`` (block 0 is vLLM's null block, so
``kv_cache_blocks - 1`` blocks hold KV), the hybrid KV-cache manager on (as on a GPU). The KV
cache has one group per ``kv_cache_groups`` entry, each one layer of vLLM's
``FullAttentionSpec`` or ``SlidingWindowSpec`` with ``block_size`` tokens per block (the pool
counts blocks, so a group's page size does not change the schedule; vLLM's own grouping of a
model's layers is checked in ``tests/test_parity_kv_spec.py``). Prefix caching as asked
(``enable_prefix_caching``); each request's ``PoolingParams`` goes through vLLM's own
``PoolingParams.verify``, which makes token tasks skip reading the cache. Prompts have the
given token ids, else distinct ones (no prefix-cache hits between prompts).

Cost: vLLM's Python per step (about 0.1–0.9 ms a step here; ``benchmarks/bench_schedule.py``
has the ratio to tokpool's scheduler); the engine config is built once per flag set (cached).
"""

from __future__ import annotations

import collections
import functools
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ...guard import ensure_fits
from ...pooler.vllm_bridge import (
    VLLM_REFERENCE_VERSION,
    VllmUnavailableError,
    prepare_vllm_environment,
    quiet_vllm_import,
)
from ..schedule.aborts import check_aborts
from ..schedule.kv_blocks import unlimited_blocks
from ..schedule.scheduler import (
    ScheduledStep,
    check_arrival_steps,
    check_prompt_token_ids,
    refuse_what_the_cache_never_admits,
    validate_prompt_lens,
)

# Called through the module, never copied: the refusal tests swap the checks there.
from ..vllm_rules import engine_checks, step_order
from ..vllm_rules.kv_spec import max_in_flight_tokens
from ..vllm_rules.prefix_cache import reads_prefix_cache

__all__ = ["vllm_schedule", "vllm_scheduler_available", "vllm_scheduler_unavailable_reason"]

_MODULES: dict[str, Any] = {}

#: A small decoder's config.json: the scheduler reads only its max length and layer count
#: (no weights are ever loaded). A causal decoder keeps chunked prefill eligible.
_CONFIG_JSON = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "num_hidden_layers": 1,
    "vocab_size": 1000,
    "max_position_embeddings": 1 << 20,
    "torch_dtype": "float32",
}

#: max_model_len with chunked prefill (any prompt tokpool simulates fits under it).
_CHUNKED_MAX_MODEL_LEN = 1 << 20


def _vllm() -> dict[str, Any]:
    """Import vLLM's scheduler pieces once (``VllmUnavailableError`` saying how to install)."""
    if _MODULES:
        if "error" in _MODULES:
            raise VllmUnavailableError(_MODULES["error"])
        return _MODULES
    prepare_vllm_environment()
    try:
        with quiet_vllm_import():  # no vLLM/torch import-time log lines in a cell
            import vllm
            from vllm.engine.arg_utils import EngineArgs
            from vllm.pooling_params import PoolingParams
            from vllm.utils.hashing import sha256
            from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
            from vllm.v1.core.sched.async_scheduler import AsyncScheduler
            from vllm.v1.core.sched.scheduler import Scheduler
            from vllm.v1.kv_cache_interface import (
                FullAttentionSpec,
                KVCacheConfig,
                KVCacheGroupSpec,
                SlidingWindowSpec,
            )
            from vllm.v1.outputs import ModelRunnerOutput
            from vllm.v1.request import Request, RequestStatus
            from vllm.v1.structured_output import StructuredOutputManager
    except Exception as err:  # ImportError, or vLLM's RuntimeError on an unknown device
        _MODULES["error"] = (
            f"scheduler='vllm' needs vLLM, which cannot be imported here "
            f"({type(err).__name__}: {err}). Install vLLM {VLLM_REFERENCE_VERSION} into this "
            "environment with `make vllm` (vLLM with --no-deps plus the pinned pure-Python "
            "packages in scripts/vllm-requirements.txt; torch is left alone), or use "
            "scheduler='tokpool'"
        )
        raise VllmUnavailableError(_MODULES["error"]) from err
    init_none_hash(sha256)
    _MODULES.update(
        torch=torch, version=vllm.__version__, EngineArgs=EngineArgs,
        PoolingParams=PoolingParams, Scheduler=Scheduler, AsyncScheduler=AsyncScheduler,
        KVCacheConfig=KVCacheConfig, KVCacheGroupSpec=KVCacheGroupSpec,
        FullAttentionSpec=FullAttentionSpec, SlidingWindowSpec=SlidingWindowSpec,
        ModelRunnerOutput=ModelRunnerOutput,
        Request=Request, RequestStatus=RequestStatus,
        StructuredOutputManager=StructuredOutputManager,
        hasher=get_request_block_hasher, sha256=sha256, model_dir=None,
    )
    return _MODULES


def vllm_scheduler_available() -> bool:
    """Whether ``vllm_schedule`` can run here (vLLM importable)."""
    return vllm_scheduler_unavailable_reason() is None


def _model_dir() -> str:
    m = _vllm()
    if m["model_dir"] is None:
        path = tempfile.mkdtemp(prefix="tokpool-vllm-run-")
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(_CONFIG_JSON, f)
        m["model_dir"] = path
    return m["model_dir"]


@functools.lru_cache(maxsize=64)
def _engine_config(
    max_num_batched_tokens: int,
    max_num_seqs: int,
    enable_chunked_prefill: bool,
    long_prefill_token_threshold: int,
    block_size: int,
    async_scheduling: bool,
    enable_prefix_caching: bool = False,
    max_model_len: int | None = None,
) -> Any:
    """vLLM's resolved ``VllmConfig`` for one flag set (built once: ~5 ms to seconds)."""
    m = _vllm()
    # Without chunking vLLM requires max_num_batched_tokens >= max_model_len
    # (SchedulerConfig.verify_max_model_len); prompts over the budget are refused before.
    if max_model_len is None:
        max_model_len = (_CHUNKED_MAX_MODEL_LEN if enable_chunked_prefill
                         else max_num_batched_tokens)
    args = m["EngineArgs"](
        model=_model_dir(), runner="pooling", skip_tokenizer_init=True,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        enable_chunked_prefill=enable_chunked_prefill,
        long_prefill_token_threshold=long_prefill_token_threshold,
        enable_prefix_caching=enable_prefix_caching, max_model_len=max_model_len,
        block_size=block_size,
        async_scheduling=async_scheduling,
    )
    with quiet_vllm_import():  # vLLM logs its resolution at INFO/WARNING (torch too, 2.14)
        config = args.create_engine_config()
    sched = config.scheduler_config
    if bool(sched.enable_chunked_prefill) != enable_chunked_prefill:
        raise ValueError(  # a tokpool bug guard: the stand-in model must keep the flag
            f"vLLM resolved enable_chunked_prefill={sched.enable_chunked_prefill} for the "
            f"stand-in model, asked for {enable_chunked_prefill}"
        )
    # vLLM's CPU platform turns async scheduling off (CpuPlatform.check_and_update_config);
    # tokpool simulates a GPU engine, where a pooling model runs it when asked for.
    sched.async_scheduling = async_scheduling
    # ... and the hybrid KV-cache manager (VllmConfig.__post_init__: not supported on CPU)
    sched.disable_hybrid_kv_cache_manager = False
    return config


def vllm_schedule(
    prompt_lens: Sequence[int],
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    enable_chunked_prefill: bool,
    long_prefill_token_threshold: int | None = None,
    kv_cache_blocks: int | None = None,
    block_size: int = 16,
    async_scheduling: bool = False,
    task: str = "token_embed",
    arrival_steps: Sequence[int] | None = None,
    kv_cache_groups: Sequence[int | None] = (None,),
    max_model_len: int | None = None,
    enable_prefix_caching: bool = False,
    prompt_token_ids: Sequence[Sequence[int]] | None = None,
    aborts: Mapping[int, int] | None = None,
    abort_log: list[tuple[int, int, bool]] | None = None,
) -> list[ScheduledStep]:
    """The prefill schedule the installed vLLM's own scheduler computes for these prompts.

    Args:
        prompt_lens: prompt length per request (each >= 1).
        max_num_batched_tokens, max_num_seqs, enable_chunked_prefill,
            long_prefill_token_threshold, block_size, async_scheduling: vLLM's flags of those
            names (``None``/0 threshold: no cap).
        kv_cache_blocks: vLLM's ``num_gpu_blocks`` (block 0 is the null block); ``None``:
            enough for every prompt at once (``kv_blocks.unlimited_blocks``).
        task: the pooling task of every request (``PoolingParams(task=...)``).
        arrival_steps: per request, the ``schedule()`` call it is added before (default 0).
        kv_cache_groups: each KV-cache group's sliding window (``None``: full attention).
        max_model_len: the engine's (default: 2**20 with chunked prefill, else the budget).
        enable_prefix_caching: vLLM's ``--enable-prefix-caching``.
        prompt_token_ids: per request, its token ids (default: distinct ids per prompt).
        aborts: ``{request: step}``: vLLM's ``Scheduler.finish_requests([id],
            RequestStatus.FINISHED_ABORTED)`` right before ``schedule()`` call ``step``
            (after that step's arrivals), as the engine core applies a client's abort.
        abort_log: when given, receives ``(request, step, took_effect)`` per abort, where
            ``took_effect`` is vLLM's own answer (``finish_requests`` returns the requests it
            aborted, never one already finished).

    Returns:
        The steps that schedule tokens, as ``tokpool.sim.schedule.scheduler.schedule`` returns them:
        chunks ``(request, start, stop)`` in Model Runner V2's row order
        (``vllm_rules.step_order`` of vLLM's scheduling order), ``finished``: the requests
        whose pooler output this step delivered (vLLM's ``update_from_output`` finished
        them; under async also one aborted while this step was in flight: its runner pooled
        it, vLLM dropped the output), ``preempted``: vLLM's ``preempted_req_ids`` of the step,
        ``kv_blocks``: the KV blocks vLLM holds right after scheduling the step (the null
        block not counted).

    Raises:
        VllmUnavailableError: vLLM cannot be imported (says to run ``make vllm``).
        ValueError: bad prompt lengths or flags, or a workload vLLM's scheduler can never
            finish (it would spin forever): the message names the flag to change.
    """
    lens = validate_prompt_lens(prompt_lens)
    arrival = check_arrival_steps(arrival_steps, len(lens))
    token_ids = check_prompt_token_ids(prompt_token_ids, lens)
    abort_at = check_aborts(aborts, len(lens), arrival)
    groups = tuple(kv_cache_groups)
    threshold = long_prefill_token_threshold or 0
    _check_size(lens, block_size)
    # the refusals tokpool's scheduler applies, from the same functions (vLLM would spin)
    engine_checks.check_unchunked_prompts_schedulable(
        lens, max_num_batched_tokens, enable_chunked_prefill=enable_chunked_prefill)
    refuse_what_the_cache_never_admits(
        lens, kv_cache_blocks, block_size=block_size, kv_cache_groups=groups,
        max_model_len=max_model_len, reads_cache=enable_prefix_caching and reads_prefix_cache(task),
        in_flight=max_in_flight_tokens(max_num_batched_tokens, async_scheduling=async_scheduling),
        token_ids=token_ids)
    m = _vllm()
    config = _engine_config(max_num_batched_tokens, max_num_seqs, enable_chunked_prefill,
                            threshold, block_size, async_scheduling, enable_prefix_caching,
                            max_model_len)
    num_blocks = (unlimited_blocks(lens, block_size, len(groups)) if kv_cache_blocks is None
                  else kv_cache_blocks)
    config.cache_config.num_gpu_blocks = num_blocks
    spec = {"block_size": block_size, "num_kv_heads": 1, "head_size": 1,
            "dtype": m["torch"].float32}
    kv_config = m["KVCacheConfig"](
        num_blocks=num_blocks, kv_cache_tensors=[],
        kv_cache_groups=[m["KVCacheGroupSpec"]([f"layer{g}"], m["FullAttentionSpec"](**spec)
                                               if window is None else
                                               m["SlidingWindowSpec"](**spec,
                                                                      sliding_window=window))
                         for g, window in enumerate(groups)],
    )
    cls = m["AsyncScheduler"] if async_scheduling else m["Scheduler"]
    with quiet_vllm_import():  # its first build imports more of vLLM (and logs it)
        scheduler = cls(
            vllm_config=config, kv_cache_config=kv_config,
            structured_output_manager=m["StructuredOutputManager"](config),
            block_size=block_size,
        )
    return _run(scheduler, m, lens, arrival, task, block_size, num_blocks,
                queue_size=config.max_concurrent_batches, token_ids=token_ids,
                model_config=config.model_config, aborts=abort_at,
                abort_log=abort_log if abort_log is not None else [])


#: Bytes vLLM's scheduler holds per prompt token (its token-id lists, KV blocks and block
#: hashes as Python objects): 63 measured for 4M tokens here, rounded up.
BYTES_PER_TOKEN = 80


def _check_size(lens: list[int], block_size: int) -> None:
    """Refuse, before vLLM builds anything, a workload its scheduler cannot hold: it keeps
    every prompt token id and KV block as Python objects (``Request``, ``BlockPool``), about
    ``BYTES_PER_TOKEN`` bytes a token, where tokpool's scheduler only counts. (Its time, about
    a microsecond a token, is bounded with the engine steps: ``backends.limits.check_work``.)
    """
    tokens = sum(lens)
    ensure_fits(tokens * BYTES_PER_TOKEN,
                what=f"scheduler='vllm' on {len(lens):,} prompt{'s' * (len(lens) > 1)} "
                     f"({tokens:,} tokens: vLLM's Request and BlockPool hold every token id "
                     "and KV block)",
                cheaper="scheduler='tokpool' (the same schedule: tests/test_parity_schedule.py)")


def _run(scheduler: Any, m: dict[str, Any], lens: list[int], arrival: list[int], task: str,
         block_size: int, num_blocks: int, *, queue_size: int,
         token_ids: list[list[int]] | None, model_config: Any, aborts: dict[int, int],
         abort_log: list[tuple[int, int, bool]]) -> list[ScheduledStep]:
    """``EngineCore.step`` / ``step_with_batch_queue`` with fake model outputs."""
    torch = m["torch"]
    hasher = m["hasher"](block_size, m["sha256"])
    progress = [0] * len(lens)  # tokens computed per request, as the records tell
    order = sorted(range(len(lens)), key=lambda i: (arrival[i], i))
    pending = collections.deque(order)
    queue: collections.deque[tuple[int, Any]] = collections.deque()
    records: dict[int, dict[str, Any]] = {}
    pool = scheduler.kv_cache_manager.block_pool
    token = 0
    index = 0
    idle_calls = 0
    carried: list[int] = []  # preempted in a call that scheduled nothing: told with the next
    pooled = torch.zeros(1)
    abort_at = sorted((s, r) for r, s in aborts.items())
    aborted: set[int] = set()
    while True:
        if not scheduler.has_requests() and not queue:
            if not pending:
                break
            index = max(index, arrival[pending[0]])  # idle until the next arrival
        while pending and arrival[pending[0]] <= index:
            r = pending.popleft()
            if token_ids is not None:
                ids = token_ids[r]
            else:
                ids = list(range(token, token + lens[r]))  # distinct ids: no shared prefix
                token += lens[r]
            params = m["PoolingParams"](task=task)
            params.verify(model_config)  # vLLM's defaults: token tasks skip the prefix cache
            scheduler.add_request(m["Request"](str(r), ids, None, params, block_hasher=hasher))
        while abort_at and abort_at[0][0] <= index:  # EngineCore.abort_requests
            s, r = abort_at.pop(0)
            done = scheduler.finish_requests(str(r), m["RequestStatus"].FINISHED_ABORTED)
            abort_log.append((r, s, bool(done)))
            if done:
                aborted.add(r)
        if scheduler.has_requests():
            out = scheduler.schedule()
            executed = out.total_num_scheduled_tokens > 0
            if executed:
                idle_calls = 0
                chunks, cached = [], []
                preempted = [*carried, *sorted(int(r) for r in out.preempted_req_ids or ())]
                for r in preempted:
                    progress[r] = 0
                for rid, n in out.num_scheduled_tokens.items():
                    stop = scheduler.requests[rid].num_computed_tokens
                    chunks.append((int(rid), stop - n, stop))
                    if stop - n > progress[int(rid)]:  # admitted after a prefix-cache hit
                        cached.append((int(rid), stop - n))
                    progress[int(rid)] = stop
                records[index] = {
                    "chunks": chunks,
                    "preempted": preempted,
                    "kv": num_blocks - 1 - pool.get_num_free_blocks(),
                    "finished": [],
                    "cached": cached,
                }
                carried = []
            else:
                carried.extend(sorted(int(r) for r in out.preempted_req_ids or ()))
                for r in out.preempted_req_ids or ():
                    progress[int(r)] = 0
                idle_calls += 1
                if idle_calls > queue_size + 1:
                    _raise_stuck(scheduler, lens, index)
            queue.appendleft((index, out))
            index += 1
            if len(queue) < queue_size and (executed or scheduler.has_requests()):
                continue
        elif not queue:
            continue
        step, out = queue.pop()
        ids = list(out.num_scheduled_tokens)
        outputs = []
        for rid in ids:
            request = scheduler.requests.get(rid)
            done = request is not None and _chunk_stop(records, step, int(rid)) == lens[int(rid)]
            outputs.append(pooled if done else None)
        result = m["ModelRunnerOutput"](
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
            pooler_output=outputs)
        engine_outputs = scheduler.update_from_output(out, result)
        for rid in ids:  # aborted in flight: the runner pooled it, vLLM dropped its output
            if int(rid) in aborted and _chunk_stop(records, step, int(rid)) == lens[int(rid)]:
                records[step]["finished"].append(int(rid))
        for client in engine_outputs.values():
            for o in client.outputs:
                if o.finished:
                    records[step]["finished"].append(int(o.request_id))
    for s, r in abort_at:  # after the engine ran dry: every request finished, a no-op
        abort_log.append((r, s, False))
    steps = []
    for index in sorted(records):
        rec = records[index]
        chunks = rec["chunks"]
        rows = [chunks[i] for i in step_order([stop - start for _, start, stop in chunks])]
        row_of = {r: i for i, (r, _, _) in enumerate(rows)}
        finished = sorted(rec["finished"], key=lambda r: row_of.get(r, len(rows)))
        steps.append(ScheduledStep(index, tuple(rows), tuple(finished),
                                   tuple(rec["preempted"]), rec["kv"], tuple(rec["cached"])))
    return steps


def _chunk_stop(records: dict[int, dict[str, Any]], step: int, request: int) -> int:
    for r, _, stop in records[step]["chunks"]:
        if r == request:
            return stop
    return -1


def _raise_stuck(scheduler: Any, lens: list[int], index: int) -> None:
    """vLLM's scheduler schedules nothing, again and again: the real engine would spin. A
    guard: the refusals checked before the run (``engine_checks``) rule the known cases out."""
    waiting = [int(r.request_id) for r in scheduler.waiting]
    r = waiting[0] if waiting else None
    detail = f"request {r} ({lens[r]} prompt tokens)" if r is not None else "no request"
    raise ValueError(
        f"vLLM's scheduler makes no progress at step {index}: {detail} is not scheduled "
        "again, and the real engine would spin forever with no error. Give the KV cache "
        "more blocks (kv_cache_blocks / gpu_memory_utilization) or raise "
        "max_num_batched_tokens / enable chunked prefill"
    )


def vllm_scheduler_unavailable_reason() -> str | None:
    """Why ``vllm_schedule`` cannot run here (``None``: it can)."""
    try:
        _vllm()
    except (VllmUnavailableError, ValueError) as err:  # not installed; VLLM_TARGET_DEVICE
        return str(err)
    return None
