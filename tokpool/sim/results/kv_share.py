"""Pooling's memory next to the KV cache: its share of the KV memory, and the prompt length from
which its peak outgrows the activation memory vLLM reserves outside the KV cache."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..._args import whole
from ..backends.closed_form import single_request
from ..vllm_rules.cpu_platform import is_cpu
from ..vllm_rules.kv_cache import _pos


def pooling_share_of_kv(
    pooling_peak_bytes: int | Sequence[int], kv_cache_bytes: int
) -> float | list[float]:
    """Pooling's peak bytes on one rank of the last stage (all of a request's pooled rows: the
    pooler runs on every TP rank with full-width rows) over the memory left for the KV cache
    on that rank (``kv_cache_memory_bytes``): the share of KV memory pooling would take.

    Args:
        pooling_peak_bytes: one number or one per prompt length.
        kv_cache_bytes: the KV memory of the rank, bytes (> 0).

    Returns:
        The ratio (a list for a sequence); 1.0 means pooling alone would fill the KV cache.
    """
    kv = _pos("kv_cache_bytes", kv_cache_bytes)
    if isinstance(pooling_peak_bytes, Sequence):
        return [int(b) / kv for b in pooling_peak_bytes]
    return int(pooling_peak_bytes) / kv


def pooling_takes_kv_from(config, *, longest: int | None = None) -> int | None:
    """The shortest prompt whose pooling peak exceeds the activation memory vLLM reserves
    outside the KV cache (its profiling run's peak): from there on, pooling's bytes can only
    come out of the KV cache, so the engine holds fewer tokens at once and preempts under load.

    vLLM sizes the KV cache once, at start-up, from a profiling forward of
    ``max_num_batched_tokens`` tokens (``gpu_worker.determine_available_memory``); pooling's
    long-prompt outputs are not in that profile.

    Args:
        config: a ``SimConfig`` (one request per prompt length; its ``estimated_activation_
            peak_bytes`` is the reserve).
        longest: the longest prompt to consider (default ``config.max_model_len``).

    Returns:
        The prompt length in tokens, or ``None`` when no prompt up to ``longest`` exceeds it.

    The peak of one request never falls as its prompt grows (each of its terms is a
    non-negative multiple of T, of the tokens kept before the last chunk, (n - 1)·C, or of the
    tag rows, floor(T / k): see ``closed_form``), so the shortest prompt over the reserve is
    found by bisection: about 2·log2(longest) prompts are solved, whatever the context (a
    config may claim 10^12 positions).

    Raises:
        ValueError: no ``longest`` and no ``max_model_len``, or a ``longest`` below 1; the CPU
            platform (no profiled reserve to outgrow).
    """
    if is_cpu(config.hardware):
        raise ValueError(
            "pooling_takes_kv_from: on vLLM's CPU platform the KV cache has a fixed size "
            "(VLLM_CPU_KVCACHE_SPACE or --kv-cache-memory-bytes, CPUWorker."
            "determine_available_memory) and no profiled activation reserve: pooling's bytes "
            "come from host memory on top of it, never out of the KV cache. Ask for a GPU "
            "(hardware='H100 SXM', ...) or read the ledger's pool_peak_bytes")
    top = longest if longest is not None else config.max_model_len
    if top is None:
        raise ValueError("give longest= (the config has no max_model_len)")
    top = whole("longest", top, minimum=1)
    reserve = config.estimated_activation_peak_bytes

    def over(n: int) -> bool:
        return bool(single_request(np.array([n], dtype=np.int64),
                                   config)["peak_pooling_bytes"][0] > reserve)

    if not over(top):
        return None
    low, high = 1, top  # over(high)
    while low < high:
        mid = (low + high) // 2
        if over(mid):
            high = mid
        else:
            low = mid + 1
    return low
