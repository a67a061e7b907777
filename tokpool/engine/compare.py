"""The comparison, engine against tokpool: the tolerance on per-token outputs, the schedule
``tp.simulate`` predicts for the engine's flags and the first step where the two differ, and the
bytes the engine's pooling holds per step against ``tp.simulate``'s ledger.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from ..sim import SimConfig, SimResult, simulate
from .flags import EngineFlags
from .vllm_venv import EngineCheckError, EngineRun, run_vllm

#: Largest absolute difference accepted between tokpool's and vLLM's per-token outputs, per task.
#: Both run the same float32 weights through different kernels (vLLM's CPU attention and fused
#: RMSNorm/SiLU vs. transformers' eager PyTorch ops), so sums are accumulated in another order;
#: measured on this project's CPU: up to 7.8e-6 on SmolLM2's unit-norm token embeddings (30
#: layers), up to 4.1e-5 on the PRM's softmax probabilities, whose logits reach +-47 (a relative
#: logit error of ~4e-6 after 17 layers). The bounds leave ~5x headroom for other CPUs' SIMD
#: widths and stay far below a real error (a wrong row, position or head: 1e-2 and more on
#: outputs of ~1e-2..1).
ENGINE_ATOL = {"token_embed": 5e-5, "token_classify": 2e-4}


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


def request_chunks(steps: Sequence[dict[int, int]], request: int) -> list[tuple[int, int]]:
    """One request's chunks in a schedule: ``(step index, tokens)`` for every step (of
    ``steps``, ``{request: num_scheduled_tokens}`` each) that scheduled it."""
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
