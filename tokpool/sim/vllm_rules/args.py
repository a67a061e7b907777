"""vLLM's command-line flags, parsed as vLLM 0.33.0 parses them (no vLLM import).

``parse_vllm_args("vllm serve MODEL --max-num-batched-tokens 8k -tp 4 ...")`` returns a dict
of ``SimConfig`` field names where ``SimConfig`` has the field, and the other modelled values
under their own names (``tensor_parallel_size``, ``gpu_memory_utilization``, ``block_size``,
``kv_cache_dtype``, ...). Names, aliases and value types were read in
``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args``, ``_compute_kwargs``) and
``vllm/utils/argparse_utils.py`` (``FlexibleArgumentParser.parse_args``: ``_`` in a flag name is
read as ``-``; ``human_readable_int``: ``32k`` = 32,000, ``32K`` = 32,768; decimals only with
``k/m/g/t``).

Every option of vLLM 0.33.0's ``vllm serve`` is known (``serve_flags``: read from vLLM's own
parser, ``make_arg_parser``), so a line copied from a deployment loads and nothing is dropped
silently: the API server's own options (``--host``, ``--port``, ``--api-key``, ...) and engine
flags that change nothing tokpool simulates (``--served-model-name``, ``--seed``, logging, ...)
come back under ``"ignored"`` (``SimConfig.ignored_flags``); a flag vLLM has but tokpool does
not model (``--kv-cache-memory-bytes``, ``--quantization``, ...) raises ``ValueError`` saying
so, or with ``unmodelled="return"`` is returned under ``"unmodelled"`` (flag -> raw value); a
flag vLLM does not have raises as vLLM's parser does (the removed ``--task``: vLLM's hint to
``--runner pooling`` / ``--convert``). ``-O0`` .. ``-O3`` are vLLM's optimization level.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal

from .pooling_kind import POOLING_KINDS
from .serve_flags import (
    CANONICAL,
    FRONTEND_OPTIONS,
    NEGATIVE_OPTIONS,
    SERVE_OPTIONS,
    VLLM_SERVE_VERSION,
)
from .sizes import check_engine_sizes

__all__ = ["SUPPORTED_FLAGS", "UNMODELLED_FLAGS", "human_readable_int", "parse_vllm_args"]

#: vllm/config/model.py ``ModelDType``; vLLM's aliases mapped to tokpool's dtype names.
_MODEL_DTYPES = {"auto": None, "half": "float16", "float16": "float16",
                 "bfloat16": "bfloat16", "float": "float32", "float32": "float32"}
#: vllm/config/cache.py ``CacheDType`` (0.33.0).
KV_CACHE_DTYPES = (
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
    "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
    "turboquant_3bit_nc", "octave_k3v4", "octave_k3v3", "octave_k3v3_compact",
    "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head",
    "nvfp4", "nvfp4_4over6",
)
#: PoolerConfig keys (vllm/config/pooler.py) tokpool models, and the SimConfig field.
_POOLER_KEYS = {"task": "task", "use_activation": "use_activation",
                "step_tag_id": "step_tag_id", "returned_token_ids": "returned_token_ids",
                "tok_pooling_type": "pooling", "pooling_type": "pooling"}


def human_readable_int(value: str) -> int:
    """vLLM's ``human_readable_int`` (vllm/utils/argparse_utils.py): ``1k`` = 1,000,
    ``1K`` = 1,024, ``25.6k`` = 25,600; a decimal with a binary suffix is refused."""
    text = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text)
    if match:
        number, suffix = match.groups()
        if suffix.islower():
            return int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
        if "." in number:
            raise ValueError(f"{value!r}: decimals are not allowed with binary suffixes like "
                             f"{suffix}; did you mean {number}{suffix.lower()}?")
        return int(number) * 2 ** (10 * "KMGT".index(suffix) + 10)
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{value!r} is not an integer (vLLM accepts 8192, 8k, 8K)") from None


def _max_model_len(value: str) -> int | None:
    """``human_readable_int_or_auto``: ``-1``/``auto`` is the model's own context (None)."""
    if value.strip() in ("-1",) or value.strip().lower() == "auto":
        return None
    return human_readable_int(value)


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an integer") from None


def _float(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a number") from None


def _choice(options) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value not in options:
            raise ValueError(f"{value!r} is not one of {list(options)}")
        return value
    return parse


def _optimization_level(value: str) -> int:
    """vLLM's ``-O``/``--optimization-level`` (vllm/config/vllm.py, ``OptimizationLevel``)."""
    if value not in ("0", "1", "2", "3"):
        raise ValueError(f"{value!r} is not one of vLLM's optimization levels 0, 1, 2, 3 "
                         "(OptimizationLevel)")
    return int(value)


# flag -> (dest, parser or "bool" (vLLM's EnableDisableAction) or "list"). Aliases and the
# negative forms (-tp, --disable-chunked-prefill, --no-enforce-eager, ...) come from vLLM's
# parser (serve_flags.CANONICAL, NEGATIVE_OPTIONS).
_FLAGS: dict[str, tuple[str, Any]] = {
    "--model": ("model", str),
    "--max-num-batched-tokens": ("max_num_batched_tokens", human_readable_int),
    "--max-num-seqs": ("max_num_seqs", _int),
    "--max-model-len": ("max_model_len", _max_model_len),
    "--async-scheduling": ("async_scheduling", "bool"),
    "--enforce-eager": ("enforce_eager", "bool"),
    "--enable-chunked-prefill": ("enable_chunked_prefill", "bool"),
    # CacheConfig.enable_prefix_caching: BooleanOptionalAction, default None (the model's)
    "--enable-prefix-caching": ("enable_prefix_caching", "bool"),
    "--tensor-parallel-size": ("tensor_parallel_size", _int),
    "--pipeline-parallel-size": ("pipeline_parallel_size", _int),
    "--data-parallel-size": ("data_parallel_size", _int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", _float),
    "--block-size": ("block_size", _int),
    # CacheConfig.kv_cache_memory_bytes (human_readable_int, EngineArgs.add_cli_args): the KV
    # cache's bytes per rank, ignoring gpu_memory_utilization (Worker/CPUWorker
    # .determine_available_memory)
    "--kv-cache-memory-bytes": ("kv_cache_memory_bytes", human_readable_int),
    # CacheConfig.num_gpu_blocks_override: the block count, whatever the memory
    # (kv_cache_planning.may_override_num_blocks)
    "--num-gpu-blocks-override": ("kv_cache_blocks", _int),
    "--dtype": ("dtype", _choice(_MODEL_DTYPES)),
    "--kv-cache-dtype": ("kv_cache_dtype", _choice(KV_CACHE_DTYPES)),
    "--max-cudagraph-capture-size": ("max_cudagraph_capture_size", _int),
    "--cudagraph-capture-sizes": ("cudagraph_capture_sizes", "list"),
    "--long-prefill-token-threshold": ("long_prefill_token_threshold", _int),
    "--optimization-level": ("optimization_level", _optimization_level),
    "--pooler-config": ("pooler_config", json.loads),
    # vllm/config/model.py RunnerOption / ConvertOption; the runner is resolved (and a
    # generative one refused) by serve_line, with vLLM's rule (registry.resolve_runner)
    "--runner": ("runner", _choice({"auto": None, "pooling": None, "generate": None,
                                    "draft": None})),
    "--convert": ("convert", _choice({"auto": None, "embed": None, "classify": None,
                                      "none": None})),
}
#: Flags tokpool parses and models, with vLLM's aliases for them.
SUPPORTED_FLAGS: tuple[str, ...] = tuple(_FLAGS) + tuple(sorted(
    alias for alias, name in CANONICAL.items() if name in _FLAGS and alias not in
    NEGATIVE_OPTIONS))

#: Engine flags that change nothing tokpool simulates (identity, loading, tokenizing, logging,
#: metrics, tracing, process addresses): accepted and listed as ignored, like the API server's
#: own flags (serve_flags.FRONTEND_OPTIONS). Read in vLLM 0.33.0's EngineArgs.add_cli_args.
_NO_EFFECT_FLAGS = frozenset({
    # who the model is and where its files come from (the config is read from model=)
    "--served-model-name", "--tokenizer", "--tokenizer-mode", "--tokenizer-revision",
    "--revision", "--code-revision", "--trust-remote-code", "--hf-token", "--download-dir",
    "--config-format", "--load-format", "--safetensors-load-strategy",
    "--safetensors-prefetch-num-threads", "--safetensors-prefetch-block-size",
    "--model-loader-extra-config", "--ignore-patterns", "--use-tqdm-on-load",
    "--pt-load-map-location", "--max-parallel-loading-workers", "--skip-tokenizer-init",
    "--allowed-local-media-path", "--allowed-media-domains", "--seed",
    # generation-only settings (a pooling request samples nothing)
    "--generation-config", "--override-generation-config", "--max-logprobs", "--logprobs-mode",
    "--reasoning-parser", "--reasoning-parser-plugin",
    # logs, metrics, traces, profiling
    "--logging-config", "--log-level", "--log-config-file", "--disable-log-stats",
    "--aggregate-engine-logging", "--enable-log-requests", "--show-hidden-metrics-for-version",
    "--otlp-traces-endpoint", "--collect-detailed-traces", "--kv-cache-metrics",
    "--kv-cache-metrics-sample", "--cudagraph-metrics", "--enable-mfu-metrics",
    "--enable-logging-iteration-details", "--enable-layerwise-nvtx-tracing",
    "--per-request-spec-decode-metrics", "--custom-histogram-buckets", "--jit-monitor-mode",
    "--jit-monitor-verbose", "--profiler-config", "--watchdog-config", "--ray-workers-use-nsight",
    # process addresses and timeouts
    "--master-addr", "--master-port", "--distributed-timeout-seconds",
    "--cpu-distributed-timeout-seconds", "--data-parallel-address", "--data-parallel-rpc-port",
    "--shutdown-timeout", "--fail-on-environ-validation",
    # deprecated in 0.33.0 and without effect (vLLM warns: _DEPRECATED)
    "--disable-cascade-attn", "--mamba-cache-mode", "--ir-op-priority",
})
#: vLLM 0.33.0's deprecation warnings (vllm/engine/arg_utils.py, ``*_DEPRECATION_MESSAGE``).
_DEPRECATED = {
    "--log-config-file": "--log-config-file is deprecated and will be removed in v0.33.0. Use "
                         "--logging-config.pylogging_config_file instead.",
    "--mamba-cache-mode": "--mamba-cache-mode is deprecated and will be removed in v0.33.0. It "
                          "has no effect: Mamba prefix caching follows --enable-prefix-caching.",
    "--ir-op-priority": "ir_op_priority (--ir-op-priority) is deprecated because vLLM IR is "
                        "being removed. It will be removed in v0.34.0.",
    "--disable-cascade-attn": "--disable-cascade-attn is deprecated and has no effect since "
                              "cascade attention has been removed. It will be removed in "
                              "v0.33.0.",
}
#: Flags vLLM no longer has, answered as vLLM answers them
#: (vllm/utils/argparse_utils.py, ``FlexibleArgumentParser.error``).
_REMOVED = {
    "--task": "unrecognized arguments: --task\n\nHint: --task is not a vllm serve option. For "
              "embedding, reranking, or reward models, use --runner pooling. To adapt a "
              "generative model for pooling, also use --convert embed, --convert classify, or "
              "--convert reward.",
}
#: Flags vLLM serves but whose values change what tokpool simulates in ways it does not model
#: (a KV-cache size in bytes, quantization, LoRA, speculative decoding, ...): refused, never
#: dropped.
UNMODELLED_FLAGS: frozenset[str] = frozenset(
    name for name in set(SERVE_OPTIONS) | set(CANONICAL.values())
    if CANONICAL.get(name, name) not in _FLAGS
    and CANONICAL.get(name, name) not in _NO_EFFECT_FLAGS
    and name not in FRONTEND_OPTIONS
) | {"--config"}


def _ignored(name: str) -> bool:
    """An option of ``vllm serve`` that changes nothing tokpool simulates: the API server's
    own (``--config`` excepted: it reads more options from a file) or ``_NO_EFFECT_FLAGS``."""
    return (name in FRONTEND_OPTIONS and name != "--config") or name in _NO_EFFECT_FLAGS


def _tokens(argv: str | Sequence[str]) -> list[str]:
    if isinstance(argv, str):
        try:
            tokens = shlex.split(shell_line(argv))
        except ValueError as err:  # shlex: "No closing quotation"
            quote = next((q for q in ("'", '"') if argv.count(q) % 2), "'")
            raise ValueError(f"cannot split the vLLM command line {argv[-80:]!r} as a shell "
                             f"would ({err}: a quote ({quote}) is opened and never closed); "
                             f"close the quote, or pass the flags as a list of strings"
                             ) from None
    elif isinstance(argv, Sequence) and all(isinstance(t, str) for t in argv):
        tokens = list(argv)
    else:
        raise TypeError(f"argv (the vLLM line) must be a command line string or a list of "
                        f"strings, got {argv!r}")
    if tokens[:2] == ["vllm", "serve"]:
        tokens = tokens[2:]
    elif tokens[:1] == ["serve"]:
        tokens = tokens[1:]
    return _optimization_flags(tokens)


def shell_line(line: str) -> str:
    r"""A copied command line as bash reads it: each backslash-newline is a line continuation
    and is removed (``vllm serve m \`` then ``--max-num-seqs 4`` on the next line), and a
    backslash that ends the text continues into nothing (bash, reading a pasted line that
    ends in ``\``, waits for the next line: an empty one runs the command without it).

    Example:
        >>> shell_line("vllm serve m --max-num-seqs 4 \\\n  --max-model-len 512 \\")
        'vllm serve m --max-num-seqs 4   --max-model-len 512 '
    """
    if not isinstance(line, str):
        raise TypeError(f"line must be a command line string, got {line!r}")
    line = re.sub(r"\\\r?\n", "", line)
    if line.endswith("\\") and (len(line) - len(line.rstrip("\\"))) % 2:
        line = line[:-1]  # an odd run of backslashes: the last one escapes the line's end
    return line


def _optimization_flags(tokens: list[str]) -> list[str]:
    """``-O3``, ``-O=3`` and ``-O 3`` as ``--optimization-level 3``, as vLLM's
    ``FlexibleArgumentParser.parse_args`` rewrites them."""
    out: list[str] = []
    for i, token in enumerate(tokens):
        if token.startswith("-O") and token != "-O":
            out += ["--optimization-level", token[3:] if token[2] == "=" else token[2:]]
        elif token == "-O" and i + 1 < len(tokens) and tokens[i + 1] in ("0", "1", "2", "3"):
            out.append("--optimization-level")
        else:
            out.append(token)
    return out


def _name(token: str) -> str:
    """Underscores in a flag name read as dashes (FlexibleArgumentParser.parse_args)."""
    if token.startswith("--"):
        return "--" + token[2:].replace("_", "-")
    return token


def _is_value(token: str) -> bool:
    """A token argparse takes as a value rather than an option (negative numbers too)."""
    return not token.startswith("-") or re.fullmatch(r"-\d*\.?\d+", token) is not None


def parse_vllm_args(
    argv: str | Sequence[str],
    *,
    unmodelled: Literal["error", "return"] = "error",
) -> dict[str, Any]:
    """vLLM flags as ``SimConfig`` fields and parallel/cache settings.

    Every option of vLLM 0.33.0's ``vllm serve`` is known (``serve_flags``, read from vLLM's
    own parser): the API server's own (``--host``, ``--port``, ``--api-key``, ...) and engine
    flags that change nothing tokpool simulates (``--served-model-name``, ``--seed``, logging,
    ...) are accepted and returned under ``"ignored"``; a flag vLLM has but tokpool does not
    model is refused (or returned, ``unmodelled="return"``); a flag vLLM does not have is
    refused as vLLM refuses it (``--task``: vLLM's hint).

    Args:
        argv: a command line (``"vllm serve MODEL --max-model-len 32k -tp 4"``, the
            ``vllm serve`` prefix optional) or its tokens.
        unmodelled: ``"error"``: a flag vLLM has but tokpool does not model raises;
            ``"return"``: it is returned under ``"unmodelled"`` (flag -> value or ``True``).

    Returns:
        Only the flags given: ``model``, ``max_num_batched_tokens``, ``max_num_seqs``,
        ``max_model_len`` (``None`` for ``auto``/-1), ``async_scheduling``, ``enforce_eager``,
        ``enable_chunked_prefill``, ``enable_prefix_caching``, ``max_cudagraph_capture_size``,
        ``cudagraph_capture_sizes`` (tuple), ``long_prefill_token_threshold`` (``None`` for 0,
        vLLM's "no limit"),
        ``optimization_level`` (``-O``), ``dtype`` (omitted for ``auto``: the model's dtype),
        ``use_activation``/``task``/``pooling``/``step_tag_id``/``returned_token_ids`` from
        ``--pooler-config``; ``runner``, ``convert``; ``tensor_parallel_size``,
        ``pipeline_parallel_size``, ``data_parallel_size``, ``gpu_memory_utilization``,
        ``block_size``, ``kv_cache_dtype``; ``ignored``: the ignored flags as given (a tuple
        of ``"--port 8000"``-like strings).

    Raises:
        ValueError: an unknown flag (with vLLM's own hint where it has one, else the closest
            vLLM flag), an unmodelled flag, a flag without its value, a bad value (flag and
            value named), a stray positional.
        TypeError: ``argv`` of another type.

    Example:
        >>> parse_vllm_args("vllm serve Qwen/Qwen3-Embedding-8B --max-model-len 32K -tp 4")
        {'model': 'Qwen/Qwen3-Embedding-8B', 'max_model_len': 32768, 'tensor_parallel_size': 4}
        >>> parse_vllm_args("vllm serve m --host 0.0.0.0 --port 8000 -O0")["ignored"]
        ('--host 0.0.0.0', '--port 8000')
    """
    if unmodelled not in ("error", "return"):
        raise ValueError(f"unmodelled must be 'error' or 'return', got {unmodelled!r}")
    tokens = _tokens(argv)
    out: dict[str, Any] = {}
    unknown: list[str] = []
    skipped: dict[str, Any] = {}
    ignored: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-"):
            if "model" in out or i > 1:
                raise ValueError(f"unexpected positional argument {token!r}; only the model "
                                 "may come first (vllm serve MODEL --flag value ...)")
            out["model"] = token
            continue
        key, eq, inline = token.partition("=")
        key = _name(key)
        if key in _REMOVED:
            raise ValueError(f"vLLM refuses this line: {_REMOVED[key]}")
        dotted = key.split(".", 1)[0] if "." in key else None
        name = CANONICAL.get(dotted or key, dotted or key)
        if name == "--pooler-config" and dotted:  # vLLM's dotted form: --pooler-config.task X
            field = key.split(".", 1)[1].replace("-", "_")
            if not eq and (i >= len(tokens) or tokens[i].startswith("--")):
                raise ValueError(f"{key} needs a value")
            raw = inline if eq else tokens[i]
            i += 0 if eq else 1
            try:
                value = json.loads(raw)
            except json.JSONDecodeError:
                value = raw  # a bare word: a string, as vLLM's parser reads it
            pooler = out.setdefault("pooler_config", {})
            if not isinstance(pooler, dict):
                raise ValueError("give --pooler-config as JSON or dotted keys, not both")
            pooler[field] = value
            continue
        if dotted and name in _FLAGS:
            raise ValueError(f"{token!r}: dotted flags are supported for --pooler-config only; "
                             "pass the whole JSON for the others")
        if name not in _FLAGS or dotted:
            known = (dotted or key) in SERVE_OPTIONS
            arity = "1" if dotted else SERVE_OPTIONS.get(key, "0")
            values = [inline] if eq else []
            while not eq and i < len(tokens) and _is_value(tokens[i]) and (
                    arity == "+" or (arity in ("1", "?") and not values)):
                values.append(tokens[i])
                i += 1
            if not known:
                unknown.append(token)
                while i < len(tokens) and not tokens[i].startswith("-"):
                    i += 1  # its values: reported with the flag, not as positionals
            elif _ignored(name):
                ignored.append(" ".join([key, *values]))
                if name in _DEPRECATED:
                    warnings.warn(f"vLLM 0.33.0 warns: {_DEPRECATED[name]}", UserWarning,
                                  stacklevel=2)
            else:
                skipped[key] = values[0] if len(values) == 1 else (tuple(values) or True)
            continue
        dest, parse = _FLAGS[name]
        if parse == "bool":
            if eq:
                raise ValueError(f"{token!r}: {name} takes no value; use {name} or "
                                 f"--no-{name[2:]}")
            out[dest] = key not in NEGATIVE_OPTIONS
            continue
        if eq:
            values = [inline]
        else:
            values = []
            while i < len(tokens) and _is_value(tokens[i]):
                values.append(tokens[i])
                i += 1
                if parse != "list":
                    break
        if not values:
            raise ValueError(f"{name} needs a value")
        try:
            if parse == "list":
                out[dest] = tuple(_int(v) for v in values)
            else:
                out[dest] = parse(values[0])
        except (ValueError, json.JSONDecodeError) as err:
            raise ValueError(f"{name} {' '.join(values)}: {err}") from None
    if unknown:
        hints = [f"{u} (did you mean {m[0]}?)" if (m := difflib.get_close_matches(
            _name(u.split("=")[0]), SERVE_OPTIONS, n=1, cutoff=0.7)) else u for u in unknown]
        raise ValueError(f"unknown vLLM flag(s) {hints}: vLLM {VLLM_SERVE_VERSION}'s `vllm "
                         f"serve` has no such option; tokpool models {list(_FLAGS)} (and "
                         "accepts the server's own options, listing them as ignored)")
    _normalise(out)
    if skipped:
        if unmodelled == "error":
            config = (" (--config reads more options from a YAML file, which tokpool does not "
                      "read: put them on the line)" if "--config" in skipped else "")
            raise ValueError(
                f"vLLM flag(s) {sorted(skipped)} are not modelled by tokpool's simulator: they "
                f"change what the engine does{config}; remove them, or pass "
                "unmodelled='return' to get them back under 'unmodelled'"
            )
        out["unmodelled"] = skipped
    if ignored:
        out["ignored"] = tuple(ignored)
    return out


def _normalise(out: dict[str, Any]) -> None:
    """vLLM's values as tokpool's fields (aliases, ``auto``, 0 = no limit, pooler JSON)."""
    if "dtype" in out:
        dtype = _MODEL_DTYPES[out.pop("dtype")]
        if dtype is not None:
            out["dtype"] = dtype
    if out.get("long_prefill_token_threshold") == 0:
        out["long_prefill_token_threshold"] = None  # SchedulerConfig default 0: no limit
    flags = {dest: flag for flag, (dest, _) in _FLAGS.items()}
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                 "block_size", "max_num_seqs", "max_num_batched_tokens",
                 "kv_cache_memory_bytes", "kv_cache_blocks"):
        if name in out and out[name] < 1:
            raise ValueError(f"{flags[name]} must be >= 1, got {out[name]}")
    check_engine_sizes(out, flags=True)
    utilization = out.get("gpu_memory_utilization")
    if utilization is not None and not 0 < utilization <= 1:
        raise ValueError(f"--gpu-memory-utilization must be in (0, 1], got {utilization}")
    pooler = out.pop("pooler_config", None)
    if pooler is None:
        return
    if not isinstance(pooler, dict):
        raise ValueError(f"--pooler-config must be a JSON object, got {pooler!r}")
    other = sorted(set(pooler) - set(_POOLER_KEYS))
    if other:
        raise ValueError(f"--pooler-config keys {other} are not modelled by tokpool; it models "
                         f"{sorted(_POOLER_KEYS)}")
    for key, value in pooler.items():
        if value is None:
            continue
        _check_pooler_value(key, value)
        if key == "returned_token_ids":
            value = tuple(value)
        if key in ("tok_pooling_type", "pooling_type") and value not in POOLING_KINDS:
            raise ValueError(f"--pooler-config {key}={value!r}: tokpool simulates "
                             f"{', '.join(POOLING_KINDS)} pooling")
        out[_POOLER_KEYS[key]] = value


def _check_pooler_value(key: str, value: Any) -> None:
    """A ``--pooler-config`` value of the type vLLM's ``PoolerConfig`` declares."""
    if key == "returned_token_ids":
        ok = isinstance(value, list) and value and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
        expected = "a non-empty list of token ids, e.g. [648, 387]"
    elif key == "step_tag_id":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        expected = "a token id (an int >= 0)"
    elif key == "use_activation":
        ok, expected = isinstance(value, bool), "true or false"
    else:
        ok, expected = isinstance(value, str), "a string"
    if not ok:
        raise ValueError(f"--pooler-config {key}={json.dumps(value)}: {key} must be {expected}")
