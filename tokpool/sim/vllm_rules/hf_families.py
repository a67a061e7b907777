"""Which Hugging Face model families tokpool can size, their config values checked, their
parameters counted layer by layer (mixture-of-experts included).

``preset_from_hf_config`` asks ``checked_hf_config`` first: a value of the wrong type or range,
an unknown family or a mixture-of-experts layout tokpool does not count raises ``ValueError``
naming the key, the value and the fix. Nothing is guessed: a family outside ``FAMILIES`` is
refused by name, never counted as a dense llama.

``count_parameters`` counts what the checkpoint holds, family by family. The counts equal
transformers' own model built from the same config on the meta device, and the published
totals (``docs/PARAMETER_COUNTS.md``, ``tests/test_hf_families.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["FAMILIES", "Family", "checked_hf_config", "count_parameters"]


@dataclass(frozen=True)
class Family:
    """How one ``model_type`` lays out its parameters.

    Attributes:
        layout: ``"decoder"`` (llama-like), ``"bert"`` (word/position/type embeddings, biased
            linears, LayerNorms) or ``"modernbert"``.
        qkv_bias: q, k and v projections carry a bias (Qwen2); ``attention_bias`` in the config
            adds biases to q, k, v and o for the others.
        qk_norm: RMSNorm on q and k: ``"head"`` (head_dim weights each, Qwen3/Gemma3) or
            ``"full"`` (over all heads, OLMo-2).
        norms_per_layer: RMSNorm/LayerNorm weight vectors of width hidden per layer (Gemma-2/3
            have four; OLMo's LayerNorm has no weights).
        final_norm: a final norm with weights.
        tied_default: ``tie_word_embeddings`` when the config omits it (transformers' default
            for the family's config class).
        moe: ``"mixtral"`` (``num_local_experts`` experts of ``intermediate_size``, a router) or
            ``"qwen"`` (``num_experts`` — transformers 5's ``PretrainedConfig.to_dict`` says
            ``num_local_experts`` — of ``moe_intermediate_size``, a router, optional shared
            expert of ``shared_expert_intermediate_size`` with its gate; ``decoder_sparse_step``
            and ``mlp_only_layers`` pick the sparse layers).
    """

    layout: Literal["decoder", "bert", "modernbert"] = "decoder"
    qkv_bias: bool = False
    qk_norm: Literal["head", "full"] | None = None
    norms_per_layer: int = 2
    final_norm: bool = True
    tied_default: bool = False
    moe: Literal["mixtral", "qwen"] | None = None


#: model_type -> layout. A family outside this table is refused by name.
FAMILIES: dict[str, Family] = {
    "llama": Family(),
    "mistral": Family(),
    "mixtral": Family(moe="mixtral"),
    "qwen2": Family(qkv_bias=True),
    "qwen2_moe": Family(qkv_bias=True, moe="qwen"),
    "qwen3": Family(qk_norm="head"),
    "qwen3_moe": Family(qk_norm="head", moe="qwen"),
    "gemma": Family(tied_default=True),
    "gemma2": Family(norms_per_layer=4, tied_default=True),
    "gemma3": Family(norms_per_layer=4, qk_norm="head", tied_default=True),
    "gemma3_text": Family(norms_per_layer=4, qk_norm="head", tied_default=True),
    "phi3": Family(),
    "olmo": Family(norms_per_layer=0, final_norm=False),
    "olmo2": Family(qk_norm="full"),
    "bert": Family(layout="bert"),
    "roberta": Family(layout="bert"),
    "xlm-roberta": Family(layout="bert"),
    "modernbert": Family(layout="modernbert"),
}

#: Keys that announce experts, whatever the family calls them.
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts",
                "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts")
_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def _where(key: str) -> str:
    return f"config key {key!r}"


def _whole(cfg: Mapping, key: str, *, minimum: int = 1, required: bool = True) -> int | None:
    """``cfg[key]`` as a checked int (JSON ints only: no strings, floats or booleans)."""
    value = cfg.get(key)
    if value is None:
        if required:
            raise ValueError(f"{_where(key)} is missing; the model's config.json has it")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        example = ""
        if isinstance(value, str) and value.strip().isdigit():
            example = f" (write {int(value)} without quotes)"
        elif isinstance(value, float) and value.is_integer():
            example = f" (write {int(value)})"
        raise ValueError(
            f"{_where(key)} must be a whole number, got {value!r} ({type(value).__name__})"
            f"{example}; tokpool does not round or convert model dimensions"
        )
    if value < minimum:
        raise ValueError(f"{_where(key)} must be >= {minimum}, got {value}")
    return value


def checked_hf_config(cfg: Mapping) -> dict:
    """The config with its dimensions checked, or ``ValueError`` naming the bad value.

    Checks: the required keys are positive ints; ``num_attention_heads`` divides
    ``hidden_size`` unless ``head_dim`` is given; ``num_key_value_heads`` is in
    ``1..num_attention_heads`` and divides it (grouped-query attention); the family is one
    tokpool counts (``FAMILIES``); experts only in families counted with their experts.

    Args:
        cfg: the config.json as a dict (``text_config`` already merged for wrappers).

    Returns:
        ``cfg`` as a new dict (values unchanged; Qwen-MoE's ``num_experts`` filled from
        ``num_local_experts`` when only that is given).

    Raises:
        ValueError: a missing, mistyped or inconsistent value, or a family tokpool refuses.
    """
    if not isinstance(cfg, Mapping):
        raise ValueError(f"a model config must be a JSON object (a dict), got {type(cfg).__name__}"
                         f" {cfg!r:.80}")
    cfg = dict(cfg)
    missing = [k for k in _REQUIRED if cfg.get(k) is None]
    if missing:
        raise ValueError(
            f"config lacks {missing} (needed for the hidden size, layers, heads and vocabulary); "
            "add them to the dict or use a config.json of a transformer model"
        )
    hidden = _whole(cfg, "hidden_size")
    _whole(cfg, "num_hidden_layers")
    _whole(cfg, "vocab_size")
    heads = _whole(cfg, "num_attention_heads")
    head_dim = _whole(cfg, "head_dim", required=False)
    if head_dim is None and hidden % heads:
        raise ValueError(
            f"num_attention_heads={heads} does not divide hidden_size={hidden} and the config "
            "has no head_dim; fix one of them (the model's config.json has the real values)"
        )
    kv = _whole(cfg, "num_key_value_heads", required=False)
    if kv is not None and (kv > heads or heads % kv):
        raise ValueError(
            f"num_key_value_heads={kv} must divide num_attention_heads={heads} (each KV head "
            "serves a whole group of query heads); fix the config"
        )
    _whole(cfg, "intermediate_size", required=False)
    _whole(cfg, "max_position_embeddings", required=False)
    model_type = cfg.get("model_type")
    archs = cfg.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs else ""
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        raise ValueError(
            f"model_type {model_type!r} ({arch or 'no architectures'}) is not a family tokpool "
            f"can count parameters for; it counts {sorted(FAMILIES)}. Give a ModelPreset "
            "(tp.sim.ModelPreset) with the model's real parameter count instead"
        )
    experts = {k: cfg[k] for k in _EXPERT_KEYS if cfg.get(k)}
    if family.moe is None and experts:
        raise ValueError(
            f"{arch or model_type} has mixture-of-experts keys {experts}, but tokpool counts "
            f"model_type {model_type!r} as dense; it counts experts for mixtral, qwen2_moe and "
            "qwen3_moe only. Give a ModelPreset with the real parameter count instead"
        )
    if family.moe == "mixtral":
        _whole(cfg, "num_local_experts")
        _whole(cfg, "intermediate_size")
    elif family.moe == "qwen":
        if cfg.get("num_experts") is None and cfg.get("num_local_experts") is not None:
            cfg["num_experts"] = cfg["num_local_experts"]  # transformers 5's name for it
        _whole(cfg, "num_experts")
        _whole(cfg, "moe_intermediate_size")
        _whole(cfg, "decoder_sparse_step", required=False)
        _whole(cfg, "shared_expert_intermediate_size", minimum=0, required=False)
    return cfg


def _tied(cfg: Mapping, family: Family) -> bool:
    value = cfg.get("tie_word_embeddings")
    return family.tied_default if value is None else bool(value)


def _mlp_params(cfg: Mapping, family: Family, n_layers: int) -> int:
    """Parameters of the MLPs of all ``n_layers`` layers (gated: gate, up, down; experts with
    their router), counted per kind of layer, never layer by layer: a config may claim 2^31
    layers."""
    h = cfg["hidden_size"]
    inter = cfg.get("intermediate_size") or 4 * h
    if family.moe == "mixtral":
        experts = cfg["num_local_experts"]
        return n_layers * (experts * 3 * h * inter + h * experts)  # experts, router
    if family.moe == "qwen":
        sparse = _sparse_layers(cfg, n_layers)
        experts = cfg["num_experts"]
        moe = experts * 3 * h * cfg["moe_intermediate_size"] + h * experts  # experts, router
        shared = cfg.get("shared_expert_intermediate_size") or 0
        if shared:
            moe += 3 * h * shared + h                        # shared expert, its gate
        return (n_layers - sparse) * 3 * h * inter + sparse * moe
    mlp = 3 * h * inter                                      # every family here is gated
    if cfg.get("mlp_bias"):
        mlp += 2 * inter + h
    return n_layers * mlp


def _sparse_layers(cfg: Mapping, n_layers: int) -> int:
    """Qwen-MoE layers with experts: layer i when ``(i + 1) % decoder_sparse_step == 0`` and
    i is not in ``mlp_only_layers`` (``Qwen2MoeDecoderLayer``), with ``num_experts > 0``."""
    if cfg["num_experts"] <= 0:
        return 0
    step = cfg.get("decoder_sparse_step") or 1
    dense = {i for i in (cfg.get("mlp_only_layers") or [])
             if isinstance(i, int) and 0 <= i < n_layers and (i + 1) % step == 0}
    return n_layers // step - len(dense)


def count_parameters(
    cfg: Mapping, *, kind: str = "decoder", include_lm_head: bool | None = None,
    num_labels: int = 2,
) -> int:
    """Parameters of the checkpoint a config describes (``checked_hf_config`` first).

    Args:
        cfg: the checked config.
        kind: ``"decoder"``, ``"encoder"``, ``"prm"``, ``"seq_classify"`` or
            ``"token_classify"`` (``hf_config._kind``): which head is added.
        include_lm_head: count an untied LM head; default for ``*ForCausalLM`` /
            ``*LMHeadModel`` architectures with untied embeddings.
        num_labels: the classifier's labels.

    Returns:
        The count (int).
    """
    family = FAMILIES[cfg["model_type"]]
    h, n_layers, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or h // heads
    kv = cfg.get("num_key_value_heads") or heads
    inter = cfg.get("intermediate_size") or 4 * h
    labels = num_labels
    if family.layout == "bert":
        emb = (vocab + cfg.get("max_position_embeddings", 512) + cfg.get("type_vocab_size", 2)) * h
        emb += 2 * h                                   # embedding LayerNorm
        layer = 4 * (h * h + h)                        # q, k, v, o with biases
        layer += (h * inter + inter) + (inter * h + h)  # intermediate, output
        layer += 2 * 2 * h                             # two LayerNorms
        head = h * h + h                               # BertModel's pooler dense
        if kind in ("seq_classify", "token_classify"):
            head = (h * h + h if kind == "seq_classify" else 0) + h * labels + labels
        return emb + n_layers * layer + head
    if family.layout == "modernbert":
        emb = vocab * h + h                            # tok_embeddings, norm (no biases)
        layer = h * 3 * h + h * h                      # Wqkv, Wo
        layer += h * 2 * inter + inter * h             # GLU: Wi (2 x inter), Wo
        layer += 2 * h                                 # attn_norm, mlp_norm
        total = emb + n_layers * layer - h + h         # layer 0 has no attn_norm; final norm
        if kind in ("seq_classify", "token_classify"):
            total += h * h + h + h * labels + labels   # head dense + norm, classifier
        return total
    q, kvw = heads * head_dim, kv * head_dim
    attn = h * q + 2 * h * kvw + q * h                 # q, k, v, o
    if family.qkv_bias:
        attn += q + 2 * kvw
    elif cfg.get("attention_bias"):
        attn += q + 2 * kvw + h
    if family.qk_norm == "head":
        attn += 2 * head_dim
    elif family.qk_norm == "full":
        attn += q + kvw
    norms = family.norms_per_layer * h
    total = vocab * h + n_layers * (attn + norms) + _mlp_params(cfg, family, n_layers)
    total += h if family.final_norm else 0
    arch = (cfg.get("architectures") or [""])[0]
    if kind == "prm":                                  # Linear(h, h), ReLU, Linear(h, labels)
        total += h * h + h + h * labels + labels
    elif kind in ("seq_classify", "token_classify"):
        total += h * labels
    if include_lm_head is None:
        include_lm_head = arch.endswith(("ForCausalLM", "LMHeadModel",
                                         "ForConditionalGeneration")) and not _tied(cfg, family)
    if include_lm_head:
        total += vocab * h
    return int(total)
