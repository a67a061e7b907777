"""Hardware and model presets, and the roofline time ESTIMATE of one engine step.

Everything here is an estimate from spec-sheet numbers, not a measurement: an ideal roofline
(no kernel inefficiency, no launch overhead, perfect overlap where overlap is modelled). Use it to
compare policies and prompt lengths with each other, not to predict absolute latency.

Per step (``c`` tokens scheduled, attention context summed over those tokens ``ctx``):

- forward  = max(FLOPs / peak FLOP/s, weight bytes / HBM bandwidth), with
  FLOPs = 2 · (parameters − vocab · hidden) · c            (matmuls; the embedding lookup is free)
        + 4 · layers · (heads · head_dim) · ctx             (QKᵀ and AV, causal: ctx = Σ (pos + 1))
- pool     = 2 · copy_bytes / HBM bandwidth                 (every pooling copy reads and writes)
- d2h      = d2h_bytes / PCIe host bandwidth
- step     = forward + pool + d2h                           (synchronous scheduling)
           = max(forward + pool, d2h)                       (async: the host copy overlaps)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

import numpy as np

GiB = 1 << 30


def _positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(
                f"{type(obj).__name__}.{name} must be a positive number, got {value!r}"
            )


@dataclass(frozen=True)
class Hardware:
    """One accelerator, by its spec sheet (used only for time ESTIMATES).

    Attributes:
        name: label.
        hbm_bytes: device memory capacity, bytes.
        hbm_bandwidth: device memory bandwidth, bytes/s.
        bf16_flops: dense bf16 tensor-core throughput, FLOP/s (no sparsity).
        pcie_bandwidth: host link bandwidth for device-to-host copies, bytes/s, one direction.

    Example:
        >>> card = Hardware("my-gpu", hbm_bytes=48 * GiB, hbm_bandwidth=0.9e12,
        ...                 bf16_flops=180e12, pcie_bandwidth=32e9)  # a custom card
    """

    name: str
    hbm_bytes: int
    hbm_bandwidth: float
    bf16_flops: float
    pcie_bandwidth: float

    def __post_init__(self) -> None:
        _positive(self, "hbm_bytes", "hbm_bandwidth", "bf16_flops", "pcie_bandwidth")


#: Spec-sheet presets (SXM parts where there is a choice). PCIe: Gen5 x16 ≈ 64 GB/s per
#: direction, Gen4 x16 ≈ 32 GB/s, theoretical.
HARDWARE_PRESETS: Mapping[str, Hardware] = {
    h.name: h
    for h in (
        Hardware("H100 SXM", 80 * GiB, 3.35e12, 989e12, 64e9),
        Hardware("H200", 141 * GiB, 4.8e12, 989e12, 64e9),
        Hardware("A100 80GB", 80 * GiB, 2.039e12, 312e12, 32e9),
        Hardware("L4", 24 * GiB, 300e9, 121e12, 32e9),
    )
}


@dataclass(frozen=True)
class ModelPreset:
    """The few numbers of a model the simulator needs.

    Attributes:
        name: short name (the preset key).
        hf_id: Hugging Face repository id.
        hidden_size: width of the final hidden states.
        num_layers, num_attention_heads, head_dim: for attention FLOPs.
        num_parameters: all parameters (embedding table included).
        vocab_size: rows of the embedding table.
        num_labels: width of the score head's output for ``token_classify`` (``None`` for
            models without one).
        default_task: the task the model is served for.
        step_tag_id: STEP pooling's tag token (process reward models), or ``None``.
        returned_token_ids: STEP pooling's columns (Math-Shepherd's token pair), or ``None``.
        max_model_len: the model's context (``max_position_embeddings``): vLLM's default
            ``max_model_len``, above which prompts are rejected.
        attn_type: vLLM's attention type for the pooling model (``"decoder"`` or
            ``"encoder_only"``); with the pooling types it decides chunked prefill.
        seq_pooling_type: the pooler's sequence pooling (``"LAST"``, ``"MEAN"``, ``"CLS"``).
        tok_pooling_type: the pooler's token pooling (``"ALL"``, or ``"STEP"`` for PRMs).
        num_key_value_heads: KV heads (grouped-query attention); ``None``: one per head.
    """

    name: str
    hf_id: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    head_dim: int
    num_parameters: int
    vocab_size: int
    num_labels: int | None = None
    default_task: str = "token_embed"
    step_tag_id: int | None = None
    returned_token_ids: tuple[int, ...] | None = None
    max_model_len: int | None = None
    attn_type: str = "decoder"
    seq_pooling_type: str = "LAST"
    tok_pooling_type: str = "ALL"
    num_key_value_heads: int | None = None

    def kv_bytes_per_token(self, dtype_size: int) -> int:
        """KV-cache bytes one token holds on ONE device holding the whole model: K and V,
        every layer, every KV head; 0 for encoder-only models (vLLM keeps no KV cache for
        them: ``EncoderOnlyAttention.get_kv_cache_spec`` returns ``None``)."""
        if self.attn_type == "encoder_only":
            return 0
        kv_heads = self.num_key_value_heads or self.num_attention_heads
        return (
            2                   # K and V
            * self.num_layers   # layers
            * kv_heads          # KV heads (grouped-query attention shares them)
            * self.head_dim     # per head
            * dtype_size        # bytes per element
        )

    def __post_init__(self) -> None:
        _positive(
            self, "hidden_size", "num_layers", "num_attention_heads", "head_dim",
            "num_parameters", "vocab_size",
        )

    @property
    def matmul_parameters(self) -> int:
        """Parameters that cost FLOPs per token (all but the embedding lookup)."""
        return max(self.num_parameters - self.vocab_size * self.hidden_size, 0)

    def flops(self, tokens, context_sum):
        """ESTIMATED forward FLOPs of a step (scalars or numpy arrays).

        Args:
            tokens: tokens computed in the step.
            context_sum: Σ over those tokens of (position + 1), the causal attention span.
        """
        attention_width = self.num_attention_heads * self.head_dim
        return (
            2.0 * self.matmul_parameters * tokens
            + 4.0 * self.num_layers * attention_width * context_sum
        )


MODEL_PRESETS: Mapping[str, ModelPreset] = {
    m.name: m
    for m in (
        # max_model_len: each model's config.json max_position_embeddings.
        ModelPreset("SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M", 576, 30, 9, 64,
                    134_515_008, 49_152, max_model_len=8192, num_key_value_heads=3),
        ModelPreset("Qwen3-Embedding-0.6B", "Qwen/Qwen3-Embedding-0.6B", 1024, 28, 16, 128,
                    595_776_512, 151_669, max_model_len=32_768, num_key_value_heads=8),
        ModelPreset("Qwen3-Embedding-8B", "Qwen/Qwen3-Embedding-8B", 4096, 36, 32, 128,
                    7_567_295_488, 151_665, max_model_len=32_768, num_key_value_heads=8),
        ModelPreset("Qwen2.5-Math-PRM-7B", "Qwen/Qwen2.5-Math-PRM-7B", 3584, 28, 28, 128,
                    7_070_000_000, 152_064, num_labels=2, default_task="token_classify",
                    step_tag_id=151_651, max_model_len=4096, tok_pooling_type="STEP",
                    num_key_value_heads=4),
        # Math-Shepherd scores steps with the LM head's full-vocabulary logits, then keeps the
        # "+"/"-" token pair: pooling sees vocab-wide rows (num_labels = vocab).
        ModelPreset("math-shepherd-mistral-7b-prm", "peiyi9979/math-shepherd-mistral-7b-prm",
                    4096, 32, 32, 128, 7_241_732_096, 32_000, num_labels=32_000,
                    default_task="token_classify", step_tag_id=12_902,
                    returned_token_ids=(648, 387), max_model_len=32_768,
                    tok_pooling_type="STEP", num_key_value_heads=8),
    )
}


def _lookup(value, presets: Mapping, kind: type, what: str):
    if value is None or isinstance(value, kind):
        return value
    if isinstance(value, str):
        wanted = value.strip().lower()
        if not wanted:
            raise ValueError(f"the {what} name is empty ({value!r}); use one of "
                             f"{list(presets)} or a {kind.__name__}")
        for key, preset in presets.items():
            if wanted in (key.lower(), getattr(preset, "hf_id", "").lower()):
                return preset
        raise ValueError(
            f"unknown {what} {value!r}; use one of {list(presets)} or a {kind.__name__}"
        )
    raise TypeError(
        f"{what} must be a preset name or a {kind.__name__}, got {type(value).__name__}"
    )


def resolve_hardware(value: str | Hardware) -> Hardware:
    """A ``Hardware`` from a preset name (case-insensitive) or itself.

    Raises:
        ValueError: an unknown name (the presets are listed).
    """
    hw = _lookup(value, HARDWARE_PRESETS, Hardware, "hardware")
    if hw is None:
        raise ValueError(f"hardware must be set; use one of {list(HARDWARE_PRESETS)}")
    return hw


def resolve_model(value: str | ModelPreset | None) -> ModelPreset | None:
    """A ``ModelPreset`` from a preset name or Hugging Face id, itself, or ``None``."""
    return _lookup(value, MODEL_PRESETS, ModelPreset, "model preset")


def estimate_step_times(
    tokens,
    context_sum,
    copy_bytes,
    d2h_bytes,
    *,
    model: ModelPreset | None,
    hardware: Hardware,
    weight_bytes_per_parameter: int,
    async_scheduling: bool,
) -> dict[str, np.ndarray]:
    """Roofline ESTIMATES for steps (arrays in, arrays out; see the module docstring).

    Args:
        tokens: ``[n_steps]`` tokens computed per step (0 for a collect-only step).
        context_sum: ``[n_steps]`` Σ (position + 1) over those tokens.
        copy_bytes: ``[n_steps]`` device bytes written by pooling.
        d2h_bytes: ``[n_steps]`` bytes copied device → host.
        model: the model; ``None`` gives NaN forward times (unknown).
        hardware: the accelerator.
        weight_bytes_per_parameter: bytes per weight (the model dtype's size).
        async_scheduling: overlap the host copy with the step (see module docstring).

    Returns:
        ``est_forward_s``, ``est_pool_s``, ``est_d2h_s``, ``est_step_s``, each ``[n_steps]``.
    """
    tokens = np.asarray(tokens, dtype=np.float64)
    if model is None:
        forward = np.full(tokens.shape, np.nan)
    else:
        compute = model.flops(tokens, np.asarray(context_sum, dtype=np.float64))
        compute_s = compute / hardware.bf16_flops
        weights_s = model.num_parameters * weight_bytes_per_parameter / hardware.hbm_bandwidth
        # A step that computes nothing (collect-only) reads no weights.
        forward = np.where(tokens > 0, np.maximum(compute_s, weights_s), 0.0)
    pool = 2.0 * np.asarray(copy_bytes, dtype=np.float64) / hardware.hbm_bandwidth
    d2h = np.asarray(d2h_bytes, dtype=np.float64) / hardware.pcie_bandwidth
    step = np.maximum(forward + pool, d2h) if async_scheduling else forward + pool + d2h
    return {"est_forward_s": forward, "est_pool_s": pool, "est_d2h_s": d2h, "est_step_s": step}


def preset_table() -> tuple[list[dict], list[dict]]:
    """The presets as plain rows (for a notebook table): ``(hardware_rows, model_rows)``."""
    hw = [{f.name: getattr(h, f.name) for f in fields(h)} for h in HARDWARE_PRESETS.values()]
    mo = [{f.name: getattr(m, f.name) for f in fields(m)} for m in MODEL_PRESETS.values()]
    return hw, mo
