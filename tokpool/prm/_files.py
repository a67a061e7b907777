"""The shipped PRM files (probe, adapter): safetensors with a format tag in their metadata."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import Tensor

from .._args import MissingFileError
from .._package import default_data_dir

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

    try:
        with safe_open(str(path), framework="pt") as f:
            raw = (f.metadata() or {}).get(META_KEY)
        settings = json.loads(raw) if raw else {}
    except Exception as err:  # safetensors' SafetensorError, a bad header, unreadable JSON
        raise damaged_file(path, what, err) from None
    if settings.get("format") != fmt:
        raise ValueError(f"{path} is not a {what} (format {settings.get('format')!r}, "
                         f"expected {fmt!r})")
    try:
        return settings, load_file(str(path))
    except Exception as err:  # truncated data after a whole header
        raise damaged_file(path, what, err) from None


def damaged_file(path: str | Path, what: str, err: Exception) -> ValueError:
    """The error for a shipped file that cannot be read: which file, why, how to restore it."""
    size = Path(path).stat().st_size if Path(path).is_file() else 0
    return ValueError(
        f"the {what} {path} is damaged ({size:,} bytes; {type(err).__name__}: {err}). Restore "
        "it: in a clone of tokpool `git checkout -- data/prm` (or `git lfs pull`); for a copy "
        "under $TOKPOOL_DATA_DIR copy data/prm from the repository again; or rebuild it "
        "(python -m tokpool.prm)"
    )


def read_shipped_json(path: str | Path | None, name: str, *, what: str,
                      write_with: str) -> dict[str, Any]:
    """A JSON file the fine-tuned PRM ships (``data/prm/smollm2-prm/<name>``), or ``path``.

    Raises:
        FileNotFoundError: no such file; the message names ``write_with``, the command that
            writes it from a checkout.
    """
    file = Path(path) if path else default_data_dir() / "prm" / "smollm2-prm" / name
    if not file.is_file():
        raise MissingFileError(f"no {what} at {file}; write it with `{write_with}` from a "
                               "checkout")
    return json.loads(file.read_text())

