"""Facts about the installed package that every room may need: its version and its data folder.

They sit at the bottom of the house (``tests/test_architecture.py``), so a room that writes the
version into a file or reads a shipped data set never imports the package's front door
(``tokpool/__init__.py``) or a room above its own.
"""

from __future__ import annotations

import os
from pathlib import Path

__version__ = "0.1.0"

DATA_DIR_ENV = "TOKPOOL_DATA_DIR"


def default_data_dir() -> Path:
    """``$TOKPOOL_DATA_DIR`` or the repository's ``data/`` folder."""
    env = os.environ.get(DATA_DIR_ENV)
    if env and Path(env).exists() and not Path(env).is_dir():
        raise ValueError(f"{DATA_DIR_ENV}={env!r} is a file, not a folder; point it at a "
                         "copy of tokpool's data/ folder (or unset it)")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "data"
