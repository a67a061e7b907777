"""The kinds issue 29 lists, area by area, as hostile cases (each also a named test in
``tests/test_bad_input_round3.py``)."""

from __future__ import annotations

import math
import os

import numpy as np

import tokpool as tp
from tokpool.sim import ScheduledStep
from tokpool.sim.vllm_rules import kv_cache
from tokpool.widgets.view import View

from .runner import Case
from .world import World

QWEN = "vllm serve Qwen/Qwen3-Embedding-8B"


def refuse(area, name, call, *names, time_cap=None) -> Case:
    case = Case(area, name, call, names=names, expect="error")
    if time_cap:
        case.time_cap = time_cap
    return case


def answer(area, name, call, check, *, time_cap=None) -> Case:
    case = Case(area, name, call, expect="answer", check=check)
    if time_cap:
        case.time_cap = time_cap
    return case


def either(area, name, call, check, *names) -> Case:
    return Case(area, name, call, names=names, expect="either", check=check)


def cli(area, name, argv, *names, ok=None) -> Case:
    """A CLI case: one line on stderr and status 2 naming ``names``, or (``ok``) status 0."""
    from .surface import run_cli

    return Case(area, name, lambda: run_cli(argv, names), names=(),
                expect="answer" if ok else "either", check=ok or (lambda r: r is True))


def with_env(env: dict[str, str], call):
    def run():
        os.environ.update(env)
        return call()
    return run


def _step(index, chunks, finished=None, lens=None, **kw):
    if finished is None:
        finished = tuple(r for r, _, stop in chunks if stop == lens[r])
    return ScheduledStep(index, tuple(chunks), tuple(finished), **kw)


def round2_leftovers(w: World) -> list[Case]:
    a = "round-2 leftovers"
    out = [
        refuse(a, "serve line with an unbalanced quote",
               lambda: tp.SimConfig.from_vllm_args(f"{QWEN} --max-model-len '32k"),
               "quotation", "--max-model-len '32k"),
        answer(a, "serve line with a trailing backslash (bash: a continuation into nothing)",
               lambda: tp.SimConfig.from_vllm_args(f"{QWEN} -tp 4 \\"),
               lambda c: c == tp.SimConfig.from_vllm_args(f"{QWEN} -tp 4")),
        refuse(a, "serve line as a list with a quote inside a flag is still checked",
               lambda: tp.SimConfig.from_vllm_args(["vllm", "serve", "Qwen/Qwen3-Embedding-8B",
                                                   "--max-model-len", "'32k"]),
               "--max-model-len"),
        cli(a, "CLI --vllm-args with an unbalanced quote",
            ["simulate", "--prompt-lens", "1000", "--vllm-args", f"{QWEN} --max-model-len '8k"],
            "quotation"),
        cli(a, "CLI --vllm-args with a trailing backslash (bash: a continuation)",
            ["simulate", "--prompt-lens", "1000", "--vllm-args", f"{QWEN} \\"],
            ok=lambda r: r is True),
        refuse(a, "both budget flags at 10^30",
               lambda: tp.SimConfig.from_vllm_args(
                   f"{QWEN} --max-num-batched-tokens {10**30} --max-num-seqs {10**30}"),
               "--max-num-batched-tokens", "2,147,483,647"),
        refuse(a, "budget flag at 10^30 with the KV cache sized",
               lambda: tp.SimConfig.from_vllm_args(f"{QWEN} --max-num-batched-tokens {10**30}"),
               "--max-num-batched-tokens"),
        refuse(a, "max_num_seqs flag at 10^30",
               lambda: tp.SimConfig.from_vllm_args(f"{QWEN} --max-num-seqs {10**30}"),
               "--max-num-seqs"),
        refuse(a, "max_model_len flag at 10^30 (long context allowed)",
               lambda: tp.SimConfig.from_vllm_args(
                   f"VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 {QWEN} --max-model-len {10**30}"),
               "--max-model-len"),
        cli(a, "CLI both budget flags at 10^30",
            ["simulate", "--prompt-lens", "1000", "--vllm-args",
             f"{QWEN} --max-num-batched-tokens {10**30} --max-num-seqs {10**30}"],
            "--max-num-batched-tokens"),
    ]
    for folder in ("huge_positions", "positions_2_31"):
        path = w.files[f"{folder}/config.json"]
        out.append(either(
            a, f"pooling_takes_kv_from with max_position_embeddings of {folder}",
            lambda path=path: _takes_kv_from(path), _takes_kv_from_is_right,
            "max_model_len"))
        out.append(either(
            a, f"KV share of a model with {folder} (simulate one prompt)",
            lambda path=path: tp.simulate([4096], tp.SimConfig.from_hf_config(
                path, gpu_memory_utilization=0.9), mode="analytic").peak_pooling_bytes,
            lambda v: isinstance(v, int) and v > 0, "max_model_len"))
    layers = w.files["layers_2_31/config.json"]
    out += [
        either(a, "2^31 layers from a config.json",
               lambda: tp.SimConfig.from_hf_config(layers).model.num_layers,
               lambda n: n == 2**31, "num_hidden_layers"),
        # the KV cache is specified layer by layer (issue 27): refused up front with the size
        either(a, "2^31 layers over 2^30 pipeline stages (2 layers a stage)",
               lambda: tp.SimConfig.from_hf_config(layers, pipeline_parallel_size=2**30,
                                                   max_model_len=4096).kv_bytes_per_token,
               lambda n: n == 2 * 2 * 8 * 128 * 2 or f"{n} KV bytes per token",
               "num_hidden_layers"),
        refuse(a, "huge data-parallel split",
               lambda: kv_cache.data_parallel_split(10**9, 10**9), "dp"),
        refuse(a, "huge data-parallel split of few requests",
               lambda: kv_cache.data_parallel_split(3, 10**12), "dp"),
        refuse(a, "SimConfig data_parallel_size 10^12 in a simulation",
               lambda: tp.simulate([100], tp.SimConfig(hidden_size=8,
                                                       data_parallel_size=10**12),
                                   mode="analytic"), "data_parallel_size"),
        refuse(a, "CLI-sized pipeline split of 2^31 layers",
               lambda: kv_cache.pipeline_layers(2**31, 2**31 - 1), "num_layers"),
        answer(a, "the fullest stage of 2^31 layers over 2^31 - 1 stages",
               lambda: kv_cache.fullest_stage_layers(2**31, 2**31 - 1), lambda n: n == 2),
    ]
    for name in ("empty", "short_length", "huge_header_length", "bad_json", "bad_offsets",
                 "no_tensors", "not_a_probe"):
        path = w.files[f"{name}.safetensors"]
        out.append(refuse(a, f"damaged PRM file: {name}", lambda path=path: tp.load_prm(path),
                          path.name))
    prm = w.prm
    out += [
        refuse(a, "score_records with a record missing 'completions'",
               lambda: prm.score_records([{"prompt": "2 + 2?"}]), "completions", "record 0"),
        refuse(a, "score_records with a record missing 'prompt'",
               lambda: prm.score_records([{"completions": ["4"]}]), "prompt"),
        refuse(a, "score_records with a record that is a string",
               lambda: prm.score_records(["2 + 2?"]), "record 0"),
        refuse(a, "score_records with records that are one dict",
               lambda: prm.score_records({"prompt": "x", "completions": ["4"]}), "records"),
        refuse(a, "score(None, steps)", lambda: prm.score(None, ["4"]), "problem"),
        refuse(a, "score(problem, None)", lambda: prm.score("2 + 2?", None), "steps"),
        refuse(a, "score(problem, a string of steps)", lambda: prm.score("2 + 2?", "4. 5."),
               "steps"),
        refuse(a, "score(problem, steps with None)", lambda: prm.score("2 + 2?", ["4", None]),
               "steps"),
        refuse(a, "score with a NaN threshold", lambda: prm.score("2+2?", ["4"],
                                                                  threshold=float("nan")),
               "threshold"),
        refuse(a, "score with a string threshold", lambda: prm.score("2+2?", ["4"],
                                                                     threshold="0.5"),
               "threshold"),
    ]
    return out


def _takes_kv_from(path):
    from tokpool.sim import pooling_takes_kv_from

    return pooling_takes_kv_from(tp.SimConfig.from_hf_config(path)), path


def _takes_kv_from_is_right(value) -> bool | str:
    from tokpool.sim.backends.closed_form import single_request

    found, path = value
    cfg = tp.SimConfig.from_hf_config(path)
    reserve = cfg.estimated_activation_peak_bytes
    if found is None:
        peak = single_request(np.array([cfg.max_model_len]), cfg)["peak_pooling_bytes"][0]
        return True if peak <= reserve else f"None, but the longest prompt peaks at {peak}"
    peaks = single_request(np.array([found - 1, found]), cfg)["peak_pooling_bytes"]
    return True if peaks[0] <= reserve < peaks[1] else f"{found}: peaks {peaks} vs {reserve}"


def given_schedules(w: World) -> list[Case]:
    a = "given schedules"
    two = [20, 20]

    def run(plan, lens=two, **cfg):
        config = tp.SimConfig(hidden_size=8, **({"max_num_batched_tokens": 64,
                                                 "max_num_seqs": 8} | cfg))
        return tp.simulate(lens, config, mode="analytic", schedule=plan)

    whole = [_step(0, [(0, 0, 20), (1, 0, 20)], lens=two)]
    return [
        refuse(a, "more KV blocks than the cache holds",
               lambda: run(whole, kv_cache_blocks=4), "kv_cache_blocks", "step 0"),
        refuse(a, "more KV blocks than the cache, spread over steps",
               lambda: run([_step(0, [(0, 0, 16)], lens=two),
                            _step(1, [(0, 16, 20), (1, 0, 16)], lens=two),
                            _step(2, [(1, 16, 20)], lens=two)], kv_cache_blocks=4),
               "kv_cache_blocks"),
        refuse(a, "a request admitted whose whole prompt the free blocks cannot hold",
               lambda: run([_step(0, [(0, 0, 8), (1, 0, 8)], lens=two),
                            _step(1, [(0, 8, 20)], lens=two), _step(2, [(1, 8, 20)], lens=two)],
                           kv_cache_blocks=3, max_num_batched_tokens=16),
               "kv_cache_blocks"),
        refuse(a, "more running requests than max_num_seqs",
               lambda: run(whole, max_num_seqs=1), "max_num_seqs", "step 0"),
        refuse(a, "more running requests than max_num_seqs across steps",
               lambda: run([_step(0, [(0, 0, 10)], lens=two),
                            _step(1, [(0, 10, 20), (1, 0, 20)], lens=two)], max_num_seqs=1),
               "max_num_seqs", "step 1"),
        refuse(a, "a chunk over the long-prefill threshold with another request running",
               lambda: run(whole, long_prefill_token_threshold=8),
               "long_prefill_token_threshold"),
        answer(a, "a lone request over the threshold (vLLM lifts the cap)",
               lambda: run([_step(0, [(0, 0, 20)], lens=[20])], lens=[20],
                           long_prefill_token_threshold=8).summary()["num_steps"],
               lambda n: n == 1),
        refuse(a, "float chunk bounds",
               lambda: run([_step(0, [(0, 0.0, 20.0), (1, 0, 20)], (0, 1))]), "chunk",
               "whole"),
        refuse(a, "bool chunk bounds", lambda: run([_step(0, [(0, False, 20), (1, 0, 20)],
                                                          (0, 1))]), "chunk"),
        refuse(a, "a chunk with two numbers",
               lambda: run([ScheduledStep(0, ((0, 20), (1, 0, 20)), (0, 1))]), "chunk"),
        refuse(a, "a chunk with four numbers",
               lambda: run([ScheduledStep(0, ((0, 0, 20, 1), (1, 0, 20)), (0, 1))]), "chunk"),
        refuse(a, "chunks that are None", lambda: run([ScheduledStep(0, None, ())]), "chunks"),
        refuse(a, "chunks that are a string", lambda: run([ScheduledStep(0, "abc", ())]),
               "chunks"),
        refuse(a, "a chunk that is a number", lambda: run([ScheduledStep(0, (5,), ())]),
               "chunk"),
        refuse(a, "a string request index",
               lambda: run([ScheduledStep(0, (("0", 0, 20), (1, 0, 20)), (0, 1))]), "chunk"),
        refuse(a, "finished that is None",
               lambda: run([ScheduledStep(0, ((0, 0, 20), (1, 0, 20)), None)]), "finished"),
        refuse(a, "finished that is an int",
               lambda: run([ScheduledStep(0, ((0, 0, 20), (1, 0, 20)), 0)]), "finished"),
        refuse(a, "finished with strings",
               lambda: run([ScheduledStep(0, ((0, 0, 20), (1, 0, 20)), ("0", "1"))]),
               "finished"),
        refuse(a, "finished with floats",
               lambda: run([ScheduledStep(0, ((0, 0, 20), (1, 0, 20)), (0.0, 1.0))]),
               "finished"),
        refuse(a, "preempted that is None",
               lambda: run([ScheduledStep(0, ((0, 0, 20), (1, 0, 20)), (0, 1), None)]),
               "preempted"),
        refuse(a, "a string step index",
               lambda: run([ScheduledStep("0", ((0, 0, 20), (1, 0, 20)), (0, 1))]), "index"),
        refuse(a, "a float step index",
               lambda: run([ScheduledStep(0.5, ((0, 0, 20), (1, 0, 20)), (0, 1))]), "index"),
        refuse(a, "negative kv_blocks",
               lambda: run([ScheduledStep(0, ((0, 0, 20), (1, 0, 20)), (0, 1), (), -3)]),
               "kv_blocks"),
        refuse(a, "kv_blocks that disagree with the chunks",
               lambda: run([ScheduledStep(0, ((0, 0, 20), (1, 0, 20)), (0, 1), (), 999)]),
               "kv_blocks"),
        refuse(a, "a dict instead of a step", lambda: run([{"index": 0}]), "ScheduledStep"),
        refuse(a, "a generator of steps", lambda: run(iter(whole)), "schedule"),
        refuse(a, "an empty schedule", lambda: run([]), "never finishes"),
        refuse(a, "a preempted request that never ran",
               lambda: run([_step(0, [(0, 0, 20)], lens=two, preempted=(1,)),
                            _step(1, [(1, 0, 20)], lens=two)]), "preempted"),
        answer(a, "tokpool's own schedule given back",
               lambda: _own_schedule_round_trip(), lambda ok: ok is True),
    ]


def _own_schedule_round_trip():
    cfg = tp.SimConfig(model="SmolLM2-135M", max_num_batched_tokens=32, max_num_seqs=2,
                       kv_cache_blocks=6, long_prefill_token_threshold=16, max_model_len=80)
    own = tp.simulate([40, 40, 9], cfg, mode="analytic")
    again = tp.simulate([40, 40, 9], cfg, mode="analytic", schedule=own.schedule)
    return bool(own.steps.equals(again.steps)) or "the same schedule gave other steps"


def vllm_scheduler(w: World) -> list[Case]:
    a = 'scheduler="vllm"'
    cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=16, max_num_seqs=4)

    def same_as_tokpool(result) -> bool | str:
        own = tp.simulate([20, 6, 9], cfg, mode="analytic", arrival_steps=[0, 1, 1])
        return True if [(s.index, s.chunks) for s in result.schedule] == [
            (s.index, s.chunks) for s in own.schedule] else "vLLM's schedule differs"

    return [
        answer(a, "numpy arrival_steps and torch ones",
               lambda: (tp.simulate(np.array([20, 6, 9]), cfg, mode="analytic",
                                    scheduler="vllm", arrival_steps=np.array([0, 1, 1])),
                        tp.simulate([20, 6, 9], cfg, mode="analytic", scheduler="vllm",
                                    arrival_steps=__import__("torch").tensor([0, 1, 1]))),
               lambda both: all(same_as_tokpool(r) is True for r in both) or "differs",
               time_cap=300),  # imports vLLM in the child: 20 s here, minutes under load
        refuse(a, "float arrival_steps",
               lambda: tp.simulate([20, 6, 9], cfg, mode="analytic", scheduler="vllm",
                                   arrival_steps=[0, 1.5, 1]), "arrival_steps"),
        refuse(a, "arrival_steps as one int",
               lambda: tp.simulate([20, 6, 9], cfg, mode="analytic", scheduler="vllm",
                                   arrival_steps=3), "arrival_steps"),
        refuse(a, "huge prompt with a large budget",
               lambda: tp.simulate([2**31 - 1], tp.SimConfig(
                   hidden_size=8, max_num_batched_tokens=2**28), mode="analytic",
                   scheduler="vllm"), "scheduler='tokpool'", time_cap=60),
        refuse(a, "many prompts (a block pool per token)",
               lambda: tp.simulate([2**24] * 64, tp.SimConfig(
                   hidden_size=8, max_num_batched_tokens=2**28), mode="analytic",
                   scheduler="vllm"), "scheduler='tokpool'", time_cap=60),
        refuse(a, "garbage VLLM_TARGET_DEVICE",
               with_env({"VLLM_TARGET_DEVICE": "garbage"}, lambda: _fresh_vllm_schedule(cfg)),
               "VLLM_TARGET_DEVICE", time_cap=90),
        refuse(a, "a scheduler name that is not one",
               lambda: tp.simulate([10], cfg, mode="analytic", scheduler="vLLM "),
               "scheduler"),
        refuse(a, "closed_form with scheduler='vllm'",
               lambda: tp.simulate([10], cfg, mode="closed_form", scheduler="vllm"),
               "closed_form"),
    ]


def _fresh_vllm_schedule(cfg):
    """As a new process would: vLLM imported after the environment variable is set."""
    import sys

    from tokpool.sim.vllm_run import scheduler as run

    run._MODULES.clear()
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]
    run._engine_config.cache_clear()
    return tp.simulate([20, 6], cfg, mode="analytic", scheduler="vllm")


def engine_check(w: World) -> list[Case]:
    from tokpool.engine.check import engine_check as check

    a = "engine_check"
    return [
        refuse(a, "prompts an int", lambda: check(prompts=5), "prompts"),
        refuse(a, "prompts a string", lambda: check(prompts="hello"), "prompts"),
        refuse(a, "prompts empty", lambda: check(prompts=[]), "prompts"),
        refuse(a, "a prompt that is empty", lambda: check(prompts=["hi", ""]), "prompts"),
        refuse(a, "a prompt of float ids", lambda: check(prompts=[[1.5, 2]]), "prompts"),
        refuse(a, "chunk_sizes an int", lambda: check(chunk_sizes=16), "chunk_sizes"),
        refuse(a, "chunk_sizes a string", lambda: check(chunk_sizes="16,48"), "chunk_sizes"),
        refuse(a, "budget a string", lambda: check(max_num_batched_tokens="64"),
               "max_num_batched_tokens"),
        refuse(a, "budget 0", lambda: check(max_num_batched_tokens=0, max_num_seqs=0),
               "max_num_batched_tokens"),
        refuse(a, "budget 0, default seqs", lambda: check(max_num_batched_tokens=0),
               "max_num_batched_tokens"),
        refuse(a, "max_num_seqs a float", lambda: check(max_num_seqs=1.5), "max_num_seqs"),
        refuse(a, "max_num_seqs None", lambda: check(max_num_seqs=None), "max_num_seqs"),
        refuse(a, "budget 10^30", lambda: check(max_num_batched_tokens=10**30),
               "max_num_batched_tokens"),
        refuse(a, "task unknown", lambda: check(task="embedding"), "task"),
        refuse(a, "model None", lambda: check(None), "model"),
        refuse(a, "model a dict", lambda: check({"a": 1}), "model"),
        refuse(a, "python a directory", lambda: check(python=str(w.tmp)), "python"),
        refuse(a, "progress not callable", lambda: check(progress="yes"), "progress"),
        cli(a, "CLI --chunk-sizes letters", ["engine-check", "--chunk-sizes", "a,b"],
            "--chunk-sizes"),
        cli(a, "CLI --budget 0", ["engine-check", "--budget", "0"], "--budget"),
        cli(a, "CLI --prompt empty", ["engine-check", "--prompt", ""], "prompt"),
    ]


def model_folders(w: World) -> list[Case]:
    a = "model folders"
    f = w.files
    return [
        refuse(a, "safetensors with no tensors", lambda: tp.load_model(f["empty_weights"]),
               "model.safetensors"),
        refuse(a, "8-byte GGUF stub", lambda: tp.load_model(f["stub.gguf"],
                                                            cache_dir=w.tmp / "c1"),
               "stub.gguf"),
        refuse(a, "GGUF of zeros", lambda: tp.load_model(f["zeros.gguf"],
                                                         cache_dir=w.tmp / "c2"), "zeros.gguf"),
        refuse(a, "GGUF with a garbage header", lambda: tp.load_model(
            f["bad.gguf"], cache_dir=w.tmp / "c3"), "bad.gguf"),
        refuse(a, "a folder without config.json", lambda: tp.load_model(w.tmp / "probe"),
               "config.json"),
        refuse(a, "a config.json that is not JSON", lambda: tp.load_model(
            f["not_json/config.json"].parent), "config.json"),
        refuse(a, "a config.json holding a list", lambda: tp.load_model(
            f["list_json/config.json"].parent), "config.json"),
        refuse(a, "a text file as the model", lambda: tp.load_model(f["text.txt"]),
               "text.txt"),
        refuse(a, "a model name that is a number", lambda: tp.load_model(5), "name_or_path"),
    ]


def configs(w: World) -> list[Case]:
    a = "configs"
    return [
        refuse(a, "kv_cache_dtype float32 (SimConfig)",
               lambda: tp.SimConfig.for_model("Qwen3-Embedding-8B", kv_cache_dtype="float32"),
               "kv_cache_dtype", "float32"),
        refuse(a, "kv_cache_dtype float32 (serve line)",
               lambda: tp.SimConfig.from_vllm_args(f"{QWEN} --kv-cache-dtype float32"),
               "--kv-cache-dtype", "float32"),
        refuse(a, "kv_cache_dtype an int",
               lambda: tp.SimConfig.for_model("Qwen3-Embedding-8B", kv_cache_dtype=2),
               "kv_cache_dtype"),
        refuse(a, "max_num_batched_tokens 10^30 (simulate)",
               lambda: tp.simulate([10], tp.SimConfig(hidden_size=8,
                                                      max_num_batched_tokens=10**30),
                                   mode="analytic"), "max_num_batched_tokens"),
        refuse(a, "max_num_batched_tokens 10^30 (tensor mode)",
               lambda: tp.simulate([10], tp.SimConfig(hidden_size=8,
                                                      max_num_batched_tokens=10**30)),
               "max_num_batched_tokens"),
        refuse(a, "max_num_batched_tokens 10^30 (sweep)",
               lambda: tp.sweep([10], tp.SimConfig(hidden_size=8,
                                                   max_num_batched_tokens=10**30)),
               "max_num_batched_tokens"),
        refuse(a, "max_num_seqs 10^30", lambda: tp.simulate(
            [10], tp.SimConfig(hidden_size=8, max_num_seqs=10**30), mode="analytic"),
            "max_num_seqs"),
        refuse(a, "max_model_len 10^30", lambda: tp.simulate(
            [10], tp.SimConfig(hidden_size=8, max_model_len=10**30), mode="analytic"),
            "max_model_len"),
        refuse(a, "kv_cache_blocks 10^30", lambda: tp.simulate(
            [10], tp.SimConfig(model="SmolLM2-135M", kv_cache_blocks=10**30),
            mode="analytic"), "kv_cache_blocks"),
        refuse(a, "hidden_size 10^30", lambda: tp.SimConfig(hidden_size=10**30), "hidden_size"),
        refuse(a, "long_prefill_token_threshold 10^30", lambda: tp.simulate(
            [10], tp.SimConfig(hidden_size=8, long_prefill_token_threshold=10**30),
            mode="analytic"), "long_prefill_token_threshold"),
        refuse(a, "damaged test.jsonl under TOKPOOL_DATA_DIR",
               with_env({"TOKPOOL_DATA_DIR": str(w.tmp / "data")},
                        lambda: tp.load_prm_dataset("test")), "test.jsonl", "line 2"),
        refuse(a, "a test.jsonl line that is not a record",
               with_env({"TOKPOOL_DATA_DIR": str(w.tmp / "data_badrecord")},
                        lambda: tp.load_prm_dataset("test")), "test.jsonl", "line 1"),
        refuse(a, "a dataset path that is a folder",
               lambda: tp.load_prm_dataset("test", path=w.tmp), "path"),
    ]


def export(w: World) -> list[Case]:
    a = "export"
    out = w.tmp / "export"
    out.mkdir(exist_ok=True)
    return [
        refuse(a, "a list as the table, saved as csv",
               lambda: View(html="", table=[1, 2]).save(out / "x.csv"), "table"),
        refuse(a, "a dict as the table, saved as csv",
               lambda: View(html="", table={"a": [1]}).save(out / "y.csv"), "table"),
        refuse(a, "PNG bytes that are not PNG",
               lambda: View(html="", png=b"not a png").save(out / "x.png"), "png"),
        refuse(a, "a str as the PNG", lambda: View(html="", png="abc").save(out / "z.png"),
               "png"),
        refuse(a, "html that is not a string",
               lambda: View(html=None).save(out / "x.html"), "html"),
        refuse(a, "a path into a missing folder",
               lambda: w.ownership.view.save(out / "missing" / "x.png"), "missing"),
        refuse(a, "a path that is a folder", lambda: w.ownership.view.save(out), "export"),
        refuse(a, "a path with no suffix", lambda: w.ownership.view.save(out / "noext"),
               "suffix"),
        refuse(a, "a path that is a number", lambda: w.ownership.view.save(5), "path"),
        answer(a, "the ownership view as csv",
               lambda: w.ownership.view.save(out / "ok.csv").stat().st_size,
               lambda n: n > 0),
    ]


def environment(w: World) -> list[Case]:
    a = "environment"
    cfg = tp.SimConfig(hidden_size=8)

    def tensor():
        return tp.simulate([100], cfg)

    out = []
    for value in ("lots", "-5G", "150%", "nan", "1e999", "0%", "G"):
        out.append(refuse(a, f"TOKPOOL_MEMORY_LIMIT={value}",
                          with_env({"TOKPOOL_MEMORY_LIMIT": value}, tensor),
                          "TOKPOOL_MEMORY_LIMIT"))
    for value in ("lots", "-1", "0", "1e3", "1.5"):
        out.append(refuse(a, f"TOKPOOL_MAX_STEPS={value}",
                          with_env({"TOKPOOL_MAX_STEPS": value},
                                   lambda: tp.simulate([100], cfg, mode="analytic")),
                          "TOKPOOL_MAX_STEPS"))
    out += [
        answer(a, "TOKPOOL_DATA_DIR that does not exist (the data is regenerated)",
               with_env({"TOKPOOL_DATA_DIR": str(w.tmp / "nowhere")},
                        lambda: len(tp.load_prm_dataset("dev"))), lambda n: n > 0),
        refuse(a, "TOKPOOL_DATA_DIR that is a file, for a shipped PRM",
               with_env({"TOKPOOL_DATA_DIR": str(w.files["text.txt"])},
                        lambda: tp.load_prm("probe")), "TOKPOOL_DATA_DIR"),
        refuse(a, "TOKPOOL_CACHE that is a file",
               with_env({"TOKPOOL_CACHE": str(w.files["text.txt"])},
                        lambda: tp.load_model(w.files["stub.gguf"])), "TOKPOOL_CACHE"),
        refuse(a, "VLLM_TARGET_DEVICE garbage for the pooling bridge",
               with_env({"VLLM_TARGET_DEVICE": "garbage"}, _fresh_vllm_bridge),
               "VLLM_TARGET_DEVICE", time_cap=90),
    ]
    return out


def _fresh_vllm_bridge():
    """The pooling bridge (``policy="vllm"``) as a new process would: vLLM not yet imported."""
    import sys

    from tokpool.pooler import vllm_bridge

    vllm_bridge._IMPORT.clear()
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]
    return tp.simulate([10], tp.SimConfig(hidden_size=8, policy="vllm"), mode="tensor")


def explorers(w: World) -> list[Case]:
    """The explorer kinds the issue lists (the rest of the controls: ``surface.py``)."""
    from .surface import control

    a = "explorers"
    model = w.tiny_model
    prm = w.prm
    nan = math.nan
    return [
        refuse(a, "a dict as the model", lambda: tp.token_explorer({"a": 1}, "hi"), "model"),
        refuse(a, "a missing path as the model",
               lambda: tp.token_explorer(str(w.tmp / "missing"), "hi"), "model"),
        refuse(a, "a one-element prompt range", lambda: tp.memory_explorer(prompt_len=(1024,)),
               "prompt_len"),
        refuse(a, "an int prompt range", lambda: tp.memory_explorer(prompt_len=1024),
               "prompt_len"),
        refuse(a, "a string of steps", lambda: tp.step_reward_explorer(prm, "2+2?", "4. 5."),
               "steps"),
        refuse(a, "layer 1.5", lambda: tp.token_explorer(model, "hi", layer=1.5), "layer"),
        refuse(a, "layer 10^9", lambda: tp.token_explorer(model, "hi", layer=10**9), "layer"),
        refuse(a, "layer -100", lambda: tp.token_explorer(model, "hi", layer=-100), "layer"),
        refuse(a, "None in prompt lengths", lambda: tp.ownership_explorer([20, None, 9]),
               "prompt_lens"),
        refuse(a, "a NaN threshold on the slider", lambda: control(w.rewards, "threshold", nan),
               "threshold"),
        refuse(a, "a PRM whose threshold is NaN", lambda: _nan_prm_explorer(prm), "threshold"),
        refuse(a, "a first-error index past the last step",
               lambda: tp.step_reward_explorer(prm, "2+2?", ["4", "5"], true_first_error=5),
               "true_first_error"),
        refuse(a, "a PRM that is None", lambda: tp.step_reward_explorer(None, "2+2?", ["4"]),
               "prm"),
        refuse(a, "a PRM that is a path",
               lambda: tp.step_reward_explorer(str(w.probe_file), "2+2?", ["4"]), "prm"),
        refuse(a, "a model preset that is not a menu value",
               lambda: control(w.memory, "model", "nope"), "model", "Qwen3-Embedding-8B"),
        refuse(a, "a hardware that is not a menu value",
               lambda: control(w.memory, "hardware", "TPU"), "hardware", "H100 SXM"),
        refuse(a, "a policy that is not a menu value",
               lambda: control(w.ownership, "policy", "copy"), "policy", "clone"),
    ]


def _nan_prm_explorer(prm):
    prm.threshold = float("nan")
    return tp.step_reward_explorer(prm, "2+2?", ["4"])


#: Issue 40's crash: chunked prefill off, a threshold, a KV cache that preempts.
_ISSUE40 = {"max_num_seqs": 2, "max_num_batched_tokens": 161, "long_prefill_token_threshold": 64,
            "max_model_len": 161, "kv_cache_blocks": 12, "block_size": 16,
            "enable_chunked_prefill": False, "hidden_size": 16}
_ISSUE40_LENS = [99, 89, 6, 119, 91, 44]
_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 512,
          "torch_dtype": "float32"}
_BERT = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 64,
         "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
         "vocab_size": 1000, "max_position_embeddings": 512, "torch_dtype": "float32"}


def _issue40_is_right(result) -> bool | str:
    rows = result.requests["delivered_rows"].tolist()
    if result.corrupted != [0, 1, 3, 4] or rows != [35, 25, 6, 55, 27, 44]:
        return f"corrupted {result.corrupted}, delivered rows {rows}"
    return True


def _sparse_config_folder(w: World):
    folder = w.tmp / "sparse-config"
    folder.mkdir(exist_ok=True)
    with open(folder / "config.json", "wb") as f:
        f.truncate(2 << 30)  # a 2 GB sparse file: no disk used
    return folder


def _llama_kv(extra: dict) -> int:
    return tp.SimConfig.from_hf_config({**_LLAMA, **extra}, runner="pooling",
                                       max_num_batched_tokens=512).kv_bytes_per_token


def round5_edges(w: World) -> list[Case]:
    """Issue 40's edges: a schedule vLLM makes, a start-up refusal on the bare path, bad input
    that waited or misnamed (each also a named test in ``tests/test_edges_round5.py``)."""
    from tokpool.engine.check import engine_check as check
    from tokpool.sim.vllm_rules import cudagraph, engine_checks
    from tokpool.sim.vllm_rules.args import shell_line

    from .surface import _sweep

    a = "round-5 edges"
    cfg = tp.SimConfig(**_ISSUE40)
    no_vllm = "/usr/bin/python3"  # a Python without vLLM: nothing may reach it
    bert = tp.SimConfig.from_hf_config(_BERT, task="embed", max_num_batched_tokens=512,
                                       max_num_seqs=4, long_prefill_token_threshold=64)
    return [
        answer(a, "unchunked split under preemption, analytic",
               lambda: tp.simulate(_ISSUE40_LENS, cfg, mode="analytic"), _issue40_is_right),
        answer(a, "unchunked split under preemption, tensor",
               lambda: tp.simulate(_ISSUE40_LENS, cfg, mode="tensor"), _issue40_is_right),
        answer(a, "unchunked split under preemption, given schedule",
               lambda: tp.simulate(_ISSUE40_LENS, cfg, mode="analytic", schedule=tp.simulate(
                   _ISSUE40_LENS, cfg, mode="analytic").schedule), _issue40_is_right),
        answer(a, "unchunked split, one request (closed form = analytic)",
               lambda: (tp.simulate([150], cfg.replace(max_model_len=None, kv_cache_blocks=None),
                                    mode="closed_form").peak_pooling_bytes,
                        tp.simulate([150], cfg.replace(max_model_len=None, kv_cache_blocks=None),
                                    mode="analytic").peak_pooling_bytes),
               lambda v: v[0] == v[1] or f"closed form {v[0]} vs analytic {v[1]}"),
        refuse(a, "CLS encoder split by the threshold (vLLM's CLSPool fails)",
               lambda: tp.simulate([300, 200, 100], bert, mode="analytic"),
               "CLSPool", "long_prefill_token_threshold"),
        refuse(a, "model-less KV cache below one max_model_len request",
               lambda: tp.SimConfig(max_model_len=1024, block_size=16, kv_cache_blocks=61,
                                    hidden_size=16), "kv_cache_blocks", "max_model_len"),
        answer(a, "model-less KV cache below one request, as_if",
               lambda: tp.SimConfig(max_model_len=1024, block_size=16, kv_cache_blocks=61,
                                    hidden_size=16, as_if=True).looked_past,
               lambda v: (len(v) == 1 and "960" in v[0]) or f"looked past {v}"),
        refuse(a, "config.json a 2 GB sparse file", lambda: tp.SimConfig.from_hf_config(
            _sparse_config_folder(w)), "config.json", time_cap=5),
        refuse(a, "engine_check: a folder without config.json",
               lambda: check(str(w.tmp), python=no_vllm), "model"),
        refuse(a, "engine_check: token ids outside the vocabulary",
               lambda: check(prompts=[[1, 2, 10**6]], python=no_vllm), "prompts", "vocabulary"),
        refuse(a, "engine_check: a token id of -1",
               lambda: check(prompts=[[-1]], python=no_vllm), "prompts"),
        answer(a, "serve line continued with backslash-newline",
               lambda: tp.SimConfig.from_vllm_args(f"{QWEN} \\\n  --max-num-seqs 4 \\\n"
                                                   "  --max-model-len 4096"),
               lambda c: (c.max_num_seqs, c.max_model_len) == (4, 4096) or repr(c)),
        answer(a, "serve line ending in a backslash",
               lambda: tp.SimConfig.from_vllm_args(f"{QWEN} --max-num-seqs 4 \\"),
               lambda c: c == tp.SimConfig.from_vllm_args(f"{QWEN} --max-num-seqs 4")),
        refuse(a, "serve line with an unclosed double quote",
               lambda: tp.SimConfig.from_vllm_args(f'{QWEN} --max-num-seqs "4'), "quote"),
        cli(a, "CLI --vllm-args with an unclosed quote", [
            "simulate", "--prompt-lens", "100", "--vllm-args", f"{QWEN} --max-model-len '4k"],
            "quote"),
        answer(a, "LlamaForCausalLM with kv_lora_rank is a Llama",
               lambda: (_llama_kv({"kv_lora_rank": 512}), _llama_kv({})),
               lambda v: v[0] == v[1] or f"{v[0]} B/token vs {v[1]}"),
        refuse(a, "DeepSeek-V3 model type with kv_lora_rank (MLA)",
               lambda: tp.SimConfig.from_hf_config({**_LLAMA, "model_type": "deepseek_v3",
                                                    "kv_lora_rank": 512}),
               "multi-head latent attention"),
        refuse(a, "data_parallel_split(10, dp=10**8)",
               lambda: kv_cache.data_parallel_split(10, dp=10**8), "dp", time_cap=5),
        refuse(a, "data_parallel_split(10**9)",
               lambda: kv_cache.data_parallel_split(10**9, dp=2), "num_requests", time_cap=5),
        refuse(a, "pooler_ranks with a billion TP ranks",
               lambda: kv_cache.pooler_ranks(tp=10**9), "tp", time_cap=5),
        refuse(a, "pipeline_layers(10**9, pp=10**8)",
               lambda: kv_cache.pipeline_layers(10**9, 10**8), "pp", time_cap=5),
        refuse(a, "cudagraph_capture_sizes(2**31 - 1)",
               lambda: cudagraph.cudagraph_capture_sizes(2**31 - 1), "max_capture_size",
               time_cap=5),
        refuse(a, "check_tensor_parallel with 10**15 + 1 heads",
               lambda: engine_checks.check_tensor_parallel("m", 10**15 + 1, 1, 2),
               "tensor parallel", time_cap=5),
        refuse(a, "shell_line of an int", lambda: shell_line(5), "line"),
        *_sweep(a, "data_parallel_split", kv_cache.data_parallel_split,
                {"num_requests": 10, "dp": 2}, {
                    "num_requests": {"-1": -1, "1.5": 1.5, "'10'": "10", "10**30": 10**30,
                                     "True": True},
                    "dp": {"0": 0, "10**8": 10**8, "10**30": 10**30, "None": None,
                           "2.0": 2.0}}),
        *_sweep(a, "pooler_ranks", kv_cache.pooler_ranks, {"tp": 2, "pp": 2}, {
            "tp": {"0": 0, "10**9": 10**9, "'2'": "2"}, "pp": {"0": 0, "1.5": 1.5}}),
        *_sweep(a, "pipeline_layers", kv_cache.pipeline_layers, {"num_layers": 30, "pp": 2}, {
            "num_layers": {"0": 0, "10**30": 10**30, "'30'": "30"},
            "pp": {"10**8": 10**8, "31": 31, "None": None}}),
        *_sweep(a, "cudagraph_capture_sizes", cudagraph.cudagraph_capture_sizes,
                {"max_capture_size": 512}, {"max_capture_size": {
                    "-1": -1, "10**30": 10**30, "1.5": 1.5, "'8'": "8"}}),
    ]


def all_cases(w: World) -> list[Case]:
    return [*round2_leftovers(w), *given_schedules(w), *vllm_scheduler(w), *engine_check(w),
            *explorers(w), *model_folders(w), *configs(w), *export(w), *environment(w),
            *round5_edges(w)]
