"""The ``tokpool`` command line: the gate, simulations, sweeps, embeddings, reports, engine check.

Every sub-command prints what it did to stdout. A user error — a bad argument, an input the
library refuses (any ``ValueError``/``TypeError``/``OSError`` it raises, the memory guard's
included), an output path that cannot be written — is ONE line on stderr and exit status 2, with
no traceback; output paths are checked before any work starts. Sizes accept vLLM's suffixes:
``k``/``m``/``g`` are powers of ten (``32k`` = 32,000) and ``K``/``M``/``G`` powers of two
(``1M`` = 1,048,576); they are bounded (``MAX_TOKENS``, ``MAX_RANGE_POINTS``, ``--max-steps``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import pandas as pd
import torch

import tokpool as tp

from ._text import format_bytes
from .report import execute_notebooks
from .sim.backends.limits import DEFAULT_MAX_RECORDS, MAX_STEPS_ENV, engine_record_limit
from .sim.backends.progress import bar_file
from .sim.schedule.aborts import abort_lines, abort_map, parse_abort

_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
_DEFAULT_RANGE_POINTS = 25
#: Largest size any option accepts (int32 positions: no engine takes a longer prompt).
MAX_TOKENS = 2**31 - 1
#: Most points a LOW..HIGH:POINTS range may have.
MAX_RANGE_POINTS = 1000
#: Default bound on the engine steps one simulation may run (``--max-steps`` raises it). The
#: command line's own, stricter than the Python API's (``limits.DEFAULT_MAX_RECORDS``, set by
#: ``TOKPOOL_MAX_STEPS``): ``_step_limit`` hands it to the library in place of that variable.
DEFAULT_MAX_STEPS = 200_000  # the counting engine runs ~50k steps/s
#: Exit status of every user error.
USER_ERROR = 2


class CLIError(ValueError):
    """A mistake in the command's input; printed without a traceback."""

class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (with a pointer to ``--help``), exit status 2."""
    def error(self, message: str) -> NoReturn:
        self.exit(USER_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parse_size(text: str) -> int:
    """``"32k"`` → 32000, ``"32K"`` → 32768, ``"1M"`` → 1048576, ``"512"`` → 512."""
    raw = text.strip().replace("_", "")
    factor = 1
    if raw and raw[-1] in _SUFFIXES:
        factor, raw = _SUFFIXES[raw[-1]], raw[:-1]
    try:
        value = float(raw) * factor
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise CLIError(
            f"cannot read {text!r} as a size; use digits with an optional suffix "
            "(k/m/g = 10^3/10^6/10^9, K/M/G = 2^10/2^20/2^30), e.g. 32k or 1M"
        )
    if value != int(value) or value < 1:
        raise CLIError(f"size {text!r} must be a positive whole number")
    if value > MAX_TOKENS:
        raise CLIError(f"size {text!r} is {int(value):,}, above the largest accepted "
                       f"{MAX_TOKENS:,} (2^31 - 1)")
    return int(value)


def parse_sizes(text: str) -> list[int]:
    """A comma list (``"30000,512"``) or a log-spaced range ``"1k..1M"`` / ``"1k..1M:40"``."""
    text = text.strip()
    if ".." in text:
        span, _, count = text.partition(":")
        lo_text, _, hi_text = span.partition("..")
        lo, hi = parse_size(lo_text), parse_size(hi_text)
        if hi < lo:
            raise CLIError(f"range {text!r} runs backwards; write LOW..HIGH")
        n = parse_size(count) if count else _DEFAULT_RANGE_POINTS
        if n > MAX_RANGE_POINTS:
            raise CLIError(f"range {text!r} asks for {n:,} points; use at most "
                           f"{MAX_RANGE_POINTS:,}, e.g. {span}:{_DEFAULT_RANGE_POINTS}")
        if n == 1 or lo == hi:
            return [lo]
        ratio = math.log(hi / lo) / (n - 1)
        points = sorted({round(lo * math.exp(i * ratio)) for i in range(n)} | {lo, hi})
        return points
    values = [parse_size(part) for part in text.split(",") if part.strip()]
    if not values:
        raise CLIError("give at least one prompt length, e.g. --prompt-lens 30000,512")
    return values


def _parse_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _arg(parse):
    """An argparse ``type=`` that reports ``parse``'s own message, not 'invalid value'."""
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    convert.__name__ = parse.__name__
    return convert


def _int_at_least(low: int):
    def parse_int(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise CLIError(f"{text!r} is not a whole number") from None
        if value < low:
            raise CLIError(f"{value} is below the minimum {low}")
        return value

    return _arg(parse_int)


def check_output_file(path: str | None, flag: str, example: str) -> None:
    """Fail now, not after the work, when ``path`` cannot be written as a file.

    Creates the file if it does not exist (removed again at once): the only test that also
    catches read-only file systems and special folders such as ``/proc``.
    """
    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise CLIError(f"{flag} {path} is a directory; give a file path, e.g. "
                       f"{target / example}")
    parent = target.parent
    if not parent.exists():
        raise CLIError(f"{flag} {path}: folder {parent} does not exist; create it first")
    if not parent.is_dir():
        raise CLIError(f"{flag} {path}: {parent} is not a folder")
    existed = target.exists()
    try:
        with open(target, "ab"):
            pass
    except OSError as err:
        raise CLIError(f"{flag} {path} cannot be written ({err.strerror or err})") from None
    if not existed:
        target.unlink(missing_ok=True)


def check_output_dir(path: str, flag: str) -> None:
    """Fail now when ``path`` is not a writable folder and cannot be created as one."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise CLIError(f"{flag} {path} is a file; give a folder")
    probe_dir = target if target.exists() else next(
        (p for p in target.parents if p.exists()), Path("."))
    if not probe_dir.is_dir():
        raise CLIError(f"{flag} {path}: {probe_dir} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=probe_dir):
            pass
    except OSError as err:
        raise CLIError(f"{flag} {path}: {probe_dir} is not writable "
                       f"({err.strerror or err})") from None


def check_steps(prompt_lens: Sequence[int], budget: int, max_steps: int | None, *,
                per_prompt: bool = False, runs: int = 1, mode: str = "analytic") -> None:
    """Refuse a simulation that would run more than ``max_steps`` engine steps.

    At most ``budget`` tokens are scheduled per step, so one simulation runs at least
    ``ceil(tokens / budget)`` steps; a sweep runs each prompt alone, ``runs`` times (policies
    x async settings), and all of its steps count. Closed forms take no steps: ``--max-steps``
    given with ``--mode closed_form`` is refused as meaningless. ``_step_limit`` hands the bound
    to the library's own (``tokpool.sim.backends.limits``).
    """
    if mode == "closed_form":
        if max_steps is not None:
            raise CLIError("--max-steps bounds the engine steps of --mode analytic/tensor; "
                           "--mode closed_form solves each request by formula and takes no "
                           "steps: drop --max-steps")
        return
    max_steps = DEFAULT_MAX_STEPS if max_steps is None else max_steps
    tokens = sum(prompt_lens)
    if per_prompt:
        steps = sum(-(-n // budget) for n in prompt_lens) * runs
    else:
        steps = math.ceil(tokens / budget)
    if steps > max_steps:
        many = f" in each of {runs} runs" if per_prompt and runs > 1 else ""
        cheaper = "; --mode closed_form takes no steps" if per_prompt or len(
            prompt_lens) == 1 else ""
        raise CLIError(
            f"{tokens:,} tokens{many} at --budget {budget:,} tokens per step is at least "
            f"{steps:,} engine steps, above --max-steps {max_steps:,}; raise --budget, shorten "
            f"the prompts, or raise --max-steps{cheaper}"
        )


def _step_limit(args: argparse.Namespace, prompt_lens: Sequence[int], runs: int = 1):
    """The library's bound on steps + requests (``tokpool.sim.backends.limits``), from
    ``--max-steps``."""

    steps = DEFAULT_MAX_STEPS if args.max_steps is None else args.max_steps
    return engine_record_limit(steps + len(prompt_lens) * runs)


# --- gate ----------------------------------------------------------------------------------


def _cmd_gate(args: argparse.Namespace) -> int:

    if args.model in tp.pooler.tasks.MODEL_KINDS:
        kind = tp.pooler.tasks.MODEL_KINDS[args.model]
        tasks, attn, archs, label = kind.tasks, kind.attn_type, kind.architectures, kind.example
    else:
        model = tp.load_model(args.model)
        tasks, attn, archs = model.supported_tasks, model.attn_type, model.architectures
        label = model.name
    selected = tp.select_task(tasks, requested=args.task, architectures=archs)
    print(f"model: {args.model} ({label}); attn_type={attn}; declares {sorted(tasks)}")
    with warnings.catch_warnings():  # the gate policy's old name: the CLI still takes it
        warnings.simplefilter("ignore", DeprecationWarning)
        args.policy = tp.pooler.tasks.gate_policy(args.policy)
    runner = sorted(tp.pooler.tasks.runner_tasks(attn_type=attn, policy=args.policy))
    print(f"gate policy: {args.policy}; runner set {runner}")
    served = tp.gate(tasks, requested=args.task, attn_type=attn, policy=args.policy,
                     architectures=archs)
    print(f"selected task: {selected}")
    print(f"served: {sorted(served)}")
    return 0


# --- simulate / sweep ----------------------------------------------------------------------


def _sim_config(args: argparse.Namespace, **overrides):

    # Unset options take vLLM's defaults (tp.SimConfig resolves them, as the API does).
    fields: dict = {
        "max_num_batched_tokens": args.budget,
        "max_num_seqs": args.max_num_seqs,
        "enable_chunked_prefill": False if args.no_chunked_prefill else None,
        "dtype": args.dtype,
        "head_dtype": None if args.head_dtype == "none" else args.head_dtype,
        "use_activation": not args.no_activation,
        "hardware": args.hardware,
        "usage": args.usage,
        "max_model_len": args.max_model_len,
        # vLLM reads VLLM_ALLOW_LONG_MAX_MODEL_LEN from the environment: so does the CLI
        "allow_long_max_model_len": os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") == "1",
        "as_if": args.as_if,
        "enforce_eager": args.enforce_eager,
        "output_memory": args.output_memory,
    }
    if args.task:
        fields["task"] = args.task
    fields.update(overrides)
    if getattr(args, "vllm_args", None):
        # The vLLM line decides the engine; tokpool's own options add what it cannot say.
        return tp.SimConfig.from_vllm_args(
            args.vllm_args, model=args.model_preset, hardware=args.hardware, as_if=args.as_if,
            **{k: v for k, v in overrides.items() if k != "async_scheduling" or v},
        )
    if args.model_preset:
        task = fields.pop("task", None)
        if args.hidden_size:
            fields["hidden_size"] = args.hidden_size
        return tp.SimConfig.for_model(args.model_preset, task=task, **fields)
    fields["hidden_size"] = args.hidden_size or 4096
    return tp.SimConfig(**fields)


def _cmd_simulate(args: argparse.Namespace) -> int:


    check_output_file(args.csv, "--csv", "steps.csv")
    check_output_file(args.trace, "--trace", "trace.json")
    prompt_lens = parse_sizes(args.prompt_lens)
    config = _sim_config(args, policy=args.policy, async_scheduling=args.async_scheduling)
    check_steps(prompt_lens, config.max_num_batched_tokens, args.max_steps, mode=args.mode)
    with _step_limit(args, prompt_lens), bar_file(sys.stderr):  # a long run's bar: stderr
        result = tp.simulate(prompt_lens, config, mode=args.mode, aborts=abort_map(args.abort))
    steps = result.steps
    columns = [c for c in ("step", "num_scheduled_tokens", "num_finished", "pool_bytes",
                           "pool_peak_bytes", "host_bytes", "copy_bytes", "d2h_bytes",
                           "est_step_s") if c in steps.columns]
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        table = steps[columns]
        if len(table) > 2 * args.max_rows:
            head, tail = table.head(args.max_rows), table.tail(args.max_rows)
            print(head.to_string(index=False))
            print(f"... {len(table) - 2 * args.max_rows} steps not shown ...")
            print(tail.to_string(index=False, header=False))
        else:
            print(table.to_string(index=False))
    print()
    print(f"policy={config.policy} async_scheduling={config.async_scheduling} "
          f"mode={args.mode} requests={len(prompt_lens)} steps={len(steps)}")
    print(f"peak pooling bytes: {format_bytes(result.peak_pooling_bytes)} "
          f"({result.peak_pooling_bytes:,})")
    print(f"peak device bytes (+ hidden buffer): {format_bytes(result.peak_device_bytes)}")
    print(f"bytes copied by pooling: {format_bytes(int(steps['copy_bytes'].sum()))}; "
          f"host copies: {format_bytes(int(steps['d2h_bytes'].sum()))}")
    if "est_step_s" in steps.columns:
        total = steps["est_step_s"].sum(min_count=1)
        if pd.notna(total):
            print(f"estimated time (roofline ESTIMATE): {total * 1e3:,.2f} ms")
    if args.mode == "tensor":
        print(f"corrupted requests: {result.corrupted or 'none'}")
    else:
        print(f"corrupted requests (predicted): {result.corrupted or 'none'}")
    for line in abort_lines(result.aborts):
        print(line)
    if args.csv:
        steps.to_csv(args.csv, index=False)
        print(f"per-step table written to {args.csv}")
    if args.trace:
        path = result.to_chrome_trace(args.trace)
        print(f"trace written to {path} (open in https://ui.perfetto.dev or chrome://tracing)")
    _print_looked_past(result.looked_past)
    _print_ignored(config)
    return 0


def _print_looked_past(looked_past) -> None:
    """``--as-if``: what vLLM would have refused, so a number is never read as vLLM's."""
    for message in looked_past:
        print(f"AS IF (--as-if): vLLM would refuse this run: {message}")


def _print_ignored(config) -> None:
    """The ``--vllm-args`` flags that change nothing simulated, said rather than dropped."""
    if config.ignored_flags:
        print("ignored (they change nothing tokpool simulates): "
              + " ".join(config.ignored_flags))


def _cmd_sweep(args: argparse.Namespace) -> int:

    check_output_file(args.out, "--out", "sweep.csv")
    check_output_file(args.plot, "--plot", "memory.png")
    prompt_lens = parse_sizes(args.prompt_lens)
    policies = _parse_list(args.policies)
    if not policies:
        raise CLIError("--policies is empty; give one or more of "
                       f"{list(tp.RETENTION_POLICIES)}, comma-separated")
    for policy in policies:
        if policy not in tp.RETENTION_POLICIES:
            known = list(tp.RETENTION_POLICIES)
            raise CLIError(f"unknown policy {policy!r} in --policies; choose from {known}")
    modes = {"on": (True,), "off": (False,), "both": (False, True)}[args.async_mode]
    config = _sim_config(args)
    check_steps(prompt_lens, config.max_num_batched_tokens, args.max_steps, per_prompt=True,
                runs=len(policies) * len(modes), mode=args.mode)
    # the bar (stdout in a notebook) goes to stderr here: stdout carries the table
    with _step_limit(args, prompt_lens, runs=len(policies) * len(modes)), \
            contextlib.redirect_stdout(sys.stderr):
        df = tp.sweep(prompt_lens, config, policies=policies, async_scheduling=modes,
                      mode=args.mode, progress=not args.no_progress)
    if args.out:
        df.to_csv(args.out, index=False)
        print(f"{len(df)} rows written to {args.out}")
    pivot = df.pivot_table(index="prompt_len", columns=["policy", "async_scheduling"],
                           values="peak_pooling_bytes")
    shown = pivot if len(pivot) <= 12 else pivot.iloc[:: max(1, len(pivot) // 12)]
    print("peak pooling bytes by prompt length, policy and async scheduling:")
    print(shown.map(format_bytes).to_string())
    if args.plot:
        import matplotlib

        matplotlib.use("Agg", force=True)
        ax = tp.plot_memory_vs_prompt_length(df, hardware=config.hardware,
                                             async_scheduling=modes[-1])
        ax.figure.savefig(args.plot, dpi=120)
        print(f"plot written to {args.plot}")
    _print_looked_past(df.attrs.get("looked_past", ()))
    _print_ignored(config)
    return 0


# --- embed ---------------------------------------------------------------------------------


def _cmd_embed(args: argparse.Namespace) -> int:
    from safetensors.torch import save_file


    if args.text is None and args.text_file is None:
        raise CLIError("give the text with --text '...' or --text-file PATH")
    if args.text is not None and args.text_file is not None:
        raise CLIError("give --text or --text-file, not both")
    check_output_file(args.out, "--out", "tokens.safetensors")
    text = args.text if args.text is not None else _read_text(args.text_file)
    model = tp.load_model(args.model, dtype=args.dtype)
    source = "--text" if args.text is not None else f"--text-file {args.text_file}"
    ids = _bounded_token_ids(model, text, source)
    (out,) = model.encode([ids], task=args.task, chunk_size=args.chunk_size,
                          policy=args.policy, layer=args.layer,
                          use_activation=not args.no_activation, dimensions=args.dimensions)
    tensors = {"embeddings": out.contiguous(), "token_ids": torch.tensor(ids)}
    save_file(tensors, args.out, metadata={"model": str(args.model), "task": args.task,
                                           "chunk_size": str(args.chunk_size)})
    print(f"{args.task} of {len(ids)} tokens from {args.model}: shape {tuple(out.shape)}, "
          f"dtype {out.dtype}; written to {args.out} (keys: embeddings, token_ids)")
    return 0


#: Largest --text-file read (bytes): far above any model's context (a token is >= 1 byte
#: of text for the models tokpool loads, and the longest context is about a million tokens).
MAX_TEXT_FILE_BYTES = 256 * 2**20


def _bounded_token_ids(model, text: str, source: str) -> list[int]:
    """Token ids of ``text``, refusing a text longer than the model's context EARLY: prefixes of
    growing length are tokenized first, so a 20 MB file costs a few contexts' worth of
    tokenizer memory, not the whole file's."""
    limit = model.max_length
    if limit is not None:
        n = max(4096, 8 * limit)  # characters
        while n < len(text):
            count = len(model.tokenizer(text[:n], add_special_tokens=True,
                                        verbose=False)["input_ids"])
            if count > limit:
                raise CLIError(
                    f"{source}: its first {n:,} characters (of {len(text):,}) are already "
                    f"{count:,} tokens, more than {model.name}'s max_length {limit:,}; split "
                    "the text or embed a shorter part"
                )
            n *= 4
    return model.token_ids(text)[0].tolist()


def _read_text(path: str) -> str:
    file = Path(path)
    if file.is_dir():
        raise CLIError(f"--text-file {path} is a directory; give a text file")
    if not file.exists():
        raise CLIError(f"--text-file {path} does not exist")
    if not file.is_file():
        raise CLIError(f"--text-file {path} is not a regular file (a device, pipe or socket: "
                       "it may never end); save the text to a file and pass that")
    size = file.stat().st_size
    if size > MAX_TEXT_FILE_BYTES:
        raise CLIError(f"--text-file {path} is {size:,} bytes, more than tokpool reads "
                       f"({MAX_TEXT_FILE_BYTES:,}) and far more than any model's context; "
                       "embed a part of it")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise CLIError(f"--text-file {path} is not UTF-8 text ({err.reason} at byte "
                       f"{err.start})") from None


# --- report --------------------------------------------------------------------------------


def _cmd_report(args: argparse.Namespace) -> int:

    source = Path(args.notebooks)
    if source.is_file() and source.suffix != ".ipynb":
        raise CLIError(f"--notebooks {source} is not a .ipynb file or a folder of them")
    if not (source.is_file() or (source.is_dir() and any(source.glob("*.ipynb")))):
        raise CLIError(f"no notebooks found at {source}; pass --notebooks DIR")
    check_output_dir(args.out, "--out")
    written = execute_notebooks(args.notebooks, args.out, quick=args.quick,
                                timeout=args.timeout, progress=print)
    print(f"{len(written)} report(s) written under {args.out}/")
    return 0


def _cmd_site(args: argparse.Namespace) -> int:
    from .site import build_site  # matplotlib and the widgets: only for this command

    check_output_dir(args.out, "OUT")
    summary = build_site(args.out, sample=args.sample)
    print(f"site written to {summary.path}/: {summary.size_bytes / 1e6:.1f} MB, "
          f"{sum(summary.states.values())} states, {summary.seconds:.0f} s; open index.html")
    return 0


# --- engine-check --------------------------------------------------------------------------


def _cmd_plan(args: argparse.Namespace) -> int:
    from .deploy.plan import plan  # the verdict and its numbers live in the deploy wing

    found = plan(args.model, task=args.task, gpu=args.gpu, prompt_len=args.prompt_len,
                 serve_line=args.serve_line)
    print(json.dumps(found.to_dict(), indent=2) if args.json else found)
    return 0


def _cmd_engine_check(args: argparse.Namespace) -> int:
    if args.score:
        from .engine.score import cli_score  # its own module: one engine, two stages

        return cli_score(args)
    for flag, value in (("--query", args.query), ("--doc", args.doc)):
        if value:
            raise CLIError(f"{flag} is used with --score only; add --score, or give --prompt")
    from .engine.check import cli_main  # the logic lives there; vLLM runs in a subprocess

    if args.chunk_sizes is None:  # --score has its own default (one engine)
        args.chunk_sizes = "16,48"
    return cli_main(args)


# --- parser --------------------------------------------------------------------------------


def _add_engine_options(p: argparse.ArgumentParser, *, default_mode: str = "analytic") -> None:
    p.add_argument("--model", "--model-preset", dest="model_preset",
                   help="a Hub id (its config files, as vLLM reads them; never weights) or "
                   "a model preset, e.g. Qwen/Qwen3-Embedding-8B; see tp.MODEL_PRESETS")
    p.add_argument("--hardware", "--gpu", dest="hardware", default="H100 SXM",
                   help="hardware preset (default: H100 SXM)")
    p.add_argument("--task", help="token_embed, token_classify, embed or classify")
    p.add_argument("--hidden-size", type=_arg(parse_size),
                   help="row width (default 4096 or preset)")
    p.add_argument("--dtype", default="bfloat16", help="hidden-state dtype (default bfloat16)")
    p.add_argument("--head-dtype", default="float32",
                   help="pooling head dtype (default float32, as vLLM; 'none': no cast)")
    p.add_argument("--no-activation", action="store_true",
                   help="skip the head's normalise/softmax (vLLM applies it by default)")
    p.add_argument("--budget", type=_arg(parse_size), default=None,
                   help="max_num_batched_tokens per step (default: vLLM's for the hardware "
                        "and --usage, e.g. 8192 on an H100 for vllm serve)")
    p.add_argument("--max-num-seqs", type=_int_at_least(1), default=None,
                   help="most running requests (default: vLLM's)")
    p.add_argument("--usage", choices=("server", "llm"), default="server",
                   help="vLLM's usage context for the defaults: vllm serve (default) or the "
                        "offline LLM class")
    p.add_argument("--max-model-len", type=_arg(parse_size), default=None,
                   help="longest prompt accepted (default: the model preset's context; past "
                        "it vLLM needs VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the environment)")
    p.add_argument("--as-if", action="store_true",
                   help="simulate past vLLM's refusals on purpose (a prompt or max_model_len "
                        "past the context, a KV cache too small): the result says what vLLM "
                        "would refuse")
    p.add_argument("--enforce-eager", action="store_true",
                   help="no CUDA graphs: every step writes a fresh output tensor")
    p.add_argument("--vllm-args", default=None,
                   help='a "vllm serve MODEL ..." line or its flags, e.g. "--max-num-batched-'
                        'tokens 8192 -tp 4 --async-scheduling" (vLLM 0.33.0 names; the server\'s '
                        "own flags are listed as ignored, an unknown or unmodelled flag is an "
                        "error); the engine options above are ignored")
    p.add_argument("--output-memory", choices=("vllm", "one_buffer"), default="vllm",
                   help="where step outputs live: vLLM's graph/eager rule (default) or the "
                        "teaching model's one buffer rewritten by every step")
    p.add_argument("--max-steps", type=_int_at_least(1), default=None,
                   help=f"refuse runs of more engine steps (default {DEFAULT_MAX_STEPS:,}; "
                        "tensor and analytic modes: closed forms take no steps). The command "
                        "line's own bound: for this command it replaces the Python API's "
                        f"{MAX_STEPS_ENV} (default {DEFAULT_MAX_RECORDS:,} steps + requests), "
                        "which the command does not read")
    p.add_argument("--no-chunked-prefill", action="store_true")
    p.add_argument("--mode", choices=("analytic", "tensor", "closed_form"), default=default_mode,
                   help=f"tensor: real tensors; analytic: the same loop counting bytes; "
                        f"closed_form: one request by formula (default {default_mode})")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tokpool",
        description="Token-level pooling in LLM inference engines: the task gate, the step "
        "simulator (ownership and memory), embeddings from real models, notebook reports.",
        epilog="Sizes: k/m/g are powers of ten (32k = 32,000), K/M/G powers of two "
        "(1M = 1,048,576); ranges LOW..HIGH[:POINTS] are log-spaced.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)

    p = sub.add_parser("gate", help="what the pooling runner's task gate says for a model",
                       description="Run the task gate (vLLM's, before or after PR #50931) for a "
                       "model kind from the catalogue or a loadable model.")
    p.add_argument("model", metavar="MODEL_KIND|MODEL",
                   help="a catalogue kind (e.g. decoder_embedding) or a model name/path "
                   "(e.g. smollm2-135m)")
    p.add_argument("--task", help="the task to request (default: the model's default task)")
    p.add_argument("--policy", choices=("current", "pre_50931", "legacy"), default="current",
                   help="the gate after vLLM PR #50931 (current) or before it (pre_50931; "
                        "'legacy' is its old name)")
    p.set_defaults(func=_cmd_gate)

    p = sub.add_parser("simulate", help="replay an engine's steps: per-step memory, corruption",
                       description="Simulate chunked prefill with token-level pooling and print "
                       "the per-step memory ledger and a summary.")
    p.add_argument("--prompt-lens", required=True, help="e.g. 30000,512 or 1k..64k:5")
    p.add_argument("--policy", default="clone", help="legacy, clone, prealloc or offload")
    p.add_argument("--async", dest="async_scheduling", action="store_true",
                   help="async scheduling (step N+1 launches before step N's host copy)")
    p.add_argument("--abort", action="append", type=_arg(parse_abort), metavar="REQ:STEP",
                   help="cancel request REQ before engine step STEP (repeatable)")
    _add_engine_options(p)
    p.add_argument("--trace", help="write a Chrome/Perfetto trace JSON here")
    p.add_argument("--csv", help="write the per-step table here")
    p.add_argument("--max-rows", type=_int_at_least(0), default=10,
                   help="steps shown at each end")
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser("sweep", help="memory and time estimates against prompt length",
                       description="Sweep prompt lengths × policies × scheduling modes.")
    p.add_argument("--prompt-lens", required=True, help="e.g. 1k..1M or 1K..1M:40 or 8k,32k")
    p.add_argument("--policies", default="clone,prealloc,offload")
    p.add_argument("--async", dest="async_mode", choices=("on", "off", "both"), default="both")
    _add_engine_options(p, default_mode="closed_form")
    p.add_argument("--out", help="CSV file for the full table")
    p.add_argument("--plot", help="PNG file: memory vs prompt length per policy")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_sweep)

    p = sub.add_parser("embed", help="per-token embeddings of a text from a real model",
                       description="Encode a text and save the per-token output as safetensors.")
    p.add_argument("model", help="smollm2-135m, minilm-l6, a local directory, ...")
    p.add_argument("--text")
    p.add_argument("--text-file")
    p.add_argument("--out", required=True, help="output .safetensors file")
    p.add_argument("--task", default="token_embed")
    p.add_argument("--chunk-size", type=_arg(parse_size),
                   help="chunked prefill (decoders only)")
    p.add_argument("--policy", default="clone")
    p.add_argument("--layer", type=_int_at_least(-(2**31)), default=-1)
    p.add_argument("--dimensions", type=_int_at_least(1), help="Matryoshka truncation")
    p.add_argument("--dtype", default=None, help="model dtype (default: the model's)")
    p.add_argument("--no-activation", action="store_true", help="skip L2 normalisation")
    p.set_defaults(func=_cmd_embed)

    p = sub.add_parser("plan", help="would vLLM serve this model and prompt length: the "
                       "verdict first, the pooling peak, the KV cache, the recipe")
    p.add_argument("model", nargs="?", help="a Hub id (e.g. BAAI/bge-m3) or a model folder")
    p.add_argument("--task", help="the pooling task (default: the one vLLM selects)")
    p.add_argument("--gpu", "--hardware", dest="gpu", default="H100", help="the device")
    p.add_argument("--prompt-len", type=_arg(parse_size), default=32768, help="e.g. 32K")
    p.add_argument("--serve-line", help='a "vllm serve MODEL ..." line to judge instead')
    p.add_argument("--json", action="store_true", help="the plan as JSON, for scripts")
    p.set_defaults(func=_cmd_plan)

    p = sub.add_parser("engine-check", help="compare tokpool with your local vLLM engine",
                       description="Serve prompts with the local vLLM engine (CPU or GPU) and "
                       "with tokpool: per-token outputs (max abs difference) and the engine's "
                       "schedule vs tp.simulate's; with --memory the pooling bytes of every "
                       "step. One engine start per chunk size. With --score: queries scored "
                       "against documents by the engine's own worker-side late interaction "
                       "(two encode calls), the scores vs "
                       "tp.late_interaction.maxsim_batched and the worker's "
                       "query-cache bytes per step vs tp.simulate_score (one engine). Exit 0 "
                       "when all agree, 1 when something differs. Without vLLM: `make engine`.")
    p.add_argument("model", nargs="?", default="smollm2-135m",
                   help="smollm2-135m (token_embed), smollm2-prm (token_classify) or a model "
                   "folder vLLM and tokpool both load (default smollm2-135m)")
    p.add_argument("--task", help="token_embed or token_classify (default: the model's)")
    p.add_argument("--prompt", action="append",
                   help="a prompt text; repeat for several (default: six built-in prompts)")
    p.add_argument("--chunk-sizes", default=None,
                   help="long_prefill_token_threshold values, one engine each (default 16,48; "
                   "with --score one value, default 0: none)")
    p.add_argument("--budget", type=_arg(parse_size), default=64,
                   help="max_num_batched_tokens (default 64)")
    p.add_argument("--max-num-seqs", type=_int_at_least(1), default=64)
    p.add_argument("--python", help="the Python that has vLLM (default: $TOKPOOL_ENGINE_PYTHON, "
                   "else .venv-engine/bin/python, else this Python)")
    p.add_argument("--memory", action="store_true",
                   help="also measure the bytes the engine's pooling holds, step by step "
                   "(vLLM's own AllPool, head and runner wrapped in the engine process), against "
                   "tp.simulate of the same serve line; exit 1 when a step differs")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                   help="the engine's --dtype (default float32; others: outputs compared by "
                   "shape only)")
    p.add_argument("--num-gpu-blocks-override", type=_int_at_least(1), default=None,
                   help="the engine's KV-cache blocks (a small cache makes vLLM preempt)")
    p.add_argument("--score", action="store_true",
                   help="score queries against documents as vLLM's /score does in two stages "
                   "(task token_embed): engine scores vs tp.late_interaction.maxsim_batched over "
                   "tokpool's and the engine's token embeddings, the worker's query-cache bytes "
                   "per step vs tp.simulate_score; exit 1 with the first difference")
    p.add_argument("--query", action="append",
                   help="with --score: a query text; repeat for several (1:N or N:N with "
                   "--doc; default: two built-in queries)")
    p.add_argument("--doc", action="append",
                   help="with --score: a document text; repeat for several (default: four "
                   "built-in documents)")
    p.set_defaults(func=_cmd_engine_check)

    p = sub.add_parser("report", help="execute every notebook into HTML under reports/",
                       description="Run the notebooks top to bottom and save them as HTML.")
    p.add_argument("--quick", action="store_true", help="TOKPOOL_QUICK=1: small sizes")
    p.add_argument("--out", default="reports")
    p.add_argument("--notebooks", default="notebooks")
    p.add_argument("--timeout", type=_int_at_least(1), default=1800, help="seconds per cell")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("site", help="the explorers as a static site (no kernel, no network)",
                       description="Precompute every explorer state into OUT/ (index.html).")
    p.add_argument("out", metavar="OUT")
    p.add_argument("--sample", action="store_true", help="a small grid (seconds, not minutes)")
    p.set_defaults(func=_cmd_site)
    return parser


def _user_error_types() -> tuple[type[BaseException], ...]:
    from .pooler.vllm_bridge import VllmUnavailableError  # an ImportError: vLLM is not installed

    types: list[type[BaseException]] = [ValueError, TypeError, OSError, NotImplementedError,
                                        OverflowError, MemoryError, VllmUnavailableError]
    try:  # a notebook cell that fails under `tokpool report`
        from nbclient.exceptions import CellExecutionError
    except ImportError:  # pragma: no cover
        pass
    else:
        types.append(CellExecutionError)
    return tuple(types)


def _one_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if type(err).__name__ == "CellExecutionError" and lines:
        return f"a notebook cell failed: {lines[-1]}"
    text = " ".join(lines) or repr(err)
    return text if len(text) <= 2000 else text[:2000] + " ..."


@contextlib.contextmanager
def _preset_notes(quiet: bool):
    """A preset answering for a Hub id whose files cannot be had (``PresetAnswersWarning``) is
    said as one ``note:`` line on stdout after the output (stderr keeps one line for an error);
    other warnings pass on."""
    from .sim.vllm_rules.hub import PresetAnswersWarning  # light: no Hub client imported

    failed = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PresetAnswersWarning)
        try:
            yield
            failed = False
        finally:
            for w in caught:
                if not issubclass(w.category, PresetAnswersWarning):
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
                elif not (failed or quiet):
                    print(f"note: {w.message}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tokpool`` console script.

    Returns:
        0 on success; ``USER_ERROR`` (2) for any user error, printed as one line on stderr.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse: --help (0) or a usage error (2, already printed)
        return int(stop.code or 0)
    try:
        with _preset_notes(quiet=bool(getattr(args, "json", False))):
            return args.func(args)
    except _user_error_types() as err:
        name = type(err).__name__
        prefix = "" if isinstance(err, CLIError) else f"{name}: "
        print(f"tokpool {args.command}: error: {prefix}{_one_line(err)}", file=sys.stderr)
        return USER_ERROR
    except RuntimeError as err:  # an allocator that ran out of memory; anything else is a bug
        text = str(err)
        if "out of memory" not in text and "can't allocate memory" not in text:
            raise
        print(f"tokpool {args.command}: error: out of memory ({_one_line(err)[:300]}); use "
              "smaller inputs or a cheaper mode (see TOKPOOL_MEMORY_LIMIT)", file=sys.stderr)
        return USER_ERROR
    except KeyboardInterrupt:  # pragma: no cover
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.exit(main())
