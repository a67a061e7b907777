"""What vLLM 0.33.0 refuses at start-up, refused here with vLLM's words and its flag.

- ``check_tensor_parallel``: ``ModelConfig.verify_with_parallel_config``
  (vllm/config/model.py): "Total number of attention heads (H) must be divisible by tensor
  parallel size (T)."; and ``QKVParallelLinear`` (vllm/model_executor/layers/linear.py): with
  ``T >= KV heads`` each KV head is replicated ``T / KV`` times (``divide`` asserts it is whole),
  else the KV heads are split ``KV / T`` per rank (whole again).
- ``check_kv_cache_holds_one_sequence``: ``get_kv_cache_configs`` and
  ``_check_enough_kv_cache_memory`` (vllm/v1/core/kv_cache_planning.py): the KV cache sized from
  ``gpu_memory_utilization``, less vLLM's null block, must hold one request of
  ``max_model_len`` tokens in every KV-cache group (a sliding-window group only its window),
  else vLLM refuses to start and estimates the longest ``max_model_len`` that fits.
"""

from __future__ import annotations

from .kv_spec import KVCacheSpec

__all__ = ["check_kv_cache_holds_one_sequence", "check_tensor_parallel"]

_GIB = 1 << 30


def check_tensor_parallel(name: str, num_attention_heads: int, num_kv_heads: int,
                          tp: int) -> None:
    """Raise ``ValueError`` as vLLM does when ``tp`` does not split the heads evenly.

    Args:
        name: the model, for the message.
        num_attention_heads, num_kv_heads: the model's query and key/value heads.
        tp: ``--tensor-parallel-size``.
    """
    if tp == 1:
        return
    if num_attention_heads % tp:
        fits = [t for t in range(1, num_attention_heads + 1) if num_attention_heads % t == 0
                and (num_kv_heads % t == 0 if t < num_kv_heads else t % num_kv_heads == 0)]
        raise ValueError(
            f"vLLM refuses to start {name} with --tensor-parallel-size {tp}: \"Total number of "
            f"attention heads ({num_attention_heads}) must be divisible by tensor parallel size "
            f"({tp}).\" (ModelConfig.verify_with_parallel_config). Use -tp in {fits}"
        )
    if (tp >= num_kv_heads and tp % num_kv_heads) or (tp < num_kv_heads and num_kv_heads % tp):
        heads, over = (tp, num_kv_heads) if tp >= num_kv_heads else (num_kv_heads, tp)
        raise ValueError(
            f"vLLM fails to load {name} with --tensor-parallel-size {tp}: its {num_kv_heads} KV "
            f"heads cannot be split or replicated evenly over {tp} ranks (QKVParallelLinear: "
            f"\"{heads} is not divisible by {over}\"). Use a -tp that divides "
            f"{num_kv_heads} or is a multiple of it"
        )


def _gib(num_bytes: int) -> str:
    return f"{round(num_bytes / _GIB, 2)}"  # vllm/utils/mem_utils.py, format_gib


def check_kv_cache_holds_one_sequence(
    *, name: str, spec: KVCacheSpec | None, kv_cache_blocks: int, max_model_len: int | None,
    max_in_flight_tokens: int, available_bytes: int | None = None,
) -> None:
    """Raise ``ValueError`` as vLLM does when one ``max_model_len`` request does not fit the KV
    cache: ``get_kv_cache_configs`` keeps the null block back (``available - bytes_per_block``)
    and ``_check_enough_kv_cache_memory`` compares the rest with one request's blocks in every
    group (``_max_memory_usage_bytes_from_groups``; a sliding-window group needs its window's
    blocks only, ``SlidingWindowSpec.max_admission_blocks_per_request``).

    Args:
        name: the model.
        spec: its KV cache on the most loaded rank (``kv_cache.kv_cache_spec``; ``None``:
            no KV cache, nothing to check).
        kv_cache_blocks: the pool's blocks on that rank (the null block included).
        max_model_len: the engine's ``max_model_len`` (``None``: nothing to check).
        max_in_flight_tokens: ``kv_spec.max_in_flight_tokens`` (sliding windows hold them).
        available_bytes: the KV memory left on that rank (default: the whole blocks').
    """
    if max_model_len is None or spec is None:
        return
    flight = {"max_model_len": max_model_len, "max_in_flight_tokens": max_in_flight_tokens}
    if spec.fits_one_sequence(kv_cache_blocks, **flight):
        return
    if available_bytes is None:  # an explicit block count: the most loaded rank's blocks
        available_bytes = kv_cache_blocks * spec.bytes_per_block
        stages: tuple[int, ...] = (spec.bytes_per_block,)
    else:  # get_kv_cache_configs checks the pipeline stages' workers in order
        stages = spec.stage_bytes_per_block
    for per_block in stages:
        if per_block == 0:
            continue  # a stage without KV layers
        check = available_bytes - per_block  # the null block BlockPool holds back
        if check <= 0:
            raise ValueError(
                f"vLLM refuses to start {name}: \"No available memory for the cache blocks. "
                "Try increasing `gpu_memory_utilization` when initializing the engine\" "
                f"(kv_cache_planning._check_enough_kv_cache_memory: {available_bytes:,} B for "
                f"the KV cache, less than one block of {per_block:,} B besides vLLM's null "
                "block). Raise --gpu-memory-utilization (gpu_memory_utilization=) or add GPUs "
                "(--tensor-parallel-size)"
            )
        blocks = available_bytes // per_block
        if spec.fits_one_sequence(blocks, **flight):
            continue
        needed = spec.max_memory_blocks(**flight) * per_block
        longest = spec.estimate_max_model_len(blocks, **flight)
        estimate = (f"Based on the available memory, the estimated maximum model length is "
                    f"{longest}. " if longest > 0 else "")
        raise ValueError(
            f"vLLM refuses to start {name}: \"To serve at least one request with the model's "
            f"max seq len ({max_model_len}), ({_gib(needed)} GiB KV cache is needed, which is "
            f"larger than the available KV cache memory ({_gib(check)} GiB). {estimate}"
            "Try increasing `gpu_memory_utilization` ... or decreasing `max_model_len`\" "
            "(kv_cache_planning._check_enough_kv_cache_memory; one block is vLLM's null "
            "block). Raise --gpu-memory-utilization (gpu_memory_utilization=), add GPUs "
            f"(--tensor-parallel-size), or lower --max-model-len (max_model_len=) to at most "
            f"{longest}"
        )
