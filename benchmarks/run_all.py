"""Run every benchmark in one process and write ``benchmarks/RESULTS.md`` plus CSVs.

    python -m benchmarks.run_all            # full (about 10-20 minutes on 2 cores)
    python -m benchmarks.run_all --quick    # smaller sizes, a smoke run (about a minute)

Every figure is a ratio of two things measured side by side in this run (or exact bytes from
the simulator), so the noise of a shared machine cancels as far as it can.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import pandas as pd
import torch

import tokpool as tp

from . import (
    bench_counting,
    bench_memory,
    bench_models,
    bench_pooling,
    bench_schedule,
    bench_sim,
)

HERE = Path(__file__).resolve().parent
TARGETS = {
    "copy_bound": 1.25,  # clone and prealloc within 1.25x of their copy bound
    "prealloc_peak": 0.55,  # prealloc peak <= 0.55x clone's (prompts of >= 8 chunks)
    "prealloc_copy": 0.60,  # prealloc copied bytes <= 0.6x clone's
    "sweep_points_per_s": 100_000,
    "tensor_vs_allpool": 1.5,
    "counting_4x_steps": 5.0,  # counting engine: 4x the steps costs at most 5x the time
    "pooling_overhead": 0.03,
}


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}; {os.cpu_count()} logical cores; {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}; torch {torch.__version__} "
            f"({torch.get_num_threads()} intra-op threads); tokpool {tp.__version__}")


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def md_table(df: pd.DataFrame, floatfmt: str = "{:.3g}") -> str:
    def fmt(v):
        if isinstance(v, float) and not pd.isna(v) and v.is_integer() and abs(v) >= 1000:
            v = int(v)
        if isinstance(v, float):
            return "" if pd.isna(v) else floatfmt.format(v)
        if isinstance(v, (int,)) and not isinstance(v, bool) and abs(v) >= 10_000:
            return f"{v:,}"
        return str(v)

    head = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "---|" * len(df.columns)
    rows = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{int(n)} B"


# --- sections --------------------------------------------------------------------------------


def section_pooling(pool: pd.DataFrame) -> tuple[str, dict]:
    owned = pool[pool.policy.isin(["clone", "prealloc"])]
    worst = owned.ratio.max()
    med = owned.ratio.median()
    table = pool[["prompt_len", "width", "dtype", "policy", "steps", "copy_bytes", "allpool_ms",
                  "bound_ms", "ratio"]]
    text = f"""## 1. Pooling against the physical limit (copy bound)

`AllPool` per policy (async scheduling, chunk 2048) against the bare copies that policy must
make (`clone`/`copy_`/`cat` of the same tensors, no pooling code): ratio = AllPool time / bound
time, best of N interleaved runs each (noise on this shared VM only adds time; gigabyte
allocations alone swing 2-4x from first-touch page faults; `median_ratio` is in
`results/pooling.csv`). Target: `clone` and `prealloc` within
{TARGETS['copy_bound']}x of their bound.

**Result: median ratio {med:.2f}x, worst {worst:.2f}x over {len(owned)} clone/prealloc cases —
{verdict(worst <= TARGETS['copy_bound'])}.** `legacy` copies nothing for one-shot prompts (its
bound is 0: the ratio is blank) and `offload` copies to host memory (the same memory on this
CPU-only machine).

{md_table(table)}
"""
    return text, {"copy_bound_median": med, "copy_bound_worst": worst}


def section_policies(pool: pd.DataFrame) -> tuple[str, dict]:
    rows = []
    for case in bench_pooling.cases(quick=False):
        if len(case.steps) < 8:
            continue
        dtype = str(case.dtype).removeprefix("torch.")
        # pooling's own bytes: no head allocation (vLLM's default float32 head would set the
        # peak for every policy alike)
        cfg = tp.SimConfig(hidden_size=case.width, dtype=dtype, max_num_batched_tokens=case.chunk,
                           async_scheduling=True, head_dtype=None, use_activation=False)
        sweep = tp.sweep([case.prompt_len], cfg, policies=("clone", "prealloc", "offload"),
                         async_scheduling=(True,), progress=False).set_index("policy")
        timing = pool[(pool.prompt_len == case.prompt_len) & (pool.width == case.width)
                      & (pool.dtype == dtype)].set_index("policy")
        if timing.empty:
            continue
        clone = sweep.loc["clone"]
        for policy in ("prealloc", "offload"):
            row = sweep.loc[policy]
            rows.append({
                "prompt_len": case.prompt_len, "width": case.width, "dtype": dtype,
                "chunks": len(case.steps), "policy": policy,
                "peak_vs_clone": row.peak_pooling_bytes / clone.peak_pooling_bytes,
                "copied_vs_clone": row.copy_bytes / clone.copy_bytes,
                "time_vs_clone": (timing.loc[policy, "allpool_ms"]
                                  / timing.loc["clone", "allpool_ms"]),
                "clone_peak": mib(clone.peak_pooling_bytes),
                "policy_peak": mib(row.peak_pooling_bytes),
            })
    df = pd.DataFrame(rows)
    if df.empty:
        return "## 2. Policies side by side\n\n(no case of >= 8 chunks in this run)\n", {}
    pre = df[df.policy == "prealloc"]
    peak_ok = (pre.peak_vs_clone <= TARGETS["prealloc_peak"]).all()
    copy_ok = (pre.copied_vs_clone <= TARGETS["prealloc_copy"]).all()
    time_ok = (pre.time_vs_clone <= 1.0).all()
    text = f"""## 2. Policies side by side

Exact bytes from the simulator (one request, async scheduling, chunk 2048, no head allocation)
and measured `AllPool` wall time from section 1's runs, relative to `clone`, for prompts of at
least 8 chunks. Targets: `prealloc` at most {TARGETS['prealloc_peak']}x of clone's peak and
{TARGETS['prealloc_copy']}x of its copied bytes, and not slower.

**Result: prealloc peak {pre.peak_vs_clone.max():.3f}x of clone at worst
({verdict(peak_ok)}), copied bytes {pre.copied_vs_clone.max():.3f}x ({verdict(copy_ok)}),
wall time {pre.time_vs_clone.median():.2f}x of clone's (median; worst
{pre.time_vs_clone.max():.2f}x: {verdict(time_ok)}).** `offload` keeps no device bytes
across steps (its device peak is 0 here: chunks go to host memory, which on this CPU-only
machine is the same memory; on a GPU the copy crosses PCIe).

{md_table(df)}
"""
    return text, {"prealloc_peak_vs_clone": pre.peak_vs_clone.max(),
                  "prealloc_copy_vs_clone": pre.copied_vs_clone.max(),
                  "prealloc_time_vs_clone": pre.time_vs_clone.median()}


def section_sim(sim: dict) -> tuple[str, dict]:
    sweep = sim["sweep"]
    tensor = pd.DataFrame(sim["tensor"])
    worst = tensor.sim_vs_allpool.max()
    text = f"""## 3. Simulator speed

* Analytic sweep (`tp.sweep`, Qwen3-Embedding-8B preset, 3 policies x 2 scheduling modes):
  **{sweep['points_per_s']:,.0f} points/s** ({sweep['points']:,} points in
  {sweep['seconds']:.2f} s) — target {TARGETS['sweep_points_per_s']:,}/s:
  {verdict(sweep['points_per_s'] >= TARGETS['sweep_points_per_s'])}.
* Tensor mode (`tp.simulate(mode="tensor")`) against replaying the same schedule with
  `AllPool` alone (`sim_vs_allpool`, target {TARGETS['tensor_vs_allpool']}x:
  {verdict(worst <= TARGETS['tensor_vs_allpool'])}, worst {worst:.2f}x) and against the
  minimal engine loop — the same synthetic source filling the buffer, `AllPool`, the host copy
  (`sim_vs_engine`, worst {tensor.sim_vs_engine.max():.2f}x).

{md_table(tensor)}

Why the first target is missed: tensor mode does work that `AllPool` alone does not — it writes
every hidden state into the buffer (the forward's stand-in), copies every output to the host,
builds the exact reference of every output and compares it with `torch.equal`, and measures
storages after every allocation. Per token that is about four extra passes over the data
against one (prealloc) or two (clone) for pooling itself. Profile of one 32k-token clone run:
the buffer fill, the reference and the host copy+compare take roughly as long as `AllPool`;
the ledger's probes are negligible. Against the engine loop it simulates (fill + pool + host
copy), the simulator's own cost is the `sim_vs_engine` column.
"""
    return text, {"sweep_points_per_s": sweep["points_per_s"],
                  "tensor_vs_allpool_worst": worst,
                  "tensor_vs_engine_worst": tensor.sim_vs_engine.max()}


def section_counting(rows: pd.DataFrame) -> tuple[str, dict]:
    worst = rows.time_ratio.max()
    text = f"""## 3b. Counting engine cost (O(steps))

`tp.simulate(mode="analytic")` — the one engine loop with integer bookkeeping — on one long
request plus two short ones at a 16-token budget, S and 4·S steps, async scheduling, best of 3
interleaved runs each. Target: 4x the steps costs at most {TARGETS['counting_4x_steps']:.0f}x
the time — {verdict(worst <= TARGETS['counting_4x_steps'])} (worst **{worst:.2f}x**; before
the one-loop rewrite the same 4x cost about 13x).

{md_table(rows)}
"""
    return text, {"counting_4x_steps_worst": worst}


def section_schedule(rows: pd.DataFrame | None) -> tuple[str, dict]:
    head = """## 3c. `scheduler="vllm"`: vLLM's own scheduler against tokpool's

`tokpool.sim.vllm_run.vllm_schedule` drives vLLM 0.33.0's V1 `Scheduler` + `KVCacheManager` on
the CPU with fake model outputs; `tokpool.sim.schedule.scheduler.schedule` follows the same
rules (schedule parity, `tests/test_parity_schedule.py`; the schedules are checked equal here
too). Same workloads, interleaved, best of 3. `ratio`: vLLM's time over tokpool's.
`vllm_first_call_s`: the first call, which builds vLLM's engine config for the flag set (cached
afterwards). The last row is a whole `tp.simulate(mode="analytic")` with each scheduler.
Whole-prompt admission makes preemption rare: a request waits rather than being admitted into a
cache it would outgrow.
"""
    if rows is None or "ratio" not in rows:
        reason = "" if rows is None else f" ({rows.iloc[0, 0]})"
        return head + f"\nNot measured in this run{reason}: needs vLLM (`make vllm`).\n", {}
    sched = rows[~rows.workload.str.startswith("tp.simulate")]
    whole = rows[rows.workload.str.startswith("tp.simulate")]
    lo, hi = sched.ratio.min(), sched.ratio.max()
    per_step = sched.vllm_ms_per_1k_steps
    text = head + f"""
vLLM's scheduler costs **{lo:.0f}x to {hi:.0f}x** tokpool's on the schedule alone
({per_step.min() / 1e3:.2f} to {per_step.max() / 1e3:.2f} s per 1,000 steps here); a whole
analytic simulation costs **{whole.ratio.max():.1f}x** with it. tokpool's scheduler stays the
default; `scheduler="vllm"` is the check that it is right.

{md_table(rows)}
"""
    return text, {"schedule_vllm_vs_tokpool_max": hi,
                  "simulate_vllm_vs_tokpool": float(whole.ratio.max()) if len(whole) else None}


def section_models(models: pd.DataFrame) -> tuple[str, dict]:
    over = models[models.benchmark.str.contains("pooling", case=False)]
    worst = over.ratio.max() if not over.empty else float("nan")
    text = f"""## 4. Real model: SmolLM2-135M

Chunked prefill through the real KV-cache path with pooling, against the plain full forward,
and first (GGUF conversion) vs cached load. Pooling overhead target: at most
{TARGETS['pooling_overhead']:.0%} of the forward — **{worst:.2%} at worst:
{verdict(worst <= TARGETS['pooling_overhead'])}**.

{md_table(models)}
"""
    return text, {"pooling_overhead_worst": worst}


def section_memory(mem: pd.DataFrame) -> str:
    shown = mem.copy()
    for col in [c for c in shown.columns if c.startswith("peak_at_")]:
        shown[col] = shown[col].map(human_bytes)
    for col in ("tokens_to_1GiB", "tokens_to_10pct_card"):
        shown[col] = shown[col].map(lambda v: "never" if pd.isna(v) else f"{int(v):,}")
    card = tp.HARDWARE_PRESETS[bench_memory.HARDWARE].hbm_bytes
    return f"""## 5. Memory against prompt length on real presets ({bench_memory.HARDWARE})

Exact peak pooling bytes (analytic mode; one request, async scheduling, chunk 2048, bf16 hidden
states) and the prompt length at which they first exceed 1 GiB and 10% of the card
({card / 2**30:.0f} GiB). `head`: the engines' float32 head with normalise/softmax, or no head
allocation. PRMs use STEP pooling (a step tag every 64 tokens); their head runs after the step
rows are selected, so it costs nothing here — the full-width ALL cache does.
`offload` keeps no device bytes (it moves the same bytes to host memory instead).

Reading it: with the engines' float32 head and normalisation, the head's two float32 tensors
(8 bytes per element, against 2 for the bf16 pooled rows) set the peak, so for a token_embed
model every correct policy peaks alike; `prealloc` halves the peak only when the head does not
allocate (bf16 head or no activation). For PRMs the head runs on the few step rows, and what
counts is the width ALL pooling caches before STEP selects columns: 2 logits per token cost
nothing, a full vocabulary row per token (Math-Shepherd's token pair) passes 1 GiB at 8.6k
tokens under `clone`.

{md_table(shown)}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--out", default=str(HERE / "RESULTS.md"))
    parser.add_argument("--csv-dir", default=str(HERE / "results"))
    parser.add_argument("--render-only", action="store_true",
                        help="rewrite RESULTS.md from the CSVs of the last run (no measuring)")
    parser.add_argument("--only", choices=("counting", "schedule"),
                        help="measure this benchmark alone; the rest is rendered from the CSVs")
    args = parser.parse_args(argv)
    csv_dir = Path(args.csv_dir)
    csv_dir.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - began:7.1f}s] {msg}", flush=True)

    if args.only == "counting":
        say("3b. counting engine cost")
        pd.DataFrame(bench_counting.run(quick=args.quick)).to_csv(
            csv_dir / "sim_counting.csv", index=False)
        args.render_only = True
    if args.only == "schedule":
        say("3c. vLLM's scheduler against tokpool's")
        pd.DataFrame(bench_schedule.run(quick=args.quick)).to_csv(
            csv_dir / "sim_schedule.csv", index=False)
        args.render_only = True
    if args.render_only:
        pool = pd.read_csv(csv_dir / "pooling.csv")
        sim = {"sweep": pd.read_csv(csv_dir / "sim_sweep.csv").iloc[0].to_dict(),
               "tensor": pd.read_csv(csv_dir / "sim_tensor.csv").to_dict("records")}
        models = pd.read_csv(csv_dir / "models.csv")
        mem = pd.read_csv(csv_dir / "memory.csv")
    else:
        say("1. pooling vs copy bound")
        pool = pd.DataFrame(bench_pooling.run(quick=args.quick))
        pool.to_csv(csv_dir / "pooling.csv", index=False)
        say("3. simulator speed")
        sim = bench_sim.run(quick=args.quick)
        pd.DataFrame(sim["tensor"]).to_csv(csv_dir / "sim_tensor.csv", index=False)
        pd.DataFrame([sim["sweep"]]).to_csv(csv_dir / "sim_sweep.csv", index=False)
        say("3b. counting engine cost")
        pd.DataFrame(bench_counting.run(quick=args.quick)).to_csv(
            csv_dir / "sim_counting.csv", index=False)
        say("3c. vLLM's scheduler against tokpool's")
        pd.DataFrame(bench_schedule.run(quick=args.quick)).to_csv(
            csv_dir / "sim_schedule.csv", index=False)
        say("4. real model")
        models = pd.DataFrame(bench_models.run(quick=args.quick, progress=say))
        models.to_csv(csv_dir / "models.csv", index=False)
        say("5. memory vs prompt length")
        mem = pd.DataFrame(bench_memory.run(quick=args.quick))
        mem.to_csv(csv_dir / "memory.csv", index=False)

    parts, headline = [], {}
    counting = pd.read_csv(csv_dir / "sim_counting.csv")
    schedule_csv = csv_dir / "sim_schedule.csv"
    scheduling = pd.read_csv(schedule_csv) if schedule_csv.exists() else None
    for text, figures in (section_pooling(pool), section_policies(pool), section_sim(sim),
                          section_counting(counting), section_schedule(scheduling),
                          section_models(models)):
        parts.append(text)
        headline.update(figures)
    parts.append(section_memory(mem))
    pd.DataFrame([headline]).to_csv(csv_dir / "headline.csv", index=False)
    info_path = csv_dir / "run_info.json"
    if args.render_only and info_path.exists():
        info = json.loads(info_path.read_text())
    else:
        info = {"date": dt.date.today().isoformat(), "seconds": time.perf_counter() - began,
                "machine": machine(), "quick": args.quick}
        info_path.write_text(json.dumps(info, indent=1))
    command = "python -m benchmarks.run_all" + (" --quick" if info["quick"] else "")
    quick_note = " — QUICK run: small sizes, not the reference figures" if info["quick"] else ""
    header = f"""# Benchmark results

Written by `{command}` (or `make bench`) on {info['date']}; measuring took
{info['seconds']:,.0f} s{quick_note}.

Machine: {info['machine']}.

All figures are ratios of things measured side by side in this one run, or exact bytes from the
simulator; absolute times depend on the machine and its load and are given only for context.
CSVs: `benchmarks/results/`. GPU checks (`benchmarks/gpu_checks.sh`) run separately on a CUDA
machine; see `benchmarks/README.md`.
"""
    Path(args.out).write_text("\n".join([header, *parts]))
    say(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
