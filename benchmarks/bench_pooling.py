"""Benchmark 1 — AllPool per retention policy against its copy bound.

For one request of T tokens prefilled in chunks of C, each policy must move some bytes:
``clone`` clones every unfinished chunk and concatenates at the finish, ``prealloc`` copies
each chunk once into a preallocated buffer, ``offload`` copies each chunk to host memory,
``legacy`` only concatenates. The *copy bound* runs exactly those copies with bare torch calls
(``clone`` / ``copy_`` / ``cat`` on the same tensors, no pooling code around them): the
memory-bandwidth cost no implementation of the policy can avoid. The ratio AllPool / bound is
what tokpool's bookkeeping (metadata checks, splitting, state handling) adds on top.

Both sides run interleaved in one process on the same tensors. The ratio uses the best of N
runs of each side: on a shared virtual machine, noise only ever adds time, and first-touch page
faults of gigabyte allocations alone swing a run by 2-4x (medians are kept in the CSV).
Async scheduling is on, so a one-shot request (T ≤ C) must be cloned too and every policy has a
non-zero bound.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

import tokpool as tp

POLICIES = ("clone", "prealloc", "offload", "legacy")


@dataclass(frozen=True)
class Case:
    prompt_len: int
    width: int
    dtype: torch.dtype
    chunk: int = 2048

    @property
    def steps(self) -> list[tuple[int, int]]:
        """(tokens scheduled, seq_len after the step) per step."""
        out, done = [], 0
        while done < self.prompt_len:
            n = min(self.chunk, self.prompt_len - done)
            done += n
            out.append((n, done))
        return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _pool_run(case: Case, policy: str, buffer: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Seconds spent inside AllPool over the whole prompt, and the output."""
    pool = tp.AllPool(async_scheduling=True, policy=policy)
    states = None
    elapsed = 0.0
    out = None
    for n, seq in case.steps:
        meta = tp.build_metadata([case.prompt_len], num_scheduled_tokens=[n], seq_lens=[seq],
                                 states=states)
        states = meta.pooling_states
        rows = buffer[:n]
        _sync(buffer.device)
        t0 = time.perf_counter()
        (out,) = pool(rows, meta)
        _sync(buffer.device)
        elapsed += time.perf_counter() - t0
    return elapsed, out


def _bound_run(case: Case, policy: str, buffer: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Seconds for the bare copies the policy must make, on the same tensors."""
    steps = case.steps
    elapsed = 0.0
    if len(steps) == 1:  # one-shot under async: one clone (offload: one host copy)
        if policy == "legacy":  # legacy hands out the view: nothing to copy
            return 0.0, buffer[: steps[0][0]]
        _sync(buffer.device)
        t0 = time.perf_counter()
        if policy == "offload":
            out = _host_like(buffer, steps[0][0]).copy_(buffer[: steps[0][0]])
        else:
            out = buffer[: steps[0][0]].clone()
        _sync(buffer.device)
        return time.perf_counter() - t0, out
    kept: list[torch.Tensor] = []
    dst = None
    for i, (n, seq) in enumerate(steps):
        rows = buffer[:n]
        last = i == len(steps) - 1
        _sync(buffer.device)
        t0 = time.perf_counter()
        if policy == "clone":
            kept.append(rows if last else rows.clone())
            if last:
                dst = torch.cat(kept)
        elif policy in ("prealloc", "offload"):
            if dst is None:
                dst = (_host_like(buffer, case.prompt_len) if policy == "offload"
                       else buffer.new_empty((case.prompt_len, case.width)))
            dst[seq - n : seq].copy_(rows)
        else:  # legacy keeps views and only concatenates
            kept.append(rows)
            if last:
                dst = torch.cat(kept)
        _sync(buffer.device)
        elapsed += time.perf_counter() - t0
    return elapsed, dst


def _host_like(buffer: torch.Tensor, rows: int) -> torch.Tensor:
    """The host tensor ``offload`` copies into (pinned when the buffer is on a GPU)."""
    return torch.empty((rows, buffer.shape[1]), dtype=buffer.dtype,
                       pin_memory=buffer.is_cuda)


def copy_bytes(case: Case, policy: str) -> int:
    """Device bytes the policy copies for this request (what the bound moves)."""
    row = case.width * torch.empty((), dtype=case.dtype).element_size()
    steps = case.steps
    if len(steps) == 1:
        return 0 if policy == "legacy" else case.prompt_len * row
    last = steps[-1][0]
    if policy == "clone":
        return (case.prompt_len - last) * row + case.prompt_len * row
    if policy == "legacy":
        return case.prompt_len * row
    return case.prompt_len * row


def _repeats(case: Case) -> int:
    total = case.prompt_len * case.width * torch.empty((), dtype=case.dtype).element_size()
    if total >= 512 * 2**20:
        return 7
    if total >= 64 * 2**20:
        return 9
    return 25


def measure(case: Case, policy: str, *, repeats: int | None = None,
            device: str = "cpu") -> dict:
    """Best-of-N (and median) AllPool and bound times, interleaved run by run."""
    # the reused hidden-state buffer [chunk, width]
    buffer = torch.randn((case.chunk, case.width), device=device).to(case.dtype)
    runs: dict[str, list[float]] = {"pool": [], "bound": []}
    sides: dict[str, Callable] = {"pool": _pool_run, "bound": _bound_run}
    for _ in range(repeats or _repeats(case)):
        for side, fn in sides.items():
            gc.collect()
            seconds, out = fn(case, policy, buffer)
            runs[side].append(seconds)
            del out
    pool_s, bound_s = min(runs["pool"]), min(runs["bound"])
    pool_med, bound_med = statistics.median(runs["pool"]), statistics.median(runs["bound"])
    return {
        "device": torch.device(device).type,
        "prompt_len": case.prompt_len,
        "width": case.width,
        "dtype": str(case.dtype).removeprefix("torch."),
        "policy": policy,
        "steps": len(case.steps),
        "copy_bytes": copy_bytes(case, policy),
        "allpool_ms": pool_s * 1e3,
        "bound_ms": bound_s * 1e3,
        "ratio": pool_s / bound_s if bound_s else float("nan"),
        "median_ratio": pool_med / bound_med if bound_med else float("nan"),
        "repeats": len(runs["pool"]),
        "allpool_GBps": copy_bytes(case, policy) / pool_s / 1e9 if pool_s else float("nan"),
    }


def cases(quick: bool = False) -> list[Case]:
    lengths = (1024, 8192) if quick else (1024, 8192, 32768, 131072)
    widths = (1024,) if quick else (1024, 4096)
    return [
        Case(t, w, d)
        for d in (torch.float32, torch.bfloat16)
        for w in widths
        for t in lengths
    ]


def run(quick: bool = False, progress: Callable[[str], None] | None = None, *,
        device: str = "cpu", repeats: int | None = None) -> list[dict]:
    """All cases × policies; one row each."""
    torch.manual_seed(0)
    rows = []
    for case in cases(quick):
        for policy in POLICIES:
            if progress:
                progress(f"pooling T={case.prompt_len} W={case.width} {case.dtype} {policy}")
            rows.append(measure(case, policy, repeats=repeats or (3 if quick else None),
                                device=device))
    return rows


if __name__ == "__main__":
    import argparse

    import pandas as pd

    parser = argparse.ArgumentParser(description="AllPool per policy vs its copy bound")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--csv")
    args = parser.parse_args()
    df = pd.DataFrame(run(quick=args.quick, progress=print, device=args.device,
                          repeats=args.repeats))
    print(df.to_string(float_format=lambda x: f"{x:.3g}"))
    if args.csv:
        df.to_csv(args.csv, index=False)
