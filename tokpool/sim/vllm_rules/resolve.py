"""The one resolution step: vLLM's defaults for what a ``SimConfig`` left ``None``.

``SimConfig`` holds what the user gave; ``resolve_engine`` applies vLLM 0.33.0's rules — the
same functions the parity tests check against vLLM's own code — once, in this order:

0. the pooling defaults: head dtype (``defaults.default_head_dtype``: float32), activation
   (``defaults.default_use_activation``), async scheduling
   (``defaults.default_async_scheduling``: off for pooling models);
1. ``max_model_len``: the model's context (``models.ModelPreset.max_model_len``);
2. chunked prefill: ``defaults.chunked_prefill_supported`` (encoders, CLS/MEAN decoders and
   STEP PRMs never chunk, whatever task they serve: the model's token pooling decides);
3. token budget and ``max_num_seqs``: ``batch_limits.engine_batch_limits`` /
   ``batch_limits.batch_defaults`` by device, usage context and (on vLLM's CPU platform) world
   size ``tp x pp`` (raised to ``max_model_len`` when prompts are not chunked);
4. CUDA-graph mode and capture sizes: ``cudagraph.pooling_cudagraph_mode`` (PIECEWISE, or NONE
   when eager or at ``-O0``: no capture sizes) and ``cudagraph.resolve_cudagraph_sizes``;
5. KV cache: the model's KV-cache spec per rank (``kv_cache.kv_cache_spec``: each layer's
   window and bytes, vLLM's groups, the pool block; none for an encoder-only model) and, with
   ``gpu_memory_utilization``, the blocks vLLM would allocate from the DRIVER-reported memory;
6. what vLLM reserves outside the KV cache: the profiled activation peak
   (``activation_peak_bytes`` or ``activation_peak_estimate``), non-torch memory and CUDA-graph
   memory (``profile``: ESTIMATES);
7. prefix caching: ``prefix_cache.default_prefix_caching`` (on where the model supports it).

8. the model runner: ``runner.select_model_runner`` (V1 on the CPU platform, V2 on CUDA).

On vLLM's CPU platform (``cpu_platform``) the block size defaults to 128, no CUDA graph is
captured, async scheduling is forced off and the KV cache takes the bytes
``VLLM_CPU_KVCACHE_SPACE`` or ``--kv-cache-memory-bytes`` give (a CPU has no device total to
take a share of). ``--kv-cache-memory-bytes`` sizes it on any platform.

Along the way it applies every start-up refusal of ``engine_checks`` (a ``-tp`` that does not
split the heads, a ``-pp`` on a model without pipeline support, float16 for a model type vLLM
refuses it for, a ``--max-model-len`` above the model's context, the scheduler's limits, a KV
cache smaller than one ``max_model_len`` request), called through that module so each has one
definition; with ``as_if=True`` the ones that can be looked past are recorded in
``ResolvedEngine.looked_past`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# Refusals are called through the module, never copied: the refusal tests swap them there.
from . import cpu_platform, engine_checks, runner
from .architectures import FLOAT16_UNSUPPORTED, supports_pipeline_parallel
from .batch_limits import derive_batch_limits
from .cudagraph import (
    OPTIMIZATION_LEVEL_CUDAGRAPH_MODE,
    pooling_cudagraph_mode,
    resolve_cudagraph_sizes,
)
from .defaults import (
    chunked_prefill_supported,
    default_async_scheduling,
    default_head_dtype,
    default_use_activation,
)
from .kv_cache import kv_cache_memory_bytes, kv_cache_spec
from .kv_spec import max_in_flight_tokens
from .prefix_cache import default_prefix_caching
from .profile import (
    NON_TORCH_BYTES_ESTIMATE,
    cudagraph_bytes,
    forward_peak_bytes,
    pooler_peak_bytes,
)
from .sizes import check_engine_sizes


@dataclass(frozen=True)
class ResolvedEngine:
    """What the resolution step derived (all fields filled)."""

    max_model_len: int | None
    enable_chunked_prefill: bool
    max_num_batched_tokens: int
    max_num_seqs: int
    capture_sizes: tuple[int, ...]
    kv_bytes_per_token: int
    kv_cache_blocks: int | None
    activation_peak_bytes: int
    activation_peak_is_estimate: bool
    non_torch_bytes: int
    cudagraph_bytes: int
    head_dtype: Any
    use_activation: bool
    async_scheduling: bool
    #: vLLM's refusals looked past on purpose (``as_if=True``), one message each.
    looked_past: tuple[str, ...] = ()
    kv_spec: Any = None  # kv_spec.KVCacheSpec on the most loaded rank, None without KV cache
    enable_prefix_caching: bool = False
    max_in_flight_tokens: int = 0
    #: the same refusals as ``EngineRefusal``s (``.follows``: the vLLM function), vLLM's order.
    refusals: tuple = ()
    block_size: int = cpu_platform.CUDA_DEFAULT_BLOCK_SIZE
    #: the KV cache's bytes per rank when given (--kv-cache-memory-bytes, or the CPU
    #: platform's VLLM_CPU_KVCACHE_SPACE), else None
    kv_cache_memory_bytes: int | None = None
    model_runner: str = "v2"


def activation_peak_estimate(config, max_num_batched_tokens: int, head_dtype) -> int:
    """ESTIMATE of the activation peak per rank that vLLM's profiling run measures: the larger
    of the forward's widest layer moment and the dummy pooler pass over a full budget
    (``profile``). Without a model preset the forward is taken as 8 hidden-state rows per
    token (residual, norm, QKV, attention output, MLP)."""
    tokens, s = max_num_batched_tokens, config.dtype_size
    if config.model is not None:
        forward = forward_peak_bytes(config.model, tokens=tokens,
                                     tp=config.tensor_parallel_size, dtype_bytes=s)
    else:
        forward = tokens * config.hidden_size * 8 * s
    head_bytes = torch.empty((), dtype=head_dtype).element_size() if head_dtype else s
    pooler = pooler_peak_bytes(tokens=tokens, hidden_size=config.hidden_size,
                               width=config.width, dtype_bytes=s, head_dtype_bytes=head_bytes)
    return max(forward, pooler)


def resolve_engine(config) -> ResolvedEngine:
    """vLLM's defaults for ``config``'s ``None`` fields (see the module docstring).

    Args:
        config: a ``SimConfig`` whose own fields are validated (model and hardware resolved).

    Raises:
        EngineRefusal: a configuration vLLM refuses to start (``engine_checks``), unless
            ``as_if`` looks past it.
        ValueError: a KV cache sized from memory without a model.
    """
    model, device = config.model, config.hardware
    refuse = engine_checks.Refusals(as_if=config.as_if)
    # the start-up refusals run in vLLM's order: ModelConfig (dtype, max_model_len), then
    # SchedulerConfig, then VllmConfig (the parallel layout), then the engine's start (the
    # pooling task, then the KV cache)
    architecture = getattr(model, "architecture", "")  # config.json's (HFModelPreset);
    model_type = getattr(model, "model_type", "")  # presets are decoders with PP support
    if model is not None:
        refuse(engine_checks.check_model_dtype, model_type,
               str(config.dtype).removeprefix("torch."),
               reason=FLOAT16_UNSUPPORTED.get(model_type))
    head_dtype = config.head_dtype
    if isinstance(head_dtype, str) and head_dtype == "auto":
        dtype_name = str(config.dtype).removeprefix("torch.")
        head_dtype = getattr(torch, default_head_dtype(dtype_name, runner="pooling"))
    use_activation = default_use_activation(config.use_activation)
    if not config.pooling_kind.has_head:  # TokenPooler(head=None): no cast, no activation
        head_dtype, use_activation = None, False
    async_scheduling = default_async_scheduling("pooling", config.async_scheduling)
    if cpu_platform.forces_async_off(device):  # CpuPlatform.check_and_update_config
        async_scheduling = False
    block_size = (config.block_size if config.block_size is not None
                  else cpu_platform.default_block_size(device))
    max_model_len = config.max_model_len
    if max_model_len is None and model is not None:
        max_model_len = model.max_model_len
    elif max_model_len is not None and model is not None:
        refuse(engine_checks.check_user_max_model_len, max_model_len,
               model.max_model_len_limit, allow_long=config.allow_long_max_model_len)
    # vLLM's PoolerConfig carries the model's token pooling whatever task is served: a token
    # kind set for this run, else the model's own (a STEP PRM neither chunks nor caches
    # prefixes, even asked for an embedding: is_chunked_prefill_supported and
    # is_prefix_caching_supported read it)
    kind = config.pooling_kind
    tok_pooling = (kind.tok_pooling_type if model is None or (
        kind.token_level and config.pooling is not None) else model.tok_pooling_type)
    chunked = config.enable_chunked_prefill
    if chunked is None:
        chunked = chunked_prefill_supported(
            model.attn_type if model else "decoder",
            seq_pooling_type=model.seq_pooling_type if model else "LAST",
            tok_pooling_type=tok_pooling,
        )
    if not isinstance(chunked, bool):
        raise TypeError(f"enable_chunked_prefill must be True or False, got {chunked!r}")
    tokens, seqs = derive_batch_limits(
        device, config.usage, max_model_len=max_model_len, enable_chunked_prefill=chunked,
        max_num_batched_tokens=config.max_num_batched_tokens, max_num_seqs=config.max_num_seqs,
        # EngineArgs._set_default_max_num_seqs_and_batched_tokens_args: tp x pp (CPU scales)
        world_size=config.tensor_parallel_size * config.pipeline_parallel_size)
    refuse(engine_checks.check_scheduler_limits, max_num_batched_tokens=tokens,
           max_num_seqs=seqs, max_model_len=max_model_len, enable_chunked_prefill=chunked,
           long_prefill_token_threshold=config.long_prefill_token_threshold)
    if model is not None:
        refuse(engine_checks.check_tensor_parallel, model.name, model.num_attention_heads,
               model.num_key_value_heads or model.num_attention_heads,
               config.tensor_parallel_size)
        refuse(engine_checks.check_pipeline_parallel, model.name,
               config.pipeline_parallel_size,
               supported=supports_pipeline_parallel(architecture, model_type))
        declared = getattr(model, "declared_tasks", ())  # a config.json's, once resolved
        if declared:
            refuse(engine_checks.check_configured_task, config.task, declared,
                   name=model.name)
    graph_mode = pooling_cudagraph_mode(
        OPTIMIZATION_LEVEL_CUDAGRAPH_MODE[config.optimization_level],
        enforce_eager=config.enforce_eager)
    if (config.output_memory != "vllm" or graph_mode == "NONE"
            or not cpu_platform.captures_cuda_graphs(device)):  # CPU: capture sizes []
        sizes: tuple[int, ...] = ()
    else:
        _, sizes = resolve_cudagraph_sizes(
            device, max_num_seqs=seqs, max_num_batched_tokens=tokens,
            max_cudagraph_capture_size=config.max_cudagraph_capture_size,
            cudagraph_capture_sizes_override=config.cudagraph_capture_sizes,
        )
    if config.activation_peak_bytes is not None:
        activation, estimate = config.activation_peak_bytes, False
    else:
        activation = activation_peak_estimate(config, tokens, head_dtype)
        estimate = True
    graphs = 0 if model is None else cudagraph_bytes(
        model, max_capture_size=max(sizes, default=0), tp=config.tensor_parallel_size,
        dtype_bytes=config.dtype_size)
    spec = None if model is None else kv_cache_spec(
        model, tp=config.tensor_parallel_size, pp=config.pipeline_parallel_size,
        kv_cache_dtype=config.kv_cache_dtype, dtype_bytes=config.dtype_size,
        block_size=block_size)
    kv_per_token = 0 if spec is None else spec.bytes_per_token
    in_flight = max_in_flight_tokens(tokens, async_scheduling=async_scheduling,
                                     pipeline_parallel_size=config.pipeline_parallel_size)
    blocks = config.kv_cache_blocks
    name = model.name if model is not None else "this model"
    explicit = config.kv_cache_memory_bytes  # --kv-cache-memory-bytes
    if cpu_platform.is_cpu(device) and (
            config.cpu_kvcache_space is not None or explicit is not None
            or (blocks is None and config.gpu_memory_utilization is not None)):
        explicit = cpu_platform.cpu_kv_cache_bytes(
            kvcache_space=config.cpu_kvcache_space, kv_cache_memory_bytes=explicit,
            blocks_given=blocks is not None)
    if blocks is None and explicit is not None:
        # Worker/CPUWorker.determine_available_memory: exactly these bytes, in whole blocks
        if spec is not None:  # encoder-only: vLLM keeps no KV cache and sizes none
            blocks = spec.num_blocks(explicit)
            check_engine_sizes({"kv_cache_blocks": blocks})  # int32 block ids
            refuse(engine_checks.check_kv_cache_holds_one_sequence,
                   name=name, spec=spec, kv_cache_blocks=blocks, max_model_len=max_model_len,
                   max_in_flight_tokens=in_flight, available_bytes=explicit)
        elif model is None:
            raise ValueError("kv_cache_memory_bytes sizes the KV cache from the model's KV "
                             "bytes per token: give a model preset (model=...)")
    elif config.gpu_memory_utilization is not None and blocks is None:
        if model is None:
            raise ValueError("gpu_memory_utilization sizes the KV cache from the model's weights "
                             "and KV bytes per token: give a model preset (model=...)")
        memory = {"gpu_memory_bytes": device.total_memory_bytes,
                  "gpu_memory_utilization": config.gpu_memory_utilization,
                  "tp": config.tensor_parallel_size, "pp": config.pipeline_parallel_size,
                  # everything vLLM keeps outside the KV cache (module docstring of ``profile``)
                  "activation_peak_bytes": activation + NON_TORCH_BYTES_ESTIMATE + graphs,
                  "dtype_bytes": config.dtype_size}
        available = kv_cache_memory_bytes(model, **memory)  # the weights must fit in any case
        if spec is not None:  # encoder-only: vLLM keeps no KV cache and sizes none
            blocks = spec.num_blocks(available)
            refuse(engine_checks.check_kv_cache_holds_one_sequence,
                   name=name, spec=spec, kv_cache_blocks=blocks, max_model_len=max_model_len,
                   max_in_flight_tokens=in_flight, available_bytes=available)
    elif blocks is not None:  # given: vLLM's --num-gpu-blocks-override, checked the same way
        refuse(engine_checks.check_kv_cache_holds_one_sequence,
               name=name, spec=spec, kv_cache_blocks=blocks, max_model_len=max_model_len,
               max_in_flight_tokens=in_flight, given=True,
               block_size=block_size if model is None else None)  # no model: blocks count
    prefix_caching = default_prefix_caching(
        config.enable_prefix_caching, model.attn_type if model else "decoder",
        seq_pooling_type=model.seq_pooling_type if model else "LAST",
        tok_pooling_type=tok_pooling)
    return ResolvedEngine(max_model_len, chunked, tokens, seqs, tuple(sizes), kv_per_token,
                          blocks, activation, estimate, NON_TORCH_BYTES_ESTIMATE, graphs,
                          head_dtype, use_activation, async_scheduling,
                          tuple(refuse.looked_past), spec, prefix_caching, in_flight,
                          tuple(refuse.refusals), block_size, explicit,
                          config.model_runner or runner.select_model_runner(device))
