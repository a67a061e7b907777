"""What vLLM 0.33.0 knows about an architecture or model type, for the architectures tokpool
reads (``hf_families.FAMILIES``): which runner ``--runner auto`` picks and what ``--convert
auto`` becomes, whether pipeline parallelism is supported, and which dtypes it refuses.

- ``resolve_runner``: vllm/config/model.py, ``ModelConfig._get_runner_type``,
  ``_get_default_runner_type``, ``_get_convert_type``, ``_get_default_convert_type`` and the
  suffix table ``_SUFFIX_TO_DEFAULTS``. A bare ``*ForCausalLM`` (no sentence-transformers
  pooling config in its folder) is served as a GENERATIVE model under ``--runner auto``.
- ``supports_pipeline_parallel``: ``ModelConfig.verify_with_parallel_config`` asks the
  registry whether the model class implements ``SupportsPP`` (BERT-style encoders,
  ModernBERT and ``Gemma3TextModel`` do not).
- ``FLOAT16_UNSUPPORTED``: vllm/config/model.py, ``_FLOAT16_NOT_SUPPORTED_MODELS``; their
  float32 checkpoints are served in bfloat16 (``_resolve_auto_dtype``).
- ``uses_mla``: ``ModelConfig.use_mla`` / ``ModelArchConfigConvertor.is_deepseek_mla``
  (vllm/transformers_utils/model_arch_config_convertor.py): multi-head latent attention is a
  property of the model types vLLM lists (DeepSeek-V2/V3, Kimi-K2, ...), not of a config key.

The registry facts (which architectures vLLM registers, and whether their class is a pooling
or a text-generation model) were read in vllm/model_executor/models/registry.py and are
checked against ``EngineArgs.create_engine_config`` in ``tests/test_parity_config.py``.
"""

from __future__ import annotations

from typing import Literal

from .scoring_path import LATE_INTERACTION_TASKS

__all__ = [
    "FLOAT16_UNSUPPORTED",
    "SUFFIX_DEFAULTS",
    "is_generative_class",
    "is_pooling_class",
    "resolve_runner",
    "runs_on_transformers_backend",
    "supports_pipeline_parallel",
    "uses_mla",
]

RunnerType = Literal["generate", "pooling", "draft"]
ConvertType = Literal["none", "embed", "classify"]

#: vllm/config/model.py ``_SUFFIX_TO_DEFAULTS``: the first suffix an architecture ends with
#: gives its default runner and conversion.
SUFFIX_DEFAULTS: tuple[tuple[str, RunnerType, ConvertType], ...] = (
    ("ForCausalLM", "generate", "none"),
    ("ForConditionalGeneration", "generate", "none"),
    ("ChatModel", "generate", "none"),
    ("LMHeadModel", "generate", "none"),
    ("ForTextEncoding", "pooling", "embed"),
    ("EmbeddingModel", "pooling", "embed"),
    ("ForSequenceClassification", "pooling", "classify"),
    ("ForTokenClassification", "pooling", "classify"),
    ("ForAudioClassification", "pooling", "classify"),
    ("ForImageClassification", "pooling", "classify"),
    ("ForVideoClassification", "pooling", "classify"),
    ("ClassificationModel", "pooling", "classify"),
    ("ForRewardModeling", "pooling", "embed"),
    ("RewardModel", "pooling", "embed"),
    ("Model", "pooling", "embed"),
)

_DECODER_STEMS = ("Llama", "Mistral", "Mixtral", "Qwen2", "Qwen2Moe", "Qwen3", "Qwen3Moe",
                  "Gemma", "Gemma2", "Gemma3", "Phi3", "Olmo", "Olmo2")
#: Registered architectures whose model class is a text-generation model: the decoders'
#: ``*ForCausalLM``, and four ``*Model`` names vLLM maps to a ``*ForCausalLM`` class
#: (registry.py ``_EMBEDDING_MODELS``: ``LlamaModel`` -> ``LlamaForCausalLM``, ...), which
#: ``--runner auto`` therefore serves as generative models.
_GENERATIVE_CLASSES = frozenset(
    {f"{stem}ForCausalLM" for stem in _DECODER_STEMS}
    | {"LlamaModel", "MistralModel", "Qwen2Model", "Gemma2Model"})
#: Registered architectures whose model class is a pooling model (``--convert auto`` gives
#: ``none``): the BERT family's encoders and heads, the Qwen2 reward models.
_POOLING_CLASSES = frozenset(
    {f"{stem}{head}" for stem in ("Bert", "Roberta", "XLMRoberta")
     for head in ("Model", "ForSequenceClassification", "ForTokenClassification")}
    | {"BertForMaskedLM", "RobertaForMaskedLM", "ModernBertForSequenceClassification",
       "ModernBertForTokenClassification", "Qwen2ForProcessRewardModel",
       "Qwen2ForRewardModel"}
    | set(LATE_INTERACTION_TASKS))  # ColBERT family, JinaForRanking, BGE-M3 (registry.py)
#: Model classes without ``SupportsPP`` among the architectures tokpool reads.
_NO_PIPELINE_PARALLEL_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "modernbert"})
_NO_PIPELINE_PARALLEL_ARCHS = frozenset({"Gemma3TextModel"})  # registry: gemma3.Gemma3Model
#: Registered architectures whose class is neither (the suffix decides runner and convert).
_OTHER_CLASSES = frozenset({"ModernBertModel", "Gemma3TextModel"})

#: model_type -> vLLM's reason (vllm/config/model.py, ``_FLOAT16_NOT_SUPPORTED_MODELS``).
FLOAT16_UNSUPPORTED: dict[str, str] = dict.fromkeys(
    ("gemma2", "gemma3", "gemma3_text", "glm4"),
    "Numerical instability. Please use bfloat16 or float32 instead.")


def _class_kind(architecture: str) -> RunnerType | None:
    if architecture in _POOLING_CLASSES:
        return "pooling"
    if architecture in _GENERATIVE_CLASSES:
        return "generate"
    return None  # not registered, or registered with a class that is neither


def _suffix(architecture: str, runner: RunnerType | None = None):
    return next(((r, c) for suffix, r, c in SUFFIX_DEFAULTS
                 if architecture.endswith(suffix) and runner in (None, r)), None)


def resolve_runner(
    architecture: str,
    *,
    runner: str = "auto",
    convert: str = "auto",
    sentence_transformers: bool = False,
) -> tuple[RunnerType, ConvertType]:
    """The runner and conversion vLLM resolves for an architecture.

    Args:
        architecture: ``architectures[0]`` of the config.
        runner: ``--runner`` (``auto``, ``pooling``, ``generate``, ``draft``).
        convert: ``--convert`` (``auto``, ``none``, ``embed``, ``classify``).
        sentence_transformers: the folder holds a sentence-transformers pooling config
            (``modules.json``): ``--runner auto`` then picks pooling
            (``get_pooling_config`` in ``_get_default_runner_type``).

    Returns:
        ``(runner_type, convert_type)``.

    Example:
        >>> resolve_runner("Qwen3ForCausalLM")  # a bare decoder: served as generative
        ('generate', 'none')
        >>> resolve_runner("Qwen3ForCausalLM", runner="pooling")
        ('pooling', 'embed')
        >>> resolve_runner("Qwen3ForCausalLM", sentence_transformers=True)
        ('pooling', 'embed')
        >>> resolve_runner("BertModel"), resolve_runner("LlamaForTokenClassification")
        (('pooling', 'none'), ('pooling', 'classify'))
    """
    kind = _class_kind(architecture)
    if runner != "auto":
        runner_type = runner
    elif convert not in ("auto", "none") or sentence_transformers:
        runner_type = "pooling"
    elif kind is not None:
        runner_type = kind
    else:
        match = _suffix(architecture)
        runner_type = match[0] if match else "generate"
    if convert != "auto":
        return runner_type, convert  # type: ignore[return-value]
    if kind == runner_type:
        return runner_type, "none"  # type: ignore[return-value]
    match = _suffix(architecture, runner_type)  # type: ignore[arg-type]
    if match:
        return runner_type, match[1]  # type: ignore[return-value]
    return runner_type, "embed" if runner_type == "pooling" else "none"  # type: ignore


def is_pooling_class(architecture: str) -> bool:
    """The registered model class is a pooling model (``ModelRegistry.is_pooling_model``)."""
    return architecture in _POOLING_CLASSES


def is_generative_class(architecture: str) -> bool:
    """The model class generates text (``ModelRegistry.is_text_generation_model``): a
    registered generative class, or an unregistered name vLLM would try as one."""
    return architecture in _GENERATIVE_CLASSES or (
        _class_kind(architecture) is None and (_suffix(architecture) or ("generate",))[0]
        == "generate")


def runs_on_transformers_backend(architecture: str, runner_type: str, convert_type: str) -> bool:
    """vLLM cannot name one of its model classes for this architecture and conversion, and
    builds the model on its Transformers backend instead (vllm/model_executor/models/
    registry.py, ``_ModelRegistry.inspect_model_cls``: ``_normalize_arch`` swaps the suffix
    for a registered one only when the suffix's defaults match the runner and conversion, e.g.
    ``LlamaForSequenceClassification --convert classify`` -> ``LlamaForCausalLM`` with the
    classification adapter, but ``--convert embed`` finds nothing). Its pooling classes
    default to CLS pooling (``EmbeddingMixin``, ``SequenceClassificationMixin``): the model
    is then encoder-only.

    Example:
        >>> runs_on_transformers_backend("LlamaForSequenceClassification", "pooling", "embed")
        True
        >>> runs_on_transformers_backend("LlamaForSequenceClassification", "pooling",
        ...                              "classify")
        False
    """
    if runner_type != "pooling" or convert_type == "none":
        return False
    if architecture in _POOLING_CLASSES | _GENERATIVE_CLASSES | _OTHER_CLASSES:
        return False
    return not any(architecture.endswith(suffix) and (runner, convert) == (runner_type,
                                                                           convert_type)
                   for suffix, runner, convert in SUFFIX_DEFAULTS)


def supports_pipeline_parallel(architecture: str, model_type: str) -> bool:
    """Whether vLLM's model class for this architecture implements ``SupportsPP``
    (``ModelRegistry.is_pp_supported_model``, asked by
    ``ModelConfig.verify_with_parallel_config``): the decoders do; BERT, RoBERTa, XLM-R,
    ModernBERT and EmbeddingGemma's ``Gemma3TextModel`` do not."""
    return (model_type not in _NO_PIPELINE_PARALLEL_TYPES
            and architecture not in _NO_PIPELINE_PARALLEL_ARCHS)


#: ``ModelArchConfigConvertor.is_deepseek_mla``'s model types (vLLM 0.33.0): the models vLLM
#: builds with multi-head latent attention when their config has ``kv_lora_rank``.
MLA_MODEL_TYPES = frozenset({
    "axk1", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v4", "deepseek_v41",
    "dots3_note", "deepseek_mtp", "k3_dspark", "glm5_next", "glm5_next_text", "glm_moe_dsa",
    "glm4_moe_lite", "glm4_moe_lite_mtp", "kimi_k2", "kimi_linear", "longcat_flash",
    "pangu_ultra_moe", "pangu_ultra_moe_mtp", "bailing_hybrid", "bailing_hybrid_mtp",
    "bailing_hybrid_v3_mtp", "hy_v4", "hy_v4_mtp",
})


def uses_mla(cfg) -> bool:
    """Whether vLLM builds this config.json's model with multi-head latent attention
    (``ModelConfig.use_mla``): its model type is one vLLM's DeepSeek-style classes serve and
    it sets ``kv_lora_rank``; a bidirectional variant (``is_causal: false``) is not. A
    ``kv_lora_rank`` in another model type's config is a key vLLM's class never reads
    (``LlamaForCausalLM`` caches K and V per head as for any Llama). Not modelled: vLLM's
    ``VLLM_MLA_DISABLE`` and the Transformers backend, which reads ``kv_lora_rank`` alone
    (tokpool sizes only the families it counts, none of which is MLA).

    Example:
        >>> uses_mla({"model_type": "deepseek_v3", "kv_lora_rank": 512})
        True
        >>> uses_mla({"model_type": "llama", "kv_lora_rank": 512})
        False
    """
    if not hasattr(cfg, "get") or cfg.get("is_causal", True) is False:
        return False
    model_type = cfg.get("model_type")
    return (isinstance(model_type, str) and model_type in MLA_MODEL_TYPES
            and cfg.get("kv_lora_rank") is not None)
