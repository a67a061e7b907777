"""Run prompts through a real vLLM engine and record what it computed and how it scheduled it.

This file is run as a SCRIPT by the Python that has vLLM (``python _vllm_driver.py IN OUT``),
usually another virtual environment than tokpool's (``make engine``); it imports vLLM, torch and
safetensors only, never tokpool. ``tokpool.engine_check`` writes the request and reads the
answer.

Request (``IN``, JSON)::

    {"model": DIR, "task": "token_embed" | "token_classify",
     "engine": {LLM keyword arguments: max_num_batched_tokens, max_num_seqs, ...},
     "runs": [[[token ids of prompt 0], [token ids of prompt 1], ...], ...]}

One engine is started; each run is one ``LLM.encode`` call (all its prompts are added before its
first step, so they all arrive at step 0). ``Scheduler.schedule`` is wrapped in-process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``): every step that schedules tokens is recorded as
``{prompt index: num_scheduled_tokens}``.

Answer (``OUT``, a directory): ``result.json`` (versions, engine start seconds, KV-cache blocks,
block size, per run the steps and the seconds) and ``outputs.safetensors`` (``"{run}.{prompt}"``:
the per-token output ``[n_tokens, width]``, float32). A failure writes ``error.json``
(``{"kind": ..., "message": ...}``) and exits with status 3.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

#: What the driver sets before vLLM is imported (a caller's own values win).
ENGINE_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # the engine core in this process: schedule wrappable
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # default binding: ~4 ms waits per op on shared cores
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache on a CPU
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
FAILED = 3


def _fail(out: Path, kind: str, message: str) -> int:
    (out / "error.json").write_text(json.dumps({"kind": kind, "message": message}))
    print(f"vllm driver: {kind}: {message}", file=sys.stderr)
    return FAILED


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:1000]


def main(argv: list[str]) -> int:
    request_file, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    request = json.loads(request_file.read_text())
    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    try:
        # imported only now: the engine's environment above must be set first
        import torch
        import vllm
        from safetensors.torch import save_file
        from vllm import LLM
        from vllm.config import PoolerConfig
        from vllm.inputs import TokensPrompt
        from vllm.v1.core.sched.scheduler import Scheduler
    except Exception as err:  # ImportError, or a vLLM build that fails to import
        return _fail(out, "no_vllm", _first_line(err))

    task = request["task"]
    steps: list[dict[str, int]] = []
    order: dict[str, int] = {}
    original = Scheduler.schedule

    def recording_schedule(self, *args, **kwargs):
        for req_id in self.requests:  # insertion order = the order encode added them
            order.setdefault(req_id, len(order))
        result = original(self, *args, **kwargs)
        scheduled = dict(result.num_scheduled_tokens)
        if scheduled:
            steps.append(scheduled)
        return result

    Scheduler.schedule = recording_schedule
    start = time.perf_counter()
    try:
        llm = LLM(model=request["model"], runner="pooling",
                  pooler_config=PoolerConfig(task=task), **request["engine"])
    except Exception as err:
        kind = "unsupported_task" if "Unsupported task" in str(err) else "model_not_loadable"
        return _fail(out, kind, _first_line(err))
    start_s = time.perf_counter() - start
    config = llm.llm_engine.vllm_config
    max_seqs = config.scheduler_config.max_num_seqs
    tensors: dict[str, torch.Tensor] = {}
    runs = []
    for r, prompts in enumerate(request["runs"]):
        if len(prompts) > 2 * max_seqs:  # LLM.encode would add the rest as others finish
            return _fail(out, "bad_request", f"run {r} has {len(prompts)} prompts; at most "
                         f"2 x max_num_seqs = {2 * max_seqs} all arrive at step 0")
        steps.clear()
        order.clear()
        t0 = time.perf_counter()
        try:
            results = llm.encode([TokensPrompt(prompt_token_ids=p) for p in prompts],
                                 pooling_task=task, use_tqdm=False)
        except Exception as err:
            return _fail(out, "encode_failed", _first_line(err))
        seconds = time.perf_counter() - t0
        ids = sorted(order, key=order.get)
        if len(ids) != len(prompts):
            return _fail(out, "bad_schedule", f"run {r}: {len(prompts)} prompts but the "
                         f"scheduler saw {len(ids)} requests")
        index = {req_id: i for i, req_id in enumerate(ids)}
        for i, res in enumerate(results):
            tensors[f"{r}.{i}"] = res.outputs.data.detach().to("cpu", torch.float32).contiguous()
        runs.append({
            "seconds": round(seconds, 3),
            "steps": [{str(index[k]): v for k, v in step.items()} for step in steps],
        })
    save_file(tensors, str(out / "outputs.safetensors"))
    import resource  # Linux: ru_maxrss in KiB

    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cache = config.cache_config
    (out / "result.json").write_text(json.dumps({
        "vllm_version": vllm.__version__, "torch_version": torch.__version__,
        "device": str(config.device_config.device), "start_seconds": round(start_s, 2),
        "num_kv_blocks": cache.num_gpu_blocks, "block_size": cache.block_size,
        "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
        "max_num_seqs": max_seqs,
        "long_prefill_token_threshold": config.scheduler_config.long_prefill_token_threshold,
        "enforce_eager": config.model_config.enforce_eager,
        "peak_rss_mb": round(peak_rss_mb),
        "runs": runs,
    }, indent=1))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except SystemExit:
        raise
    except BaseException:  # a driver bug: the traceback goes to stderr for the caller
        traceback.print_exc()
        sys.exit(1)
