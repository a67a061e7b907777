"""Dequantize a GGUF checkpoint once and cache it as safetensors + tokenizer.

transformers loads a GGUF file by dequantizing every tensor (tens of seconds for SmolLM2-135M on
two CPU cores). The converted model cannot be saved as is ("quantized with gguf and is not
serializable"), so the quantization marker is dropped first: after dequantization the weights
are plain float32 tensors and nothing of the quantization remains but the marker.

The cache entry is keyed by the GGUF file's name, size and mtime plus the transformers version
(a config written by one major version may not load in another), and is written to a temporary
directory and renamed into place, so concurrent first loads never see half a cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .registry import CACHE_ENV, model_cache_dir

logger = logging.getLogger("tokpool.models")

CACHE_FORMAT = 1
MARKER = "tokpool-cache.json"


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
    return (path / MARKER).is_file() and (path / "config.json").is_file()


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
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path).resolve()
    target = cached_gguf_path(gguf_path, name=name, cache_dir=None if cache_dir is None
                              else Path(cache_dir))
    if _is_complete(target):
        logger.info("tokpool: loading %s from cache %s", name, target)
        return target, False

    print(
        f"tokpool: first load of {name}: dequantizing {gguf_path.name} (tens of seconds, once); "
        f"the result is cached in {target} (set {CACHE_ENV} to move it)",
        file=sys.stderr,
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        with tqdm(total=3, desc=f"tokpool: converting {name}", unit="stage") as bar:
            bar.set_postfix_str("dequantize GGUF")
            model = AutoModelForCausalLM.from_pretrained(
                gguf_path.parent, gguf_file=gguf_path.name, dtype="float32",
                local_files_only=True,
            )
            tokenizer = AutoTokenizer.from_pretrained(
                gguf_path.parent, gguf_file=gguf_path.name, local_files_only=True
            )
            bar.update()
            bar.set_postfix_str("write safetensors")
            _drop_gguf_marker(model)
            model.save_pretrained(work, safe_serialization=True)
            bar.update()
            bar.set_postfix_str("write tokenizer")
            tokenizer.save_pretrained(work)
            bar.update()
        seconds = time.perf_counter() - start
        st = gguf_path.stat()
        (work / MARKER).write_text(json.dumps({
            "source": str(gguf_path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "format": CACHE_FORMAT, "conversion_seconds": round(seconds, 2),
        }, indent=2))
        if target.exists() and not _is_complete(target):  # debris of an interrupted run
            shutil.rmtree(target, ignore_errors=True)
        try:
            work.rename(target)  # atomic: a reader sees no cache or a whole one
        except OSError:
            if not _is_complete(target):  # not a lost race: a real failure
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    print(f"tokpool: cached {name} at {target} ({seconds:.0f} s)", file=sys.stderr)
    return target, True
