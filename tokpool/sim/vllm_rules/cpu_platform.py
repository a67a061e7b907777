"""vLLM 0.33.0's CPU platform as a device: what ``hardware="CPU"`` changes (pure functions).

vLLM runs on a CPU through ``CpuPlatform`` (vllm/platforms/cpu.py) and the CPU worker
(vllm/v1/worker/cpu_worker.py). What they change for the simulator, each rule with the vLLM
function it follows:

- **The KV cache is sized from bytes, not from a device total.**
  ``CpuPlatform.check_and_update_config``: when ``VLLM_CPU_KVCACHE_SPACE`` is set and not empty,
  ``cache_config.kv_cache_memory_bytes = int(os.environ["VLLM_CPU_KVCACHE_SPACE"]) * GiB_bytes``
  (it overrides ``--kv-cache-memory-bytes``; ``int()``: whole GiB, ``"1.5"`` is vLLM's
  ``ValueError``). ``CPUWorker.determine_available_memory`` then gives the KV cache exactly
  ``kv_cache_memory_bytes``; without it, ``ceil(node memory x gpu_memory_utilization)`` minus the
  worker's RSS — a figure only the running process knows, so tokpool asks for one of the
  explicit sizes instead (``cpu_kv_cache_bytes``). ``--num-gpu-blocks-override`` replaces the
  block count whatever the memory (vllm/v1/core/kv_cache_planning.py,
  ``_apply_num_gpu_blocks_override``), on every platform.
- **Block size 128.** ``CpuPlatform.update_block_size_for_backend``: without ``--block-size``,
  ``_preferred_block_size_for_backends(backends, 128, ...)``; ``CPU_ATTN`` takes any multiple
  of 32 (``CPUAttentionBackend.get_supported_kernel_block_sizes``), so 128 (MLA models, which
  tokpool refuses, get 16): ``default_block_size``.
- **No CUDA graphs.** ``check_and_update_config`` sets ``compilation_config.
  cudagraph_capture_sizes = []``: every step runs eagerly into a fresh tensor, whatever
  ``--enforce-eager`` says: ``captures_cuda_graphs``.
- **Async scheduling forced off.** ``check_and_update_config``: ``scheduler_config.
  async_scheduling = False`` ("async scheduling is not required on CPU"), even when asked for:
  ``forces_async_off``.
- **The host copy is a no-op.** The runner hands pooled outputs to the host with
  ``.to("cpu")`` (vllm/v1/worker/gpu_model_runner.py, ``GPUModelRunner._pool`` ->
  ``_copy_pooler_output_to_cpu`` on a platform that is not CUDA-alike); on a CPU tensor that
  returns the tensor itself: 0 bytes copied (``host_copy_copies``).
- **Memory.** The CPU device has no device-memory total tokpool could know (the host's memory,
  less whatever else runs there): ``Hardware.hbm_bytes`` is ``None`` for it, and shares of
  "device memory" are not computed (``has_memory_total``).

The engine layer (``tokpool/engine/driver.py``: ``VLLM_CPU_KVCACHE_SPACE=1``) runs exactly this
platform: ``SimConfig.from_vllm_args("VLLM_CPU_KVCACHE_SPACE=1 vllm serve ...",
hardware="CPU")`` sizes the same KV cache without overrides. Checked against vLLM's own
``CpuPlatform.check_and_update_config`` on a built ``VllmConfig``
(``tests/test_cpu_platform.py``).
"""

from __future__ import annotations

from .devices import GiB, Hardware

__all__ = [
    "CPU_DEFAULT_BLOCK_SIZE",
    "CPU_KVCACHE_SPACE_ENV",
    "captures_cuda_graphs",
    "cpu_kv_cache_bytes",
    "default_block_size",
    "forces_async_off",
    "has_memory_total",
    "host_copy_copies",
    "is_cpu",
    "read_kvcache_space",
]

#: vLLM 0.33.0 reads the CPU KV-cache size from this environment variable, in GiB.
CPU_KVCACHE_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"
#: ``CpuPlatform.update_block_size_for_backend``'s default for ``CPU_ATTN``.
CPU_DEFAULT_BLOCK_SIZE = 128
#: vllm/config/cache.py ``CacheConfig.DEFAULT_BLOCK_SIZE`` (CUDA attention backends keep it).
CUDA_DEFAULT_BLOCK_SIZE = 16


def is_cpu(device: Hardware) -> bool:
    """The device is vLLM's CPU platform (``current_platform.is_cpu()``)."""
    return device.platform == "cpu"


def read_kvcache_space(value: object) -> int | None:
    """``VLLM_CPU_KVCACHE_SPACE`` read as ``CpuPlatform.check_and_update_config`` reads it:
    unset or ``""`` is ``None``; otherwise ``int(value)`` GiB (a whole number: ``"1.5"`` is
    refused, as vLLM's ``int()`` refuses it).

    Example:
        >>> read_kvcache_space("1"), read_kvcache_space("")
        (1, None)
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"{CPU_KVCACHE_SPACE_ENV} must be a whole number of GiB (an int or its "
                        f"text), got {value!r}")
    try:
        space = int(value)
    except ValueError:
        raise ValueError(f"{CPU_KVCACHE_SPACE_ENV}={value!r}: vLLM reads it with int(), so it "
                         "must be a whole number of GiB (e.g. 1 or 4); give the KV cache in "
                         "bytes with --kv-cache-memory-bytes instead") from None
    if space < 0:
        raise ValueError(f"{CPU_KVCACHE_SPACE_ENV}={value!r}: a KV-cache size cannot be "
                         "negative; give a whole number of GiB >= 0")
    return space


def cpu_kv_cache_bytes(*, kvcache_space: int | None, kv_cache_memory_bytes: int | None,
                       blocks_given: bool) -> int | None:
    """Bytes the CPU worker gives the KV cache (``CPUWorker.determine_available_memory``).

    Args:
        kvcache_space: ``VLLM_CPU_KVCACHE_SPACE`` in GiB (``read_kvcache_space``), or ``None``.
        kv_cache_memory_bytes: ``--kv-cache-memory-bytes``, or ``None``.
        blocks_given: ``--num-gpu-blocks-override`` is given (the bytes do not matter then).

    Returns:
        The explicit size (the environment wins: ``check_and_update_config`` runs after the
        flags are read), or ``None`` when only ``blocks_given`` sizes the cache.

    Raises:
        ValueError: no explicit size at all: vLLM would take ``ceil(memory x utilization)``
            minus the worker's RSS, which only the running process knows.

    Example:
        >>> cpu_kv_cache_bytes(kvcache_space=1, kv_cache_memory_bytes=None, blocks_given=False)
        1073741824
    """
    if kvcache_space is not None:
        return kvcache_space * GiB
    if kv_cache_memory_bytes is not None:
        return kv_cache_memory_bytes
    if blocks_given:
        return None
    raise ValueError(
        "hardware='CPU': vLLM's CPU worker sizes the KV cache from VLLM_CPU_KVCACHE_SPACE "
        "(GiB) or --kv-cache-memory-bytes; without them it takes ceil(node memory x "
        "gpu_memory_utilization) minus the worker's RSS (CPUWorker.determine_available_memory),"
        " which only the running process knows. Give one: 'VLLM_CPU_KVCACHE_SPACE=4 vllm "
        "serve ...' (or cpu_kvcache_space=4), kv_cache_memory_bytes=..., kv_cache_blocks=... "
        "(--num-gpu-blocks-override), or gpu_memory_utilization=None for an unlimited cache")


def default_block_size(device: Hardware) -> int:
    """Tokens per KV block when ``--block-size`` is not given: 128 on the CPU platform
    (``CpuPlatform.update_block_size_for_backend``), vLLM's ``CacheConfig.DEFAULT_BLOCK_SIZE``
    (16) elsewhere.

    Example:
        >>> from tokpool.sim.vllm_rules.devices import DEVICES
        >>> default_block_size(DEVICES["CPU"]), default_block_size(DEVICES["H200"])
        (128, 16)
    """
    return CPU_DEFAULT_BLOCK_SIZE if is_cpu(device) else CUDA_DEFAULT_BLOCK_SIZE


def captures_cuda_graphs(device: Hardware) -> bool:
    """Does the platform capture CUDA graphs? Not the CPU (``cudagraph_capture_sizes = []``
    in ``CpuPlatform.check_and_update_config``): every step is eager."""
    return not is_cpu(device)


def forces_async_off(device: Hardware) -> bool:
    """``CpuPlatform.check_and_update_config`` sets ``async_scheduling = False``, even when
    ``--async-scheduling`` asked for it."""
    return is_cpu(device)


def host_copy_copies(device: Hardware) -> bool:
    """Does delivering a pooled output copy bytes? Not on the CPU platform: the runner's
    ``.to("cpu")`` of a CPU tensor returns the tensor itself (0 bytes copied)."""
    return not is_cpu(device)


def has_memory_total(device: Hardware) -> bool:
    """The device has a memory total shares and limits can be computed from (``False`` for
    the CPU record: its memory is the host's, not a device figure)."""
    return device.hbm_bytes is not None

