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
"""

from __future__ import annotations

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
