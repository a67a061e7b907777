"""Sizes vLLM's tensors can hold: tokpool refuses a larger one (vLLM itself does not check).

Not one of vLLM's refusals (``engine_checks`` holds those): its tensors would wrap instead.
Model Runner V2 keeps token offsets, sequence lengths, request indices and KV block ids in
int32 tensors (``InputBuffers``, vllm/v1/worker/gpu/input_batch.py; ``BlockTable``,
vllm/v1/worker/block_table.py), and ``torch.distributed`` numbers ranks with C ints. A
simulation of an engine that cannot exist would report numbers for nothing, so every way in (a
``SimConfig``, a ``vllm serve`` line) refuses such a size first, naming the field or the flag.

``positive_int``: the check the rule functions (``cudagraph``, ``batch_limits``,
``scheduling``) make of a size they are given (an int, at least 1 unless told).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ENGINE_SIZE_LIMITS", "check_engine_sizes", "positive_int"]

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
    "kv_cache_memory_bytes": (INT64_MAX, "byte counts are int64"),
    "cpu_kvcache_space": (INT64_MAX >> 30, "its GiB are counted in int64 bytes"),
}
#: vLLM's flag for a field whose name is not the flag's
_FLAG_NAMES = {"kv_cache_blocks": "--num-gpu-blocks-override",
               "cpu_kvcache_space": "VLLM_CPU_KVCACHE_SPACE"}


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
        shown = (_FLAG_NAMES.get(name, f"--{name.replace('_', '-')}") if flags else name)
        got = f"{value:,}" if value < 10**18 else f"{float(value):.1e}"
        raise ValueError(f"{shown} must be at most {bound:,}, got {got}: {why}; tokpool "
                         "refuses a value they cannot hold")
    sizes = [values.get(n) for n in ("tensor_parallel_size", "pipeline_parallel_size",
                                     "data_parallel_size")]
    if all(isinstance(n, int) for n in sizes) and sizes[0] * sizes[1] * sizes[2] > INT32_MAX:
        raise ValueError(f"tensor x pipeline x data parallel = {sizes[0]} x {sizes[1]} x "
                         f"{sizes[2]} GPUs is over {INT32_MAX:,}: {_RANKS}")


def positive_int(name: str, value: object, *, minimum: int = 1) -> int:
    """``value`` when it is an int (not a bool) >= ``minimum``, else ``ValueError`` naming
    ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value
