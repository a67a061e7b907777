"""Check the simulator against a real GPU: the engine loop on CUDA, bytes per step.

What it runs, per workload × retention policy × scheduling mode:

- ONE static hidden-state buffer ``[max_num_batched_tokens, W]`` on the GPU, rewritten every
  step by a fill kernel (the stand-in for the model's forward);
- the core's ``AllPool`` (real ``build_metadata`` with ``PoolingStates``) and head;
- each finished output copied to pinned host memory with ``non_blocking=True`` on a SIDE
  stream that waits for the step's work, while the main stream never waits for the copy;
- under async scheduling, step N+1 is launched before step N's copy is collected, so its fill
  kernel can overwrite the buffer while the copy still reads it (the race PR #50931 fixes).

It compares, per step, the simulator's predicted pooling bytes (``tp.simulate(mode="analytic")``:
``pool_bytes`` at the start and end, ``pool_peak_bytes`` during the step) with the CUDA caching
allocator's ``requested_bytes.all`` (current / peak, minus the buffer and other non-pooling
bytes measured before the loop), and which requests came back corrupted on the GPU versus
predicted. Differences of a few KB are expected: the cursor's index tensors and op temporaries
(STEP's row indices, F.normalize's norms) are real allocations the ledger deliberately ignores.

Usage: ``python benchmarks/cuda_engine_check.py [--out benchmarks/cuda_engine_check.md]``.
Without CUDA it prints "skipped: no CUDA" and exits 0. Takes well under five minutes.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import tokpool as tp  # noqa: E402
from tokpool.sim.scheduler import engine_steps, schedule  # noqa: E402
from tokpool.sim.source import SyntheticSource  # noqa: E402
from tokpool.sim.tensor import make_head, make_pooler  # noqa: E402


@dataclass(frozen=True)
class Workload:
    name: str
    prompt_lens: tuple[int, ...]
    width: int = 4096  # Qwen3-Embedding-8B's hidden size
    budget: int = 8192  # max_num_batched_tokens: a 64 MiB bf16 buffer
    head_dtype: str | None = None


WORKLOADS = (
    Workload("one 20k prompt (3 chunks)", (20_000,)),
    Workload("one 20k prompt, float32 head", (20_000,), head_dtype="float32"),
    Workload("mixed batch", (6_000, 1_500, 9_000, 700, 4_000)),
    Workload("one-shot prompts then a long one", (4_000, 4_000, 12_000)),
)


class CudaEngine:
    """The engine loop with real streams (see the module docstring)."""

    def __init__(self, lens: list[int], config: tp.SimConfig, device: torch.device) -> None:
        self.lens, self.cfg, self.device = lens, config, device
        self.main = torch.cuda.Stream(device)
        self.side = torch.cuda.Stream(device)  # host copies; the main stream never waits on it
        # [max_num_batched_tokens, W]: allocated once, rewritten by every step.
        self.buffer = torch.empty((config.max_num_batched_tokens, config.width),
                                  dtype=config.dtype, device=device)
        self.source = SyntheticSource(config.width, config.dtype)
        self.source.prepare(lens)
        self.source.fill(self.buffer[:1], [(0, 0, 1)])  # caches its column scales on the GPU
        self.pool = make_pooler(config)
        self.head = make_head(config)
        self.states: dict[int, tp.PoolingStates] = {}
        self.pending: list = []  # (request, device tensor, pinned host tensor, copy-done event)
        self.delivered: dict[int, torch.Tensor] = {}

    def _requested(self, key: str) -> int:
        stats = torch.cuda.memory_stats(self.device)
        # Requested bytes are exact tensor sizes; allocated bytes are rounded to 512-byte blocks.
        return int(stats.get(f"requested_bytes.all.{key}", stats[f"allocated_bytes.all.{key}"]))

    def run(self) -> tuple[pd.DataFrame, list[int]]:
        steps = schedule(self.lens, max_num_batched_tokens=self.cfg.max_num_batched_tokens,
                         max_num_seqs=self.cfg.max_num_seqs, enable_chunked_prefill=True)
        torch.cuda.synchronize(self.device)
        baseline = self._requested("current")  # buffer + anything not pooling's
        rows = []
        with torch.cuda.stream(self.main):
            for index, step in engine_steps(steps, async_scheduling=self.cfg.async_scheduling):
                if step is not None:
                    hidden = self.buffer[: step.num_tokens]  # [n_step_tokens, W]
                    self.source.fill(hidden, step.chunks)  # the "forward" writes the buffer
                    for r, start, _ in step.chunks:
                        if start == 0:
                            self.states[r] = tp.PoolingStates()
                self.main.synchronize()  # the fill's temporaries are gone; measure from here
                start_bytes = self._requested("current") - baseline
                torch.cuda.reset_peak_memory_stats(self.device)
                outs = self._pool_and_head(step) if step is not None else []
                # Sync: collect this step's outputs now. Async: collect the previous step's,
                # whose copies may still be running while this step's fill already ran.
                if self.cfg.async_scheduling:
                    self._collect(self.pending)
                    self.pending = self._launch_copies(outs)
                else:
                    self._collect(self._launch_copies(outs))
                self.main.synchronize()
                rows.append({
                    "step": index,
                    "measured_start": start_bytes,
                    "measured_peak": self._requested("peak") - baseline,
                    "measured_end": self._requested("current") - baseline,
                })
        corrupted = self._check()
        return pd.DataFrame(rows), corrupted

    def _pool_and_head(self, step) -> list:
        batch = [r for r, _, _ in step.chunks]
        meta = tp.build_metadata(
            [self.lens[r] for r in batch],
            num_scheduled_tokens=[b - a for _, a, b in step.chunks],
            seq_lens=[b for _, _, b in step.chunks],
            states=[self.states[r] for r in batch],
            device=self.device,
        )
        pooled = self.pool(self.buffer[: step.num_tokens], meta)
        outs = []
        for r, x in zip(batch, pooled, strict=True):
            if x is not None:
                outs.append((r, self.head.forward_one(x, use_activation=False)))
                del self.states[r]
        return outs

    def _launch_copies(self, outs: list) -> list:
        done = torch.cuda.Event()
        done.record(self.main)
        launched = []
        with torch.cuda.stream(self.side):
            self.side.wait_event(done)  # the copy starts after the step's pooling and head
            for r, t in outs:
                host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                host.copy_(t, non_blocking=True)
                event = torch.cuda.Event()
                event.record(self.side)
                launched.append((r, t, host, event))
        outs.clear()  # from now on only the copy holds the device tensors
        return launched

    def _collect(self, launched: list) -> None:
        for r, _, host, event in launched:
            event.synchronize()
            self.delivered[r] = host
        launched.clear()  # device outputs are freed once their copy is done (as simulated)

    def _check(self) -> list[int]:
        bad = []
        for r, host in sorted(self.delivered.items()):
            ref = self.source.reference(r).to(self.device)
            expected = self.head.forward_one(ref, use_activation=False).cpu()
            if not torch.equal(host, expected):
                bad.append(r)
        return bad


def check(workload: Workload, policy: str, async_scheduling: bool, device) -> dict:
    config = tp.SimConfig(
        hidden_size=workload.width, dtype="bfloat16", head_dtype=workload.head_dtype,
        max_num_batched_tokens=workload.budget, policy=policy,
        async_scheduling=async_scheduling,
    )
    lens = list(workload.prompt_lens)
    predicted = tp.simulate(lens, config, mode="analytic")
    engine = CudaEngine(lens, config, device)
    measured, corrupted = engine.run()
    steps = predicted.steps.set_index("step")
    start_pred = steps["pool_bytes"].shift(1, fill_value=0)
    measured = measured.set_index("step")
    diff = pd.DataFrame({
        "start": measured["measured_start"] - start_pred,
        "peak": measured["measured_peak"] - steps["pool_peak_bytes"],
        "end": measured["measured_end"] - steps["pool_bytes"],
    })
    worst = int(diff.abs().to_numpy().max())
    del engine
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return {
        "workload": workload.name,
        "policy": policy,
        "async": async_scheduling,
        "steps": len(steps),
        "predicted_peak_MiB": round(predicted.peak_pooling_bytes / 2**20, 3),
        "measured_peak_MiB": round(float(measured["measured_peak"].max()) / 2**20, 3),
        "max_step_diff_bytes": worst,
        "predicted_corrupted": predicted.corrupted,
        "gpu_corrupted": corrupted,
    }


def _markdown(frame: pd.DataFrame) -> str:
    head = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "cuda_engine_check.md"))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("skipped: no CUDA")
        return 0
    device = torch.device("cuda")
    # Warm up kernels and allocator pools so nothing persistent appears mid-measurement.
    CudaEngine([300, 50], tp.SimConfig(hidden_size=64, max_num_batched_tokens=128), device).run()
    began = time.perf_counter()
    rows = [
        check(w, policy, mode, device)
        for w in WORKLOADS
        for policy in tp.RETENTION_POLICIES
        for mode in (False, True)
    ]
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False))
    elapsed = time.perf_counter() - began
    gpu = torch.cuda.get_device_name(device)
    text = "\n".join([
        "# CUDA engine check",
        "",
        f"GPU: {gpu}; torch {torch.__version__}; {elapsed:.1f} s. Written by "
        "`benchmarks/cuda_engine_check.py`.",
        "",
        "Per run: the simulator's predicted pooling bytes per step (analytic mode) against the "
        "CUDA caching allocator's requested bytes (start / peak / end of each step, minus the "
        "buffer); `max_step_diff_bytes` is the worst step's difference (index tensors and op "
        "temporaries the ledger ignores). `gpu_corrupted` lists requests whose host copy "
        "differed from the reference on the GPU, with a real side-stream copy racing the next "
        "step; `predicted_corrupted` is the simulator's worst-case stream-order answer.",
        "",
        _markdown(table),
        "",
    ])
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
