"""Parallelism and the KV cache, per GPU, as vLLM 0.33.0 lays them out (pure functions).

Each function names the vLLM file and function its rule was read in. Ranks are numbered as
vLLM's executor numbers them (vllm/v1/executor/multiproc_executor.py, ``_get_output_rank``):
``rank = pp_rank * tp + tp_rank`` within one data-parallel engine.

- **Who pools.** Only the last pipeline stage holds the final hidden states: the model runner
  of other stages returns ``IntermediateTensors`` and skips the pooler
  (vllm/v1/worker/gpu/model_runner.py, ``GPUModelRunner.pool``: ``if not self.is_last_pp_rank``).
  EVERY tensor-parallel rank of that stage runs ``pooling_runner.pool`` on the full-width hidden
  states (the row-parallel output projection all-reduces them, so each rank holds all
  ``hidden_size`` columns); only the first of them (``output_rank = world - tp``) sends its
  output back. So the pooling bytes of a request are paid in full on each of the ``tp`` ranks
  of the last stage: ``pooler_ranks``.
- **Data parallel** runs independent engines; the front end sends each request to the least
  loaded one (vllm/v1/engine/core_client.py, ``DPLBAsyncMPClient.get_core_engine_for_request``:
  score ``max(clients x in-flight, waiting + running)``, ties from a rotating start), which for
  a burst of new requests is exact round-robin: ``data_parallel_split``.
- **Weights** split over ``tp x pp`` (an estimate: embeddings and norms are not all split
  evenly): ``weight_bytes_per_rank``.
- **KV cache**: KV heads split over TP, replicated when ``tp`` > KV heads
  (vllm/config/model.py, ``ModelConfig.get_num_kv_heads``: ``max(1, kv_heads // tp)``); layers
  split over PP (vllm/distributed/utils.py, ``get_pp_indices``); each layer's spec, the groups
  and the pool block as vLLM plans them (``kv_spec``: sliding windows, per-token-head scales):
  ``kv_cache_spec``, ``kv_bytes_per_token_per_rank``.
- **KV capacity** (vllm/v1/worker/gpu_worker.py, ``Worker.determine_available_memory``;
  vllm/v1/worker/utils.py, ``request_memory``; vllm/v1/core/kv_cache_planning.py,
  ``get_kv_cache_config_from_groups`` and ``get_kv_cache_configs``):
  ``ceil(total x utilization) - non-KV memory (weights + activation peak + ...)``, divided
  into whole pool blocks (``KVCacheSpec.bytes_per_block``), the smallest count over ranks:
  ``kv_cache_capacity_tokens``.
"""

from __future__ import annotations

import itertools
import math

from ...guard import ensure_fits
from .args import KV_CACHE_DTYPES
from .kv_spec import KVCacheSpec, check_layer_table, kv_element_bytes, kv_head_bytes
from .models import ModelPreset
from .sizes import INT32_MAX

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "check_kv_cache_dtype",
    "data_parallel_split",
    "fullest_stage_layers",
    "kv_bytes_per_token_per_rank",
    "kv_cache_capacity_tokens",
    "kv_cache_dtype_bytes",
    "kv_cache_memory_bytes",
    "kv_cache_spec",
    "kv_heads_per_rank",
    "pipeline_layers",
    "pooler_ranks",
    "weight_bytes_per_rank",
]

#: vllm/config/cache.py ``CacheConfig.DEFAULT_BLOCK_SIZE`` (an attention backend may pick another).
DEFAULT_BLOCK_SIZE = 16
#: vllm/config/cache.py ``CacheConfig.gpu_memory_utilization`` default in 0.33.0.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
#: Bytes ``data_parallel_split`` holds per engine (an empty list and its slot) and per request
#: (an int and its slot): what its answer costs to build.
_SPLIT_BYTES_PER_ENGINE, _SPLIT_BYTES_PER_REQUEST = 64, 36


#: The most ranks or engines a function here LISTS (one entry each): a million GPUs is beyond
#: any cluster, and the list is built in well under a second; more is refused at once rather
#: than built for minutes (the memory guard alone would let 10**8 lists through).
MAX_LISTED_RANKS = 1 << 20
#: The most requests ``data_parallel_split`` lists (one index each, about a second to build).
MAX_LISTED_REQUESTS = 1 << 24


def _pos(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value


def _listed(name: str, value: object, *, cheaper: str) -> int:
    """``_pos``, and at most ``MAX_LISTED_RANKS``: the answer lists one entry per rank."""
    value = _pos(name, value)
    if value > MAX_LISTED_RANKS:
        raise ValueError(f"{name}={value:,} ranks would be listed one by one; at most "
                         f"{MAX_LISTED_RANKS:,} are (no cluster has more GPUs). {cheaper}")
    return value


def pooler_ranks(tp: int = 1, pp: int = 1) -> tuple[int, ...]:
    """Ranks (``pp_rank * tp + tp_rank``) that hold the final hidden states and run the pooler:
    every tensor-parallel rank of the last pipeline stage. The first of them returns the output.

    Example:
        >>> pooler_ranks(tp=4, pp=2)
        (4, 5, 6, 7)
    """
    tp = _listed("tp", tp, cheaper="The pooler ranks are pp_rank * tp + tp_rank of the last "
                 "stage: range((pp - 1) * tp, pp * tp)")
    pp = _pos("pp", pp)
    return tuple(range((pp - 1) * tp, pp * tp))


def data_parallel_split(num_requests: int, dp: int = 1) -> list[list[int]]:
    """Request indices per data-parallel engine: round-robin, as the DP load balancer assigns
    a burst of new requests (``DPLBAsyncMPClient.get_core_engine_for_request``)."""
    _listed("dp", dp, cheaper="Request r goes to engine r % dp (round-robin): no list needed")
    if isinstance(num_requests, bool) or not isinstance(num_requests, int) or num_requests < 0:
        raise ValueError(f"num_requests must be an int >= 0, got {num_requests!r}")
    if num_requests > MAX_LISTED_REQUESTS:
        raise ValueError(f"num_requests={num_requests:,} would be listed one by one; at most "
                         f"{MAX_LISTED_REQUESTS:,} are. Request r goes to engine r % dp "
                         "(round-robin): no list needed")
    ensure_fits(dp * _SPLIT_BYTES_PER_ENGINE + num_requests * _SPLIT_BYTES_PER_REQUEST,
                what=f"data_parallel_split(num_requests={num_requests:,}, dp={dp:,}): a list "
                     "per engine and an index per request",
                cheaper="request r goes to engine r % dp (round-robin): no list needed")
    return [list(range(rank, num_requests, dp)) for rank in range(dp)]


def pipeline_layers(num_layers: int, pp: int = 1) -> tuple[int, ...]:
    """Layers per pipeline stage (vllm/distributed/utils.py ``get_pp_indices``, without
    ``VLLM_PP_LAYER_PARTITION``): even split; the remainder goes one each to the stages before
    the last, from the second-to-last backwards.

    Example:
        >>> pipeline_layers(30, 4)
        (7, 8, 8, 7)
    """
    num_layers = _pos("num_layers", num_layers)
    if num_layers > INT32_MAX:
        raise ValueError(f"num_layers={num_layers:,} is more layers than vLLM's layer indices "
                         f"hold (at most {INT32_MAX:,}); the model's config.json has the real "
                         "num_hidden_layers")
    pp = _listed("pp", pp, cheaper="fullest_stage_layers(num_layers, pp) gives the fullest "
                 "stage's layers without listing them")
    if pp > num_layers:
        raise ValueError(f"pp (pipeline_parallel_size)={pp} exceeds the model's {num_layers} "
                         "layers: a stage needs at least one layer")
    ensure_fits(8 * pp, what=f"pipeline_layers: a tuple of {pp:,} stages",
                cheaper="fullest_stage_layers(num_layers, pp), the layers of the fullest stage")
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def fullest_stage_layers(num_layers: int, pp: int = 1) -> int:
    """``max(pipeline_layers(num_layers, pp))`` without listing the stages: the even share,
    plus one when a remainder is handed out (``get_pp_indices``).

    Example:
        >>> fullest_stage_layers(30, 4)
        8
    """
    num_layers = _pos("num_layers", num_layers)
    pp = _pos("pp", pp)  # a formula: nothing is listed, any size answers at once
    if pp > num_layers:
        raise ValueError(f"pp (pipeline_parallel_size)={pp} exceeds the model's {num_layers} "
                         "layers: a stage needs at least one layer")
    return num_layers // pp + (1 if num_layers % pp else 0)


def kv_heads_per_rank(num_kv_heads: int, tp: int = 1) -> int:
    """KV heads one TP rank stores (``ModelConfig.get_num_kv_heads``: replicated if fewer)."""
    return max(1, _pos("num_kv_heads", num_kv_heads) // _pos("tp", tp))


def kv_cache_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes per stored K or V element for ``--kv-cache-dtype`` (``auto``: the model's dtype;
    the per-token-head dtypes' scales come on top: ``kv_spec.kv_head_bytes``).

    Raises:
        TypeError: not a string.
        ValueError: a value vLLM 0.33.0 does not take (``float32``: vLLM has no float32 KV
            cache), or a packed/quantised format tokpool does not size (nvfp4, turboquant, ...).
    """
    check_kv_cache_dtype(kv_cache_dtype)
    return kv_element_bytes(kv_cache_dtype, model_dtype_bytes)


def check_kv_cache_dtype(kv_cache_dtype: object) -> str:
    """One of vLLM 0.33.0's ``--kv-cache-dtype`` values (``CacheDType``, vllm/config/cache.py),
    else ``TypeError``/``ValueError`` listing them."""
    if not isinstance(kv_cache_dtype, str):
        raise TypeError(f"kv_cache_dtype must be a string, one of vLLM's --kv-cache-dtype "
                        f"values {list(KV_CACHE_DTYPES)}, got {kv_cache_dtype!r}")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        hint = (" (vLLM has no float32 KV cache: 'auto' keeps the model's dtype)"
                if kv_cache_dtype in ("float32", "float", "fp32") else "")
        raise ValueError(f"kv_cache_dtype {kv_cache_dtype!r} is not one of vLLM 0.33.0's "
                         f"--kv-cache-dtype values{hint}: {list(KV_CACHE_DTYPES)} "
                         "(CacheDType, vllm/config/cache.py)")
    return kv_cache_dtype


def _model_bytes(preset: ModelPreset, dtype_bytes: int | None) -> int:
    if dtype_bytes is not None:
        return _pos("dtype_bytes", dtype_bytes)
    own = getattr(preset, "dtype_bytes", None)  # HFModelPreset knows its dtype
    return own if own is not None else 2


def kv_cache_spec(
    preset: ModelPreset,
    *,
    tp: int = 1,
    pp: int = 1,
    kv_cache_dtype: str = "auto",
    dtype_bytes: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> KVCacheSpec | None:
    """The model's KV cache on the most loaded rank, layer by layer (``kv_spec``): each
    layer's window (``preset.sliding_windows``), its KV heads on a TP rank, its bytes per token
    (scales included), the groups, the pipeline stages. ``None`` for an encoder-only model
    (vLLM keeps no KV cache for it). A ``ModelPreset`` without ``num_key_value_heads`` is taken
    as without grouped-query attention (KV heads = attention heads).

    Args:
        preset: the model.
        tp, pp: tensor- and pipeline-parallel sizes.
        kv_cache_dtype: vLLM's ``--kv-cache-dtype``.
        dtype_bytes: the model dtype's bytes (default: the preset's, else 2).
        block_size: tokens per block.
    """
    if preset.attn_type == "encoder_only":
        return None
    kv_heads = preset.num_key_value_heads or preset.num_attention_heads
    check_layer_table(preset.num_layers)  # the spec is built layer by layer
    windows = preset.sliding_windows or (None,) * preset.num_layers
    if len(windows) != preset.num_layers:
        raise ValueError(f"{preset.name}: sliding_windows lists {len(windows)} layers, the "
                         f"model has {preset.num_layers}")
    bounds = [0]
    for n in pipeline_layers(preset.num_layers, pp):
        bounds.append(bounds[-1] + n)
    stages = [tuple(range(a, b)) for a, b in itertools.pairwise(bounds)]
    head = kv_head_bytes(preset.head_dim, kv_cache_dtype, _model_bytes(preset, dtype_bytes))
    return KVCacheSpec.build(windows, num_kv_heads=kv_heads_per_rank(kv_heads, tp),
                             head_bytes=head, block_size=_pos("block_size", block_size),
                             stages=stages)


def kv_bytes_per_token_per_rank(
    preset: ModelPreset,
    *,
    tp: int = 1,
    pp: int = 1,
    kv_cache_dtype: str = "auto",
    dtype_bytes: int | None = None,
) -> int:
    """KV-cache bytes one token takes on the most loaded rank (the stage with most layers),
    if every layer held it: ``layers on the stage x KV heads per TP rank x kv_head_bytes``
    (K and V, and the per-token-head dtypes' scales). Encoder-only models keep no KV cache
    (0). A sliding-window layer holds at most its window's tokens (``kv_cache_spec``).

    Args:
        preset: the model.
        tp, pp: tensor- and pipeline-parallel sizes.
        kv_cache_dtype: vLLM's ``--kv-cache-dtype``.
        dtype_bytes: the model dtype's bytes (default: the preset's, else 2).
    """
    spec = kv_cache_spec(preset, tp=tp, pp=pp, kv_cache_dtype=kv_cache_dtype,
                         dtype_bytes=dtype_bytes)
    return 0 if spec is None else spec.bytes_per_token


def weight_bytes_per_rank(
    preset: ModelPreset, *, tp: int = 1, pp: int = 1, dtype_bytes: int | None = None
) -> int:
    """ESTIMATED weight bytes per rank: ``parameters x bytes / (tp x pp)``, rounded up."""
    total = preset.num_parameters * _model_bytes(preset, dtype_bytes)
    return math.ceil(total / (_pos("tp", tp) * _pos("pp", pp)))


def kv_cache_memory_bytes(
    preset: ModelPreset,
    *,
    gpu_memory_bytes: int,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    tp: int = 1,
    pp: int = 1,
    activation_peak_bytes: int = 0,
    dtype_bytes: int | None = None,
) -> int:
    """Bytes left for the KV cache on one rank: ``ceil(total x utilization)`` (``request_memory``)
    minus weights per rank minus the forward's activation peak (``determine_available_memory``:
    ``requested_memory - non_kv_cache_memory - cudagraph_memory_estimate``).
    ``activation_peak_bytes`` is everything vLLM reserves outside the KV cache: the resolution
    step passes the profiled activation peak plus non-torch and CUDA-graph memory
    (``vllm_rules.profile``, ESTIMATES).

    Raises:
        ValueError: nothing left, as vLLM (``No available memory for the cache blocks``), with
            the numbers.
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    requested = math.ceil(_pos("gpu_memory_bytes", gpu_memory_bytes) * gpu_memory_utilization)
    weights = weight_bytes_per_rank(preset, tp=tp, pp=pp, dtype_bytes=dtype_bytes)
    if activation_peak_bytes < 0:
        raise ValueError(f"activation_peak_bytes must be >= 0, got {activation_peak_bytes}")
    available = requested - weights - activation_peak_bytes
    if available <= 0:
        raise ValueError(
            f"no available memory for the KV cache: {requested:,} B requested "
            f"({gpu_memory_utilization} x {gpu_memory_bytes:,}) - {weights:,} B weights per rank "
            f"- {activation_peak_bytes:,} B activation peak = {available:,} B; raise "
            "gpu_memory_utilization or tensor_parallel_size/pipeline_parallel_size"
        )
    return available


def kv_cache_capacity_tokens(
    preset: ModelPreset,
    *,
    gpu_memory_bytes: int,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    tp: int = 1,
    pp: int = 1,
    activation_peak_bytes: int = 0,
    block_size: int = DEFAULT_BLOCK_SIZE,
    kv_cache_dtype: str = "auto",
    dtype_bytes: int | None = None,
) -> int:
    """Token slots of the KV cache: ``num_blocks x block_size``, the whole pool blocks in the
    memory left (``kv_cache_memory_bytes``), ``num_blocks = available // bytes_per_block``
    (``get_kv_cache_config_from_groups``), on the most loaded rank (``get_kv_cache_configs``
    takes the smallest count over ranks). For a full-attention model these are the tokens it
    holds; a pool block of a hybrid model holds one group's layers.

    Raises:
        ValueError: an encoder-only model (no KV cache), or no memory left.

    Example:
        >>> from tokpool.sim.vllm_rules import GiB
        >>> from tokpool.sim.vllm_rules.models import MODEL_PRESETS
        >>> kv_cache_capacity_tokens(MODEL_PRESETS["SmolLM2-135M"], gpu_memory_bytes=80 * GiB)
        3418320
    """
    spec = kv_cache_spec(preset, tp=tp, pp=pp, kv_cache_dtype=kv_cache_dtype,
                         dtype_bytes=dtype_bytes, block_size=block_size)
    if spec is None:
        raise ValueError(f"{preset.name} is encoder-only: vLLM keeps no KV cache for it")
    available = kv_cache_memory_bytes(
        preset, gpu_memory_bytes=gpu_memory_bytes, gpu_memory_utilization=gpu_memory_utilization,
        tp=tp, pp=pp, activation_peak_bytes=activation_peak_bytes, dtype_bytes=dtype_bytes,
    )
    return spec.num_blocks(available) * block_size
