"""The fine-tuned PRM: SmolLM2 + merged LoRA + a 2-label score head, served as ``token_classify``.

``load_finetuned(file)`` rebuilds what vLLM would serve for Qwen2.5-Math-PRM: a
``*ForTokenClassification`` model (here ``LlamaForTokenClassification``) whose per-token logits
go through ``StepPool`` (the step-tag rows) and a softmax (``two_class``, index 1). It reuses the
base model's cached weights (``tp.load_model``), keeps its first ``num_layers`` layers (the
shipped PRM: 17 of 30, the final norm after them), adds the LoRA deltas in place
(``adapter.merge_lora_``) and sets the score head, so loading needs nothing but torch and
transformers, and scoring costs one forward of the kept layers.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..models import load_model
from ..models.pooling_model import PoolingModel
from .adapter import merge_lora_, read_adapter
from .reward_model import ProcessRewardModel

#: The name ``PoolingModel`` gets, and ``tp.load_prm`` accepts, for the shipped adapter.
FINETUNED_NAME = "smollm2-prm"


def build_token_classifier(base, tensors: dict[str, torch.Tensor], settings: dict[str, Any]):
    """A ``*ForTokenClassification`` model around ``base``'s transformer, LoRA merged.

    Args:
        base: the ``PoolingModel`` of the base causal LM (its transformer is reused and
            modified in place: pass a fresh ``tp.load_model``).
        tensors, settings: from ``read_adapter``.

    Returns:
        The transformers model, in eval mode, float32, on the CPU.

    Raises:
        ValueError: the base is not a causal LM, or the adapter does not fit it.
    """
    from transformers import AutoModelForTokenClassification

    arch = type(base.hf_model).__name__
    if not arch.endswith("ForCausalLM"):
        raise ValueError(f"the PRM adapter needs a causal-LM base model, got {arch}")
    config = copy.deepcopy(base.hf_model.config)
    config.num_labels = int(settings["num_labels"])
    keep = int(settings.get("num_layers", config.num_hidden_layers))
    if not 0 < keep <= config.num_hidden_layers:
        raise ValueError(f"the adapter keeps {keep} layers; {settings['base_model']} has "
                         f"{config.num_hidden_layers}")
    transformer = base.base_model
    # why drop layers: a PRM trained on an intermediate layer's output serves only the layers
    # below it (and the final norm); the rest would cost compute and change the features
    transformer.layers = nn.ModuleList(list(transformer.layers)[:keep])
    config.num_hidden_layers = keep
    transformer.config = config
    config.architectures = [arch.removesuffix("ForCausalLM") + "ForTokenClassification"]
    with torch.device("meta"):  # why: every weight is replaced below; skip random init
        model = AutoModelForTokenClassification.from_config(config)
    setattr(model, model.base_model_prefix, transformer)
    weight, bias = tensors["score.weight"], tensors["score.bias"]  # [labels, hidden], [labels]
    if weight.shape != (config.num_labels, base.hidden_size):
        raise ValueError(f"the adapter's score head is {tuple(weight.shape)}, the base model "
                         f"needs [{config.num_labels}, {base.hidden_size}]")
    score = nn.Linear(base.hidden_size, config.num_labels, dtype=base.dtype)
    with torch.no_grad():
        score.weight.copy_(weight)
        score.bias.copy_(bias)
    model.score = score
    leftover = [n for n, p in [*model.named_parameters(), *model.named_buffers()] if p.is_meta]
    if leftover:
        raise ValueError(f"{config.architectures[0]} has weights the adapter does not set: "
                         f"{leftover[:4]}")
    merge_lora_(model, tensors, rank=int(settings["rank"]), alpha=float(settings["alpha"]))
    return model.eval().requires_grad_(False)


def load_finetuned(file: str | Path, *, tag: str | None = None,
                   threshold: float | None = None) -> ProcessRewardModel:
    """The PRM of an adapter file written by ``scripts/train_prm.py``.

    Args:
        file: the ``adapter.safetensors``.
        tag: override the step tag (default: the one it was trained with).
        threshold: override the ``first_error`` cut (default: the one chosen on ``dev``).

    Returns:
        ``ProcessRewardModel`` (``two_class``) over a ``PoolingModel`` named ``"smollm2-prm"``
        whose task is ``token_classify``; ``info["metrics"]`` holds the test-split figures of
        the ``metrics.json`` next to the file (flat), when there is one.

    Raises:
        FileNotFoundError: no such file, or the base model's package is missing.
        ValueError: the file is not a tokpool PRM adapter, or does not fit its base model.
    """
    file = Path(file)
    tensors, settings = read_adapter(file)
    base = load_model(settings["base_model"])
    hf_model = build_token_classifier(base, tensors, settings)
    model = PoolingModel(
        hf_model, base.tokenizer, name=FINETUNED_NAME, attn_type="decoder",
        sequence_pooling="LAST", max_length=base.max_length,
        max_length_reason=base.max_length_reason, task="token_classify",
        source_path=file.parent,
    )
    return ProcessRewardModel(
        model,
        convention=settings["convention"],
        threshold=settings["threshold"] if threshold is None else threshold,
        tag=settings["tag"] if tag is None else tag,
        separator=settings["separator"],
        chat=settings["chat"],
        system=settings["system"],
        info={"file": str(file), **settings, "metrics": finetuned_metrics(file)},
    )


def finetuned_metrics(file: Path) -> dict[str, Any]:
    """The fine-tuned PRM's own test-split figures from ``metrics.json`` (flat), or ``{}``."""
    report = file.parent / "metrics.json"
    if not report.is_file():
        return {}
    test = json.loads(report.read_text()).get("test", {}).get(FINETUNED_NAME, {})
    flat = {k: v for k, v in test.items() if not isinstance(v, dict)}
    flat.update({f"error_accuracy_by_type.{k}": v
                 for k, v in test.get("error_accuracy_by_type", {}).items()})
    return flat
