"""Model presets: the few numbers of a model the simulator needs (width, layers, heads,
parameters, context, pooling types), and its ESTIMATED forward FLOPs.

``tokpool.sim.vllm_rules.hf_config`` builds the same record from a ``config.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .devices import _positive
from .kv_spec import kv_head_bytes


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
        derived_max_model_len: the longest ``--max-model-len`` vLLM accepts without
            ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` when that is not ``max_model_len`` (LongRoPE
            models default to ``original_max_position_embeddings`` but accept their whole
            context); ``None``: ``max_model_len``.
        attn_type: vLLM's attention type for the pooling model (``"decoder"`` or
            ``"encoder_only"``); with the pooling types it decides chunked prefill.
        seq_pooling_type: the pooler's sequence pooling (``"LAST"``, ``"MEAN"``, ``"CLS"``).
        tok_pooling_type: the pooler's token pooling (``"ALL"``, or ``"STEP"`` for PRMs).
        num_key_value_heads: KV heads (grouped-query attention); ``None``: one per head.
        sliding_windows: each layer's sliding window in tokens, ``None`` entries for full
            attention (``kv_spec.layer_sliding_windows`` reads them from a config.json);
            ``None``: every layer attends fully.
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
    derived_max_model_len: int | None = None
    attn_type: str = "decoder"
    seq_pooling_type: str = "LAST"
    tok_pooling_type: str = "ALL"
    num_key_value_heads: int | None = None
    sliding_windows: tuple[int | None, ...] | None = None

    def kv_bytes_per_token(self, dtype_size: int) -> int:
        """KV-cache bytes one token holds on ONE device holding the whole model if every layer
        kept it: K and V, every layer, every KV head; 0 for encoder-only models (vLLM keeps no
        KV cache for them: ``EncoderOnlyAttention.get_kv_cache_spec`` returns ``None``).
        A sliding-window layer keeps at most its window (``kv_cache.kv_cache_spec``)."""
        if self.attn_type == "encoder_only":
            return 0
        kv_heads = self.num_key_value_heads or self.num_attention_heads
        return (
            self.num_layers                            # layers
            * kv_heads                                 # KV heads (GQA shares them)
            * kv_head_bytes(self.head_dim, "auto", dtype_size)  # K and V of one head
        )

    def __post_init__(self) -> None:
        _positive(
            self, "hidden_size", "num_layers", "num_attention_heads", "head_dim",
            "num_parameters", "vocab_size",
        )
        windows = self.sliding_windows
        if windows is not None:
            windows = tuple(windows)
            bad = [w for w in windows if w is not None and (
                isinstance(w, bool) or not isinstance(w, int) or w < 1)]
            if bad or len(windows) != self.num_layers:
                raise ValueError(
                    f"ModelPreset.sliding_windows must give each of the {self.num_layers} "
                    f"layers a window (an int >= 1) or None (full attention), got {windows!r:.80}"
                )
            object.__setattr__(self, "sliding_windows", windows)

    @property
    def max_model_len_limit(self) -> int | None:
        """The longest ``max_model_len`` vLLM accepts without ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``
        (``derived_max_model_len``, else ``max_model_len``; ``None``: no limit)."""
        return self.derived_max_model_len or self.max_model_len

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
        # max_model_len: each model's config.json max_position_embeddings, which vLLM derives
        # its default from (Qwen3-Embedding-8B: 40,960; its model card advertises 32K).
        ModelPreset("SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M", 576, 30, 9, 64,
                    134_515_008, 49_152, max_model_len=8192, num_key_value_heads=3),
        ModelPreset("Qwen3-Embedding-0.6B", "Qwen/Qwen3-Embedding-0.6B", 1024, 28, 16, 128,
                    595_776_512, 151_669, max_model_len=32_768, num_key_value_heads=8),
        ModelPreset("Qwen3-Embedding-8B", "Qwen/Qwen3-Embedding-8B", 4096, 36, 32, 128,
                    7_567_295_488, 151_665, max_model_len=40_960, num_key_value_heads=8),
        ModelPreset("Qwen2.5-Math-PRM-7B", "Qwen/Qwen2.5-Math-PRM-7B", 3584, 28, 28, 128,
                    7_070_000_000, 152_064, num_labels=2, default_task="token_classify",
                    step_tag_id=151_651, max_model_len=4096, tok_pooling_type="STEP",
                    num_key_value_heads=4),
        # Math-Shepherd keeps the "+"/"-" token pair of its LM head's logits; but served as a
        # pooling model by vLLM 0.33.0 it has NO LM head (models/adapters.py,
        # _create_pooling_model_cls): STEP selects those two columns of the backbone's
        # 4096-wide hidden rows (num_labels = hidden size).
        ModelPreset("math-shepherd-mistral-7b-prm", "peiyi9979/math-shepherd-mistral-7b-prm",
                    4096, 32, 32, 128, 7_241_732_096, 32_000, num_labels=4096,
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


def resolve_model(value: str | ModelPreset | None) -> ModelPreset | None:
    """A ``ModelPreset`` from a preset name or Hugging Face id, itself, or ``None``."""
    return _lookup(value, MODEL_PRESETS, ModelPreset, "model preset")


def preset_fields(preset: str | ModelPreset, *, task: str | None = None, **overrides) -> dict:
    """``SimConfig`` keyword arguments for a model preset (then ``overrides``):
    ``SimConfig.for_model(preset, task=..., **overrides)`` is ``cls(**preset_fields(...))``.

    The preset's width, task and labels; STEP pooling for a PRM asked for ``token_classify``
    (with its token pair as columns, Math-Shepherd); where its rows come from: a token-pair PRM
    has no score head, so STEP selects columns of the backbone's rows (vLLM 0.33.0 loads no LM
    head for a pooling model); a score head computes float32 logits after the backbone.

    Raises:
        ValueError: no preset (``None``) or an unknown name.
    """
    model = resolve_model(preset)
    if model is None:
        raise ValueError("for_model needs a preset name or ModelPreset, got None")
    task = task or model.default_task
    fields: dict = {"hidden_size": model.hidden_size, "task": task, "model": model}
    classify = task in ("token_classify", "classify")
    if classify and model.num_labels is not None:
        fields["num_labels"] = model.num_labels
    if task == "token_classify" and model.step_tag_id is not None:
        fields["pooling"] = "STEP"
        if model.returned_token_ids is not None and not {
                "num_returned_columns", "returned_token_ids"} & set(overrides):
            fields["num_returned_columns"] = len(model.returned_token_ids)
    if classify:
        if model.returned_token_ids is not None:
            fields["rows_from"] = "backbone"
        else:
            fields.update(rows_from="score_head", dtype="float32")
    fields.update(overrides)
    return fields
