"""What vLLM 0.33.0 refuses at start-up, refused here with vLLM's words and its flag.

- ``check_tensor_parallel``: ``ModelConfig.verify_with_parallel_config``
  (vllm/config/model.py): "Total number of attention heads (H) must be divisible by tensor
  parallel size (T)."; and ``QKVParallelLinear`` (vllm/model_executor/layers/linear.py): with
  ``T >= KV heads`` each KV head is replicated ``T / KV`` times (``divide`` asserts it is whole),
  else the KV heads are split ``KV / T`` per rank (whole again).
- ``check_kv_cache_holds_one_sequence``: ``_check_enough_kv_cache_memory``
  (vllm/v1/core/kv_cache_planning.py): the KV cache sized from ``gpu_memory_utilization`` must
  hold one request of ``max_model_len`` tokens, else vLLM refuses to start and estimates the
  longest ``max_model_len`` that fits.
- ``check_engine_sizes``: NOT a check vLLM makes — its int32 tensors would wrap instead. Token
  offsets, sequence lengths, request indices and KV block ids live in int32 tensors (Model
  Runner V2's ``InputBuffers``, vllm/v1/worker/gpu/input_batch.py; ``BlockTable``,
  vllm/v1/worker/block_table.py), and ranks are C ints in ``torch.distributed``; tokpool refuses
  a size they cannot hold rather than simulate an engine that cannot exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ENGINE_SIZE_LIMITS", "check_engine_sizes", "check_kv_cache_holds_one_sequence",
           "check_tensor_parallel"]

_GIB = 1 << 30
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
_INT32_TENSORS = ("vLLM's Model Runner V2 keeps token offsets, sequence lengths, request "
                  "indices and KV block ids in int32 tensors (InputBuffers, "
                  "vllm/v1/worker/gpu/input_batch.py; BlockTable, vllm/v1/worker/block_table.py)")
_RANKS = "torch.distributed numbers ranks with C ints (int32)"
#: The largest value each size may take, and why (SimConfig field -> (bound, reason)).
ENGINE_SIZE_LIMITS: dict[str, tuple[int, str]] = {
    **dict.fromkeys(("max_num_batched_tokens", "max_num_seqs", "max_model_len",
                     "long_prefill_token_threshold", "max_cudagraph_capture_size",
                     "kv_cache_blocks", "step_tag_id", "step_tag_every"),
                    (INT32_MAX, _INT32_TENSORS)),
    **dict.fromkeys(("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"),
                    (INT32_MAX, _RANKS)),
    **dict.fromkeys(("hidden_size", "num_labels"),
                    (INT32_MAX, "tokpool's bound on a row's width (the widest models have "
                                "about 10^5 columns)")),
    "activation_peak_bytes": (INT64_MAX, "byte counts are int64"),
}


def check_engine_sizes(values: Mapping[str, Any], *, flags: bool = False) -> None:
    """Raise ``ValueError`` for a size above ``ENGINE_SIZE_LIMITS`` (the field, or with
    ``flags`` vLLM's flag, the bound and why). Values that are not ints are left to the
    type checks; ``None`` means unset.

    Example:
        >>> check_engine_sizes({"max_num_batched_tokens": 10**30}, flags=True)
        Traceback (most recent call last):
        ValueError: --max-num-batched-tokens must be at most 2,147,483,647, got 1.0e+30: ...
    """
    for name, (bound, why) in ENGINE_SIZE_LIMITS.items():
        value = values.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= bound:
            continue
        shown = f"--{name.replace('_', '-')}" if flags else name
        got = f"{value:,}" if value < 10**18 else f"{float(value):.1e}"
        raise ValueError(f"{shown} must be at most {bound:,}, got {got}: {why}; tokpool "
                         "refuses a value they cannot hold")
    sizes = [values.get(n) for n in ("tensor_parallel_size", "pipeline_parallel_size",
                                     "data_parallel_size")]
    if all(isinstance(n, int) for n in sizes) and sizes[0] * sizes[1] * sizes[2] > INT32_MAX:
        raise ValueError(f"tensor x pipeline x data parallel = {sizes[0]} x {sizes[1]} x "
                         f"{sizes[2]} GPUs is over {INT32_MAX:,}: {_RANKS}")


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


def check_kv_cache_holds_one_sequence(
    *, name: str, kv_cache_blocks: int, block_size: int, kv_bytes_per_token: int,
    max_model_len: int | None, available_bytes: int | None = None,
) -> None:
    """Raise ``ValueError`` as vLLM does when one ``max_model_len`` request does not fit the KV
    cache sized from ``gpu_memory_utilization``.

    Args:
        name: the model.
        kv_cache_blocks: blocks the memory holds on the most loaded rank.
        block_size: tokens per block.
        kv_bytes_per_token: KV bytes per token on that rank.
        max_model_len: the engine's ``max_model_len`` (``None``: nothing to check).
        available_bytes: the KV memory left on that rank (default: the whole blocks').
    """
    if max_model_len is None or kv_bytes_per_token == 0:
        return
    blocks_needed = -(-max_model_len // block_size)
    if blocks_needed <= kv_cache_blocks:
        return
    per_block = block_size * kv_bytes_per_token
    needed = blocks_needed * per_block
    available = kv_cache_blocks * per_block if available_bytes is None else available_bytes
    longest = kv_cache_blocks * block_size
    estimate = (f"Based on the available memory, the estimated maximum model length is "
                f"{longest}. " if longest > 0 else "")
    raise ValueError(
        f"vLLM refuses to start {name}: \"To serve at least one request with the model's max "
        f"seq len ({max_model_len}), ({needed / _GIB:.2f} GiB KV cache is needed, which is "
        f"larger than the available KV cache memory ({available / _GIB:.2f} GiB). {estimate}"
        "Try increasing `gpu_memory_utilization` ... or decreasing `max_model_len`\" "
        "(kv_cache_planning._check_enough_kv_cache_memory). Raise --gpu-memory-utilization "
        "(gpu_memory_utilization=), add GPUs (--tensor-parallel-size), or lower "
        f"--max-model-len (max_model_len=) to at most {longest}"
    )
