"""vLLM 0.33.0's pooling defaults: what a pooling model gets when the user says nothing.

The head's dtype (``default_head_dtype``), activation (``default_use_activation``), async
scheduling (``default_async_scheduling``), the attention type (``pooling_attn_type``) and
whether prompts are chunked (``chunked_prefill_supported``). Each names the vLLM file and
function it restates.
"""

from __future__ import annotations

from typing import Literal

from .pooling_kind import POOLING_KINDS

__all__ = [
    "chunked_prefill_supported",
    "default_async_scheduling",
    "default_head_dtype",
    "default_use_activation",
    "pooling_attn_type",
]

Runner = Literal["pooling", "generate"]
AttnType = Literal["decoder", "encoder_only", "encoder_decoder", "hybrid", "attention_free"]
SeqPoolingType = Literal["CLS", "LAST", "MEAN"]
TokPoolingType = Literal["ALL", "STEP"]


def default_head_dtype(
    model_dtype: str,
    *,
    runner: Runner = "pooling",
    override: str | None = None,
    platform_supports_float32: bool = True,
) -> str:
    """The dtype a pooling head casts to.

    vllm/config/model.py, ``_get_head_dtype`` (used by ``ModelConfig.head_dtype``): an
    ``hf_overrides`` ``head_dtype`` wins (``"model"`` means the model dtype); otherwise pooling
    models get ``"float32"`` (when the platform supports it) and generative models the model
    dtype. The cast allocates a new ``[n_tokens, hidden]`` float32 tensor on bf16/fp16 models,
    so the head's output never aliases the step's hidden states there.

    Args:
        model_dtype: ``"bfloat16"``, ``"float16"``, ``"float32"``...
        runner: ``"pooling"`` or ``"generate"``.
        override: ``hf_overrides={"head_dtype": ...}``.
        platform_supports_float32: ``current_platform.supported_dtypes`` holds float32.
    """
    if runner not in ("pooling", "generate"):
        raise ValueError(f"unknown runner {runner!r}; use 'pooling' or 'generate'")
    if override is not None:
        return model_dtype if override == "model" else override.lower()
    if not platform_supports_float32:
        return model_dtype
    return "float32" if runner == "pooling" else model_dtype


def default_use_activation(configured: bool | None = None) -> bool:
    """``use_activation`` of a pooling request: True unless the request or ``PoolerConfig`` says.

    vllm/pooling_params.py, ``PoolingParams._merge_default_parameters`` (the request inherits
    ``PoolerConfig.use_activation``) and ``_set_default_parameters`` (still None → True, for
    embed/token_embed and classify/token_classify alike).
    """
    return True if configured is None else bool(configured)


def default_async_scheduling(runner: Runner = "pooling", requested: bool | None = None) -> bool:
    """Whether the engine schedules asynchronously.

    vllm/config/vllm.py, ``VllmConfig.__post_init__``: an explicit choice is kept; left unset
    it is off for pooling models ("negatively impacts performance of pooling models") and on
    for generative ones (when the executor supports it). vLLM's CPU platform forces it off.
    """
    if requested is not None:
        return bool(requested)
    if runner not in ("pooling", "generate"):
        raise ValueError(f"unknown runner {runner!r}; use 'pooling' or 'generate'")
    return runner == "generate"


# --- which models chunk ---------------------------------------------------------------------


def pooling_attn_type(
    default_seq_pooling_type: SeqPoolingType = "LAST",
    *,
    is_causal: bool = True,
    declared: AttnType = "decoder",
) -> AttnType:
    """The attention type vLLM assigns a pooling model.

    vllm/config/model.py, ``ModelConfig.attn_type``: a model whose *architecture's default*
    sequence pooling is CLS is ``encoder_only``; so is one whose config says ``is_causal=False``;
    otherwise the architecture's declared type (``"decoder"`` by default).
    """
    if default_seq_pooling_type == "CLS" or not is_causal:
        return "encoder_only"
    return declared


def chunked_prefill_supported(
    attn_type: AttnType,
    *,
    seq_pooling_type: SeqPoolingType | None = "LAST",
    tok_pooling_type: TokPoolingType | None = "ALL",
    pooling: bool = True,
) -> bool:
    """Whether vLLM chunks this model's prompts by default.

    vllm/config/model.py, ``ModelConfig.is_chunked_prefill_supported`` (applied by
    ``EngineArgs._set_default_chunked_prefill_and_prefix_caching_args``):

    - pooling, ``encoder_only``: never;
    - pooling, ``decoder``: not when ``seq_pooling_type`` is MEAN or CLS, or
      ``tok_pooling_type`` is STEP — both types are part of the model's ``PoolerConfig``
      whatever task is served, so a decoder whose sequence pooling is MEAN does not chunk its
      ``token_embed`` requests either; otherwise yes;
    - pooling, other types: all but ``encoder_decoder``;
    - generative: all but ``encoder_decoder``.

    Defaults (``LAST``/``ALL``) are vLLM's ``VllmModelForPooling`` defaults.
    """
    if not pooling:
        return attn_type != "encoder_decoder"
    if attn_type == "encoder_only":
        return False
    if attn_type == "decoder":
        never = tok_pooling_type is not None and not POOLING_KINDS[tok_pooling_type].chunks
        return not (seq_pooling_type in ("MEAN", "CLS") or never)
    return attn_type != "encoder_decoder"
