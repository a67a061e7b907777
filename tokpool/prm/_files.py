"""The shipped PRM files (probe, adapter): safetensors with a format tag in their metadata."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import Tensor

#: The safetensors metadata key holding a file's JSON settings (``"format"`` among them).
META_KEY = "tokpool"


def read_tagged_safetensors(path: str | Path, *, fmt: str,
                            what: str) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(settings, tensors)`` of a tokpool file; its ``format`` tag must be ``fmt``.

    Raises:
        ValueError: another format (``what`` names the expected kind of file).
    """
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as f:
        raw = (f.metadata() or {}).get(META_KEY)
    settings = json.loads(raw) if raw else {}
    if settings.get("format") != fmt:
        raise ValueError(f"{path} is not a {what} (format {settings.get('format')!r}, "
                         f"expected {fmt!r})")
    return settings, load_file(str(path))
