"""Check tokpool against a running vLLM engine: same prompts, same flags, outputs and schedules.

``engine_check`` sends token-id prompts to a real vLLM engine (``LLM(runner="pooling")``, one
engine start per configuration, many prompts each) and to ``tp.load_model(...).encode`` with the
same chunk size, and compares:

- every prompt's per-token output (``token_embed`` or ``token_classify``): the largest absolute
  difference, against ``ENGINE_ATOL[task]``;
- the engine's schedule — ``Scheduler.schedule`` wrapped in the engine process, the
  ``num_scheduled_tokens`` of every step — with ``tp.simulate``'s schedule for the same prompt
  lengths and flags (budget, ``max_num_seqs``, ``long_prefill_token_threshold``, the engine's
  own KV-cache size and block size).

vLLM runs in a subprocess, usually another virtual environment (``vllm_venv.py``: which Python,
the driver's subprocess, ``EngineCheckError``). The engine's flags are in ``flags.py``, the
built-in models' folders in ``prepare.py``, the comparisons in ``compare.py``, the text printed
in ``report.py``; this module runs them in order (``engine_check``) and is ``tokpool
engine-check``'s entry (``cli_main``).

``python -m tokpool.engine.check prepare`` writes the folders the engine layer serves (used by
``make engine``): SmolLM2-135M (tokpool's converted GGUF cache entry) and the fine-tuned PRM as
a ``LlamaForTokenClassification`` folder.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from .. import _args as checks
from .compare import (
    ENGINE_ATOL,
    first_schedule_difference,
    memory_comparison,
    request_chunks,
    simulated_memory,
    simulated_steps,
)
from .flags import ENGINE_TASKS, EngineFlags
from .prepare import (
    ENGINE_MODELS,
    ENGINE_VOCAB_SIZE,
    checked_task_and_ids,
    engine_model_dir,
    load_checked,
    prepare_engine_models,
)
from .report import check_passed, format_report
from .vllm_venv import EngineCheckError, engine_python, engine_unavailable_reason, run_vllm

DEFAULT_PROMPTS = (
    "What is the capital of France?",
    "Chunked prefill splits a long prompt into pieces that fit the step's token budget.",
    "The quick brown fox jumps over the lazy dog. " * 6,
    "Step 1: 12 + 7 = 19\nStep 2: 19 * 2 = 38\nStep 3: 38 - 5 = 33\nAnswer: 33",
    "Token-level pooling returns one vector per prompt token: hidden states of every chunk must "
    "survive until the request finishes, so an engine keeps them across steps while other "
    "requests run and the step's output memory is reused. " * 2,
    "Hi",
)





def engine_check(
    model: str | os.PathLike = "smollm2-135m",
    prompts: Sequence[str | Sequence[int]] | None = None,
    *,
    task: str | None = None,
    chunk_sizes: Sequence[int] = (16, 48),
    max_num_batched_tokens: int = 64,
    max_num_seqs: int = 64,
    python: str | os.PathLike | None = None,
    progress: Callable[[str], None] | None = None,
    memory: bool = False,
    dtype: str = "float32",
    num_gpu_blocks_override: int | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Serve prompts with the local vLLM and with tokpool; compare outputs and schedules.

    One engine is started per chunk size (``long_prefill_token_threshold``); all prompts go to
    it in one ``encode`` call (a batch). tokpool encodes the same token ids with
    ``chunk_size`` = that threshold, and simulates the schedule with the same flags.

    Args:
        model: ``"smollm2-135m"`` (``token_embed``), ``"smollm2-prm"`` (``token_classify``) or
            a transformers folder both vLLM and ``tp.load_model`` load.
        prompts: texts or token-id lists (default ``DEFAULT_PROMPTS``).
        task: ``"token_embed"`` or ``"token_classify"`` (default: the model's).
        chunk_sizes: thresholds, one engine start each (``0``: none).
        max_num_batched_tokens, max_num_seqs: the engine's budget and sequence cap.
        python: the Python with vLLM (see ``engine_python``).
        progress: a callable taking one line per engine start (e.g. ``print``).
        memory: also compare the bytes the engine's pooling holds, step by step, with
            ``tp.simulate`` of the same serve line (``memory_comparison``): each run's table
            is ``summary["runs"][i]["memory"]``.
        dtype: the engine's ``--dtype`` (``"float32"``: outputs compared tightly; another
            dtype rounds every activation: outputs are then compared by shape only).
        num_gpu_blocks_override: the engine's KV-cache blocks (a small cache preempts).

    Returns:
        ``(table, summary)``: one row per (chunk size, prompt) with ``chunk_size``,
        ``prompt``, ``text``, ``tokens``, ``steps`` (engine steps that computed the prompt),
        ``max_abs_diff``, ``within_tol`` and ``schedule_equal`` (this prompt's chunks, step
        by step, equal to ``tp.simulate``'s); ``summary`` holds the vLLM version, device,
        engine start seconds, the tolerance and each run's first schedule difference.

    Raises:
        EngineCheckError: no vLLM, a model vLLM or tokpool cannot load, a task the model does
            not serve, bad chunk sizes or prompts.
    """
    sizes = _check_arguments(model, prompts, task, chunk_sizes, max_num_batched_tokens,
                             max_num_seqs, python, progress)
    engine_python(python)  # a named Python that does not exist: before any loading
    if max_num_batched_tokens < max_num_seqs:
        raise EngineCheckError(f"max_num_batched_tokens ({max_num_batched_tokens}) must be at "
                               f"least max_num_seqs ({max_num_seqs}), as vLLM requires")
    if prompts is not None and len(prompts) > 2 * max_num_seqs:
        raise EngineCheckError(f"{len(prompts)} prompts: at most 2 x max_num_seqs = "
                               f"{2 * max_num_seqs} (LLM.encode adds more only as others "
                               "finish, which tp.simulate's arrival-at-step-0 would not match)")
    name = os.fspath(model)
    if name not in ENGINE_MODELS and not Path(name).expanduser().is_dir():
        raise EngineCheckError(f"{name!r} is not a built-in engine model "
                               f"({list(ENGINE_MODELS)}) or a model folder")
    # Bad input is refused before any engine is looked for (naming the input): a folder that
    # is not a model, a task it does not serve, token ids outside its vocabulary. A folder is
    # loaded first (its config says all three); a built-in's vocabulary is known, and it is
    # loaded first only when a task other than its own is asked for.
    if name in ENGINE_MODELS:
        _check_token_ids(prompts, ENGINE_VOCAB_SIZE[name], name)
        task = task or ENGINE_MODELS[name]
        tp_model = (None if task == ENGINE_MODELS[name]
                    else load_checked(engine_model_dir(name), name))
    else:
        folder = Path(name).expanduser()
        if not (folder / "config.json").is_file():
            raise EngineCheckError(f"model: {name!r} is a folder without a config.json, not a "
                                   "transformers model folder; pass a built-in engine model "
                                   f"({list(ENGINE_MODELS)}) or a folder both vLLM and "
                                   "tp.load_model load")
        tp_model = load_checked(folder, name)
        task = task or tp_model.task
    texts = list(DEFAULT_PROMPTS if prompts is None else prompts)
    if tp_model is not None:
        ids = checked_task_and_ids(tp_model, name, task, texts)
    reason = engine_unavailable_reason(python)
    if reason is not None:
        raise EngineCheckError(reason)
    if tp_model is None:  # a built-in with its own task: loaded now
        folder = engine_model_dir(name)
        tp_model = load_checked(folder, name)
        ids = checked_task_and_ids(tp_model, name, task, texts)
    elif name in ENGINE_MODELS:
        folder = engine_model_dir(name)
    longest = max(len(p) for p in ids)
    # float32 on both sides: compared within ENGINE_ATOL; another engine dtype rounds every
    # activation, so its outputs are compared by shape only (max_abs_diff still reported)
    tolerance = ENGINE_ATOL[task] if dtype == "float32" else None
    rows, summary = [], {"tolerance": tolerance, "task": task, "model": name, "runs": [],
                         "dtype": dtype}
    for chunk in sizes:
        flags = EngineFlags(max_num_batched_tokens=max_num_batched_tokens,
                            max_num_seqs=max_num_seqs, long_prefill_token_threshold=chunk,
                            max_model_len=max(512, longest), dtype=dtype,
                            num_gpu_blocks_override=num_gpu_blocks_override)
        if progress is not None:
            progress(f"starting vLLM: {len(ids)} prompts, chunk size {chunk or 'none'}, "
                     f"budget {max_num_batched_tokens}")
        engine = run_vllm(folder, task, [ids], flags, python=python, memory=memory)
        ours = tp_model.encode(ids, task=task, chunk_size=flags.chunk_size)
        sim = simulated_steps([len(p) for p in ids], flags,
                              num_kv_blocks=engine.info["num_kv_blocks"],
                              block_size=engine.info["block_size"])
        got = engine.steps[0]
        for i, (text, out, theirs) in enumerate(
                zip(texts, ours, engine.outputs[0], strict=True)):
            diff = (out.float() - theirs).abs().max().item() if out.shape == theirs.shape \
                else float("inf")
            rows.append({
                "chunk_size": chunk, "prompt": i,
                "text": text if isinstance(text, str) else f"<{len(text)} token ids>",
                "tokens": len(ids[i]), "steps": len(request_chunks(got, i)),
                "max_abs_diff": diff,
                "within_tol": out.shape == theirs.shape and (tolerance is None
                                                             or diff <= tolerance),
                "schedule_equal": request_chunks(got, i) == request_chunks(sim, i),
            })
        summary["runs"].append({
            "chunk_size": chunk, "engine_steps": len(got), "simulated_steps": len(sim),
            "start_seconds": engine.info["start_seconds"],
            "peak_rss_mb": engine.info.get("peak_rss_mb"),
            "first_schedule_difference": first_schedule_difference(got, sim),
        })
        if memory:
            try:
                predicted = simulated_memory(folder, task, [len(p) for p in ids], flags)
            except (TypeError, ValueError) as err:
                raise EngineCheckError(f"tp.simulate cannot model this engine's serve line "
                                       f"({err})") from None
            summary["runs"][-1]["memory"] = memory_comparison(engine, 0, predicted)
        summary.update({k: engine.info[k] for k in ("vllm_version", "device", "torch_version")})
    return pd.DataFrame(rows), summary


def _check_arguments(model, prompts, task, chunk_sizes, max_num_batched_tokens, max_num_seqs,
                     python, progress) -> list[int]:
    """``engine_check``'s arguments, before anything is started or loaded (each refused with
    its name); returns the chunk sizes as a list."""
    try:
        checks.path("model", model)
        if prompts is not None:
            given = checks.items("prompts", prompts, what="a list of texts or token-id lists")
            for i, prompt in enumerate(given):
                if isinstance(prompt, str):
                    checks.text(f"prompts[{i}]", prompt)
                else:
                    ids = checks.items(f"prompts[{i}]", prompt, what="a text or a list of token "
                                     "ids")
                    checks.each(f"prompts[{i}]", ids, lambda n, v: checks.whole(n, v, minimum=0))
        if task is not None:
            checks.choice("task", task, ENGINE_TASKS)
        sizes = checks.items("chunk_sizes", chunk_sizes, what="a list of thresholds (0: none)")
        sizes = checks.each("chunk_sizes", sizes, lambda n, v: checks.whole(
            n, v, minimum=0, maximum=checks.INT32_MAX))
        for name, value in (("max_num_batched_tokens", max_num_batched_tokens),
                            ("max_num_seqs", max_num_seqs)):
            checks.whole(name, value, minimum=1, maximum=checks.INT32_MAX)
        if python is not None:
            checks.path("python", python)
        if progress is not None and not callable(progress):
            raise TypeError(f"progress must be a callable taking one line (e.g. print), got "
                            f"{progress!r}")
    except (TypeError, ValueError) as err:
        raise EngineCheckError(str(err)) from None
    return sizes  # type: ignore[return-value]


def _check_token_ids(prompts, vocab_size: int, name: str) -> None:
    """Token-id prompts within the model's vocabulary (texts are tokenized by the model)."""
    for i, prompt in enumerate(prompts or ()):
        if isinstance(prompt, str):
            continue
        outside = [int(t) for t in prompt if not 0 <= int(t) < vocab_size]
        if outside:
            raise EngineCheckError(
                f"prompts[{i}] has token ids outside {name}'s vocabulary [0, {vocab_size}): "
                f"{outside[:5]}{' ...' if len(outside) > 5 else ''}; pass ids below "
                f"{vocab_size} or the prompt as text")



def cli_main(args: argparse.Namespace) -> int:
    """``tokpool engine-check``: parse its options, run the check, print the report.

    Returns:
        0 when every output is within tolerance, every schedule equal and (``--memory``) every
        step's pooling bytes equal; 1 otherwise.

    Raises:
        EngineCheckError: bad options or a check that cannot run (the CLI prints one line).
    """
    try:
        sizes = [int(x) for x in args.chunk_sizes.split(",")]
    except ValueError:
        raise EngineCheckError(f"--chunk-sizes {args.chunk_sizes!r}: give ints separated by "
                               "commas, e.g. 16,48 (0: no threshold)") from None
    table, summary = engine_check(
        args.model, args.prompt, task=args.task, chunk_sizes=sizes,
        max_num_batched_tokens=args.budget, max_num_seqs=args.max_num_seqs, python=args.python,
        progress=lambda line: print(line, flush=True), memory=args.memory, dtype=args.dtype,
        num_gpu_blocks_override=args.num_gpu_blocks_override,
    )
    print(format_report(table, summary))
    return 0 if check_passed(table, summary) else 1


def _main(argv: Sequence[str]) -> int:
    if list(argv) != ["prepare"]:
        print("usage: python -m tokpool.engine.check prepare", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    for name, folder in prepare_engine_models().items():
        print(f"{name}: {folder}")
    print(f"engine model folders ready ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
