"""Drive the INSTALLED vLLM's own ``AllPool``/``StepPool`` from tokpool's metadata.

``VllmPool`` has the interface of ``tp.AllPool(...)`` / ``tp.StepPool(...)``: call it as
``pool(hidden_states, meta)`` with a tokpool ``PoolingMetadata`` and it returns one entry per
request (``[prompt_len, width]`` when the request finishes this step, else ``None``). Inside, it
builds vLLM's ``PoolingMetadata`` (``PoolingParams`` per request, prompt token ids, the cursor
from vLLM's own ``build_pooling_cursor``) and runs vLLM's pooling method. So a simulator can
ask "what does *my* vLLM keep, and does it corrupt or pin memory under these flags?".

State across steps: each request's vLLM ``PoolingStates`` is kept by the bridge and its
``hidden_states_cache`` *is* the list of the tokpool ``PoolingStates`` in ``meta``. So exactly
what vLLM keeps between steps is visible to tokpool's ownership and memory accounting
(``state.tensors()``, ``tp.owned_bytes``) and to tokpool's continuity check, and passing the
previous step's ``meta.pooling_states`` as ``states=`` continues the requests, as with
``tp.AllPool``.

vLLM is imported only when a ``VllmPool`` is built or ``vllm_available()`` is called. On a
machine without CUDA the bridge sets ``VLLM_TARGET_DEVICE=cpu`` (if unset) before that import,
because vLLM cannot otherwise infer a device. vLLM needs extra packages; ``make vllm`` installs
vLLM 0.33.0 with ``--no-deps`` plus the pinned pure-Python set in
``scripts/vllm-requirements.txt``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import entry_points
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from .metadata import PoolingMetadata, PoolingStates
from .pooling import AllPool

__all__ = [
    "VLLM_REFERENCE_VERSION",
    "VllmPool",
    "VllmUnavailableError",
    "vllm_available",
    "vllm_unavailable_reason",
    "vllm_version",
]

#: The vLLM version the bridge and ``tokpool.sim.vllm_rules`` were read against.
VLLM_REFERENCE_VERSION = "0.33.0"

_IMPORT: dict[str, Any] = {}


class VllmUnavailableError(ImportError):
    """vLLM cannot be imported here; the message says why and how to install it."""

def prepare_vllm_environment() -> None:
    """Before vLLM is first imported: its CPU platform where no GPU is (vLLM cannot otherwise
    infer a device), and only its errors in a simulation's output (it configures its loggers
    at import). Explicit settings win."""
    if "VLLM_TARGET_DEVICE" not in os.environ and not torch.cuda.is_available():
        os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    check_target_device(os.environ.get("VLLM_TARGET_DEVICE"))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


#: The libraries whose import-time log lines and warnings ``quiet_vllm_import`` keeps out of a
#: cell: vLLM's own, and torch's that importing vLLM triggers (torch 2.14.1 logs, in its glog
#: format, "W1201 18:44:46.838 ... torch._opaque_base is deprecated" and "No CUDA runtime is
#: found" from ``torch.utils.cpp_extension``).
QUIET_AT_IMPORT = ("vllm", "torch")


@contextlib.contextmanager
def quiet_vllm_import() -> Iterator[None]:
    """Import vLLM without its or torch's import-time WARNING/INFO log lines and warnings in the
    output (a notebook cell, the exported HTML). Only the loggers and modules named in
    ``QUIET_AT_IMPORT`` are quieted, only while the block runs, and their errors still show;
    tokpool's own warnings and every other library's are untouched.

    Example:
        >>> import logging
        >>> with quiet_vllm_import():
        ...     logging.getLogger("torch.utils.cpp_extension").warning("No CUDA runtime is found")
        >>> logging.getLogger("torch").level == logging.ERROR
        False
    """
    loggers = [logging.getLogger(name) for name in QUIET_AT_IMPORT]
    levels = [logger.level for logger in loggers]
    # children created during the import inherit ERROR; existing ones with their own level
    # below it are raised too, and every level is put back afterwards
    children = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
                if name.split(".", 1)[0] in QUIET_AT_IMPORT and "." in name]
    child_levels = [child.level for child in children]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        for child in children:
            if logging.NOTSET < child.level < logging.ERROR:
                child.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            for name in QUIET_AT_IMPORT:  # warnings raised from their modules only
                warnings.filterwarnings("ignore", module=rf"{name}(\.|$)")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        for child, level in zip(children, child_levels, strict=True):
            child.setLevel(level)


#: vLLM 0.33.0's built-in platforms (vllm/platforms/__init__.py, ``builtin_platform_plugins``).
VLLM_DEVICES = ("cuda", "rocm", "tpu", "xpu", "cpu")


def check_target_device(value: str | None) -> None:
    """``VLLM_TARGET_DEVICE`` as vLLM reads it (lower-cased): a built-in platform or a
    registered platform plugin, and a GPU one only where torch sees a GPU; else vLLM fails
    later with ``RuntimeError: Device string must not be empty`` (its device could not be
    inferred).

    Raises:
        ValueError: the value, the platforms vLLM knows and what to set instead.
    """
    if value is None or value.lower() == "cpu":
        return
    device = value.lower()
    if device not in VLLM_DEVICES:
        plugins = {ep.name for ep in entry_points(group="vllm.platform_plugins")}
        if device in plugins:
            return
        raise ValueError(
            f"VLLM_TARGET_DEVICE={value!r} is not a platform vLLM {VLLM_REFERENCE_VERSION} "
            f"knows: its built-in platforms are {list(VLLM_DEVICES)} (vllm/platforms/"
            f"__init__.py){f', plugins {sorted(plugins)}' if plugins else ''}. Set it to "
            "'cpu' on a machine without a GPU, or unset it"
        )
    if device in ("cuda", "rocm") and not torch.cuda.is_available():
        raise ValueError(
            f"VLLM_TARGET_DEVICE={value!r} but this torch ({torch.__version__}) sees no GPU: "
            "vLLM could not infer its device (RuntimeError: Device string must not be "
            "empty). Set VLLM_TARGET_DEVICE=cpu, or unset it (tokpool then picks cpu)"
        )


def _import_vllm() -> dict[str, Any]:
    if _IMPORT:
        if "error" in _IMPORT:
            raise VllmUnavailableError(_IMPORT["error"])
        return _IMPORT
    prepare_vllm_environment()
    try:
        with quiet_vllm_import():
            import vllm
            from vllm.config import VllmConfig, set_current_vllm_config
            from vllm.model_executor.layers.pooler.tokwise import methods
            from vllm.pooling_params import PoolingParams
            from vllm.v1.pool import metadata as vmeta
    except Exception as err:  # ImportError, or vLLM's own RuntimeError on an unknown device
        _IMPORT["error"] = (
            f"vLLM cannot be imported here ({type(err).__name__}: {err}). Install vLLM "
            f"{VLLM_REFERENCE_VERSION} into this environment with `make vllm` (vLLM with "
            "--no-deps plus the pinned pure-Python packages in scripts/vllm-requirements.txt; "
            "torch is left alone)"
        )
        raise VllmUnavailableError(_IMPORT["error"]) from err
    _IMPORT.update(
        np=np,
        version=vllm.__version__,
        VllmConfig=VllmConfig,
        set_current_vllm_config=set_current_vllm_config,
        methods=methods,
        PoolingParams=PoolingParams,
        VllmPoolingMetadata=vmeta.PoolingMetadata,
        VllmPoolingStates=vmeta.PoolingStates,
    )
    return _IMPORT


def vllm_available() -> bool:
    """Whether the installed vLLM's pooling modules import here (never raises)."""
    return vllm_unavailable_reason() is None


def vllm_unavailable_reason() -> str | None:
    """Why vLLM cannot be imported (``None`` when it can): not installed, or a
    ``VLLM_TARGET_DEVICE`` it cannot run on."""
    try:
        _import_vllm()
    except (VllmUnavailableError, ValueError) as err:
        return str(err)
    return None


def vllm_version() -> str | None:
    """The installed vLLM's version, or ``None`` when it cannot be imported."""
    return _IMPORT["version"] if vllm_available() else None


def _base_config():
    mod = _import_vllm()
    if "config" not in mod:
        mod["config"] = mod["VllmConfig"]()  # vLLM's defaults; only the scheduler flags matter
    return mod["config"]


#: vLLM's token pooling methods by name: (class in vllm/model_executor/layers/pooler/tokwise/
#: methods.py, the task a request gets by default, whether it selects columns and step rows).
_VLLM_METHODS: dict[str, tuple[str, str, bool]] = {
    "ALL": ("AllPool", "token_embed", False),
    "STEP": ("StepPool", "token_classify", True),
}


class VllmPool:
    """vLLM's own ``AllPool`` (``pooling_type="ALL"``) or ``StepPool`` (``"STEP"``).

    Args:
        pooling_type: ``"ALL"`` or ``"STEP"``.
        enable_chunked_prefill: vLLM's ``SchedulerConfig.enable_chunked_prefill``.
        async_scheduling: vLLM's ``SchedulerConfig.async_scheduling`` (its AllPool then clones
            one-shot finished outputs). Set on the built config, so vLLM's CPU platform, which
            forces it off inside ``VllmConfig``, does not interfere.

    Call:
        ``pool(hidden_states, meta)`` with ``hidden_states`` ``[n_step_tokens, width]`` and a
        tokpool ``PoolingMetadata`` (``tp.build_metadata``); returns one entry per request,
        ``[prompt_len, width]`` (STEP: after column and step-tag row selection) or ``None``.

    Raises:
        VllmUnavailableError: vLLM is not importable (the message says how to install it).
        ValueError: a bad ``pooling_type``; rows that do not match the cursor; a state that
            does not continue what vLLM holds; a STEP step tag without prompt token ids.

    Example:
        >>> pool = VllmPool("ALL", async_scheduling=True)      # doctest: +SKIP
        >>> pool(torch.randn(4, 8), tp.build_metadata([4]))    # doctest: +SKIP
    """
    policy = "vllm"

    def __init__(
        self,
        pooling_type: Literal["ALL", "STEP"] = "ALL",
        *,
        enable_chunked_prefill: bool = True,
        async_scheduling: bool = False,
    ) -> None:
        if pooling_type not in _VLLM_METHODS:
            raise ValueError(f"pooling_type must be one of {list(_VLLM_METHODS)}, got "
                             f"{pooling_type!r}")
        mod = _import_vllm()
        config = _base_config()
        config.scheduler_config.enable_chunked_prefill = bool(enable_chunked_prefill)
        config.scheduler_config.async_scheduling = bool(async_scheduling)
        class_name, self._default_task, self._selects = _VLLM_METHODS[pooling_type]
        with mod["set_current_vllm_config"](config):
            self.method = getattr(mod["methods"], class_name)()
        self.pooling_type = pooling_type
        self.enable_chunked_prefill = bool(enable_chunked_prefill)
        self.async_scheduling = bool(async_scheduling)
        self.clone_finished = bool(self.method.clone_finished)
        #: ``probe(event, outputs)``, called once after vLLM's forward with event
        #: ``"vllm_step"`` (vLLM's internal allocations cannot be observed one by one).
        self.probe: Callable[[str, Sequence[Tensor | None]], None] | None = None
        self._states: dict[int, tuple[PoolingStates, Any]] = {}

    def __repr__(self) -> str:
        return (
            f"VllmPool({self.pooling_type!r}, enable_chunked_prefill="
            f"{self.enable_chunked_prefill}, async_scheduling={self.async_scheduling}; "
            f"vLLM {_IMPORT.get('version')})"
        )

    def get_supported_tasks(self) -> frozenset[str]:
        return frozenset(self.method.get_supported_tasks())

    def reset(self) -> None:
        """Forget every request's vLLM state (an aborted run; finished requests forget
        themselves)."""
        self._states.clear()

    def __call__(self, hidden_states: Tensor, metadata: PoolingMetadata) -> list[Tensor | None]:
        return self.forward(hidden_states, metadata)

    def forward(self, hidden_states: Tensor, metadata: PoolingMetadata) -> list[Tensor | None]:
        if not isinstance(hidden_states, Tensor):
            raise TypeError(f"hidden_states must be a Tensor, got {type(hidden_states).__name__}")
        cursor = metadata.get_pooling_cursor()
        if self.enable_chunked_prefill:
            # vLLM trusts its states; tokpool checks them, so a wrong `states=` fails loudly.
            AllPool._check_continuity(metadata.pooling_states, cursor)
        if hidden_states.dim() != 2 or hidden_states.shape[0] != int(
            cursor.num_scheduled_tokens_cpu.sum()
        ):
            raise ValueError(
                f"hidden_states has shape {tuple(hidden_states.shape)} but the cursor schedules "
                f"{cursor.num_scheduled_tokens_cpu.tolist()} tokens; pass the step's rows "
                "[n_step_tokens, width]"
            )
        vllm_meta = self.vllm_metadata(metadata, device=hidden_states.device)
        outputs = list(self.method(hidden_states, vllm_meta))
        for state, done in zip(metadata.pooling_states, cursor.get_finished_mask(), strict=True):
            if done:
                self._states.pop(id(state), None)
        if self.probe is not None:
            self.probe("vllm_step", outputs)
        return outputs

    def vllm_metadata(self, metadata: PoolingMetadata, *, device: torch.device | str = "cpu"):
        """vLLM's ``PoolingMetadata`` (cursor built) for one step of tokpool ``metadata``.

        Each request's vLLM ``PoolingStates`` persists across calls and shares its
        ``hidden_states_cache`` list with the tokpool state.
        """
        mod = _import_vllm()
        if not isinstance(metadata, PoolingMetadata):
            raise TypeError(
                f"metadata must be a tokpool PoolingMetadata (tp.build_metadata), got "
                f"{type(metadata).__name__}"
            )
        cursor = metadata.get_pooling_cursor()
        n = len(metadata)
        params = []
        for i in range(n):
            kwargs: dict[str, Any] = {"task": metadata.tasks[i] or self._default_task}
            if self._selects:
                kwargs["step_tag_id"] = metadata.step_tag_ids[i]
                columns = metadata.returned_token_ids[i]
                kwargs["returned_token_ids"] = None if columns is None else list(columns)
            params.append(mod["PoolingParams"](**kwargs))
        token_ids = None
        if self._selects:
            if metadata.prompt_token_ids is not None:
                token_ids = metadata.prompt_token_ids.cpu()
            elif any(tag is not None for tag in metadata.step_tag_ids):
                raise ValueError(
                    "STEP pooling with a step_tag_id needs the prompt token ids: pass "
                    "prompt_token_ids= to build_metadata()"
                )
            else:  # vLLM's StepPool reads the ids even when no row selection uses them
                width = int(metadata.prompt_lens.max()) if n else 0
                token_ids = torch.zeros((n, width), dtype=torch.int64)
        vllm_meta = mod["VllmPoolingMetadata"](
            prompt_lens=metadata.prompt_lens.cpu(),
            prompt_token_ids=None,
            prompt_token_ids_cpu=token_ids,
            pooling_params=params,
            pooling_states=[self._state_for(s) for s in metadata.pooling_states],
        )
        vllm_meta.build_pooling_cursor(
            cursor.num_scheduled_tokens_cpu.numpy(),
            cursor.seq_lens_cpu,
            device=torch.device(device),
        )
        return vllm_meta

    def _state_for(self, state: PoolingStates) -> Any:
        if not isinstance(state, PoolingStates):
            raise TypeError(f"pooling states must be tokpool PoolingStates, got {type(state)}")
        if state.buffer is not None:
            raise ValueError(
                "this request's state holds a prealloc/offload buffer; vLLM keeps chunks in "
                "hidden_states_cache only. Start the request with fresh states"
            )
        kept = self._states.get(id(state))
        if kept is None or kept[0] is not state:
            vllm_state = _import_vllm()["VllmPoolingStates"]()
            vllm_state.hidden_states_cache = state.hidden_states_cache  # one list, shared
            self._states[id(state)] = (state, vllm_state)
            return vllm_state
        return kept[1]
