"""The models the engine serves: the built-in names and their folders (SmolLM2-135M: tokpool's
converted GGUF cache entry; the fine-tuned PRM saved as a ``LlamaForTokenClassification``
folder), built or repaired on first use, and a folder loaded on tokpool's side with the task and
prompts checked against it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from .._package import default_data_dir
from ..models import load_model
from ..models.gguf_cache import convert_gguf
from ..models.integrity import MARKER, file_manifest, sha256_file, verify_entry
from ..models.registry import builtin_files, model_cache_dir
from ..prm.finetuned import load_finetuned
from ..prm.loading import SHIPPED_PRMS
from .flags import ENGINE_TASKS
from .vllm_venv import EngineCheckError

#: Built-in models the engine serves (``engine_model_dir``): name -> the task checked.
ENGINE_MODELS = {"smollm2-135m": "token_embed", "smollm2-prm": "token_classify"}
_PRM_FORMAT = 1

#: The built-in engine models' vocabulary (SmolLM2's tokenizer, the PRM's base).
ENGINE_VOCAB_SIZE = {"smollm2-135m": 49152, "smollm2-prm": 49152}


def engine_model_dir(name: str) -> Path:
    """The folder vLLM loads for a built-in name (built or repaired on first use).

    ``"smollm2-135m"``: tokpool's converted GGUF cache entry (float32 safetensors).
    ``"smollm2-prm"``: the shipped fine-tuned PRM (17 layers, LoRA merged, 2-label score head
    with bias) saved as a ``LlamaForTokenClassification`` folder, cached under
    ``tp.model_cache_dir()/engine/`` with a manifest; a damaged folder is rebuilt.

    Raises:
        EngineCheckError: another name.
    """
    if name == "smollm2-135m":

        return convert_gguf(builtin_files(name), name=name)[0]
    if name == "smollm2-prm":
        return _prm_folder()
    raise EngineCheckError(f"no engine folder for {name!r}; built in: {list(ENGINE_MODELS)} "
                           "(or pass a transformers folder)")


def _prm_folder() -> Path:

    import transformers


    adapter = default_data_dir() / "prm" / SHIPPED_PRMS["smollm2-prm"]
    if not adapter.is_file():
        raise FileNotFoundError(f"the shipped PRM adapter is missing at {adapter}")

    digest = sha256_file(adapter)
    key = hashlib.sha256(f"{digest}|{transformers.__version__}|{_PRM_FORMAT}".encode())
    target = model_cache_dir() / "engine" / f"smollm2-prm-{key.hexdigest()[:16]}"
    if target.exists():
        problems = verify_entry(target)
        if not problems:
            return target
        print(f"tokpool: the engine folder {target} is damaged ({'; '.join(problems[:3])}); "
              "rebuilding it", file=sys.stderr)
        shutil.rmtree(target, ignore_errors=True)

    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model = load_finetuned(adapter).model
        model.hf_model.save_pretrained(work, safe_serialization=True)
        model.tokenizer.save_pretrained(work)
        (work / MARKER).write_text(json.dumps({
            "source": str(adapter), "sha256": digest, "format": _PRM_FORMAT,
            "transformers_version": transformers.__version__, "files": file_manifest(work),
        }, indent=2))
        if problems := verify_entry(work):
            raise OSError(f"writing the PRM folder failed: {'; '.join(problems)}")
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"tokpool: wrote the PRM as a token-classification folder at {target}",
          file=sys.stderr)
    return target


def prepare_engine_models() -> dict[str, Path]:
    """Build (or check) every built-in engine folder; ``{name: folder}``."""
    return {name: engine_model_dir(name) for name in ENGINE_MODELS}


def load_checked(folder: Path, name: str):
    """``load_model(folder)``; a folder it cannot load is named as the model input."""
    try:
        return _quiet_load(load_model, folder)
    except (OSError, ValueError, TypeError) as err:
        raise EngineCheckError(f"model: {name!r} is not a model tokpool can load ({err}); "
                               "pass a transformers model folder") from None


def checked_task_and_ids(tp_model, name: str, task: str, texts: list) -> list[list[int]]:
    """The task checked against what the model serves, and the prompts' token ids checked
    against its vocabulary and length (``PoolingModel.token_ids``)."""
    if task not in ENGINE_TASKS:
        raise EngineCheckError(f"task {task!r} is not checked against the engine; use one of "
                               f"{list(ENGINE_TASKS)}")
    served = tp_model.served_tasks()
    if task not in served:
        raise EngineCheckError(f"task: {name} does not serve task {task!r} (it serves "
                               f"{sorted(served)}); pick one of those")
    try:
        return [t.tolist() for t in tp_model.token_ids(texts)]
    except (TypeError, ValueError) as err:  # ids outside the vocabulary, too long, empty
        raise EngineCheckError(f"prompts: {err}") from None


def _quiet_load(load_model: Callable, folder: Path):
    """``load_model`` without transformers' progress bar (an error then stays one line)."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return load_model(folder)
    finally:
        if shown:
            hf_logging.enable_progress_bar()
