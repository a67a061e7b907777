"""Benchmark 3c — the cost of ``scheduler="vllm"``: vLLM's own scheduler against tokpool's.

The same workloads go through ``tokpool.sim.schedule.scheduler.schedule`` and
``tokpool.sim.vllm_run.vllm_schedule`` (vLLM 0.33.0's V1 ``Scheduler`` + ``KVCacheManager``
driven on the CPU with fake model outputs), interleaved, best of ``repeats`` each; both give
the same steps (checked here too). The engine config vLLM builds once per flag set is warmed
before timing and its first build is reported apart. Also ``tp.simulate(mode="analytic")``
end to end with each scheduler, to show what the choice costs a whole simulation.
"""

from __future__ import annotations

import random
import time

import tokpool as tp
from tokpool.sim.schedule.scheduler import schedule


def workloads(quick: bool = False) -> list[tuple[str, list[int], dict]]:
    """(name, prompt lengths, scheduler flags): a serving-sized batch, with KV pressure, async."""
    rng = random.Random(3)
    n = 64 if quick else 256
    mixed = [rng.choice((rng.randint(16, 512), rng.randint(512, 8192))) for _ in range(n)]
    base = {"max_num_batched_tokens": 2048, "max_num_seqs": 256, "enable_chunked_prefill": True}
    need = sum(-(-x // 16) for x in mixed)
    shared = [rng.randint(0, 999) for _ in range(8192)]
    return [
        ("chunked, budget 2048", mixed, base),
        ("+ threshold 512, async", mixed,
         base | {"long_prefill_token_threshold": 512, "async_scheduling": True}),
        ("+ KV cache 1/8 of the batch", mixed,
         base | {"long_prefill_token_threshold": 512, "kv_cache_blocks": need // 8}),
        ("no chunking, budget 8192", mixed,
         base | {"enable_chunked_prefill": False, "max_num_batched_tokens": 8192}),
        ("short prompts, budget 256", [rng.randint(1, 64) for _ in range(4 * n)],
         base | {"max_num_batched_tokens": 256}),
        # prefix caching (vLLM's default for causal poolers): embed prompts sharing a prefix
        ("+ prefix caching, embed, shared prefixes", mixed,
         base | {"long_prefill_token_threshold": 512, "kv_cache_blocks": need // 8,
                 "enable_prefix_caching": True, "task": "embed",
                 "prompt_token_ids": [shared[: x // 2] + list(range(1000, 1000 + x - x // 2))
                                      for x in mixed]}),
        ("+ sliding window 1024 (hybrid groups)", mixed,
         base | {"long_prefill_token_threshold": 512, "kv_cache_blocks": need // 8,
                 "kv_cache_groups": (1024, None), "max_model_len": 8192}),
    ]


def _timed(fn, *args, **kwargs) -> float:
    t0 = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - t0


def run(quick: bool = False) -> list[dict]:
    from tokpool.sim.vllm_run import vllm_schedule, vllm_scheduler_unavailable_reason

    reason = vllm_scheduler_unavailable_reason()
    if reason is not None:
        return [{"workload": f"skipped: {reason}"}]
    repeats = 2 if quick else 3
    rows = []
    for name, lens, flags in workloads(quick):
        t0 = time.perf_counter()
        theirs = vllm_schedule(lens, **flags)  # builds (and caches) the engine config
        first = time.perf_counter() - t0
        ours = schedule(lens, **flags)
        assert theirs == ours, f"{name}: schedules differ (run tests/test_parity_schedule.py)"
        t_tok = t_vllm = float("inf")
        for _ in range(repeats):  # interleaved: the machine's load hits both alike
            t_tok = min(t_tok, _timed(schedule, lens, **flags))
            t_vllm = min(t_vllm, _timed(vllm_schedule, lens, **flags))
        steps = len(ours)
        rows.append({
            "workload": name, "requests": len(lens), "steps": steps,
            "preemptions": sum(len(s.preempted) for s in ours),
            "tokpool_ms": 1e3 * t_tok, "vllm_ms": 1e3 * t_vllm,
            "vllm_ms_per_1k_steps": 1e6 * t_vllm / steps,
            "ratio": t_vllm / t_tok, "vllm_first_call_s": first,
        })
    # a whole analytic simulation with each scheduler
    name, lens, flags = workloads(quick)[1]
    config = tp.SimConfig(hidden_size=1024, max_num_batched_tokens=flags["max_num_batched_tokens"],
                          long_prefill_token_threshold=flags["long_prefill_token_threshold"],
                          async_scheduling=True)
    t_tok = t_vllm = float("inf")
    for _ in range(repeats):
        t_tok = min(t_tok, _timed(tp.simulate, lens, config, mode="analytic"))
        t_vllm = min(t_vllm, _timed(tp.simulate, lens, config, mode="analytic",
                                    scheduler="vllm"))
    steps = len(tp.simulate(lens, config, mode="analytic").schedule)
    rows.append({
        "workload": f"tp.simulate(analytic): {name}", "requests": len(lens), "steps": steps,
        "preemptions": 0, "tokpool_ms": 1e3 * t_tok, "vllm_ms": 1e3 * t_vllm,
        "vllm_ms_per_1k_steps": 1e6 * t_vllm / steps, "ratio": t_vllm / t_tok,
        "vllm_first_call_s": float("nan"),
    })
    return rows
