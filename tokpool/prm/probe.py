"""The probe PRM's head and file: a small trained head on frozen hidden states.

``ProbeHead`` maps every token's hidden state at one layer of SmolLM2-135M-Instruct to 2
logits, exactly like Qwen2.5-Math-PRM's score head; ``save_probe`` / ``read_probe`` write and
read it as tagged safetensors (``data/prm/probe/probe.safetensors``). ``tp.load_prm("probe")``
(``prm.loading``) serves it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .._package import default_data_dir
from ._files import META_KEY, read_tagged_safetensors

PROBE_FILE = "probe.safetensors"
PROBE_FORMAT = "tokpool-prm-probe/1"
QWEN_PRM_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


class ProbeHead(nn.Module):
    """Standardise, then linear (``hidden_units == 0``) or one-hidden-layer MLP → logits.

    Args:
        hidden_size: width of the hidden states it reads.
        num_labels: 2 for ``two_class``, 1 for ``value_head``.
        hidden_units: width of the MLP's hidden layer (0: a linear probe).

    Call: ``head(hidden [n_tokens, hidden_size]) -> [n_tokens, num_labels]`` logits (float32).
    """
    def __init__(self, hidden_size: int, num_labels: int = 2, hidden_units: int = 0) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(hidden_size))
        self.register_buffer("scale", torch.ones(hidden_size))
        if hidden_units:
            self.net: nn.Module = nn.Sequential(
                nn.Linear(hidden_size, hidden_units), nn.GELU(),
                nn.Linear(hidden_units, num_labels),
            )
        else:
            self.net = nn.Sequential(nn.Linear(hidden_size, num_labels))
        self.hidden_size, self.num_labels, self.hidden_units = hidden_size, num_labels, hidden_units

    def forward(self, hidden: Tensor) -> Tensor:
        x = (hidden.float() - self.mean) / self.scale  # [n_tokens, hidden_size]
        return self.net(x)  # [n_tokens, num_labels]


# --- saving and loading -------------------------------------------------------------------

_META_KEY = META_KEY  # written by save_probe


def save_probe(path: str | os.PathLike, head: ProbeHead, metadata: dict[str, Any]) -> Path:
    """Write ``head`` and its settings to ``path`` (a ``.safetensors`` file).

    The settings go into the header as ONE JSON string (sorted keys): safetensors writes its
    metadata map in arbitrary order, so one key keeps the file byte-for-byte reproducible.
    """
    from safetensors.torch import save_file

    settings = {**metadata, "format": PROBE_FORMAT, "hidden_size": head.hidden_size,
                "num_labels": head.num_labels, "hidden_units": head.hidden_units}
    tensors = {k: v.detach().float().contiguous() for k, v in head.state_dict().items()}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={_META_KEY: json.dumps(settings, sort_keys=True)})
    return path


def read_probe(path: str | os.PathLike) -> tuple[ProbeHead, dict[str, Any]]:
    """``(head, settings)`` from a file written by ``save_probe``.

    Raises:
        ValueError: the file is not a tokpool probe.
    """
    settings, tensors = read_tagged_safetensors(path, fmt=PROBE_FORMAT, what="tokpool probe")
    head = ProbeHead(settings.pop("hidden_size"), settings.pop("num_labels"),
                     settings.pop("hidden_units"))
    head.load_state_dict(tensors)
    settings.pop("format")
    return head.eval(), settings


def default_probe_path() -> Path:
    """``data/prm/probe/probe.safetensors`` (``$TOKPOOL_DATA_DIR`` moves ``data/``)."""
    return default_data_dir() / "prm" / "probe" / PROBE_FILE
