"""Benchmark 5 — memory against prompt length on real model presets (H200 profile).

Exact bytes from the simulator's analytic mode (one request, async scheduling, chunk budget
2048, bf16 hidden states), with two heads: the engines' default (float32 cast + normalise /
softmax) and no head allocation at all (pooling alone). For each preset, head and retention
policy: peak pooling bytes at a few prompt lengths, and the smallest prompt length at which they
exceed 1 GiB and 10% of the card (found by bisection on exact integers).
"""

from __future__ import annotations

import tokpool as tp

GiB = 2**30
HARDWARE = "H200"
CASES = (
    # (preset, task, extra SimConfig fields)
    ("Qwen3-Embedding-8B", "token_embed", {}),
    ("Qwen2.5-Math-PRM-7B", "token_classify", {"step_tag_every": 64}),
    ("math-shepherd-mistral-7b-prm", "token_classify", {"step_tag_every": 64}),
)
POLICIES = ("legacy", "clone", "prealloc", "offload")
HEADS = {
    "float32+activation": {"head_dtype": "float32", "use_activation": True},
    "none": {"head_dtype": None, "use_activation": False},
}
LENGTHS = (32_768, 131_072, 1_048_576)
MAX_TOKENS = 2**34  # beyond any context window: "never" below this


def config(preset: str, task: str, extra: dict, policy: str,
           head: str = "float32+activation") -> tp.SimConfig:
    return tp.SimConfig.for_model(
        preset, task=task, hardware=HARDWARE, max_num_batched_tokens=2048,
        dtype="bfloat16", policy=policy, async_scheduling=True, **HEADS[head], **extra,
    )


def _point(cfg: tp.SimConfig, prompt_len: int):
    # tp.sweep evaluates one request in closed form (no per-step table), so it stays instant
    # for billion-token prompts; tests check it equals simulate(mode="analytic").
    return tp.sweep([prompt_len], cfg, policies=(cfg.policy,),
                    async_scheduling=(cfg.async_scheduling,), progress=False).iloc[0]


def peak(cfg: tp.SimConfig, prompt_len: int) -> int:
    return int(_point(cfg, prompt_len)["peak_pooling_bytes"])


def first_length_above(cfg: tp.SimConfig, limit: int) -> int | None:
    """Smallest prompt length whose peak pooling bytes exceed ``limit`` (None: never)."""
    if peak(cfg, MAX_TOKENS) <= limit:
        return None
    lo, hi = 1, MAX_TOKENS  # peak(lo) may exceed; peak(hi) does
    if peak(cfg, lo) > limit:
        return lo
    while hi - lo > 1:  # invariant: peak(lo) <= limit < peak(hi); peak grows with length
        mid = (lo + hi) // 2
        if peak(cfg, mid) > limit:
            hi = mid
        else:
            lo = mid
    return hi


def run(quick: bool = False) -> list[dict]:
    card = tp.HARDWARE_PRESETS[HARDWARE].hbm_bytes
    rows = []
    for preset, task, extra in CASES:
        for head in HEADS:
            for policy in POLICIES:
                cfg = config(preset, task, extra, policy, head)
                rows.append(_row(cfg, preset, task, head, policy, card))
    return rows


def _row(cfg: tp.SimConfig, preset: str, task: str, head: str, policy: str, card: int) -> dict:
    return {
        "model": preset, "task": task, "pooled_width": cfg.width, "head": head,
        "policy": policy,
        **{f"peak_at_{n // 1024}k": peak(cfg, n) for n in LENGTHS},
        "tokens_to_1GiB": first_length_above(cfg, GiB),
        "tokens_to_10pct_card": first_length_above(cfg, card // 10),
        "corrupted_at_32k": bool(_point(cfg, 32_768)["corrupted"]),
    }


if __name__ == "__main__":
    import pandas as pd

    print(pd.DataFrame(run()).to_string())
