"""A Hugging Face Hub id → a folder of the model's small files, as vLLM reads them.

vLLM decides a pooling model's pooler and ``max_model_len`` from a handful of small files
(``config.json``, sentence-transformers' ``modules.json``, ``sentence_bert_config.json``,
``config_sentence_transformers.json``, the ``1_Pooling`` / ``2_Dense`` module configs,
``tokenizer_config.json``). ``hub_folder(repo_id)`` fetches those — never weights — through
``huggingface_hub`` as transformers does: the standard cache (``HF_HUB_CACHE``, ``HF_HOME``),
``revision=``, a token from the environment or ``huggingface-cli login``, ``HF_HUB_OFFLINE`` /
``local_files_only`` honoured (read when called, not when imported). Every file of one revision
lands in the same snapshot folder (``models--org--name/snapshots/<commit>/``), which the
folder readers (``hf_config``, ``st_config``, ``scoring_path``) then read as any local folder,
with their size guards.

What the Hub client raises is said in words that name the id, the revision and what to do
(``HubError``: a ``ValueError``); ``HubUnavailable`` (a subclass) is the case where the files
cannot be had right now (offline and not cached, no network), where a preset of the same name
may answer instead (``SimConfig.for_model``, ``from_vllm_args``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .models import MODEL_PRESETS, ModelPreset

__all__ = [
    "HubError",
    "HubUnavailable",
    "PresetAnswersWarning",
    "hub_cache_dir",
    "hub_folder",
    "hub_id_of_folder",
    "hub_offline",
    "is_hub_id",
    "model_source",
]

#: Files vLLM 0.33.0 reads to decide the pooler and ``max_model_len`` (besides the module
#: folders ``modules.json`` names). Only ``config.json`` must exist.
SMALL_FILES = (
    "config.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "tokenizer_config.json",
)

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_SNAPSHOT = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/[0-9a-f]{40}$")


class HubError(ValueError):
    """The Hub cannot give a model's files (missing, gated, a revision that is not there)."""


class HubUnavailable(HubError):
    """The files cannot be had now: offline (``HF_HUB_OFFLINE``) and not in the cache, or no
    connection to the Hub."""


class PresetAnswersWarning(UserWarning):
    """A name that is both a preset and a Hub id was answered by the preset: the Hub's files
    could not be had (offline and not cached, no network)."""


def is_hub_id(name: object) -> bool:
    """Whether ``name`` reads as a Hub model id (``org/name``) and names no local path.

    Example:
        >>> is_hub_id("BAAI/bge-m3"), is_hub_id("./models/bge-m3"), is_hub_id("bge-m3")
        (True, False, False)
    """
    if not isinstance(name, str) or not _ID.match(name) or ".." in name:
        return False
    return not Path(name).exists()


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) set to a true value, read now."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_cache_dir() -> Path:
    """The Hub cache folder as ``huggingface_hub`` places it, read now: ``HF_HUB_CACHE``, else
    ``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub`` or ``~/.cache/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expandvars(os.path.expanduser(os.environ["HF_HUB_CACHE"])))
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface")
    return Path(os.path.expandvars(os.path.expanduser(home))) / "hub"


def hub_id_of_folder(folder: Path | None) -> str | None:
    """The repo id of a Hub cache snapshot folder (``.../models--org--name/snapshots/<sha>``),
    else ``None``."""
    if folder is None:
        return None
    match = _SNAPSHOT.search(Path(folder).as_posix())
    return f"{match['org']}/{match['name']}" if match else None


#: Hosts this session found unreachable: later look-ups read the cache only, at once (the Hub
#: client would retry each file for ~20 s with back-off before it gives up).
_UNREACHABLE: set[str] = set()
_PROXIES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def _hub_reachable() -> bool:
    """Whether the Hub's host answers a TCP connection within 3 s (remembered when it does
    not); ``True`` behind a proxy, where only the client can tell."""
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    name = host.hostname or "huggingface.co"
    if name in _UNREACHABLE:
        return False
    if any(os.environ.get(k) for k in _PROXIES):
        return True
    try:
        socket.create_connection((name, host.port or 443), timeout=3).close()
    except OSError:
        _UNREACHABLE.add(name)
        return False
    return True


def _where(repo_id: str, revision: str | None) -> str:
    return f"{repo_id!r} (revision {revision or 'main'!r})"


def _fetch(repo_id: str, filename: str, *, revision: str | None, token: str | bool | None,
           local_files_only: bool, cache_dir: Path, required: bool) -> Path | None:
    """One small file of the repo, or ``None`` for an optional file the repo lacks."""
    # loaded only when a Hub id is named: `import tokpool` stays light and offline
    import huggingface_hub as hub
    from huggingface_hub import errors  # the same, its exception classes

    where = _where(repo_id, revision)
    try:
        return Path(hub.hf_hub_download(
            repo_id, filename, revision=revision, cache_dir=cache_dir, token=token,
            local_files_only=local_files_only))
    except errors.GatedRepoError:
        raise HubError(
            f"{where} is a gated repository: accept its terms on its Hub page, then log in "
            "(`hf auth login`, or HF_TOKEN in the environment); or pass a folder holding "
            "its config.json") from None
    except errors.RepositoryNotFoundError:
        raise HubError(
            f"no model {where} on the Hub (or it is private): check the spelling, log in "
            "(`hf auth login`, or HF_TOKEN) if it is private, or pass a local folder holding "
            "its config.json") from None
    except errors.RevisionNotFoundError:
        raise HubError(
            f"{where}: the repository has no such revision; pass an existing branch, tag or "
            "commit as revision= (vllm serve: --revision), or leave it out for 'main'") from None
    except errors.LocalEntryNotFoundError:
        if not required:  # not cached while offline: vLLM reads what the cache has
            return None
        how = ("HF_HUB_OFFLINE is set" if hub_offline() else
               "the Hub cannot be reached from here" if _UNREACHABLE else
               "local_files_only=True")
        fix = ("drop HF_HUB_OFFLINE (or go online)" if hub_offline() else
               "go online (check HF_ENDPOINT or your proxy)")
        raise HubUnavailable(
            f"{where}: {filename} is not in the Hub cache ({cache_dir}) and {how}; {fix} to "
            "fetch its config files once, or pass a folder holding its config.json") from None
    except errors.EntryNotFoundError:  # the repository lacks the file
        if not required:
            return None
        raise HubError(
            f"{where} has no {filename}: it is not a transformers model repository vLLM "
            "can serve; pass a folder holding its config.json") from None
    except errors.OfflineModeIsEnabled:
        raise HubUnavailable(
            f"{where}: {filename} is not in the Hub cache ({cache_dir}) and the Hub client "
            "runs offline (HF_HUB_OFFLINE was set when huggingface_hub was imported); unset "
            "it before starting Python, or pass a folder holding its config.json") from None
    except errors.HFValidationError as err:
        raise HubError(f"{repo_id!r} is not a valid Hub model id ({err}); pass 'org/name' or "
                       "a local folder holding its config.json") from None
    except (OSError, ConnectionError) as err:  # no network, a proxy, a timeout
        if not required:
            return None
        raise HubUnavailable(
            f"{where}: the Hub could not be reached ({type(err).__name__}) and {filename} is "
            f"not in the Hub cache ({cache_dir}); retry online, set HF_HUB_OFFLINE=1 to use "
            "the cache only, or pass a folder holding its config.json") from None


def _module_configs(folder: Path) -> list[str]:
    """The module config files ``modules.json`` names (``1_Pooling/config.json``, ...)."""
    file = folder / "modules.json"
    if not file.is_file() or file.stat().st_size > 1 << 20:
        return []
    try:
        modules = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return []  # the folder reader says what is wrong with it
    if not isinstance(modules, list):
        return []
    paths = []
    for module in modules:
        path = module.get("path") if isinstance(module, dict) else None
        if isinstance(path, str) and path and ".." not in path and not path.startswith("/"):
            paths.append(f"{path.strip('/')}/config.json")
    return paths


def hub_folder(repo_id: str, *, revision: str | None = None, token: str | bool | None = None,
               local_files_only: bool | None = None,
               cache_dir: str | os.PathLike | None = None) -> Path:
    """The snapshot folder holding a Hub model's small config files (fetched when missing).

    Args:
        repo_id: ``"org/name"``, e.g. ``"Qwen/Qwen3-Embedding-0.6B"``.
        revision: a branch, tag or commit (default ``"main"``).
        token: a Hub token; default: the environment's (``HF_TOKEN``) or the logged-in one.
        local_files_only: read the cache only; default: when ``HF_HUB_OFFLINE`` is set, or
            the Hub's host does not answer (checked once per session, 3 s at most).
        cache_dir: default ``hub_cache_dir()``.

    Returns:
        The folder (``.../models--org--name/snapshots/<commit>``): ``config.json`` and
        whichever of ``SMALL_FILES`` and the sentence-transformers module configs the repo has.

    Raises:
        HubUnavailable: offline and not cached, or the Hub cannot be reached.
        HubError: a missing, private or gated repository, a missing revision, no config.json.
    """
    if not isinstance(repo_id, str) or not _ID.match(repo_id):
        raise HubError(f"{repo_id!r} is not a Hub model id; pass 'org/name' (e.g. "
                       "'BAAI/bge-m3') or a local folder holding its config.json")
    if local_files_only is None:
        local_files_only = hub_offline() or not _hub_reachable()
    cache = Path(cache_dir) if cache_dir is not None else hub_cache_dir()
    common = {"revision": revision, "token": token, "local_files_only": local_files_only,
              "cache_dir": cache}
    folder = Path(_fetch(repo_id, "config.json", required=True, **common)).parent
    for name in SMALL_FILES[1:]:
        _fetch(repo_id, name, required=False, **common)
    for name in _module_configs(folder):
        _fetch(repo_id, name, required=False, **common)
    return folder


def _preset(name: str) -> ModelPreset | None:
    wanted = name.strip().lower()
    for key, preset in MODEL_PRESETS.items():
        if wanted in (key.lower(), preset.hf_id.lower()):
            return preset
    return None


def model_source(value: Any, *, revision: str | None = None) -> Any:
    """What a model name names, as vLLM would read it: a Hub id's snapshot folder
    (``hub_folder``) when its files can be had (cache or network); else, for a name that is
    also one of ``MODEL_PRESETS``, that preset — with a ``PresetAnswersWarning`` that says so;
    a bare preset name (``"Qwen3-Embedding-8B"``) is the preset; anything else is returned as
    given (a folder, a dict, a ``ModelPreset``).

    Raises:
        HubError: a Hub id that is no preset and whose files cannot be had, or any Hub id
            asked at a ``revision`` it cannot give (a preset has no revisions), in words.
    """
    if not isinstance(value, str):
        return value
    preset = _preset(value)
    if not is_hub_id(value):
        return preset if preset is not None else value
    try:
        return hub_folder(value, revision=revision)
    except HubError as err:
        if preset is None or revision is not None:
            raise
        warnings.warn(
            f"{value}: tokpool's preset {preset.name!r} answers (its max_model_len "
            f"{preset.max_model_len}), not the model's own files as vLLM reads them — {err}",
            PresetAnswersWarning, stacklevel=3)
        return preset
