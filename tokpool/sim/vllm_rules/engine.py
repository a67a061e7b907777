"""vLLM 0.33.0's engine rules, as small pure functions (no vLLM import).

Each function restates one rule read in vLLM 0.33.0's sources and names the file and function it
comes from; ``docs/ENGINE_MODEL.md`` explains them, and ``tests/test_parity_vllm.py`` checks the
ones whose vLLM function can run on a CPU against that function.

- which steps replay a CUDA graph (and so write graph-pool memory a later replay rewrites) and
  which run eagerly (fresh memory): ``cudagraph_capture_sizes``, ``resolve_cudagraph_sizes``,
  ``graph_size_for``, ``pooling_cudagraph_mode``;
- per-GPU and per-usage defaults: ``batch_defaults``, ``engine_batch_limits``;
- pooling defaults: ``default_head_dtype``, ``default_use_activation``,
  ``default_async_scheduling``;
- which models chunk: ``pooling_attn_type``, ``chunked_prefill_supported``;
- the order of requests in a step's rows: ``step_order``;
- tasks: ``TOKEN_POOL_METHOD_TASKS``, ``RUNNER_TASKS``, ``select_pooling_task``,
  ``check_selected_task`` (defined in ``tokpool.pooler.task_names``, beside the gate that
  uses them; re-exported here).

What vLLM refuses (prompt lengths, scheduler limits, ...) is in ``engine_checks``, each refusal
once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

__all__ = [
    "BLACKWELL_MAX_CUDAGRAPH_CAPTURE_SIZE",
    "DEFAULT_MAX_CUDAGRAPH_CAPTURE_SIZE",
    "DEVICES",
    "POOLING_TASK_PRIORITY",
    "RUNNER_TASKS",
    "TOKEN_POOL_METHOD_TASKS",
    "DeviceFacts",
    "batch_defaults",
    "check_request_task",
    "check_selected_task",
    "chunked_prefill_supported",
    "cudagraph_capture_sizes",
    "default_async_scheduling",
    "default_head_dtype",
    "default_max_cudagraph_capture_size",
    "default_use_activation",
    "derive_batch_limits",
    "engine_batch_limits",
    "graph_size_for",
    "padded_step_sizes",
    "pooling_attn_type",
    "pooling_cudagraph_mode",
    "resolve_cudagraph_sizes",
    "resolve_device",
    "select_pooling_task",
    "step_order",
]

from ...pooler.task_names import (  # the task rules live with the pooler: the gate needs them
    POOLING_TASK_PRIORITY,
    RUNNER_TASKS,
    TOKEN_POOL_METHOD_TASKS,
    check_request_task,
    check_selected_task,
    select_pooling_task,
)
from .devices import DEVICES, DeviceFacts, GiB, Hardware, resolve_device
from .engine_checks import check_scheduler_limits
from .pooling_kind import POOLING_KINDS

#: ``max_cudagraph_capture_size`` when none is given (vllm/config/vllm.py,
#: ``VllmConfig._set_cudagraph_sizes``): 512, or 1024 on data-centre Blackwell (sm_10x).
DEFAULT_MAX_CUDAGRAPH_CAPTURE_SIZE = 512
BLACKWELL_MAX_CUDAGRAPH_CAPTURE_SIZE = 1024

Usage = Literal["llm", "server", "engine"]
Runner = Literal["pooling", "generate"]
AttnType = Literal["decoder", "encoder_only", "encoder_decoder", "hybrid", "attention_free"]
SeqPoolingType = Literal["CLS", "LAST", "MEAN"]
TokPoolingType = Literal["ALL", "STEP"]
CudaGraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]


def _positive_int(name: str, value: object, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


# --- CUDA graphs: which steps replay a graph ------------------------------------------------


def default_max_cudagraph_capture_size(
    gpu: str | Hardware,
    *,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    decode_query_len: int = 1,
) -> int:
    """The largest step (in tokens) that replays a CUDA graph when the user sets no size.

    vllm/config/vllm.py, ``VllmConfig._set_cudagraph_sizes``: the platform ceiling is 1024 on
    data-centre Blackwell (capability 10.x) and 512 elsewhere; it is capped at
    ``max_num_seqs * decode_query_len * 2`` and then at ``max_num_batched_tokens``.

    Args:
        gpu: device preset name or ``DeviceFacts``.
        max_num_seqs: the scheduler's ``max_num_seqs`` (None: no cap from it).
        max_num_batched_tokens: the token budget (None: no cap from it).
        decode_query_len: 1 without speculative decoding.

    Returns:
        The capture-size ceiling in tokens.
    """
    device = resolve_device(gpu)
    size = (
        BLACKWELL_MAX_CUDAGRAPH_CAPTURE_SIZE
        if device.is_data_center_blackwell
        else DEFAULT_MAX_CUDAGRAPH_CAPTURE_SIZE
    )
    if max_num_seqs is not None:
        size = min(_positive_int("max_num_seqs", max_num_seqs) * decode_query_len * 2, size)
    if max_num_batched_tokens is not None:
        size = min(_positive_int("max_num_batched_tokens", max_num_batched_tokens), size)
    return size


#: The largest ``max_capture_size`` whose sizes are listed (65,536 graphs): beyond it the
#: list alone would take seconds to build and gigabytes to hold.
MAX_CAPTURE_SIZE = 1 << 20


def cudagraph_capture_sizes(max_capture_size: int) -> tuple[int, ...]:
    """vLLM's capture-size pattern up to ``max_capture_size`` (ascending).

    ``1, 2, 4``, then multiples of 8 below 256, then multiples of 16 from 256 to the maximum
    (vllm/config/vllm.py, ``VllmConfig._set_cudagraph_sizes``; documented on
    ``CompilationConfig.max_cudagraph_capture_size`` in vllm/config/compilation.py). Sizes
    above the maximum are dropped; 0 gives ``()`` (no graphs). ``resolve_cudagraph_sizes`` adds
    the budget and decode sizes vLLM appends.

    Example:
        >>> cudagraph_capture_sizes(20)
        (1, 2, 4, 8, 16)
    """
    _positive_int("max_capture_size", max_capture_size, minimum=0)
    if max_capture_size > MAX_CAPTURE_SIZE:
        raise ValueError(
            f"max_capture_size={max_capture_size:,}: vLLM would capture a CUDA graph every 16 "
            f"tokens up to it ({max_capture_size // 16:,} graphs); tokpool lists sizes up to "
            f"{MAX_CAPTURE_SIZE:,} tokens (vLLM's default is {DEFAULT_MAX_CUDAGRAPH_CAPTURE_SIZE}"
            "). Set a smaller --max-cudagraph-capture-size, or enforce_eager=True")
    sizes = [s for s in (1, 2, 4) if s <= max_capture_size]
    sizes += list(range(8, min(max_capture_size + 1, 256), 8))
    sizes += list(range(256, max_capture_size + 1, 16))
    return tuple(sizes)


def resolve_cudagraph_sizes(
    gpu: str | Hardware,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    enforce_eager: bool = False,
    max_cudagraph_capture_size: int | None = None,
    cudagraph_capture_sizes_override: Sequence[int] | None = None,
) -> tuple[int, tuple[int, ...]]:
    """The final ``(max_cudagraph_capture_size, cudagraph_capture_sizes)`` of an engine.

    vllm/config/vllm.py, ``VllmConfig._set_cudagraph_sizes`` without speculative decoding and in
    the default ("balanced") performance mode:

    - ``enforce_eager`` → ``(0, ())``: every step runs eagerly;
    - explicit sizes: deduplicated, those ``<= max_num_batched_tokens`` kept, sorted; an explicit
      maximum that disagrees with them raises ``ValueError`` (as vLLM does);
    - otherwise the pattern of ``cudagraph_capture_sizes`` up to the ceiling (default: see
      ``default_max_cudagraph_capture_size``; an explicit maximum is capped at the budget), plus
      ``max_num_batched_tokens`` when it fits, plus ``max_num_seqs`` (the widest decode batch)
      when the ceiling was defaulted and it fits; the final maximum is the largest size.

    Returns:
        ``(max_capture_size, sizes)``.

    Raises:
        ValueError: non-positive sizes, or an explicit maximum inconsistent with explicit sizes.
    """
    _positive_int("max_num_seqs", max_num_seqs)
    _positive_int("max_num_batched_tokens", max_num_batched_tokens)
    if enforce_eager:
        return 0, ()
    decode_sizes: list[int] = []
    ceiling = max_cudagraph_capture_size
    if ceiling is None:
        ceiling = default_max_cudagraph_capture_size(gpu, max_num_seqs=max_num_seqs)
        if max_num_seqs <= ceiling:
            decode_sizes = [max_num_seqs]
    else:
        _positive_int("max_cudagraph_capture_size", ceiling)
    ceiling = min(max_num_batched_tokens, ceiling)
    if cudagraph_capture_sizes_override is not None:
        given = [_positive_int("capture size", int(s)) for s in cudagraph_capture_sizes_override]
        if not given:
            raise ValueError("cudagraph_capture_sizes must hold at least one size")
        sizes = sorted({s for s in given if s <= max_num_batched_tokens})
    else:
        sizes = list(cudagraph_capture_sizes(ceiling))
        if max_num_batched_tokens <= ceiling and max_num_batched_tokens not in sizes:
            sizes.append(max_num_batched_tokens)
        sizes += [s for s in decode_sizes if s <= max_num_batched_tokens]
        sizes = sorted(set(sizes))
    final = sizes[-1] if sizes else 0
    if (
        max_cudagraph_capture_size is not None
        and max_cudagraph_capture_size != final
        and cudagraph_capture_sizes_override is not None
    ):
        raise ValueError(
            f"max_cudagraph_capture_size={max_cudagraph_capture_size} disagrees with the largest "
            f"of cudagraph_capture_sizes ({final}); give one of them or make them agree"
        )
    return final, tuple(sizes)


def graph_size_for(
    num_tokens: int, sizes: Sequence[int], *, enforce_eager: bool = False
) -> int | None:
    """The capture size a step of ``num_tokens`` is padded to, or ``None`` if it runs eagerly.

    vllm/v1/worker/gpu/cudagraph_utils.py, ``CudaGraphManager._init_candidates`` and
    ``dispatch``: a step replays the graph of the smallest capture size ``>= num_tokens``; a
    step larger than every capture size (or any step under ``enforce_eager``) runs eagerly
    (``CUDAGraphMode.NONE``). A graph step's hidden states are ``[padded, hidden]`` rows in
    graph-pool memory that later replays rewrite; an eager step's are a fresh
    ``[num_tokens, hidden]`` allocation that nothing rewrites while a view keeps it alive.

    Args:
        num_tokens: tokens scheduled in the step (>= 1).
        sizes: the engine's capture sizes (``resolve_cudagraph_sizes``), any order.
        enforce_eager: no graphs at all.

    Example:
        >>> sizes = cudagraph_capture_sizes(512)
        >>> graph_size_for(300, sizes), graph_size_for(513, sizes)
        (304, None)
    """
    _positive_int("num_tokens", num_tokens)
    if enforce_eager:
        return None
    padded = int(padded_step_sizes(num_tokens, sorted(sizes)))
    return padded or None


def padded_step_sizes(num_tokens, ascending_sizes: Sequence[int]):
    """``graph_size_for`` over an int or int array: the capture size each step pads to, 0
    where it runs eagerly (``ascending_sizes``: the capture sizes, sorted; empty: all eager).
    The step-memory rule (``step_memory.step_memory``) reads vLLM's dispatch through this."""
    table = np.asarray((*ascending_sizes, 0), dtype=np.int64)  # the 0 answers "past the last"
    return table[np.searchsorted(table[:-1], np.asarray(num_tokens, dtype=np.int64), "left")]


#: The CUDA-graph mode each optimization level asks for (vllm/config/vllm.py,
#: ``OPTIMIZATION_LEVEL_00`` .. ``OPTIMIZATION_LEVEL_03``; ``-O2`` is the default).
OPTIMIZATION_LEVEL_CUDAGRAPH_MODE: dict[int, str] = {
    0: "NONE", 1: "PIECEWISE", 2: "FULL_AND_PIECEWISE", 3: "FULL_AND_PIECEWISE"}


def pooling_cudagraph_mode(
    requested: CudaGraphMode = "FULL_AND_PIECEWISE", *, enforce_eager: bool = False
) -> CudaGraphMode:
    """The CUDA-graph mode a pooling model actually runs with.

    vllm/config/vllm.py, ``VllmConfig.__post_init__``: pooling models do not support full
    graphs, so any mode with FULL graphs becomes ``PIECEWISE``; ``enforce_eager`` gives
    ``NONE``. The default requested mode (optimisation levels O2/O3) is
    ``FULL_AND_PIECEWISE``; ``-O0`` asks for ``NONE`` (``OPTIMIZATION_LEVEL_CUDAGRAPH_MODE``:
    nothing is captured, every step is eager). So a pooling step's output is never MRV2's
    persistent FULL-graph ``hidden_states`` buffer (``ModelCudaGraphManager.
    store_capture_output``): it is the last piecewise graph's output in the graph pool
    (``CUDAGraphWrapper``, vllm/compilation/cuda_graph.py, weak-referenced and rewritten by
    the next replay).
    """
    modes = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
    if requested not in modes:
        raise ValueError(f"unknown cudagraph mode {requested!r}; use one of {list(modes)}")
    if enforce_eager or requested == "NONE":
        return "NONE"
    return "PIECEWISE"


# --- scheduler defaults ---------------------------------------------------------------------


def batch_defaults(
    gpu: str | Hardware, usage: Usage = "llm", *, world_size: int = 1
) -> tuple[int, int]:
    """vLLM's default ``(max_num_batched_tokens, max_num_seqs)`` for a device and usage context.

    vllm/engine/arg_utils.py, ``EngineArgs.get_batch_defaults`` (``usage``: ``"llm"`` is the
    ``LLM`` class, ``"server"`` the OpenAI API server, ``"engine"`` any other context, which
    falls back to ``SchedulerConfig``'s 2048 tokens and 128 sequences):

    ============================================  ==============  ==============
    device                                        LLM class       API server
    ============================================  ==============  ==============
    >= 160 GiB (B200, GB200, B300)                16384, 1024     16384, 1024
    >= 70 GiB, not A100, not GB10 (H100, H200)    16384, 1024     8192, 1024
    anything else (A100, L4, GB10, ...)           8192, 256       2048, 256
    CPU (times ``world_size``)                    4096, 256       2048, 128
    ============================================  ==============  ==============

    These are the defaults before ``engine_batch_limits`` adjusts them to the model.
    """
    device = resolve_device(gpu)
    _positive_int("world_size", world_size)
    if usage not in ("llm", "server", "engine"):
        raise ValueError(f"unknown usage {usage!r}; use 'llm', 'server' or 'engine'")
    if device.platform == "cpu":
        tokens = {"llm": 4096 * world_size, "server": 2048 * world_size}
        seqs = {"llm": 256 * world_size, "server": 128 * world_size}
    elif device.total_memory_bytes >= 160 * GiB:
        tokens, seqs = {"llm": 16384, "server": 16384}, {"llm": 1024, "server": 1024}
    elif (
        device.total_memory_bytes >= 70 * GiB
        and "a100" not in device.driver_name.lower()
        and device.capability != (12, 1)
    ):
        tokens, seqs = {"llm": 16384, "server": 8192}, {"llm": 1024, "server": 1024}
    else:
        tokens, seqs = {"llm": 8192, "server": 2048}, {"llm": 256, "server": 256}
    # SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS / DEFAULT_MAX_NUM_SEQS (config/scheduler.py)
    return tokens.get(usage, 2048), seqs.get(usage, 128)


def derive_batch_limits(
    gpu: str | Hardware,
    usage: Usage = "llm",
    *,
    max_model_len: int | None,
    enable_chunked_prefill: bool,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    world_size: int = 1,
) -> tuple[int, int]:
    """The engine's ``(max_num_batched_tokens, max_num_seqs)`` for a model, before vLLM's
    checks (``engine_batch_limits`` adds them).

    vllm/engine/arg_utils.py, ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``
    (default performance mode, no batched DP MoE, no multimodal prefix-LM). Only values the
    user did not give are adjusted:

    - budget: the ``batch_defaults`` value; without chunked prefill raised to at least
      ``max_model_len`` (a whole prompt must fit one step); then capped at
      ``max_num_seqs * max_model_len``;
    - ``max_num_seqs``: the default, capped at the budget.

    Without a ``max_model_len`` (no model: no context) the defaults are only capped by each
    other.
    """
    if max_model_len is not None:
        _positive_int("max_model_len", max_model_len)
    default_tokens, default_seqs = batch_defaults(gpu, usage, world_size=world_size)
    seqs = default_seqs if max_num_seqs is None else _positive_int("max_num_seqs", max_num_seqs)
    if max_num_batched_tokens is None:
        tokens = default_tokens
        if max_model_len is not None:
            if not enable_chunked_prefill:
                tokens = max(max_model_len, tokens)
            tokens = min(seqs * max_model_len, tokens)
    else:
        tokens = _positive_int("max_num_batched_tokens", max_num_batched_tokens)
    if max_num_seqs is None:
        seqs = min(seqs, tokens)
    return tokens, seqs


def engine_batch_limits(
    gpu: str | Hardware,
    usage: Usage = "llm",
    *,
    max_model_len: int,
    enable_chunked_prefill: bool,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    world_size: int = 1,
) -> tuple[int, int]:
    """The engine's final ``(max_num_batched_tokens, max_num_seqs)`` for a model:
    ``derive_batch_limits``, then vLLM's ``SchedulerConfig.verify_max_model_len``
    (``engine_checks.check_scheduler_limits``).

    Raises:
        EngineRefusal: without chunked prefill, a given budget below ``max_model_len`` (vLLM
            refuses it: such prompts could never be scheduled), or a budget below
            ``max_num_seqs``.
    """
    _positive_int("max_model_len", max_model_len)
    tokens, seqs = derive_batch_limits(
        gpu, usage, max_model_len=max_model_len, enable_chunked_prefill=enable_chunked_prefill,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        world_size=world_size)
    check_scheduler_limits(
        max_num_batched_tokens=tokens, max_num_seqs=seqs, max_model_len=max_model_len,
        enable_chunked_prefill=enable_chunked_prefill, long_prefill_token_threshold=None)
    return tokens, seqs


# --- pooling defaults -----------------------------------------------------------------------


def default_head_dtype(
    model_dtype: str,
    *,
    runner: Runner = "pooling",
    override: str | None = None,
    platform_supports_float32: bool = True,
) -> str:
    """The dtype a pooling head casts to.

    vllm/config/model.py, ``_get_head_dtype`` (used by ``ModelConfig.head_dtype``): an
    ``hf_overrides`` ``head_dtype`` wins (``"model"`` means the model dtype); otherwise pooling
    models get ``"float32"`` (when the platform supports it) and generative models the model
    dtype. The cast allocates a new ``[n_tokens, hidden]`` float32 tensor on bf16/fp16 models,
    so the head's output never aliases the step's hidden states there.

    Args:
        model_dtype: ``"bfloat16"``, ``"float16"``, ``"float32"``...
        runner: ``"pooling"`` or ``"generate"``.
        override: ``hf_overrides={"head_dtype": ...}``.
        platform_supports_float32: ``current_platform.supported_dtypes`` holds float32.
    """
    if runner not in ("pooling", "generate"):
        raise ValueError(f"unknown runner {runner!r}; use 'pooling' or 'generate'")
    if override is not None:
        return model_dtype if override == "model" else override.lower()
    if not platform_supports_float32:
        return model_dtype
    return "float32" if runner == "pooling" else model_dtype


def default_use_activation(configured: bool | None = None) -> bool:
    """``use_activation`` of a pooling request: True unless the request or ``PoolerConfig`` says.

    vllm/pooling_params.py, ``PoolingParams._merge_default_parameters`` (the request inherits
    ``PoolerConfig.use_activation``) and ``_set_default_parameters`` (still None → True, for
    embed/token_embed and classify/token_classify alike).
    """
    return True if configured is None else bool(configured)


def default_async_scheduling(runner: Runner = "pooling", requested: bool | None = None) -> bool:
    """Whether the engine schedules asynchronously.

    vllm/config/vllm.py, ``VllmConfig.__post_init__``: an explicit choice is kept; left unset
    it is off for pooling models ("negatively impacts performance of pooling models") and on
    for generative ones (when the executor supports it). vLLM's CPU platform forces it off.
    """
    if requested is not None:
        return bool(requested)
    if runner not in ("pooling", "generate"):
        raise ValueError(f"unknown runner {runner!r}; use 'pooling' or 'generate'")
    return runner == "generate"


# --- which models chunk ---------------------------------------------------------------------


def pooling_attn_type(
    default_seq_pooling_type: SeqPoolingType = "LAST",
    *,
    is_causal: bool = True,
    declared: AttnType = "decoder",
) -> AttnType:
    """The attention type vLLM assigns a pooling model.

    vllm/config/model.py, ``ModelConfig.attn_type``: a model whose *architecture's default*
    sequence pooling is CLS is ``encoder_only``; so is one whose config says ``is_causal=False``;
    otherwise the architecture's declared type (``"decoder"`` by default).
    """
    if default_seq_pooling_type == "CLS" or not is_causal:
        return "encoder_only"
    return declared


def chunked_prefill_supported(
    attn_type: AttnType,
    *,
    seq_pooling_type: SeqPoolingType | None = "LAST",
    tok_pooling_type: TokPoolingType | None = "ALL",
    pooling: bool = True,
) -> bool:
    """Whether vLLM chunks this model's prompts by default.

    vllm/config/model.py, ``ModelConfig.is_chunked_prefill_supported`` (applied by
    ``EngineArgs._set_default_chunked_prefill_and_prefix_caching_args``):

    - pooling, ``encoder_only``: never;
    - pooling, ``decoder``: not when ``seq_pooling_type`` is MEAN or CLS, or
      ``tok_pooling_type`` is STEP — both types are part of the model's ``PoolerConfig``
      whatever task is served, so a decoder whose sequence pooling is MEAN does not chunk its
      ``token_embed`` requests either; otherwise yes;
    - pooling, other types: all but ``encoder_decoder``;
    - generative: all but ``encoder_decoder``.

    Defaults (``LAST``/``ALL``) are vLLM's ``VllmModelForPooling`` defaults.
    """
    if not pooling:
        return attn_type != "encoder_decoder"
    if attn_type == "encoder_only":
        return False
    if attn_type == "decoder":
        never = tok_pooling_type is not None and not POOLING_KINDS[tok_pooling_type].chunks
        return not (seq_pooling_type in ("MEAN", "CLS") or never)
    return attn_type != "encoder_decoder"


# --- batch order ----------------------------------------------------------------------------


def step_order(
    num_scheduled_tokens: Sequence[int],
    *,
    decode_query_len: int = 1,
    num_draft_tokens: Sequence[int] | None = None,
) -> list[int]:
    """The order in which MRV2 lays a step's requests out in its rows.

    vllm/v1/worker/gpu/model_runner.py, ``sort_batch_req_ids`` (called by
    ``GPUModelRunner.gather_batch_req_state``): a stable sort of the scheduler's order by
    (has no drafts, scheduled tokens != ``decode_query_len``, scheduled tokens). For pooling
    (no drafts, ``decode_query_len`` 1) that is ascending scheduled tokens, ties in scheduler
    order: the rows ``[0, n_0)`` belong to the request with the fewest tokens.

    Args:
        num_scheduled_tokens: per request, in the scheduler's order (running requests first,
            then newly admitted ones).
        decode_query_len: 1 without speculative decoding.
        num_draft_tokens: per request, speculative draft tokens (None: none).

    Returns:
        Indices into ``num_scheduled_tokens``, in row order.

    Example:
        >>> step_order([5, 1, 3, 1])
        [1, 3, 2, 0]
    """
    counts = [_positive_int("num_scheduled_tokens", int(n), minimum=0)
              for n in num_scheduled_tokens]
    drafts = [0] * len(counts) if num_draft_tokens is None else list(num_draft_tokens)
    if len(drafts) != len(counts):
        raise ValueError(
            f"num_draft_tokens has {len(drafts)} entries for {len(counts)} requests"
        )
    return sorted(
        range(len(counts)),
        key=lambda i: (not drafts[i], counts[i] != decode_query_len, counts[i]),
    )
