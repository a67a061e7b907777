"""A real vLLM engine on CUDA: the allocator's bytes around the pooler, per step, vs the GPU ledger.

The GPU half of ``tokpool engine-check --memory``. vLLM (a CUDA build, where this runs) serves
SmolLM2-135M ``token_embed`` with Model Runner V2 (vLLM's default on CUDA) and async scheduling
(AllPool clones finished one-shot outputs); the driver (``tokpool/engine/driver.py``,
``memory="cuda"``: ``CudaPoolerRecorder``) reads the CUDA caching allocator's REQUESTED bytes
around every call of the model's pooler, synchronised: the peak inside the call and the net
change, each from the call's start. ``tp.simulate`` (analytic) of the same serve line on the
same GPU preset predicts both per step:

- peak: ``pool_peak_bytes`` minus the step's start (the previous step's ``pool_bytes``);
- net: what is alive after the head minus the start — ``pool_bytes`` plus, under async, the
  previous step's outputs still awaiting their copy (``pool_output_bytes + pool_head_bytes`` of
  the previous step; the ledger frees them only after this step's pooling) minus the start.

Op temporaries (``F.normalize``'s row norms) are in the allocator's peak and not in the
ledger: the peak difference of a step that finished a request is expected to be at most 8 bytes
per finished row; it is reported, not hidden. Usage:
``python benchmarks/cuda_vllm_memory.py [--out FILE] [--python ENGINE_PYTHON] [--dry-run]``;
without CUDA, or with ``--dry-run``, only tokpool's side is computed (no engine starts) and the
script says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import pandas as pd  # noqa: E402

import tokpool as tp  # noqa: E402
from tokpool.engine.compare import random_prompts  # noqa: E402
from tokpool.engine.flags import EngineFlags  # noqa: E402
from tokpool.engine.prepare import engine_model_dir  # noqa: E402
from tokpool.engine.vllm_venv import run_vllm  # noqa: E402

BUDGETS = (256, 2048)  # a captured-graph budget and an eager one
RUNS = ((8192,), (1500, 700, 128, 3000, 40))
MODEL, TASK = "smollm2-135m", "token_embed"


def serve_line(folder: Path, budget: int) -> str:
    """The CUDA engine's line: V2 runner (default), async scheduling, bf16, no prefix cache."""
    return (f"vllm serve {folder} --runner pooling --pooler-config "
            f"'{{\"task\":\"{TASK}\"}}' --max-num-batched-tokens {budget} --max-num-seqs 8 "
            "--max-model-len 8192 --no-enable-prefix-caching --dtype bfloat16 "
            "--async-scheduling")


def gpu_preset(name: str) -> str:
    """The ``tp.HARDWARE_PRESETS`` entry of a CUDA device name (``torch.cuda.get_device_name``).

    Raises:
        ValueError: a GPU tokpool has no preset for.
    """
    for key in sorted(tp.HARDWARE_PRESETS, key=len, reverse=True):
        if key.lower() in name.lower():
            return key
    raise ValueError(f"no tokpool hardware preset matches the GPU {name!r}; presets: "
                     f"{sorted(tp.HARDWARE_PRESETS)}")


def predicted(folder: Path, budget: int, lens, hardware: str) -> pd.DataFrame:
    """Per pooled step: ``peak`` and ``net`` pooling bytes from the step's start (see the
    module docstring)."""
    config = tp.SimConfig.from_vllm_args(serve_line(folder, budget), model=str(folder),
                                         hardware=hardware)
    steps = tp.simulate(list(lens), config, mode="analytic").steps
    start = steps["pool_bytes"].shift(1, fill_value=0)
    pending = (steps["pool_output_bytes"] + steps["pool_head_bytes"]).shift(1, fill_value=0)
    pending = pending if config.async_scheduling else pending * 0
    frame = pd.DataFrame({"peak": steps["pool_peak_bytes"] - start,
                          "net": steps["pool_bytes"] + pending - start})
    return frame[steps["num_scheduled_tokens"] > 0].reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results"
                        / "cuda_vllm_memory.json")
    parser.add_argument("--python", help="the Python with a CUDA build of vLLM")
    parser.add_argument("--dry-run", action="store_true",
                        help="tokpool's side only (H200 preset), no engine")
    args = parser.parse_args(argv)
    import torch

    folder = engine_model_dir(MODEL)
    cuda = torch.cuda.is_available() and not args.dry_run
    hardware = gpu_preset(torch.cuda.get_device_name()) if cuda else "H200"
    began, results = time.perf_counter(), []
    for budget in BUDGETS:
        want = [predicted(folder, budget, lens, hardware) for lens in RUNS]
        if not cuda:
            print(f"dry run (no CUDA engine started): budget {budget}: tokpool predicts "
                  f"{sum(len(w) for w in want)} pooled steps, peak "
                  f"{max(int(w['peak'].max()) for w in want):,} B over a step's start")
            continue
        flags = EngineFlags(max_num_batched_tokens=budget, max_num_seqs=8, max_model_len=8192,
                            dtype="bfloat16")
        # the driver's flags are the CPU engine's; the CUDA engine gets its own: no eager
        kwargs = {**flags.llm_kwargs(), "enforce_eager": False, "async_scheduling": True}
        engine = run_vllm(folder, TASK, [random_prompts(lens, budget) for lens in RUNS],
                          _Flags(kwargs), python=args.python, memory="cuda")
        for r, lens in enumerate(RUNS):
            got = pd.DataFrame(engine.memory[r])
            w = want[r]
            n = min(len(got), len(w))
            results.append({
                "budget": budget, "prompt_lens": list(lens), "steps_engine": len(got),
                "steps_tokpool": len(w),
                "peak_equal": int((got["peak_delta"][:n].to_numpy() == w["peak"][:n]).sum()),
                "net_equal": int((got["net_delta"][:n].to_numpy() == w["net"][:n]).sum()),
                "max_peak_diff": int((got["peak_delta"][:n] - w["peak"][:n]).abs().max()),
                "max_net_diff": int((got["net_delta"][:n] - w["net"][:n]).abs().max()),
            })
            print(results[-1], flush=True)
    if cuda:
        args.out.write_text(json.dumps({
            "gpu": torch.cuda.get_device_name(), "preset": hardware,
            "vllm": engine.info["vllm_version"], "seconds": round(time.perf_counter() - began),
            "runs": results}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


class _Flags:
    """``run_vllm`` takes its ``LLM`` keyword arguments from ``flags.llm_kwargs()``."""

    def __init__(self, kwargs: dict) -> None:
        self._kwargs = kwargs

    def llm_kwargs(self) -> dict:
        return dict(self._kwargs)


if __name__ == "__main__":
    raise SystemExit(main())
