"""The fine-tuned PRM's files: LoRA factors + a 2-label score head, and how they merge.

A tokpool PRM adapter is one ``adapter.safetensors`` holding, for every adapted linear layer
``model.layers.{i}.{self_attn|mlp}.{name}``, the LoRA factors ``.lora_A`` ``[rank, in]`` and
``.lora_B`` ``[out, rank]`` (float32), plus the score head ``score.weight`` ``[2, hidden]`` and
``score.bias`` ``[2]``; its settings (base model, rank, alpha, prompt layout, threshold, …) are
ONE JSON string in the safetensors header.

Merging is LoRA's (and peft's) formula, done once at load time, so serving needs no adapter
library and runs at the base model's speed::

    W ← W + (alpha / rank) · B @ A          # [out, in] += [out, rank] @ [rank, in]

The training script (``scripts/train_prm.py``) and the loader both use ``LORA_TARGETS`` and
``lora_key`` from here, so they cannot disagree on which layers are adapted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ._files import META_KEY, damaged_file, read_tagged_safetensors

ADAPTER_FILE = "adapter.safetensors"
ADAPTER_FORMAT = "tokpool-prm-lora/1"
#: The linear layers of a Llama decoder layer that get LoRA factors: ``(block, name)``.
LORA_TARGETS: tuple[tuple[str, str], ...] = (
    ("self_attn", "q_proj"), ("self_attn", "k_proj"), ("self_attn", "v_proj"),
    ("self_attn", "o_proj"), ("mlp", "gate_proj"), ("mlp", "up_proj"), ("mlp", "down_proj"),
)
_META_KEY = META_KEY  # written by save_adapter


def lora_key(layer: int, block: str, name: str) -> str:
    """``model.layers.{layer}.{block}.{name}``: the adapted module's name in the file."""
    return f"model.layers.{layer}.{block}.{name}"


def save_adapter(path: str | os.PathLike, tensors: dict[str, Tensor],
                 settings: dict[str, Any]) -> Path:
    """Write LoRA factors and the head to ``path`` with ``settings`` in the header.

    Args:
        path: the ``.safetensors`` file to write.
        tensors: ``{lora_key(...) + ".lora_A"|".lora_B": ..., "score.weight": ...,
            "score.bias": ...}``.
        settings: JSON-able settings; ``format`` is added.

    Returns:
        ``path``. Sorted JSON keys and float32 contiguous tensors make reruns byte-identical.
    """
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {k: v.detach().float().contiguous() for k, v in sorted(tensors.items())}
    meta = json.dumps({**settings, "format": ADAPTER_FORMAT}, sort_keys=True)
    save_file(data, str(path), metadata={_META_KEY: meta})
    return path


def read_format(path: str | os.PathLike) -> str | None:
    """The ``format`` a tokpool ``.safetensors`` file declares in its header, or ``None``.

    Raises:
        ValueError: a file safetensors cannot read (empty, truncated, a bad header): named
            with its size and how to restore it.
    """
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            raw = (f.metadata() or {}).get(_META_KEY)
    except Exception as err:  # safetensors' SafetensorError: header too small, bad JSON, ...
        raise damaged_file(path, "tokpool probe or PRM adapter", err) from None
    try:
        return json.loads(raw).get("format") if raw else None
    except (ValueError, AttributeError):
        return None


def read_adapter(path: str | os.PathLike) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """``(tensors, settings)`` of a file written by ``save_adapter``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a tokpool PRM adapter, or lacks the score head.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no PRM adapter at {path}")
    settings, tensors = read_tagged_safetensors(path, fmt=ADAPTER_FORMAT,
                                                what="tokpool PRM adapter")
    missing = [k for k in ("score.weight", "score.bias") if k not in tensors]
    if missing:
        raise ValueError(f"{path} lacks the score head tensors {missing}")
    settings.pop("format")
    return tensors, settings


def merge_lora_(model: nn.Module, tensors: dict[str, Tensor], *, rank: int,
                alpha: float) -> list[str]:
    """Add every ``(alpha / rank) · B @ A`` of ``tensors`` to its linear layer, in place.

    Args:
        model: the module whose names match ``lora_key`` (a ``LlamaForTokenClassification``
            or ``LlamaForCausalLM``: ``model.layers.{i}...``).
        tensors: as ``read_adapter`` returns them (other keys are ignored).
        rank, alpha: the LoRA rank and scale the factors were trained with.

    Returns:
        The names of the merged modules.

    Raises:
        ValueError: a factor names a module the model lacks, or shapes do not fit.
    """
    modules = dict(model.named_modules())
    merged = []
    scale = alpha / rank
    for key in sorted(k.removesuffix(".lora_A") for k in tensors if k.endswith(".lora_A")):
        module = modules.get(key)
        if not isinstance(module, nn.Linear):
            raise ValueError(f"the adapter adapts {key!r}, which is not a linear layer of "
                             f"{type(model).__name__}; was it trained on another base model?")
        a, b = tensors[f"{key}.lora_A"], tensors[f"{key}.lora_B"]  # [rank, in], [out, rank]
        if a.shape != (rank, module.in_features) or b.shape != (module.out_features, rank):
            raise ValueError(f"LoRA factors of {key} are {tuple(b.shape)} @ {tuple(a.shape)}; "
                             f"the layer is [{module.out_features}, {module.in_features}] with "
                             f"rank {rank}")
        with torch.no_grad():
            delta = (b.double() @ a.double()) * scale  # [out, in]
            module.weight.add_(delta.to(module.weight.dtype))
        merged.append(key)
    return merged
