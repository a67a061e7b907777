"""Integrity of model files: a manifest of sizes and hashes, checks on load, pruning.

A converted cache entry records, when it is written, every file's size and SHA-256 in its marker
(``tokpool-cache.json``). On load:

- every recorded file must exist with its recorded size (a ``stat``: free);
- each ``.safetensors`` file's header must parse and its tensors must end exactly at the end of
  the file (reads the header only: catches truncation and a damaged header);
- files up to ``HASH_ON_LOAD_MAX_BYTES`` (config, tokenizer: a few MB) are hashed.

The large weight files are not hashed on every load: SHA-256 runs at about 950 MiB/s on this
project's 2-core reference machine, i.e. ~0.6 s for SmolLM2's 540 MB — a large share of a
cached load — while the damage actually seen (an interrupted copy, a full disk) changes the size
or the header, which the free checks catch. A full check (``verify_entry(path, full=True)``) runs
when loading a checked entry still fails, and on demand through ``verify_model_cache``.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable
from pathlib import Path

MARKER = "tokpool-cache.json"


class DamagedModelError(ValueError, OSError):
    """Model files exist but cannot make a model; the message names the files and the fix."""

#: Files up to this size are hashed on every load (config and tokenizer files).
HASH_ON_LOAD_MAX_BYTES = 16 * 2**20
_HASH_BLOCK = 8 * 2**20
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json",
                   "tokenizer.model", "spiece.model", "sentencepiece.bpe.model")


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in 8 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _files(root: Path) -> Iterable[Path]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != MARKER:
            yield path


def file_manifest(root: Path) -> dict[str, dict[str, int | str]]:
    """``{relative path: {"size": bytes, "sha256": hex}}`` for every file under ``root``."""
    return {
        p.relative_to(root).as_posix(): {"size": p.stat().st_size, "sha256": sha256_file(p)}
        for p in _files(root)
    }


def safetensors_problem(path: Path) -> str | None:
    """``None`` when a ``.safetensors`` file's header parses and covers the file exactly.

    Reads 8 bytes and the JSON header, never the tensors.
    """
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                return f"{path.name} is {size} bytes, too short for a safetensors header"
            (header_len,) = struct.unpack("<Q", raw)
            if header_len > min(size - 8, 100 * 2**20):
                return (f"{path.name} declares a {header_len:,}-byte header but the file has "
                        f"{size:,} bytes (truncated or not safetensors)")
            header = json.loads(f.read(header_len))
    except (OSError, ValueError, UnicodeDecodeError) as err:
        return f"{path.name} has an unreadable safetensors header ({err})"
    if not isinstance(header, dict):
        return f"{path.name} has a safetensors header that is not a JSON object"
    ends = [
        info["data_offsets"][1]
        for key, info in header.items()
        if key != "__metadata__" and isinstance(info, dict) and "data_offsets" in info
    ]
    expected = 8 + header_len + max(ends, default=0)
    if expected != size:
        return (f"{path.name} is {size:,} bytes but its header describes {expected:,} "
                f"({'truncated' if size < expected else 'trailing bytes'})")
    return None


def verify_entry(root: Path, *, full: bool = False) -> list[str]:
    """Problems of a cache entry written with a manifest (empty list: it checks out).

    Args:
        root: the entry's directory.
        full: hash every file (default: only files up to ``HASH_ON_LOAD_MAX_BYTES``).
    """
    marker = root / MARKER
    if not marker.is_file():
        return [f"{MARKER} is missing (an interrupted or pre-manifest entry)"]
    try:
        info = json.loads(marker.read_text())
        files = info["files"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return [f"{MARKER} is unreadable ({err})"]
    problems = []
    for required in ("config.json", "tokenizer.json"):
        if required not in files:
            problems.append(f"the manifest lists no {required}")
    if not any(name.endswith(".safetensors") for name in files):
        problems.append("the manifest lists no .safetensors weights")
    for name, meta in files.items():
        path = root / name
        if not path.is_file():
            problems.append(f"{name} is missing")
            continue
        size = path.stat().st_size
        if size != meta.get("size"):
            problems.append(f"{name} is {size:,} bytes, the manifest says {meta.get('size'):,}")
            continue
        if name.endswith(".safetensors") and (bad := safetensors_problem(path)):
            problems.append(bad)
            continue
        if (full or size <= HASH_ON_LOAD_MAX_BYTES) and sha256_file(path) != meta.get("sha256"):
            problems.append(f"{name} does not match its recorded SHA-256 (same size, "
                            "different bytes)")
    return problems


def directory_problems(root: Path) -> list[str]:
    """What stops a local transformers directory from loading, found before transformers runs.

    Checks ``config.json`` (present, a JSON object) and the weights (present; safetensors
    headers consistent with their sizes).
    """
    problems = []
    config = root / "config.json"
    if not config.is_file():
        problems.append("config.json is missing")
    else:
        try:
            parsed = json.loads(config.read_text())
            if not isinstance(parsed, dict):
                problems.append("config.json is not a JSON object")
        except (OSError, ValueError) as err:
            problems.append(f"config.json is not valid JSON ({err})")
    weights = [p for p in root.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES]
    if not weights:
        problems.append(f"no weights (*{', *'.join(WEIGHT_SUFFIXES)}) next to config.json")
    for path in weights:
        if path.suffix == ".safetensors" and (bad := safetensors_problem(path)):
            problems.append(bad)
    return problems


def has_tokenizer_files(root: Path) -> bool:
    """Whether ``root`` holds any file a tokenizer is loaded from."""
    return any((root / name).is_file() for name in TOKENIZER_FILES)
