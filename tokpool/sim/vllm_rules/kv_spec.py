"""The KV cache as vLLM 0.33.0 lays it out, layer by layer, and how it plans the blocks.

Every rule names the vLLM function it was read in; ``tests/test_parity_kv_spec.py`` checks them
against those functions, run on the CPU (the model's own attention layers built from the
``config.json``, their ``get_kv_cache_spec``, vLLM's grouping and planning).

- **Which layers slide** (``layer_sliding_windows``). vLLM reads the ``config.json`` through
  transformers' config class of the family, so its defaults apply: Mistral, Qwen2/3 and
  Gemma-2/3 default to a 4,096-token window; Qwen2/3 slide only with ``use_sliding_window`` and
  only from layer ``max_window_layers`` on (Qwen2-MoE: every other layer below it); Gemma-2
  alternates sliding/full, Gemma-3 slides on 5 of every ``sliding_window_pattern`` (6) layers;
  Gemma-3 with ``use_bidirectional_attention`` halves its window (``window // 2 + 1``). A window
  of 0 is none (``ModelConfig.__post_init__``). The model files then build the layers:
  ``llama.py``/``mistral.py``, ``gemma2.py``, ``gemma3.py`` give each layer its window from
  ``layer_types``; every other family's ``Attention`` takes ``CacheConfig.sliding_window``,
  which ``EngineArgs.create_engine_config`` sets only when ``layer_types`` is absent or all
  ``sliding_attention`` (so Qwen2-MoE's mixed layers all attend fully). ``qwen2.py``
  (``Qwen2Model``, also Qwen3's) refuses mixed layer types unless ``max_window_layers`` equals
  the layer count.
- **One layer's spec** (``LayerKV``): ``Attention.get_kv_cache_spec`` gives a
  ``FullAttentionSpec`` or, with a window, a ``SlidingWindowSpec``; encoder-only layers keep
  no KV (``EncoderOnlyAttention``). Its page holds ``block_size`` tokens of K and V for each KV
  head on the rank (``AttentionSpec.page_size_bytes``); the per-token-head dtypes add one
  float32 scale per head for K and one for V (``TritonAttentionBackend.customize_spec``, the
  only backend that serves them), and ``int4_per_token_head`` packs two values per byte.
- **Groups** (``kv_cache_groups``): ``kv_cache_planning.get_kv_cache_groups`` puts all layers
  in one group when their specs are one type (all full attention, or all the same window);
  otherwise (``_get_kv_cache_groups_uniform_page_size``) the layers of each spec form buckets,
  the group size is the smallest bucket (the largest when that is under 1.5x the smallest),
  and a bucket of ``n`` layers becomes ``ceil(n / size)`` groups of ``layers[i::groups]``.
  Gemma-3 27B (52 sliding, 10 full layers): 6 sliding groups and 1 full group of 10 layers.
- **Blocks** (``KVCacheSpec.num_blocks``): one pool block holds a page for every layer of the
  largest group on the rank (``_get_kv_cache_bytes_per_block``); ``get_kv_cache_config_from_
  groups`` makes ``available // bytes_per_block`` blocks, the smallest count over the ranks
  (``get_kv_cache_configs``); every group draws its blocks from that one pool.
- **Blocks one request takes** (``KVCacheSpec.max_memory_blocks``): a full-attention group one
  per ``block_size`` tokens (``FullAttentionSpec.max_memory_usage_bytes``); a sliding-window
  group ``ceil(min(window - 1 + in-flight tokens, max_model_len) / block_size) + 1``
  (``SlidingWindowSpec.max_admission_blocks_per_request``: the window's tokens, the tokens of
  the steps in flight, one block for a window that does not start on a block boundary), where
  in-flight tokens are ``max_num_batched_tokens`` per concurrent batch
  (``VllmConfig.max_in_flight_tokens``).
- **The start-up check** (``KVCacheSpec.fits_one_sequence``): ``get_kv_cache_configs`` reserves
  the null block (``check_memory = available - bytes_per_block``) and
  ``_check_enough_kv_cache_memory`` refuses to start unless one ``max_model_len`` request's
  blocks fit the rest (``_max_memory_usage_bytes_from_groups``).

Not modelled, refused by name (``check_kv_layout``): multi-head latent attention (MLA),
Mamba / linear-attention state, chunked local attention, cross-attention, KV sharing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...guard import ensure_fits
from .architectures import uses_mla

__all__ = [
    "KVCacheSpec",
    "KVGroup",
    "LayerKV",
    "admission_blocks",
    "attention_head_size",
    "check_kv_layout",
    "kv_cache_groups",
    "kv_element_bytes",
    "kv_head_bytes",
    "layer_sliding_windows",
    "max_in_flight_tokens",
]

#: transformers' default ``sliding_window`` per config class (5.x), when config.json omits it.
_DEFAULT_WINDOW = {"mistral": 4096, "qwen2": 4096, "qwen2_moe": 4096, "qwen3": 4096,
                   "qwen3_moe": 4096, "gemma2": 4096, "gemma3": 4096, "gemma3_text": 4096}
#: Families whose window is gated by ``use_sliding_window`` (transformers' Qwen configs).
_GATED = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})
#: vLLM model files that give each layer its own window from ``layer_types``.
_PER_LAYER = frozenset({"llama", "mistral", "gemma2", "gemma3", "gemma3_text"})
#: vLLM model files built on ``Qwen2Model``, which refuses some-but-not-all sliding layers.
_QWEN2_MODEL = frozenset({"qwen2", "qwen3"})
_LAYER_TYPES = ("full_attention", "sliding_attention")
#: --kv-cache-dtype -> bytes per stored K or V element (``auto``: the model dtype).
_ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
                  "fp8_inc": 1, "int8_per_token_head": 1, "fp8_per_token_head": 1}
_PER_TOKEN_HEAD = frozenset({"int8_per_token_head", "fp8_per_token_head",
                             "int4_per_token_head"})
#: One float32 scale per head for K and one for V (TritonAttentionBackend.customize_spec).
_SCALE_BYTES = 2 * 4
#: The attention backends' kernel block sizes (FLASH_ATTN, TRITON_ATTN: ``MultipleOf(16)``).
_KERNEL_BLOCK = 16


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _whole(name: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"config key {name!r} must be a whole number >= {minimum}, got "
                         f"{value!r}; the model's config.json has the real value")
    return value


# --- which layers slide -------------------------------------------------------------------


def check_kv_layout(cfg: Mapping) -> None:
    """Refuse a KV layout vLLM serves but tokpool does not model, naming it.

    Args:
        cfg: the config.json as a dict.

    Raises:
        ValueError: MLA (``architectures.uses_mla``: the model type with
            ``kv_lora_rank``), Mamba / linear-attention state, chunked local
            attention (``attention_chunk_size``), an encoder-decoder model, KV sharing, or a
            ``layer_types`` entry other than full or sliding attention.
    """
    arch = (cfg.get("architectures") or [cfg.get("model_type") or "this model"])[0]
    if uses_mla(cfg):  # the model type decides, as vLLM's ModelConfig.use_mla does
        raise ValueError(
            f"{arch} uses multi-head latent attention (MLA): vLLM caches one compressed "
            f"latent per token (MLAAttentionSpec), not K and V per head (model_type "
            f"{cfg.get('model_type')!r} with kv_lora_rank, ModelConfig.use_mla); tokpool "
            "models full and sliding-window attention KV caches only, so it cannot size this "
            "model's KV cache. Give a ModelPreset without a KV cache layout it cannot check, "
            "or size it with vLLM itself")
    layouts = [
        (("ssm_state_size", "mamba_d_state", "mamba_expand", "attn_layer_period",
          "hybrid_override_pattern", "layers_block_type", "linear_num_value_heads"),
         "Mamba / linear-attention layers: vLLM keeps a fixed-size state per request "
         "(MambaSpec), not K and V per token"),
        (("attention_chunk_size",), "chunked local attention (ChunkedLocalAttentionSpec)"),
        (("num_kv_shared_layers",), "layers that share another layer's KV cache"),
    ]
    for keys, what in layouts:
        found = [k for k in keys if cfg.get(k) not in (None, 0, [], "")]
        if found:
            raise ValueError(
                f"{arch} uses {what} (config key {found[0]!r}); tokpool models full and "
                "sliding-window attention KV caches only, so it cannot size this model's "
                "KV cache. Give a ModelPreset without a KV cache layout it cannot check, or "
                "size it with vLLM itself"
            )
    if cfg.get("is_encoder_decoder"):
        raise ValueError(f"{arch} is an encoder-decoder model: vLLM adds cross-attention KV "
                         "(CrossAttentionSpec), which tokpool does not model")
    types = cfg.get("layer_types")
    if types is not None:
        other = sorted({t for t in types if t not in _LAYER_TYPES}) if isinstance(
            types, list) else [types]
        if other:
            raise ValueError(
                f"{arch} has layer_types {other}: tokpool models {list(_LAYER_TYPES)} only "
                "(vLLM builds other layer kinds with their own KV cache specs)"
            )


#: Bytes the per-layer KV tables take per layer, at most (a window and a layer kind in the
#: config's lists, a ``LayerKV`` and its place in a group and a pipeline stage).
PER_LAYER_BYTES = 256


def check_layer_table(num_layers: int) -> None:
    """Refuse, before building them, per-layer KV tables that cannot fit in memory (a config
    with billions of layers): ``MemoryLimitError`` with the size they would need."""
    ensure_fits(num_layers * PER_LAYER_BYTES,
                what=f"the per-layer KV-cache spec of a {num_layers:,}-layer model",
                cheaper="a real layer count (num_hidden_layers in config.json)")


def _default_layer_types(model_type: str, cfg: Mapping, n: int,
                         window: int | None) -> list[str] | None:
    """transformers' ``layer_types`` when config.json has none (None: the class has none)."""
    if model_type in ("qwen2", "qwen3"):
        start = cfg.get("max_window_layers", 28)
        return ["sliding_attention" if window is not None and i >= start else "full_attention"
                for i in range(n)]
    if model_type == "qwen2_moe":
        below = cfg.get("max_window_layers", 28)
        on = bool(cfg.get("use_sliding_window", False))
        return ["sliding_attention" if (i + 1) % 2 and i < below and on else "full_attention"
                for i in range(n)]
    if model_type == "gemma2":
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
    if model_type in ("gemma3", "gemma3_text"):
        pattern = _whole("sliding_window_pattern", cfg.get("sliding_window_pattern", 6),
                         minimum=1)
        return ["sliding_attention" if (i + 1) % pattern else "full_attention"
                for i in range(n)]
    return None


def layer_sliding_windows(cfg: Mapping) -> tuple[int | None, ...]:
    """Each layer's sliding window as vLLM 0.33.0 builds the model (``None``: full attention).

    Args:
        cfg: the config.json as a dict (``text_config`` merged for wrappers).

    Returns:
        One entry per layer, ``num_hidden_layers`` long.

    Raises:
        ValueError: a window or ``layer_types`` of the wrong type or length, or the layer mix
            vLLM's ``Qwen2Model`` refuses to load.

    Example:
        >>> layer_sliding_windows({"model_type": "gemma2", "num_hidden_layers": 4})
        (4096, None, 4096, None)
        >>> layer_sliding_windows({"model_type": "mistral", "num_hidden_layers": 2,
        ...                        "sliding_window": None})
        (None, None)
    """
    check_kv_layout(cfg)
    model_type = str(cfg.get("model_type", ""))
    n = _whole("num_hidden_layers", cfg.get("num_hidden_layers"), minimum=1)
    check_layer_table(n)
    window = cfg.get("sliding_window", _DEFAULT_WINDOW.get(model_type))
    if window is not None:
        window = _whole("sliding_window", window, minimum=0)
    if model_type in _GATED and not cfg.get("use_sliding_window", False):
        window = None  # Qwen2Config: sliding_window if use_sliding_window else None
    if model_type in ("gemma3", "gemma3_text") and cfg.get("use_bidirectional_attention") \
            and window:
        window = window // 2 + 1  # Gemma3TextConfig.__post_init__
    if window == 0:
        window = None  # ModelConfig.__post_init__: 0 means no sliding window
    types = cfg.get("layer_types")
    if types is None:
        types = _default_layer_types(model_type, cfg, n, window)
    elif not isinstance(types, list) or len(types) != n:
        raise ValueError(f"config key 'layer_types' must list {n} layer kinds (one per "
                         f"layer), got {types!r:.80}")
    if (model_type in _QWEN2_MODEL and types and len(set(types)) > 1
            and cfg.get("max_window_layers", 28) != n):
        raise ValueError(
            f"vLLM refuses to load this {model_type} model: \"Sliding window for some but all "
            "layers is not supported. This model uses sliding window but `max_window_layers` = "
            f"{cfg.get('max_window_layers', 28)} is less than `num_hidden_layers` = {n}.\" "
            "(qwen2.py, Qwen2Model)"
        )
    # EngineArgs.create_engine_config: the model-level window only for all-sliding models
    model_level = window if types is None or all(t == "sliding_attention" for t in types) \
        else None
    if model_type in _PER_LAYER and types is not None:
        return tuple(window if t == "sliding_attention" and window is not None else model_level
                     for t in types)
    return (model_level,) * n


#: vLLM model files that size heads as ``hidden_size // num_attention_heads`` whatever
#: ``head_dim`` says (qwen2.py, qwen2_moe.py: ``Qwen2Attention``).
_HEAD_FROM_HIDDEN = frozenset({"qwen2", "qwen2_moe"})
#: Families whose model file reads ``config.head_dim`` (gemma*.py), transformers' default 256.
_HEAD_DEFAULT_256 = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})


def attention_head_size(cfg: Mapping) -> int:
    """The head size vLLM's attention layers are built with (``Attention(head_size=...)``):
    ``head_dim`` when the model file reads it (llama.py, qwen3.py, ...: else ``hidden_size //
    num_attention_heads``; gemma*.py: transformers' default 256), never for qwen2.py /
    qwen2_moe.py (always ``hidden_size // num_attention_heads``).

    Example:
        >>> attention_head_size({"model_type": "qwen2", "hidden_size": 64,
        ...                      "num_attention_heads": 8, "head_dim": 32})
        8
    """
    model_type = cfg.get("model_type")
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    if model_type in _HEAD_FROM_HIDDEN:
        return hidden // heads
    if cfg.get("head_dim"):
        return int(cfg["head_dim"])
    return 256 if model_type in _HEAD_DEFAULT_256 else hidden // heads


# --- one layer's spec ---------------------------------------------------------------------


def kv_element_bytes(kv_cache_dtype: str = "auto", model_dtype_bytes: int = 2) -> int:
    """Bytes per stored K or V element (``auto``: the model dtype's; ``int4_per_token_head``
    packs two per byte: 1 here, halved in ``kv_head_bytes``).

    Raises:
        ValueError: a dtype tokpool does not size (see ``kv_head_bytes``).
    """
    if kv_cache_dtype == "auto":
        return model_dtype_bytes
    if kv_cache_dtype == "int4_per_token_head":
        return 1
    if kv_cache_dtype not in _ELEMENT_BYTES:
        raise ValueError(
            f"kv_cache_dtype {kv_cache_dtype!r} is not sized by tokpool (vLLM 0.33.0 takes "
            "the CacheDType names of vllm/config/cache.py; 'float32' is not one: 'auto' stores "
            f"the model's dtype); use one of {['auto', 'int4_per_token_head', *_ELEMENT_BYTES]}"
        )
    return _ELEMENT_BYTES[kv_cache_dtype]


def kv_head_bytes(head_size: int, kv_cache_dtype: str = "auto", model_dtype_bytes: int = 2
                  ) -> int:
    """Bytes one token of one KV head takes in the cache: K and V, with their scales.

    ``AttentionSpec.state_content_size_bytes``: ``(head_size + head_size_v) x element bytes``;
    per-token-head dtypes add one float32 scale for K and one for V, and
    ``int4_per_token_head`` packs two values per byte (``TritonAttentionBackend.
    customize_spec``).

    Args:
        head_size: the head dimension.
        kv_cache_dtype: vLLM's ``--kv-cache-dtype`` (``"auto"``: the model dtype).
        model_dtype_bytes: the served model dtype's bytes (for ``"auto"``).

    Raises:
        ValueError: a dtype vLLM 0.33.0 does not accept, or a packed format tokpool does not
            size (nvfp4, turboquant, ...), named.

    Example:
        >>> kv_head_bytes(128, "int8_per_token_head")   # 256 data bytes + 2 x 4-byte scales
        264
    """
    element = kv_element_bytes(kv_cache_dtype, model_dtype_bytes)
    values = head_size // 2 if kv_cache_dtype == "int4_per_token_head" else head_size
    scales = _SCALE_BYTES if kv_cache_dtype in _PER_TOKEN_HEAD else 0
    return (
        2              # K and V
        * values       # stored values per head (int4: two per byte)
        * element      # bytes per stored value
        + scales       # one float32 scale each for K and V (per-token-head dtypes)
    )


@dataclass(frozen=True)
class LayerKV:
    """One attention layer's KV-cache spec on one rank (vLLM's ``FullAttentionSpec`` or
    ``SlidingWindowSpec``).

    Attributes:
        sliding_window: the window in tokens, ``None`` for full attention.
        num_kv_heads: KV heads this rank stores.
        head_bytes: bytes per token per KV head (``kv_head_bytes``).
    """

    sliding_window: int | None
    num_kv_heads: int
    head_bytes: int

    @property
    def bytes_per_token(self) -> int:
        return self.num_kv_heads * self.head_bytes

    def page_size_bytes(self, block_size: int) -> int:
        """One block of this layer (``AttentionSpec.page_size_bytes``)."""
        return (
            block_size             # tokens
            * self.num_kv_heads    # KV heads on the rank
            * self.head_bytes      # K and V (and scales) of one head
        )


def max_in_flight_tokens(max_num_batched_tokens: int, *, async_scheduling: bool,
                         pipeline_parallel_size: int = 1) -> int:
    """Tokens scheduled but not yet processed, at most (``VllmConfig.max_in_flight_tokens``):
    a full budget per concurrent batch, ``VllmConfig.max_concurrent_batches`` = the pipeline
    stages, plus one under async scheduling (Model Runner V2).

    Example:
        >>> max_in_flight_tokens(8192, async_scheduling=True)
        16384
    """
    batches = pipeline_parallel_size + (1 if async_scheduling else 0)
    return batches * max_num_batched_tokens


# --- groups -------------------------------------------------------------------------------


@dataclass(frozen=True)
class KVGroup:
    """One KV-cache group: layers of one spec sharing one block table per request.

    Attributes:
        sliding_window: the group's window (``None``: full attention).
        layers: the model layer indices in the group (``layers[i::groups]`` of a bucket).
    """

    sliding_window: int | None
    layers: tuple[int, ...]

    def max_memory_blocks(self, *, block_size: int, max_model_len: int,
                          max_in_flight_tokens: int) -> int:
        """Blocks vLLM plans for one request of ``max_model_len`` tokens in this group
        (``max_memory_usage_bytes`` / page): one per ``block_size`` tokens for full attention,
        the admission cap for a sliding window (``SlidingWindowSpec.max_memory_usage_bytes``:
        the cap's extra block is counted even when ``max_model_len`` is shorter than the
        window)."""
        if self.sliding_window is None:
            return _cdiv(max_model_len, block_size)
        return self.admission_cap(block_size=block_size, max_model_len=max_model_len,
                                  max_in_flight_tokens=max_in_flight_tokens)

    def admission_cap(self, *, block_size: int, max_model_len: int,
                      max_in_flight_tokens: int) -> int | None:
        """``SlidingWindowSpec.max_admission_blocks_per_request`` (``None`` for full
        attention: no cap)."""
        if self.sliding_window is None:
            return None
        tokens = min(self.sliding_window - 1 + max_in_flight_tokens, max_model_len)
        return _cdiv(tokens, block_size) + 1


def admission_blocks(num_tokens: int, windows: Sequence[int | None], *, block_size: int,
                     max_model_len: int | None = None, max_in_flight_tokens: int = 0) -> int:
    """Blocks a waiting request of ``num_tokens`` tokens must find free to be admitted with
    no prefix-cache hit, all groups together: its whole prompt in a full-attention group, at
    most the window's cap in a sliding one (``SingleTypeKVCacheManager.
    get_num_blocks_to_allocate(apply_admission_cap=True)``; ``max_model_len`` ``None``: no
    limit).

    Example:
        >>> admission_blocks(16_000, [4096], block_size=16, max_model_len=16_384,
        ...                  max_in_flight_tokens=2048)
        385
    """
    limit = max_model_len if max_model_len is not None else num_tokens
    blocks = _cdiv(min(num_tokens, limit), block_size)
    total = 0
    for window in windows:
        cap = KVGroup(window, ()).admission_cap(block_size=block_size, max_model_len=limit,
                                                max_in_flight_tokens=max_in_flight_tokens)
        total += blocks if cap is None else min(blocks, cap)
    return total


def kv_cache_groups(windows: Sequence[int | None]) -> tuple[KVGroup, ...]:
    """vLLM's KV-cache groups for layers whose specs differ only by window
    (``kv_cache_planning.get_kv_cache_groups``; see the module docstring).

    Args:
        windows: each KV layer's window, layer order (``None``: full attention).

    Returns:
        The groups in vLLM's order (buckets by the layer they first appear in).

    Example:
        >>> [(g.sliding_window, g.layers) for g in kv_cache_groups([512, 512, None] * 2)]
        [(512, (0, 3)), (512, (1, 4)), (None, (2, 5))]
    """
    if not windows:
        return ()
    buckets: dict[int | None, list[int]] = {}
    for layer, window in enumerate(windows):
        buckets.setdefault(window, []).append(layer)
    if len(buckets) == 1:  # is_kv_cache_spec_uniform: one group of every layer
        ((window, layers),) = buckets.items()
        return (KVGroup(window, tuple(layers)),)
    sizes = [len(layers) for layers in buckets.values()]
    size = min(sizes)
    if max(sizes) < size * 1.5:  # fewer padding layers (vLLM's heuristic)
        size = max(sizes)
    groups = []
    for window, layers in buckets.items():
        count = _cdiv(len(layers), size)
        groups.extend(KVGroup(window, tuple(layers[i::count])) for i in range(count))
    return tuple(groups)


# --- the cache of a model -----------------------------------------------------------------


@dataclass(frozen=True)
class KVCacheSpec:
    """A model's KV cache on the most loaded rank, as vLLM plans it.

    Attributes:
        layers: each model layer's spec on this rank (``None``: no KV, e.g. encoder-only).
        groups: vLLM's KV-cache groups (``kv_cache_groups``), of the whole model.
        stages: the layer indices of each pipeline stage.
        block_size: tokens per block.
    """

    layers: tuple[LayerKV | None, ...]
    groups: tuple[KVGroup, ...]
    stages: tuple[tuple[int, ...], ...]
    block_size: int

    @classmethod
    def build(cls, windows: Sequence[int | None], *, num_kv_heads: int, head_bytes: int,
              block_size: int, stages: Sequence[Sequence[int]] | None = None,
              ) -> KVCacheSpec:
        """The spec of ``len(windows)`` attention layers, each with ``num_kv_heads`` heads of
        ``head_bytes`` bytes per token on the rank.

        Raises:
            ValueError: a sliding-window model with a ``block_size`` that is not a multiple of
                16 (vLLM then picks another block size for the sliding layers from the attention
                backend, which tokpool does not model).
        """
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        windows = tuple(windows)
        if any(w is not None for w in windows) and block_size % _KERNEL_BLOCK:
            raise ValueError(
                f"block_size={block_size} with sliding-window layers: vLLM sizes a sliding "
                "layer's block from its attention backend (Attention.get_kv_cache_spec, "
                f"_largest_kernel_block_within: multiples of {_KERNEL_BLOCK} on FLASH_ATTN and "
                "TRITON_ATTN), which tokpool does not model for other sizes; use "
                f"--block-size {_KERNEL_BLOCK} (vLLM's default) or a multiple of it"
            )
        layers = tuple(LayerKV(w, num_kv_heads, head_bytes) for w in windows)
        staged = tuple(tuple(s) for s in stages) if stages is not None else (
            tuple(range(len(windows))),)
        return cls(layers, kv_cache_groups(windows), staged, block_size)

    @property
    def group_windows(self) -> tuple[int | None, ...]:
        """Each group's window (``None``: full attention), group order: what the scheduler's
        block manager needs."""
        return tuple(g.sliding_window for g in self.groups)

    @property
    def is_hybrid(self) -> bool:
        """More than one group (vLLM's ``HybridKVCacheCoordinator``)."""
        return len(self.groups) > 1

    def _page(self, layer: int) -> int:
        spec = self.layers[layer]
        return 0 if spec is None else spec.page_size_bytes(self.block_size)

    @property
    def stage_bytes_per_block(self) -> tuple[int, ...]:
        """One pool block on each pipeline stage's ranks: a page for every layer of the
        largest group there (``_get_kv_cache_bytes_per_block`` over the stage's projected
        groups, ``_project_kv_cache_groups_to_worker``)."""
        return tuple(
            max(sum(self._page(i) for i in g.layers if i in stage) for g in self.groups)
            for stage in map(set, self.stages)
        )

    @property
    def bytes_per_block(self) -> int:
        """One pool block on the most loaded rank (the largest of ``stage_bytes_per_block``):
        the blocks of every rank are the smallest count (``get_kv_cache_configs``)."""
        return max(self.stage_bytes_per_block)

    @property
    def bytes_per_token(self) -> int:
        """KV bytes one token takes on the most loaded rank if every layer held it (what a
        full-attention model pays per token; sliding layers pay at most their window)."""
        return max(sum(self.layers[i].bytes_per_token for i in stage
                       if self.layers[i] is not None) for stage in self.stages)

    def num_blocks(self, available_bytes: int) -> int:
        """Blocks vLLM allocates in ``available_bytes`` per rank
        (``get_kv_cache_config_from_groups``: ``available // bytes_per_block``)."""
        return max(0, available_bytes) // self.bytes_per_block

    def max_memory_blocks(self, *, max_model_len: int, max_in_flight_tokens: int) -> int:
        """Blocks vLLM plans for one ``max_model_len`` request, all groups together
        (``_max_memory_usage_bytes_from_groups`` / ``bytes_per_block``)."""
        return sum(g.max_memory_blocks(block_size=self.block_size, max_model_len=max_model_len,
                                       max_in_flight_tokens=max_in_flight_tokens)
                   for g in self.groups)

    def fits_one_sequence(self, num_blocks: int, *, max_model_len: int,
                          max_in_flight_tokens: int) -> bool:
        """vLLM's start-up check: one ``max_model_len`` request fits the blocks but the null
        block (``get_kv_cache_configs``, ``_check_enough_kv_cache_memory``)."""
        return self.max_memory_blocks(max_model_len=max_model_len,
                                      max_in_flight_tokens=max_in_flight_tokens) \
            <= num_blocks - 1

    def estimate_max_model_len(self, num_blocks: int, *, max_model_len: int,
                               max_in_flight_tokens: int) -> int:
        """The longest ``max_model_len`` the blocks hold, as vLLM's message estimates it
        (``_estimate_max_model_len_from_groups``: a binary search, 0 when one token does not
        fit)."""
        def fits(length: int) -> bool:
            return self.max_memory_blocks(max_model_len=length,
                                          max_in_flight_tokens=max_in_flight_tokens) \
                <= num_blocks - 1
        if not fits(1):
            return 0
        lo, hi, best = 1, max_model_len, 1
        while lo <= hi:
            mid = (lo + hi) // 2
            if fits(mid):
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        return best

    def max_concurrency(self, num_blocks: int, *, max_model_len: int,
                        max_in_flight_tokens: int) -> float:
        """Requests of ``max_model_len`` tokens the cache holds at once (vLLM's start-up log
        line, ``get_max_concurrency_for_kv_cache_config``: ``num_blocks`` over one request's
        blocks)."""
        return num_blocks / self.max_memory_blocks(max_model_len=max_model_len,
                                                   max_in_flight_tokens=max_in_flight_tokens)
