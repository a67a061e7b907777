"""Issue 40's edges against vLLM 0.33.0's running code (parity layer).

- Chunked prefill off + ``long_prefill_token_threshold``: vLLM's own V1 ``Scheduler`` splits
  prompts and preempts; tokpool's scheduler makes the same steps, and ``tp.simulate`` runs
  them in tensor and analytic mode, on either scheduler and as a given schedule, with vLLM's
  own ``AllPool`` (``policy="vllm"``) delivering the same tensors as tokpool's (each split
  request's last chunk alone).
- A config without a model and with ``kv_cache_blocks``: vLLM's start-up KV check
  (``get_kv_cache_configs`` with ``num_gpu_blocks_override``, ``vllm_run.startup``), its
  ``SchedulerConfig``, its input processor and its ``Scheduler`` against ``tp.SimConfig`` +
  ``tp.simulate`` on 1,000 random workloads: the same refusals, the same schedules.
"""

from __future__ import annotations

import random

import pandas as pd
import pytest
import torch
from sweep_sizes import sample_size, scaled

import tokpool as tp
from tokpool.sim.schedule.scheduler import schedule
from tokpool.sim.vllm_run import vllm_scheduler_unavailable_reason

pytestmark = pytest.mark.parity

_reason = vllm_scheduler_unavailable_reason()
if _reason is not None:
    pytest.skip(f"parity skipped: {_reason}", allow_module_level=True)

from tokpool.sim.vllm_run import vllm_schedule  # noqa: E402
from tokpool.sim.vllm_run.startup import (  # noqa: E402
    vllm_prompt_refusal,
    vllm_startup_refusal,
)

# the full sizes run in CI (TOKPOOL_FULL=1); `make test` runs the first part of each stream
NUM_UNCHUNKED_WORKLOADS = sample_size(full=300, sample=100)
NUM_UNCHUNKED_RUNS = 30
NUM_STARTUP_FLAG_SETS = sample_size(full=250, sample=75)
PROMPT_SETS_PER_FLAG_SET = 4  # 1,000 workloads in full; vLLM's engine config is built once a set


def _same(a, b) -> bool:
    return [(s.index, s.chunks, s.finished, sorted(s.preempted), s.kv_blocks, s.cached)
            for s in a] == [(s.index, s.chunks, s.finished, sorted(s.preempted), s.kv_blocks,
                             s.cached) for s in b]


def unchunked_workload(rng: random.Random) -> dict:
    """Chunked prefill off, a threshold under the budget, caches tight enough to preempt."""
    budget = rng.choice((32, 64, 161))
    lens = [rng.randint(1, budget) for _ in range(rng.randint(2, 7))]
    block = rng.choice((8, 16))
    need = [-(-x // block) for x in lens]
    return {"prompt_lens": lens, "max_num_batched_tokens": budget,
            "max_num_seqs": rng.choice((2, 3, 8)), "enable_chunked_prefill": False,
            "long_prefill_token_threshold": rng.choice((8, 24, min(64, budget))),
            "kv_cache_blocks": (rng.randint(max(need) + 1, sum(need) + 2)
                                if rng.random() < 0.85 else None),
            "block_size": block, "async_scheduling": rng.random() < 0.4}


def test_unchunked_threshold_schedules_step_by_step_as_vllm(parity_count):
    rng = random.Random(4001)
    failures, steps, split, preemptions = [], 0, 0, 0
    for w in range(NUM_UNCHUNKED_WORKLOADS):
        kw = unchunked_workload(rng)
        task = rng.choice(("token_embed", "token_classify", "embed"))
        theirs, ours = vllm_schedule(task=task, **kw), schedule(task=task, **kw)
        if not _same(theirs, ours):
            failures.append(f"workload {w}: {kw}")
        steps += len(theirs)
        preemptions += sum(len(s.preempted) for s in theirs)
        split += any(stop - start != kw["prompt_lens"][r] for s in theirs
                     for r, start, stop in s.chunks)
    parity_count("unchunked+threshold workloads (equal schedules)",
                 NUM_UNCHUNKED_WORKLOADS - len(failures))
    parity_count("unchunked+threshold steps compared", steps)
    parity_count("unchunked+threshold preemptions compared", preemptions)
    parity_count("unchunked+threshold differences", len(failures))
    assert not failures, "\n".join(failures[:3])
    assert split >= NUM_UNCHUNKED_WORKLOADS // 2, split
    assert preemptions >= scaled(30, full=300, size=NUM_UNCHUNKED_WORKLOADS), preemptions


def test_unchunked_threshold_runs_in_every_mode_with_vllms_allpool(parity_count):
    """Issue 40's crash (``KeyError`` in the counting backend's ``_preempt``) and its
    neighbours: every mode, both schedulers and the given schedule give the same frames,
    and vLLM's own AllPool delivers the same tensors (torch.equal)."""
    rng = random.Random(4002)
    preempted_and_short = 0
    issue = {"prompt_lens": [99, 89, 6, 119, 91, 44], "max_num_batched_tokens": 161,
             "max_num_seqs": 2, "enable_chunked_prefill": False,
             "long_prefill_token_threshold": 64, "kv_cache_blocks": 12, "block_size": 16,
             "async_scheduling": False, "max_model_len": 161}
    for w in range(NUM_UNCHUNKED_RUNS + 1):
        kw = issue.copy() if w == 0 else unchunked_workload(rng)
        lens = kw.pop("prompt_lens")
        task = "token_embed" if w == 0 else rng.choice(("token_embed", "token_classify"))
        cfg = tp.SimConfig(hidden_size=3, task=task, dtype="float32",
                           **({"num_labels": 2} if task == "token_classify" else {}), **kw)
        runs = {(mode, s): tp.simulate(lens, cfg, mode=mode, scheduler=s)
                for mode in ("tensor", "analytic") for s in ("tokpool", "vllm")}
        runs["given"] = tp.simulate(lens, cfg, mode="analytic",
                                    schedule=runs["analytic", "vllm"].schedule)
        vllm_pool = tp.simulate(lens, cfg.replace(policy="vllm"), mode="tensor",
                                scheduler="vllm")
        first = runs["tensor", "tokpool"]
        for run in runs.values():
            pd.testing.assert_frame_equal(first.steps, run.steps)
            pd.testing.assert_frame_equal(first.requests, run.requests)
            pd.testing.assert_frame_equal(first.chunks, run.chunks)
            assert first.corrupted == run.corrupted
        assert vllm_pool.corrupted == first.corrupted
        for ours, theirs in zip(first.outputs, vllm_pool.outputs, strict=True):
            assert torch.equal(ours, theirs)
            parity_count("unchunked+threshold outputs vs vLLM's AllPool (torch.equal)")
        req = first.requests
        short = req[req["delivered_rows"] < req["prompt_len"]]
        assert sorted(short["request"]) == first.corrupted  # short = corrupted, said why
        for r in short["request"]:
            assert "only its last chunk" in first.explain()[r]
        preempted_and_short += bool(len(short)) and int(req["num_preemptions"].sum()) > 0
        parity_count("unchunked+threshold simulate runs (6 paths, equal frames)")
    assert preempted_and_short >= 2, preempted_and_short  # the issue's workload and more


# --- start-up: a config without a model ------------------------------------------------------


def _flag_set(rng: random.Random) -> dict:
    chunked = rng.random() < 0.7
    budget = rng.choice((16, 32, 64, 128, 256))
    block = rng.choice((16, 16, 8, 32))
    mml = (rng.choice((64, 128, 256, 512)) if chunked
           else rng.choice((budget, budget, budget // 2, 2 * budget)))
    threshold = rng.choice((None, None, 8, 24, 50))
    if threshold and threshold > mml and rng.random() < 0.8:
        threshold = None  # sometimes left above max_model_len: both refuse
    one = -(-mml // block)  # blocks of one max_model_len request
    blocks = rng.choice((None, one + 1, one + 1, one, one - 1, rng.randint(one + 1, 3 * one)))
    return {"max_model_len": mml, "max_num_batched_tokens": budget,
            "max_num_seqs": min(budget, rng.choice((1, 2, 4, 8, 256))),
            "enable_chunked_prefill": chunked, "long_prefill_token_threshold": threshold,
            "kv_cache_blocks": None if blocks is None else max(2, blocks),
            "block_size": block, "async_scheduling": rng.random() < 0.4}


def _tokpool(flags: dict, lens: list[int], task: str):
    labels = {"num_labels": 2} if "classify" in task else {}
    try:
        cfg = tp.SimConfig(hidden_size=4, task=task, enable_prefix_caching=False, **labels,
                           **flags)
    except ValueError as err:
        return "start", err
    try:
        return "ran", tp.simulate(lens, cfg, mode="analytic").schedule
    except ValueError as err:
        return "request", err


def _vllm(flags: dict, lens: list[int], task: str):
    why = vllm_startup_refusal(**flags)
    if why is not None:
        return "start", why
    engine = {k: v for k, v in flags.items() if k != "kv_cache_blocks"}
    why = vllm_prompt_refusal(lens, **engine)
    if why is not None:
        return "request", why
    try:
        return "ran", vllm_schedule(lens, task=task, **flags)
    except ValueError as err:
        return "request", err


def test_the_issue_config_is_refused_as_vllm_refuses_to_start():
    flags = {"max_model_len": 1024, "block_size": 16, "kv_cache_blocks": 61,
             "max_num_batched_tokens": 2048, "max_num_seqs": 4, "enable_chunked_prefill": True}
    assert "estimated maximum model length is 960" in vllm_startup_refusal(**flags)
    with pytest.raises(ValueError, match="estimated maximum model length is 960"):
        tp.SimConfig(max_model_len=1024, block_size=16, kv_cache_blocks=61, hidden_size=16)
    assert vllm_startup_refusal(**{**flags, "kv_cache_blocks": 65}) is None
    tp.SimConfig(max_model_len=1024, block_size=16, kv_cache_blocks=65, hidden_size=16)


def test_model_less_configs_start_and_schedule_as_vllm(parity_count):
    rng = random.Random(4003)
    failures, kinds, steps, kv_refusals = [], {}, 0, 0
    for f in range(NUM_STARTUP_FLAG_SETS):
        flags = _flag_set(rng)
        for _ in range(PROMPT_SETS_PER_FLAG_SET):
            mml = flags["max_model_len"]
            lens = [rng.randint(1, mml) if rng.random() < 0.8 else rng.randint(1, 20)
                    for _ in range(rng.randint(1, 6))]
            task = rng.choice(("token_embed", "embed", "token_classify", "classify"))
            ours, theirs = _tokpool(flags, lens, task), _vllm(flags, lens, task)
            kinds[ours[0], theirs[0]] = kinds.get((ours[0], theirs[0]), 0) + 1
            if ours[0] != theirs[0] or (ours[0] == "ran" and not _same(ours[1], theirs[1])):
                failures.append(f"flags {f} {flags}, {lens} {task}:\n tokpool {ours}\n "
                                f"vLLM {theirs}")
            elif ours[0] == "ran":
                steps += len(ours[1])
            kv_refusals += theirs[0] == "start" and "KV cache" in str(theirs[1])
    total = NUM_STARTUP_FLAG_SETS * PROMPT_SETS_PER_FLAG_SET
    parity_count("model-less workloads (same start-up, refusals, schedules)",
                 total - len(failures))
    parity_count("model-less steps compared", steps)
    parity_count("model-less workloads vLLM's KV check refuses at start-up", kv_refusals)
    parity_count("model-less differences", len(failures))
    assert not failures, f"{len(failures)} of {total} differ:\n" + "\n".join(failures[:3])
    # each outcome is exercised (a layer that cannot fail would not reach them)
    assert kinds.get(("ran", "ran"), 0) >= scaled(300, full=1000, size=total), kinds
    assert kv_refusals >= scaled(100, full=1000, size=total), kv_refusals
    assert kinds.get(("request", "request"), 0) >= scaled(5, full=1000, size=total), kinds


# --- a kv_lora_rank key on a model vLLM builds without MLA -----------------------------------


def test_a_llama_with_kv_lora_rank_caches_k_and_v_as_vllm_builds_it(tmp_path, parity_count):
    """vLLM's ``LlamaForCausalLM`` reads no ``kv_lora_rank``: its layers' KV spec (built on the
    meta device) is a Llama's, and tokpool's spec of the same folder is the same, layer by
    layer (``architectures.uses_mla`` follows ``ModelConfig.use_mla``)."""
    import json

    from tokpool.sim.vllm_rules.hf_config import preset_from_hf_config
    from tokpool.sim.vllm_rules.kv_cache import kv_cache_spec
    from tokpool.sim.vllm_run.kv_spec import vllm_kv_cache_facts

    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 512,
           "torch_dtype": "float32", "kv_lora_rank": 512}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    case = {"available_bytes": 1 << 24, "max_model_len": 512, "max_num_batched_tokens": 512}
    theirs = vllm_kv_cache_facts(tmp_path, [case], block_size=16)[0]
    spec = kv_cache_spec(preset_from_hf_config(tmp_path), block_size=16)
    ours = [(x.sliding_window, x.num_kv_heads, x.page_size_bytes(16)) for x in spec.layers]
    assert theirs["error"] is None and ours == theirs["layers"]
    assert theirs["num_blocks"] == spec.num_blocks(case["available_bytes"])
    parity_count("kv_lora_rank on a Llama: layers equal to vLLM's", len(ours))
