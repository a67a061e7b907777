"""What tokpool reads from a sentence-transformers directory (``modules.json``, the pooling
module's ``config.json``, ``sentence_bert_config.json``): plain JSON, no model library.

Both the model loader (``tokpool.models.loading``) and the simulator's ``config.json`` reader
(``tokpool.sim.vllm_rules.hf_config``) use it, so it sits below both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SentenceTransformersConfig:
    """What tokpool reads from a sentence-transformers directory."""

    pooling: str | None = None  # "MEAN" | "CLS" | "LAST"
    normalize: bool = False
    max_seq_length: int | None = None


def read_sentence_transformers_config(path: Path, *, dense: bool = False,
                                      ) -> SentenceTransformersConfig | None:
    """Pooling mode, normalisation and ``max_seq_length`` of a sentence-transformers directory.

    Args:
        path: the directory.
        dense: accept ``Dense`` modules (the simulator models them as vLLM's head projector:
            ``tokpool.sim.vllm_rules.scoring_path.late_interaction_head``); the model loader does
            not reproduce them.

    Returns ``None`` when ``path`` has no ``modules.json``.

    Raises:
        ValueError: a module tokpool does not reproduce (e.g. ``Dense`` without ``dense``),
            named in the message.
    """
    modules_file = path / "modules.json"
    if not modules_file.is_file():
        return None
    pooling, normalize = None, False
    for module in json.loads(modules_file.read_text()):
        kind = module.get("type", "").rsplit(".", 1)[-1]
        if kind == "Transformer" or (dense and kind == "Dense"):
            continue
        if kind == "Normalize":
            normalize = True
        elif kind == "Pooling":
            pooling = _st_pooling_mode(path / module.get("path", ""))
        else:
            raise ValueError(
                f"{path} uses sentence-transformers module {kind!r}, which tokpool does not "
                "reproduce (it supports Transformer, Pooling and Normalize); load the "
                "transformer alone by removing modules.json from a copy of the directory"
            )
    max_seq_length = None
    st_config = path / "sentence_bert_config.json"
    if st_config.is_file():
        max_seq_length = json.loads(st_config.read_text()).get("max_seq_length")
    return SentenceTransformersConfig(pooling, normalize, max_seq_length)


def _st_pooling_mode(pooling_dir: Path) -> str:
    config = json.loads((pooling_dir / "config.json").read_text())
    mode = config.get("pooling_mode")  # newer sentence-transformers write one key
    if mode is None:
        flags = {
            "cls": config.get("pooling_mode_cls_token"),
            "mean": config.get("pooling_mode_mean_tokens"),
            "lasttoken": config.get("pooling_mode_lasttoken"),
        }
        chosen = [k for k, v in flags.items() if v]
        mode = chosen[0] if len(chosen) == 1 else None
    by_mode = {"cls": "CLS", "mean": "MEAN", "lasttoken": "LAST"}
    if mode not in by_mode:
        raise ValueError(
            f"sentence-transformers pooling {config} in {pooling_dir} is not one of CLS, MEAN, "
            "LAST (the poolers tokpool has)"
        )
    return by_mode[mode]
