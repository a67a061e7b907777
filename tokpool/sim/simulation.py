"""``tp.simulate``: run one workload through the simulated engine, in tensor or analytic mode."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd
import torch

from ..guard import ensure_fits
from ..pooler.pooling_params import PoolingParams, per_request_params
from .backends.clone_ledger import clone_steps_frame, run_clone_ledger
from .backends.closed_form import single_request
from .backends.counting import run_counting
from .backends.limits import check_byte_range, check_work
from .backends.loop import CHUNK_COLUMNS, paused_gc
from .backends.mixed import MixedCountingEngine, MixedTensorEngine
from .backends.progress import check_progress, show_progress
from .backends.source import HiddenStateSource, PromptTokenIds, check_source, default_source
from .backends.tensor import run_tensor
from .backends.timing import estimate_step_times
from .config import SimConfig
from .memory.ledger import REQUEST_COLUMNS, STEP_COLUMNS, requests_frame, steps_frame
from .memory.views import overwrites_frame, writes_frame
from .results.result import SimResult
from .schedule.aborts import abort_outcomes, aborts_frame, check_aborts, closed_form_outcomes
from .schedule.given import check_schedule
from .schedule.scheduler import (
    ScheduledStep,
    check_arrival_steps,
    check_prompt_token_ids,
    validate_prompt_lens,
)
from .schedule.scheduler import schedule as tokpool_schedule
from .schedule.stream import stream_schedule
from .vllm_rules import engine_checks, runner
from .vllm_rules.pooling_kind import MARKER_ROWS_NEED_TOKEN_IDS
from .vllm_rules.prefix_cache import reads_prefix_cache
from .vllm_rules.request_tasks import check_mixed_run, request_tasks
from .vllm_run import vllm_schedule

SimMode = Literal["tensor", "analytic", "closed_form"]
SIM_MODES: tuple[str, ...] = ("tensor", "analytic", "closed_form")
SchedulerName = Literal["tokpool", "vllm"]
SCHEDULERS: tuple[str, ...] = ("tokpool", "vllm")


def _without_gc_passes(fn):
    """Run ``fn`` with the cyclic collector paused (``paused_gc``): a run's records live to
    its end, and the collector's passes over them grew with the run (half the time of a
    30,000-request analytic run went to them)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with paused_gc():
            return fn(*args, **kwargs)
    return run


@_without_gc_passes
def simulate(
    prompt_lens: Sequence[int],
    config: SimConfig | None = None,
    *,
    mode: SimMode = "tensor",
    source: HiddenStateSource | None = None,
    arrival_steps: Sequence[int] | None = None,
    device: str = "cpu",
    schedule: Sequence[ScheduledStep] | None = None,
    scheduler: SchedulerName = "tokpool",
    pooling_params: PoolingParams | Sequence[PoolingParams | None] | None = None,
    progress: bool | None = None,
    aborts: Mapping[int, int] | None = None,
) -> SimResult:
    """Replay an engine's prefill steps around token-level pooling and account for every byte.

    Args:
        prompt_lens: prompt length per request (each >= 1), or each request's prompt token
            ids (a list of ints per request): prompts whose leading tokens are equal share
            prefix-cache blocks (``SimConfig.enable_prefix_caching``, vLLM's default for causal
            pooling models); given by length, every prompt has tokens of its own. The token
            ids decide the cache hits only; hidden states and STEP's tag rows come from the
            source.
        config: the engine (default ``SimConfig()``).
        mode: ``"tensor"`` runs real tensors through the core's poolers and heads, measures
            real storages and checks every output against the source's reference;
            ``"analytic"`` runs the same loop with integer bookkeeping (no allocation; fast for
            million-token prompts); ``"closed_form"`` solves one request by formula (no step
            table: ``steps`` and ``chunks`` are empty; ``summary()`` has every number). All
            three agree to the byte.
        source: where hidden states come from (tensor mode); default a ``SyntheticSource``.
            In analytic mode only its ``token_ids`` are used (STEP tag rows).
        arrival_steps: per request, the first step it may be scheduled in (default all 0).
        device: tensor mode: where the step's tensors live (``"cuda"`` makes it the GPU step
            simulator: host copies on a side stream into pinned memory).
        schedule: run THIS schedule (a list of ``ScheduledStep``: hand-written, recorded from
            an engine, or another scheduler's) instead of tokpool's scheduler's; checked first
            (``schedule.given.check_schedule``). Tensor and analytic modes.
        scheduler: who computes the schedule when none is given: ``"tokpool"`` (default;
            tokpool's own ``schedule``, no vLLM needed) or ``"vllm"`` (the installed vLLM's own
            V1 ``Scheduler`` driven on the CPU, ``tokpool.sim.vllm_run.vllm_schedule``; needs
            ``make vllm``). Schedule parity (tests/test_parity_schedule.py) shows both agree.
        pooling_params: vLLM's per-request options (``tp.PoolingParams``): one for every
            request, or a list with one (or ``None``) per request. Each is checked as vLLM
            checks it (``engine_checks.check_pooling_params``); ``truncate_prompt_tokens``
            shortens the prompt before anything else; late chunking, ``dimensions`` and
            ``use_activation`` change what the head makes and delivers
            (``vllm_rules.classifier.head_tensors``, in every mode): a 32,768-token document
            at chunk 512 delivers 64 rows while pooling still holds all 32,768. Late-chunked
            requests are ``token_embed``, which never reads the prefix cache. STEP's tag and
            columns are the engine's (``SimConfig``): a request may repeat them, not change
            them. ``task`` mixes tasks of one model (vLLM's ``PoolingParams.task``: the
            engine's task and its twin, ``token_embed`` with ``embed``, ``token_classify``
            with ``classify``; ``vllm_rules.request_tasks``): each step's requests are
            grouped as vLLM's ``DispatchPooler`` groups them (``backends.mixed``), a sequence
            request gathers one row and keeps nothing; ``SimResult.by_task`` has each task's
            bytes per step. Tensor and analytic modes.
        progress: a text bar over the engine's steps (stdout; the command line: stderr).
            ``None``: only when the run has at least ``backends.progress.AUTO_STEPS`` steps.
        aborts: ``{request: step}``: the client hangs up and vLLM cancels the request right
            before ``schedule()`` call ``step`` (``Scheduler.finish_requests`` with
            ``FINISHED_ABORTED``; ``tokpool.sim.schedule.aborts``): its KV blocks and slot
            are freed at once, its pooling state in engine step ``step`` (an abort-only
            iteration when nothing else runs). ``SimResult.aborts`` says what each did and
            freed; an abort at or after a request's finish is a ``"no-op"`` there, as vLLM
            ignores finished ids. Tensor and analytic modes, either scheduler; in
            ``mode="closed_form"`` only where the formula stays exact — an abort after the
            request's last chunk (a no-op, or ``"output dropped"`` under async scheduling);
            one mid-prompt is refused there, saying so (the formula runs the request to its
            end: ``schedule.aborts.closed_form_outcomes``). Not with a given ``schedule``.

    Returns:
        A ``SimResult`` (``steps``, ``requests``, ``corrupted``, peaks).

    Raises:
        EngineRefusal: a prompt vLLM rejects (longer than ``max_model_len``; looked past with
            ``SimConfig(as_if=True)``, then listed in ``SimResult.looked_past``) or one that
            can never be scheduled.
        ValueError: bad prompt lengths, mode or scheduler.
        VllmUnavailableError: ``scheduler="vllm"`` without vLLM (says how to install it).
        TypeError: non-integer prompt lengths, or a source missing part of the protocol.

    Example:
        >>> cfg = SimConfig(hidden_size=8, max_num_batched_tokens=1024,
        ...                 head_dtype=None, use_activation=False)  # pooling alone, no head
        >>> r = simulate([3000], cfg, mode="analytic")
        >>> r.peak_pooling_bytes == (2 * 3000 - 952) * 8 * 2  # clone: (2T - L)·W·s
        True
        >>> simulate([3000], cfg.replace(head_dtype="float32"), mode="analytic").peak_pooling_bytes
        144000
    """
    config = SimConfig() if config is None else config
    if not isinstance(config, SimConfig):
        raise TypeError(f"config must be a SimConfig, got {type(config).__name__}")
    if not isinstance(mode, str) or mode not in SIM_MODES:
        raise ValueError(f"unknown mode {mode!r}; use one of {list(SIM_MODES)}")
    check_progress(progress)
    _check_device(device)
    if not isinstance(scheduler, str) or scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r}; use one of {list(SCHEDULERS)}")
    lens, token_ids = split_prompts(prompt_lens)
    refuse = engine_checks.Refusals(as_if=config.as_if)  # vLLM rejects prompts over the limit
    params = per_request_params(pooling_params, len(lens))
    tasks = request_tasks(params, config)  # None: every request runs the engine's task
    lens, token_ids = _apply_request_params(params, lens, token_ids, config, refuse)
    if tasks is not None:
        check_mixed_run(config, prompt_token_ids=token_ids)
        if mode == "closed_form":
            raise ValueError("mode='closed_form' solves one request of the engine's task; "
                             "run a workload mixing tasks with mode='tensor' or 'analytic'")
    refuse(engine_checks.check_prompts_fit, lens, config.max_model_len, name=config.model_name)
    abort_map = check_aborts(aborts, len(lens), None if schedule is not None else
                             check_arrival_steps(arrival_steps, len(lens)))
    if abort_map and schedule is not None:
        raise ValueError("aborts change the schedule, so they need tokpool's or vLLM's "
                         "scheduler: run them with no given schedule (a given schedule runs "
                         "every prompt to its end)")
    check_byte_range(lens, config, what=f"simulate(mode={mode!r})")  # no int64 wrap
    if mode == "closed_form" and scheduler != "tokpool":
        raise ValueError(f"mode='closed_form' solves tokpool's own schedule of one request by "
                         f"formula, so it takes no scheduler={scheduler!r}; use "
                         "mode='analytic' with it")
    work_scheduler = scheduler if schedule is None else "tokpool"  # a given one: no scheduler
    check_work(lens, config, mode=mode, scheduler=work_scheduler)  # refused before it starts
    if mode == "closed_form":
        if schedule is not None:
            raise ValueError("closed forms solve tokpool's own schedule of one request by "
                             "formula; run a given schedule with mode='tensor' or 'analytic'")
        result = _closed_form_result(lens, config, source=source, arrival_steps=arrival_steps,
                                     params=params[0], aborts=abort_map)
        result.looked_past = [*config.looked_past, *refuse.looked_past]
        return result
    if schedule is not None:
        if arrival_steps is not None:
            raise ValueError("give arrival_steps or a schedule, not both: a schedule already "
                             "says when each request runs")
        steps = check_schedule(schedule, lens,
                               max_num_batched_tokens=config.max_num_batched_tokens,
                               enable_chunked_prefill=config.enable_chunked_prefill,
                               long_prefill_token_threshold=config.long_prefill_token_threshold,
                               reads_prefix_cache=config.enable_prefix_caching
                               and reads_prefix_cache(config.task),
                               max_num_seqs=config.max_num_seqs,
                               kv_cache_blocks=config.kv_cache_blocks,
                               block_size=config.block_size,
                               async_scheduling=config.async_scheduling,
                               kv_cache_groups=config.kv_group_windows,
                               max_model_len=config.max_model_len,
                               prompt_token_ids=token_ids)
    else:
        steps = _scheduled_steps(lens, config, arrival_steps, scheduler, token_ids, abort_map)
    outcomes = abort_outcomes(steps, abort_map, async_scheduling=config.async_scheduling)
    if runner.lays_rows_in_persistent_batch(config.model_runner):
        steps = runner.v1_batch_rows(steps)
    engine_checks.check_step_pooling_sees_whole_prompts(
        steps, lens, step_tag_id=config.pooling_kind.row_tag(config),
        enable_chunked_prefill=config.enable_chunked_prefill)
    engine_checks.check_sequence_pooling_sees_whole_prompts(
        steps, lens, seq_pooling_type=getattr(config.model, "seq_pooling_type", "LAST"),
        token_level=config.pooling_kind.token_level)
    outputs = None
    if source is not None:
        check_source(source, width=config.width, dtype=config.dtype)
        source.prepare(lens)  # the source validates the lengths (both modes)
    if config.pooling_kind.reads_prompt_token_ids:  # JinaForRanking: rows at its markers
        if token_ids is None and source is None:
            raise ValueError(MARKER_ROWS_NEED_TOKEN_IDS)
        if token_ids is not None:
            if source is None:
                source = default_source(config)
                source.prepare(lens)
            source = PromptTokenIds(source, token_ids)
    if mode == "tensor":
        _guard_tensor_mode(lens, config, steps, source, arrival_steps, device, params,
                           outcomes, tasks)
        if source is None:
            source = default_source(config)
            source.prepare(lens)
        with show_progress(progress):
            records, requests, corrupted, outputs, engine = run_tensor(
                lens, config, steps, source, device=device, pooling_params=params,
                aborts=outcomes, **_mixed(MixedTensorEngine, tasks))
    else:
        with show_progress(progress):
            # the common case in plain integers (backends.clone_ledger); None: the general loop
            fast = run_clone_ledger(lens, config, steps, pooling_params=params, aborts=outcomes)
            if fast is not None:
                return _clone_ledger_result(fast, lens, config, steps, token_ids, params,
                                            [*config.looked_past, *refuse.looked_past])
            records, requests, corrupted, engine = run_counting(
                lens, config, steps, source=source, pooling_params=params, aborts=outcomes,
                **_mixed(MixedCountingEngine, tasks))
    times = _times(config, [r.num_scheduled_tokens for r in records],
                   [r.context_sum for r in records], [r.copy_bytes for r in records],
                   [r.d2h_bytes for r in records])
    frame = steps_frame(records, times)
    peak = int(frame["pool_peak_bytes"].max())
    return SimResult(
        config=config,
        mode=mode,
        prompt_lens=lens,
        steps=frame,
        requests=requests_frame(requests),
        corrupted=sorted(corrupted),
        peak_pooling_bytes=peak,
        buffer_bytes=config.buffer_bytes,
        peak_device_bytes=peak + config.buffer_bytes,
        schedule=steps,
        outputs=outputs,
        chunks=chunks_frame(engine.chunks),
        buffer_writes=writes_frame(engine.tracker),
        overwrites=overwrites_frame(engine.tracker),
        looked_past=[*config.looked_past, *refuse.looked_past],
        prompt_token_ids=token_ids,
        pooling_params=params,
        aborts=_aborts_frame(outcomes, engine, steps),
        by_task=engine.by_task_frame() if tasks is not None else None,
    )


def _mixed(engine_cls, tasks) -> dict:
    """A backend's engine arguments for a workload mixing tasks (none for one task)."""
    return {} if tasks is None else {"engine_cls": engine_cls, "tasks": tasks}


def _times(config: SimConfig, tokens, context_sum, copy_bytes, d2h_bytes) -> dict:
    """The steps' roofline ESTIMATES (``backends.timing``) under ``config``."""
    return estimate_step_times(tokens, context_sum, copy_bytes, d2h_bytes, model=config.model,
                               hardware=config.hardware,
                               weight_bytes_per_parameter=config.dtype_size,
                               async_scheduling=config.async_scheduling)


def _clone_ledger_result(fast, lens, config, steps, token_ids, params,
                         looked_past) -> SimResult:
    """``SimResult`` of the fast analytic ledger (``backends.clone_ledger``): the same frames
    the general loop builds."""
    cols = fast.step_columns
    frame = clone_steps_frame(cols, _times(config, cols["num_scheduled_tokens"],
                                           cols["context_sum"], cols["copy_bytes"],
                                           cols["d2h_bytes"]))
    peak = int(frame["pool_peak_bytes"].max())
    return SimResult(
        config=config, mode="analytic", prompt_lens=lens, steps=frame,
        requests=fast.requests, corrupted=[], peak_pooling_bytes=peak,
        buffer_bytes=config.buffer_bytes, peak_device_bytes=peak + config.buffer_bytes,
        schedule=steps, outputs=None, chunks=fast.chunks, buffer_writes=fast.buffer_writes,
        overwrites=fast.overwrites, looked_past=looked_past, prompt_token_ids=token_ids,
        pooling_params=params, aborts=None)


def _aborts_frame(outcomes, engine, steps) -> pd.DataFrame:
    """``SimResult.aborts``: each abort's outcome and the pooling bytes it freed (``None``
    without aborts; the KV blocks it freed show in the next step's ``kv_bytes``)."""
    if not outcomes:
        return None
    rows = []
    for o in outcomes:
        device, host = engine.freed_by_abort.get(o.request, (0, 0))
        rows.append({"request": o.request, "step": o.step, "outcome": o.outcome,
                     "finish_step": o.finish_step, "freed_pool_bytes": device,
                     "freed_host_bytes": host})
    return aborts_frame(rows)


def _check_device(device) -> None:
    """A device this torch can use, or ``ValueError`` saying why not (before any work)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device={device!r} is not a torch device ({err}); use 'cpu' or "
                         "'cuda'") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} but this torch ({torch.__version__}) sees no CUDA GPU "
            f"(CUDA build: {torch.version.cuda or 'no'}); use device='cpu' (the same numbers "
            "without the side-stream copy race) or run on a GPU machine"
        )
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r}: the simulator runs on 'cpu' or 'cuda'")


def split_prompts(prompts) -> tuple[list[int], list[list[int]] | None]:
    """Prompt lengths, and the token ids when the prompts are given as token-id lists.

    Raises:
        TypeError: a mix of lengths and token-id lists, or entries of another type.
        ValueError: an empty prompt or none at all.
    """
    def is_ids(p) -> bool:  # a list/tuple of ids, or a 1-D tensor / array
        return isinstance(p, (list, tuple)) or getattr(p, "ndim", 0) == 1

    items = prompts if isinstance(prompts, (list, tuple)) else None
    if items and any(is_ids(p) for p in items):
        if not all(is_ids(p) for p in items):
            raise TypeError("give every prompt as a length (an int) or every prompt as token "
                            "ids (a list of ints), not a mix")
        lens = validate_prompt_lens([len(p) for p in items])
        return lens, check_prompt_token_ids(items, lens)
    return validate_prompt_lens(prompts), None


def _scheduled_steps(lens, config: SimConfig, arrival_steps, scheduler: str,
                     token_ids, aborts=None) -> list[ScheduledStep]:
    if scheduler == "vllm":
        schedule_fns = [vllm_schedule]
    elif aborts:  # the stream's closed form knows no aborts: the scheduler's loop does
        schedule_fns = [tokpool_schedule]
    else:
        schedule_fns = [stream_schedule, tokpool_schedule]
    with paused_gc():  # a long schedule is many small objects: see paused_gc
        for schedule_fn in schedule_fns:  # the stream's closed form where it applies (None:
            steps = schedule_fn(           # it does not), else the scheduler's loop
                lens,
                max_num_batched_tokens=config.max_num_batched_tokens,
                max_num_seqs=config.max_num_seqs,
                enable_chunked_prefill=config.enable_chunked_prefill,
                arrival_steps=arrival_steps,
                long_prefill_token_threshold=config.long_prefill_token_threshold,
                kv_cache_blocks=config.kv_cache_blocks,
                block_size=config.block_size,
                async_scheduling=config.async_scheduling,
                kv_cache_groups=config.kv_group_windows,
                max_model_len=config.max_model_len,
                enable_prefix_caching=config.enable_prefix_caching,
                task=config.task,
                prompt_token_ids=token_ids,
                **({} if schedule_fn is stream_schedule else {"aborts": aborts or None}),
            )
            if steps is not None:
                return steps
    raise AssertionError("the scheduler's loop returns a schedule")  # pragma: no cover


def _apply_request_params(params, lens, token_ids, config, refuse):
    """Each request's ``tp.PoolingParams`` checked as vLLM checks it, then its truncation
    applied (vLLM truncates in the renderer, before the prompt-length check): the lengths and
    token ids the engine sees."""
    kind = config.pooling_kind
    for i, p in enumerate(params):
        if p is None:
            continue
        refuse(engine_checks.check_pooling_params, p, config, request=i)
        for name, own in (("step_tag_id", kind.row_tag(config)),
                          ("returned_token_ids", kind.columns(config))):
            given = getattr(p, name)
            if given is not None and given != own:
                raise ValueError(f"pooling_params[{i}].{name}={given!r} but the engine's is "
                                 f"{own!r}: tokpool simulates one STEP selection per run; set "
                                 f"it on the SimConfig ({name}=...) instead")
    if not any(p is not None and p.truncate_prompt_tokens is not None for p in params):
        return lens, token_ids
    mml = config.max_model_len
    lens = [n if p is None else p.truncated_length(n, mml) for n, p in zip(lens, params,
                                                                           strict=True)]
    if token_ids is not None:
        token_ids = [ids if p is None else p.truncate(list(ids), mml)
                     for ids, p in zip(token_ids, params, strict=True)]
    return lens, token_ids


def _guard_tensor_mode(lens, config, steps, source, arrival_steps, device, params=None,
                       aborts=(), tasks=None) -> None:
    """Refuse a tensor-mode run that cannot fit, before allocating: the counting engine knows
    its bytes in milliseconds (pooling's peak, the persistent buffer, the largest step's output
    tensor, every delivered output, which tensor mode keeps on the host, and the oracle's
    reference and expected output of the largest request)."""
    counted = run_counting(lens, config, steps, source=source, pooling_params=params,
                           aborts=aborts, **_mixed(MixedCountingEngine, tasks))[0]
    rows = max((s.num_tokens for s in steps), default=0)
    step_output = rows * config.width * config.dtype_size  # eager output (or the buffer)
    peak_device = max(r.pool_peak_bytes for r in counted) + config.buffer_bytes + step_output
    oracle = max(lens) * config.width * (config.dtype_size + 4)  # reference + expected (<= fp32)
    host = max(r.host_bytes for r in counted) + oracle
    what = (f"tensor-mode simulation of {len(lens)} prompt{'s' if len(lens) > 1 else ''} "
            f"({sum(lens):,} tokens, width {config.width})")
    cheaper = "mode='analytic' (the same bytes, counted without allocating)"
    if str(device).startswith("cuda"):
        ensure_fits(peak_device, what=what, cheaper=cheaper, device=device)
        ensure_fits(host, what=what + " (host copies)", cheaper=cheaper)
    else:
        ensure_fits(peak_device + host, what=what, cheaper=cheaper)


def chunks_frame(chunks) -> pd.DataFrame:
    """``SimResult.chunks`` from the loop's chunk records, ``CHUNK_COLUMNS`` order."""
    frame = pd.DataFrame([vars(c) for c in chunks], columns=list(CHUNK_COLUMNS))
    for name in ("read_at_step", "overwritten_at_step", "widest_write", "widest_write_step"):
        frame[name] = frame[name].astype("Int64")  # NA where no step applies
    return frame.astype({c: "int64" for c in ("step", "request", "token_start", "token_end",
                                               "buffer_row_start", "overwritten_rows")}
                        | {"eager": bool, "owned": bool})


def _closed_form_result(lens, config, *, source, arrival_steps, params=None,
                        aborts=None) -> SimResult:
    if len(lens) != 1 or source is not None or arrival_steps is not None:
        raise ValueError(
            "mode='closed_form' solves ONE request from the synthetic source with no arrival "
            f"steps (got {len(lens)} requests, source={source!r}, arrival_steps="
            f"{arrival_steps!r}); use mode='analytic' for anything else"
        )
    values = {k: v[0] if hasattr(v, "__len__") else v
              for k, v in single_request(np.asarray(lens, dtype=np.int64), config,
                                         params).items()}
    peak = int(values["peak_pooling_bytes"])
    outcomes = closed_form_outcomes(  # only where the formula stays exact (else refused)
        aborts or {}, int(values["num_steps"]) - int(config.async_scheduling),
        async_scheduling=config.async_scheduling)
    summary = {"prompt_len": lens[0], "policy": config.policy,
               "async_scheduling": config.async_scheduling}
    summary |= {k: (bool(v) if k == "corrupted" else v.item() if hasattr(v, "item") else v)
                for k, v in values.items() if k != "peak_device_bytes"}
    summary["peak_device_bytes"] = peak + config.buffer_bytes
    requests = pd.DataFrame([{
        "request": 0, "prompt_len": lens[0], "first_step": 0, "finish_step": -1,
        "delivered_step": -1, "num_chunks": -1, "output_bytes": int(values["output_bytes"]),
        "corrupted": bool(values["corrupted"]), "stranded_bytes": -1,
    }], columns=list(REQUEST_COLUMNS))
    return SimResult(
        config=config, mode="closed_form", prompt_lens=lens,
        steps=pd.DataFrame(columns=list(STEP_COLUMNS)), requests=requests,
        corrupted=[0] if values["corrupted"] else [], peak_pooling_bytes=peak,
        buffer_bytes=config.buffer_bytes, peak_device_bytes=peak + config.buffer_bytes,
        schedule=[], chunks=pd.DataFrame(columns=list(CHUNK_COLUMNS)), closed_form=summary,
        aborts=aborts_frame([{**vars(o), "freed_pool_bytes": 0, "freed_host_bytes": 0}
                             for o in outcomes]) if aborts else None,
    )
