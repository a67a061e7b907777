"""Property tests over inputs with structure: schedules, ``vllm serve`` lines and configs.

hypothesis draws the inputs (``draw``: generation only, so a run costs the same every time;
the seed is fixed unless ``TOKPOOL_HOSTILE_SEED`` is set); each one is then a ``Case`` run in
its own forked child with the time and memory cap. The property is the generator's rule: a
clear tokpool error, or a result that is right:

- **schedules**: tokpool's own schedule for a random engine (or its refusal, where vLLM
  could not serve the engine), given back as is (must be accepted and give the same run), or
  with one hostile change (a bound moved, a float, a
  step dropped, doubled or merged, a chunk moved, a wrong ``finished``/``preempted``/
  ``kv_blocks``, a field of the wrong type, or a schedule made up from scratch). An accepted
  schedule must keep to the configuration's limits as the result reports them (tokens per
  step, KV blocks held) and run to the same bytes in tensor and analytic mode.
- **serve lines**: flags, aliases, ``=`` and dotted forms, sizes with suffixes, quotes,
  backslashes, unknown and unmodelled flags, JSON pooler configs, the line's environment.
  A line that parses must give a config whose parallel and cache settings are the line's,
  and simulate; a quarter go through the CLI (``tokpool simulate --vllm-args``).
- **configs**: ``SimConfig`` fields drawn valid or hostile; a config that is made must run
  a small workload to the same bytes in tensor and analytic mode.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shlex
from collections.abc import Callable
from typing import Any

import pandas as pd
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

import tokpool as tp
from tokpool.sim import ScheduledStep
from tokpool.sim.schedule.scheduler import schedule as tokpool_schedule
from tokpool.sim.vllm_rules.args import parse_vllm_args

from .runner import Case, run_cases

#: Examples per property in ``make test``, and in the full run (``TOKPOOL_HOSTILE_FULL=1``);
#: ``--examples`` or ``TOKPOOL_HOSTILE_EXAMPLES`` sets another number.
EXAMPLES, FULL_EXAMPLES = 40, 300


def draw(strategy: st.SearchStrategy, n: int) -> list[Any]:
    """``n`` examples of ``strategy`` (hypothesis' generation phase only)."""
    out: list[Any] = []
    seed = os.environ.get("TOKPOOL_HOSTILE_SEED")

    @settings(max_examples=n, database=None, derandomize=seed is None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(example):
        out.append(example)

    if seed is not None:
        collect = hypothesis_seed(int(seed))(collect)
    collect()
    return out[:n]


# --- schedules ----------------------------------------------------------------------------

MUTATIONS = ("none", "shift_bound", "float_bound", "bool_bound", "drop_step", "double_step",
             "merge_steps", "move_chunk", "wrong_finished", "extra_preempt", "kv_blocks",
             "string_request", "two_number_chunk", "from_scratch")


@st.composite
def engines(draw_: Callable) -> dict[str, Any]:
    n = draw_(st.integers(1, 5))
    lens = draw_(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    block = draw_(st.sampled_from([1, 4, 16]))
    need = max(-(-x // block) for x in lens) + 1
    return {
        "lens": lens,
        "config": {
            "hidden_size": 8, "block_size": block,
            "max_num_batched_tokens": draw_(st.integers(4, 64)),
            "max_num_seqs": draw_(st.integers(1, 5)),
            "long_prefill_token_threshold": draw_(st.one_of(st.none(), st.integers(1, 32))),
            "kv_cache_blocks": draw_(st.one_of(st.none(), st.integers(need, need + 8))),
            # chunking on mostly: without it most random prompts exceed the budget
            "enable_chunked_prefill": draw_(st.sampled_from([True, True, True, False])),
            "async_scheduling": draw_(st.booleans()),
            "policy": draw_(st.sampled_from(tp.RETENTION_POLICIES)),
        },
        "mutation": draw_(st.sampled_from(MUTATIONS)),
        "seed": draw_(st.integers(0, 2**31)),
    }


def _mutate(steps: list[ScheduledStep], lens: list[int], how: str, rng: random.Random
            ) -> list[ScheduledStep]:
    steps = list(steps)
    if how == "none" or not steps:
        return steps
    k = rng.randrange(len(steps))
    s = steps[k]
    if how == "from_scratch":
        out, done, index = [], [0] * len(lens), 0
        while any(d < n for d, n in zip(done, lens, strict=True)) and index < 40:
            todo = [r for r in range(len(lens)) if done[r] < lens[r]]
            chunks = []
            for r in rng.sample(todo, rng.randint(1, len(todo))):
                stop = rng.randint(done[r] + 1, lens[r])
                chunks.append((r, done[r], stop))
                done[r] = stop
            finished = tuple(r for r, _, stop in chunks if stop == lens[r])
            out.append(ScheduledStep(index, tuple(chunks), finished))
            index += rng.randint(1, 2)
        return out
    chunks = list(s.chunks)
    j = rng.randrange(len(chunks))
    r, start, stop = chunks[j]
    if how == "shift_bound":
        chunks[j] = (r, start, stop + rng.choice([-2, -1, 1, 2]))
    elif how == "float_bound":
        chunks[j] = (r, float(start), stop)
    elif how == "bool_bound":
        chunks[j] = (r, start, True) if stop == 1 else (r, bool(start), stop)
    elif how == "string_request":
        chunks[j] = (str(r), start, stop)
    elif how == "two_number_chunk":
        chunks[j] = (r, stop)
    elif how == "drop_step":
        return _splice(steps, k, 1)
    elif how == "double_step":
        later = [dataclasses.replace(t, index=t.index + 1) for t in steps[k + 1:]]
        return [*steps[:k + 1], dataclasses.replace(s, index=s.index + 1), *later]
    elif how == "merge_steps" and k + 1 < len(steps):
        merged = {c[0]: c for c in s.chunks}
        for c in steps[k + 1].chunks:
            merged[c[0]] = (c[0], merged[c[0]][1], c[2]) if c[0] in merged else c
        both = tuple(merged.values())
        finished = tuple(x for x, _, e in both if e == lens[x])
        return _splice(steps, k, 2, ScheduledStep(s.index, both, finished, s.preempted))
    elif how == "move_chunk" and k + 1 < len(steps):
        nxt = steps[k + 1]
        moved = ScheduledStep(nxt.index, (*nxt.chunks, chunks[j]), (*nxt.finished,))
        rest = tuple(c for i, c in enumerate(chunks) if i != j)
        return _splice(steps, k, 2, ScheduledStep(s.index, rest, s.finished), moved)
    elif how == "wrong_finished":
        return _splice(steps, k, 1, dataclasses.replace(
            s, finished=(*reversed(s.finished), r)))
    elif how == "extra_preempt":
        return _splice(steps, k, 1, dataclasses.replace(s, preempted=(*s.preempted, r)))
    elif how == "kv_blocks":
        return _splice(steps, k, 1, dataclasses.replace(
            s, kv_blocks=s.kv_blocks + rng.choice([-1, 1, 7])))
    return _splice(steps, k, 1, dataclasses.replace(s, chunks=tuple(chunks)))


def _splice(steps: list[ScheduledStep], k: int, drop: int, *new: ScheduledStep
            ) -> list[ScheduledStep]:
    """``steps`` with ``drop`` steps from ``k`` on replaced by ``new``."""
    return [*steps[:k], *new, *steps[k + drop:]]


def _run_schedule(example: dict[str, Any]) -> tuple[str, Any]:
    lens, kw = example["lens"], example["config"]
    cfg = tp.SimConfig(**kw)
    own = tokpool_schedule(lens, max_num_batched_tokens=cfg.max_num_batched_tokens,
                           max_num_seqs=cfg.max_num_seqs,
                           enable_chunked_prefill=cfg.enable_chunked_prefill,
                           long_prefill_token_threshold=cfg.long_prefill_token_threshold,
                           kv_cache_blocks=cfg.kv_cache_blocks, block_size=cfg.block_size,
                           async_scheduling=cfg.async_scheduling)
    plan = _mutate(own, lens, example["mutation"], random.Random(example["seed"]))
    analytic = tp.simulate(lens, cfg, mode="analytic", schedule=plan)
    tensor = tp.simulate(lens, cfg, mode="tensor", schedule=plan)
    return example["mutation"], (cfg, own, analytic, tensor)


def _schedule_is_right(value: tuple[str, Any]) -> bool | str:
    mutation, (cfg, own, analytic, tensor) = value
    if mutation == "none" and analytic.schedule != own:
        return "tokpool's own schedule came back changed"
    for s in analytic.schedule:
        if not all(type(v) is int for c in s.chunks for v in c):
            return f"step {s.index} kept non-int chunk fields {s.chunks}"
        if s.num_tokens > cfg.max_num_batched_tokens:
            return f"step {s.index} computes {s.num_tokens} tokens over the budget"
        if cfg.kv_cache_blocks is not None and s.kv_blocks > cfg.kv_cache_blocks - 1:
            return f"step {s.index} holds {s.kv_blocks} KV blocks, over the cache"
    try:
        pd.testing.assert_frame_equal(tensor.steps, analytic.steps)
    except AssertionError as err:
        return f"tensor and analytic mode differ: {str(err)[:200]}"
    return True if tensor.corrupted == analytic.corrupted else "corrupted lists differ"


def schedule_cases(n: int) -> list[Case]:
    return [Case("schedules (property)", f"{e['mutation']} #{i}: {e['lens']} {e['config']}",
                 lambda e=e: _run_schedule(e), expect="either", check=_schedule_is_right)
            for i, e in enumerate(draw(engines(), n))]


# --- serve lines --------------------------------------------------------------------------

_SIZES = st.one_of(st.integers(1, 2**16).map(str), st.sampled_from(
    ["8k", "8K", "32k", "1.5k", "1.5K", "1M", "0", "-1", "-5", "1.5", "x", "", "1e3",
     str(10**30), str(2**31), "'8k", '"8k"', "8k\\", "١٢"]))
_VALUES = {
    "--max-num-batched-tokens": _SIZES, "--max-num-seqs": _SIZES, "--max-model-len": st.one_of(
        _SIZES, st.sampled_from(["auto", "-1"])),
    "--long-prefill-token-threshold": _SIZES, "--block-size": _SIZES,
    "-tp": st.sampled_from(["1", "2", "3", "4", "8", "0", "x", "64"]),
    "--tensor-parallel-size": st.sampled_from(["1", "2", "4"]),
    "-pp": st.sampled_from(["1", "2", "0", "100"]), "-dp": st.sampled_from(["1", "2", "0"]),
    "--gpu-memory-utilization": st.sampled_from(["0.9", "0.5", "1", "1.5", "0", "-0.5", "nan",
                                                 "x", "0.05"]),
    "--dtype": st.sampled_from(["auto", "half", "bfloat16", "float32", "float8", "x"]),
    "--kv-cache-dtype": st.sampled_from(["auto", "fp8", "float32", "nvfp4", "x"]),
    "--pooler-config": st.sampled_from(['{"task": "token_embed"}', '{"task": 5}', "{oops",
                                        '[1]', '{"nope": 1}', '{"returned_token_ids": []}',
                                        '{"step_tag_id": -1}', '{"use_activation": "no"}']),
    "--pooler-config.task": st.sampled_from(["token_embed", "embed", "nope", "5"]),
    "--max-cudagraph-capture-size": _SIZES,
    "--cudagraph-capture-sizes": st.sampled_from(["1 2 4", "8", "0", "x", "4 -1"]),
}
_SWITCHES = ("--async-scheduling", "--no-async-scheduling", "--enforce-eager",
             "--enable-chunked-prefill", "--no-enable-chunked-prefill",
             "--async-scheduling=1", "--enable-prefix-caching", "--nope", "--max_num_seqs",
             "--trust-remote-code", "-q", "--pooler-config.", "--")
_MODELS = ("Qwen/Qwen3-Embedding-8B", "Qwen3-Embedding-0.6B", "SmolLM2-135M",
           "Qwen2.5-Math-PRM-7B", "nope/none", "nope", "", "'Qwen/Qwen3-Embedding-8B")


@st.composite
def serve_lines(draw_: Callable) -> dict[str, Any]:
    words = []
    if draw_(st.booleans()):
        words.append("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    if draw_(st.integers(0, 4)):
        words += ["vllm", "serve"]
    model = draw_(st.sampled_from(_MODELS))
    if model:
        words.append(model)
    for _ in range(draw_(st.integers(0, 5))):
        if draw_(st.integers(0, 3)) == 0:
            words.append(draw_(st.sampled_from(_SWITCHES)))
            continue
        flag = draw_(st.sampled_from(sorted(_VALUES)))
        value = draw_(_VALUES[flag])
        if draw_(st.integers(0, 3)) == 0:
            words.append(f"{flag}={value}")
        else:
            words += [flag, shlex.quote(value) if " " in value or '"' in value else value]
    as_list = draw_(st.integers(0, 4)) == 0
    return {"line": words if as_list else " ".join(words),
            "cli": draw_(st.integers(0, 3)) == 0 and not as_list}


def _run_line(example: dict[str, Any]) -> Any:
    line = example["line"]
    if example["cli"]:
        from .surface import run_cli

        return run_cli(["simulate", "--prompt-lens", "64", "--vllm-args", line], ())
    cfg = tp.SimConfig.from_vllm_args(line)
    n = min(64, cfg.max_model_len or 64)
    return cfg, tp.simulate([n], cfg, mode="analytic"), line


def _line_is_right(value: Any) -> bool | str:
    if value is True:  # the CLI ran the line: status 0
        return True
    if isinstance(value, str):
        return value
    cfg, result, line = value
    words = line if isinstance(line, list) else shlex.split(line)
    words = [w for w in words if "=" not in w or w.startswith("-")]
    parsed = parse_vllm_args(words)
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                 "block_size", "gpu_memory_utilization", "enforce_eager", "kv_cache_dtype"):
        if name in parsed and getattr(cfg, name) != parsed[name]:
            return f"{name}: the line says {parsed[name]!r}, the config has {getattr(cfg, name)!r}"
    return True if result.peak_pooling_bytes >= 0 else "a negative peak"


def serve_line_cases(n: int) -> list[Case]:
    return [Case("serve lines (property)", f"#{i}: {e['line']!r:.120}" + (" (CLI)" if e["cli"]
                                                                         else ""),
                 lambda e=e: _run_line(e), expect="either", check=_line_is_right)
            for i, e in enumerate(draw(serve_lines(), n))]


# --- configs ------------------------------------------------------------------------------

_BAD = st.sampled_from([None, "8", -1, 0, 1.5, float("nan"), True, [8], 10**30, "x"])
_FIELDS: dict[str, st.SearchStrategy] = {
    "hidden_size": st.integers(1, 64), "num_labels": st.integers(1, 4),
    "dtype": st.sampled_from(["bfloat16", "float16", "float32", torch.float16]),
    "head_dtype": st.sampled_from(["auto", None, "float32", "bfloat16"]),
    "use_activation": st.booleans(), "task": st.sampled_from(
        ["token_embed", "token_classify", "embed", "classify"]),
    "pooling": st.sampled_from([None, "ALL", "STEP", "JINA_RANKING", "LAST"]),
    "max_num_batched_tokens": st.integers(1, 128), "max_num_seqs": st.integers(1, 6),
    "long_prefill_token_threshold": st.integers(1, 64),
    "enable_chunked_prefill": st.booleans(), "async_scheduling": st.booleans(),
    "policy": st.sampled_from(tp.RETENTION_POLICIES),
    "model": st.sampled_from([None, "SmolLM2-135M", "Qwen3-Embedding-0.6B"]),
    "output_memory": st.sampled_from(["vllm", "one_buffer"]), "enforce_eager": st.booleans(),
    "max_cudagraph_capture_size": st.integers(1, 64),
    "step_tag_every": st.integers(1, 8), "step_tag_id": st.integers(0, 3),
    "num_returned_columns": st.integers(1, 4), "kv_cache_blocks": st.integers(2, 40),
    "block_size": st.sampled_from([1, 4, 16]), "tensor_parallel_size": st.sampled_from([1, 2]),
    "max_model_len": st.integers(1, 256), "async_overwrite": st.sampled_from(
        ["forward_start", "forward_end"]),
    "usage": st.sampled_from(["llm", "server"]), "rows_from": st.sampled_from(
        [None, "backbone", "score_head"]),
}


@st.composite
def configs(draw_: Callable) -> dict[str, Any]:
    kw = {}
    for name, good in _FIELDS.items():
        if draw_(st.integers(0, 3)) == 0:  # about a quarter of the fields are given
            kw[name] = draw_(_BAD if draw_(st.integers(0, 4)) == 0 else good)
    n = draw_(st.integers(1, 3))
    lens = draw_(st.lists(st.integers(1, 48), min_size=n, max_size=n))
    return {"config": kw, "lens": lens}


def _run_config(example: dict[str, Any]) -> tuple[Any, Any]:
    cfg = tp.SimConfig(**example["config"])
    lens = example["lens"]
    return (tp.simulate(lens, cfg, mode="analytic"), tp.simulate(lens, cfg, mode="tensor"))


def _config_is_right(value: tuple[Any, Any]) -> bool | str:
    analytic, tensor = value
    try:
        pd.testing.assert_frame_equal(tensor.steps, analytic.steps)
        pd.testing.assert_frame_equal(tensor.chunks, analytic.chunks)
    except AssertionError as err:
        return f"tensor and analytic mode differ: {str(err)[:200]}"
    return True if tensor.corrupted == analytic.corrupted else "corrupted lists differ"


def config_cases(n: int) -> list[Case]:
    return [Case("configs (property)", f"#{i}: {e['config']!r:.140} on {e['lens']}",
                 lambda e=e: _run_config(e), expect="either", check=_config_is_right)
            for i, e in enumerate(draw(configs(), n))]


def all_cases(examples: int | None = None) -> list[Case]:
    full = os.environ.get("TOKPOOL_HOSTILE_FULL") == "1"
    n = examples or int(os.environ.get("TOKPOOL_HOSTILE_EXAMPLES",
                                       FULL_EXAMPLES if full else EXAMPLES))
    return [*schedule_cases(n), *serve_line_cases(n), *config_cases(n)]


def run_all(world, *, examples=None, areas=None, workers=2, on_report=None):
    cases = all_cases(examples)
    if areas:
        cases = [c for c in cases if c.area in areas]
    return run_cases(cases, workers=workers, on_report=on_report)
