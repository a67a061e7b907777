"""The whole public surface, swept: every public function in ``tp.__all__`` (one hostile value
per parameter, the others valid), every CLI sub-command (one hostile value per option) and
every explorer control (values from code, typed into a slider's box, and constructor
arguments)."""

from __future__ import annotations

import contextlib
import io
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as W
import pandas as pd
import torch

import tokpool as tp
from tokpool.widgets.guards import label_of  # a control's words without its tooltip span

from .cases_late_interaction import late_interaction
from .cases_score import score
from .cases_token_pooling import token_pooling_and_index
from .runner import Case, Shown
from .world import World

NAN, INF = math.nan, math.inf
#: Values no numeric parameter should take silently.
BAD_NUMBERS = {"None": None, "'8'": "8", "-1": -1, "0": 0, "1.5": 1.5, "nan": NAN, "inf": INF,
               "10^30": 10**30, "True": True, "[8]": [8]}
BAD_FLAGS = {"None": None, "'no'": "no", "0": 0, "1": 1, "'True'": "True"}
BAD_NAMES = {"None": None, "''": "", "'nope'": "nope", "5": 5, "['clone']": ["clone"]}


# --- how a case looks at the CLI and at an explorer -----------------------------------------


def run_cli(argv: Sequence[str], names: Sequence[str]) -> Any:
    """Run ``tokpool ARGV`` in this process. A refusal (status 2, one line on stderr, no
    traceback) raises ``Shown`` with that line and the exception behind it; status 0 returns
    ``True``; anything else returns what happened (a wrong answer)."""
    from tokpool import cli

    caught: list[BaseException] = []
    one_line = cli._one_line

    def record(err):
        caught.append(err)
        return one_line(err)

    cli._one_line = record
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(argv))
    finally:
        cli._one_line = one_line
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    if code == 2 and len(lines) == 1 and "Traceback" not in err.getvalue():
        raise Shown(lines[0], caught[-1] if caught else None)
    if code == 0:
        return True
    return f"status {code}, stderr {err.getvalue()[-400:]!r}"


def control(explorer, name: str, value: Any):
    """Set one control of ``explorer`` (``"typed:<slider description>"`` types into its box).

    A refusal shown in the panel (output cleared, ``explorer.error`` set) raises ``Shown``
    with the panel's message and the exception the render raised, if any. A value that was
    taken returns the explorer's state (for an invalid value: a wrong answer)."""
    caught: list[BaseException] = []
    render = explorer.render

    def recording():
        try:
            return render()
        except BaseException as err:
            caught.append(err)
            raise

    explorer.render = recording
    try:
        if name.startswith("typed:"):
            explorer.typed[name.removeprefix("typed:")].value = value
        else:
            getattr(explorer, name).value = value
    finally:
        del explorer.render
    if explorer.error is not None:
        if explorer.view is not None or explorer._output.layout.display != "none":
            return f"the panel says {explorer.error!r} but a figure is still shown"
        raise Shown(explorer.error, caught[-1] if caught else None)
    widget = getattr(explorer, name, None) if not name.startswith("typed:") else None
    return f"taken: {name} = {getattr(widget, 'value', value)!r}, no message"


def _taken(explorer, name: str, value: Any) -> bool | str:
    """Set a valid value: the explorer must draw it (no message, a figure)."""
    getattr(explorer, name).value = value
    return True if explorer.error is None and explorer.view is not None else (
        f"refused a valid value: {explorer.error}")


def _refuse(area: str, name: str, call: Callable[[], Any], *names: str) -> Case:
    return Case(area, name, call, names=names, expect="error")


# --- the top level: one hostile value per parameter ----------------------------------------


#: ``TOKPOOL_HOSTILE_FULL=1``: every hostile value of every parameter (``make hostile-test``);
#: otherwise at most ``QUICK_VALUES`` per parameter, spread over its list (``make test``).
FULL = os.environ.get("TOKPOOL_HOSTILE_FULL") == "1"
QUICK_VALUES = 3


def sample(values: dict[str, Any]) -> dict[str, Any]:
    """All of ``values`` in the full run; else at most ``QUICK_VALUES``, first to last."""
    if FULL or len(values) <= QUICK_VALUES:
        return values
    keys = list(values)
    picked = {round(i * (len(keys) - 1) / (QUICK_VALUES - 1)) for i in range(QUICK_VALUES)}
    return {k: values[k] for i, k in enumerate(keys) if i in picked}


def _sweep(area: str, what: str, call: Callable[..., Any], base: dict[str, Any],
           bad: dict[str, dict[str, Any]], names: dict[str, tuple[str, ...]] | None = None
           ) -> list[Case]:
    """For each parameter in ``bad``, each hostile value in turn with ``base`` for the rest
    (a ``sample`` of them outside the full run)."""
    cases = []
    for param, values in bad.items():
        for label, value in sample(values).items():
            kwargs = {**base, param: value}
            need = (names or {}).get(param, (param,))
            cases.append(_refuse(area, f"{what}({param}={label})",
                                 lambda kwargs=kwargs: call(**kwargs), *need))
    return cases


def top_level(w: World) -> list[Case]:
    a = "public API"
    meta = tp.build_metadata([4])
    hidden = torch.zeros(4, 8)
    cases: list[Case] = []
    cases += _sweep(a, "gate", tp.gate, {"model_tasks": {"embed", "token_embed"}}, {
        "model_tasks": {"None": None, "'embed'": "embed", "5": 5, "[None]": [None]},
        "requested": {"'nope'": "nope", "5": 5, "['embed']": ["embed"]},
        "attn_type": {"'nope'": "nope", "None": None, "5": 5},
        "policy": {"'nope'": "nope", "None": None},
        "architectures": {"'LlamaModel'": "LlamaModel", "5": 5, "[5]": [5]},
    })
    cases += _sweep(a, "select_task", tp.select_task, {"model_tasks": {"embed"}}, {
        "model_tasks": {"None": None, "'embed'": "embed", "[5]": [5]},
        "requested": {"'nope'": "nope", "5": 5},
        "architectures": {"'Llama'": "Llama", "5": 5},
    })
    cases += _sweep(a, "task_table", tp.task_table, {}, {
        "kinds": {"'decoder'": "decoder", "['nope']": ["nope"], "5": 5},
        "tasks": {"'embed'": "embed", "['nope']": ["nope"], "5": 5},
    })
    cases += _sweep(a, "build_metadata", tp.build_metadata, {"prompt_lens": [4, 2]}, {
        "prompt_lens": {"None": None, "[0]": [0], "[1.5]": [1.5], "'4'": "4",
                        "[[4]]": [[4]], "[-1]": [-1], "[True]": [True]},
        "num_scheduled_tokens": {"[5, 2]": [5, 2], "[1]": [1], "[1.5, 2]": [1.5, 2],
                                 "'x'": "x"},
        "seq_lens": {"[9, 2]": [9, 2], "[1]": [1], "['a', 2]": ["a", 2]},
        "states": {"[None, None]": [None, None], "5": 5},
        "prompt_token_ids": {"[[1]]": [[1]], "'ab'": "ab", "[[1.5]*4, [1, 2]]":
                             [[1.5] * 4, [1, 2]]},
        "step_tag_id": {"1.5": 1.5, "'x'": "x", "-1": -1},
        "returned_token_ids": {"[1.5]": [1.5], "'x'": "x"},
        "task": {"'nope'": "nope", "5": 5},
        "device": {"'nope'": "nope", "5": 5},
    }, names={"prompt_token_ids": ("prompt_token_ids",), "states": ("states",),
              "num_scheduled_tokens": ("scheduled",)})
    for cls in (tp.AllPool, tp.StepPool):
        cases += _sweep(a, cls.__name__, cls, {}, {
            "enable_chunked_prefill": BAD_FLAGS, "async_scheduling": BAD_FLAGS,
            "policy": BAD_NAMES,
        }, names={"policy": ("policy",)})
        pool = cls()
        cases += _sweep(a, f"{cls.__name__}()(...)", lambda hidden, metadata, pool=pool:
                        pool(hidden, metadata), {"hidden": hidden, "metadata": meta}, {
            "hidden": {"None": None, "list": [[0.0] * 8] * 4, "[3, 8]": torch.zeros(3, 8),
                       "[4]": torch.zeros(4)},
            "metadata": {"None": None, "dict": {"prompt_lens": [4]}},
        }, names={"hidden": ("hidden",), "metadata": ("metadata",)})
    for cls in (tp.CLSPool, tp.LastPool, tp.MeanPool):
        pool = cls()
        cases += _sweep(a, f"{cls.__name__}()(...)", lambda hidden, metadata, pool=pool:
                        pool(hidden, metadata), {"hidden": hidden, "metadata": meta}, {
            "hidden": {"None": None, "[3, 8]": torch.zeros(3, 8), "[4]": torch.zeros(4)},
            "metadata": {"None": None, "5": 5},
        }, names={"hidden": ("hidden",), "metadata": ("metadata",)})
    cases += _sweep(a, "shares_storage", tp.shares_storage, {"a": hidden, "b": hidden}, {
        "a": {"None": None, "list": [1.0]}, "b": {"None": None, "5": 5}})
    cases += _sweep(a, "owned_bytes", tp.owned_bytes, {"tensors": [hidden]}, {
        "tensors": {"5": 5, "[5]": [5]}, "exclude": {"5": 5, "[5]": [5]}})
    cases += simconfig_fields(a)
    cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=16)
    cases += _sweep(a, "simulate", tp.simulate, {"prompt_lens": [20, 6], "config": cfg,
                                                 "mode": "analytic"}, {
        "prompt_lens": {"None": None, "[]": [], "[0]": [0], "[1.5]": [1.5], "'20'": "20",
                        "20": 20, "[nan]": [NAN], "{20}": {20}},
        "config": {"dict": {"hidden_size": 8}, "'clone'": "clone"},
        "mode": BAD_NAMES,
        "source": {"5": 5, "'synthetic'": "synthetic"},
        "arrival_steps": {"[0]": [0], "[-1, 0]": [-1, 0], "[0.5, 0]": [0.5, 0], "3": 3,
                          "[None, 0]": [None, 0]},
        "device": {"'tpu'": "tpu", "5": 5, "None": None, "'cuda:x'": "cuda:x"},
        "schedule": {"'steps'": "steps", "5": 5, "[5]": [5]},
        "scheduler": BAD_NAMES,
        "progress": {"'yes'": "yes", "5": 5},
        "aborts": {"[0]": [0], "{5: 1}": {5: 1}, "{0: -1}": {0: -1}, "{0: 1.5}": {0: 1.5},
                   "{'0': 1}": {"0": 1}},
    }, names={"prompt_lens": ("prompt_lens",), "mode": ("mode",), "scheduler": ("scheduler",),
              "config": ("config",), "schedule": ("schedule",), "device": ("device",)})
    cases += _sweep(a, "response_bytes", tp.response_bytes, {"shape": (4, 8)}, {
        "shape": {"None": None, "[]": [], "[0, 8]": [0, 8], "[1.5]": [1.5], "'4'": "4",
                  "[1, 2, 3]": [1, 2, 3]},
        "encoding_format": BAD_NAMES, "embed_dtype": BAD_NAMES, "endianness": BAD_NAMES,
        "endpoint": BAD_NAMES, "task": BAD_NAMES,
    })
    cases += _sweep(a, "sweep", tp.sweep, {"prompt_lens": [100, 1000], "config": cfg}, {
        "prompt_lens": {"None": None, "[]": [], "[0]": [0], "[1.5]": [1.5], "'100'": "100",
                        "100": 100},
        "config": {"dict": {"hidden_size": 8}},
        "policies": {"'clone'": "clone", "[]": [], "['copy']": ["copy"], "None": None},
        "async_scheduling": {"True": True, "['yes']": ["yes"], "[]": [], "None": None},
        "mode": BAD_NAMES, "progress": {"'yes'": "yes", "5": 5},
    }, names={"policies": ("polic",), "mode": ("mode",)})
    result = tp.simulate([20, 6], cfg.replace(use_activation=False), mode="tensor")
    cases += _sweep(a, "corruption_table", tp.sim.corruption_table, {"result": result,
                                                                 "request": 0}, {
        "result": {"None": None, "dict": {}}, "request": {"-1": -1, "2": 2, "1.5": 1.5,
                                                          "'0'": "0", "None": None},
        "column": {"-1": -1, "8": 8, "1.5": 1.5, "'0'": "0"},
        "values": {"'yes'": "yes", "1": 1, "None": None}})
    cases += _sweep(a, "SimResult.to_chrome_trace", lambda path: result.to_chrome_trace(path),
                    {"path": w.tmp / "t.json"}, {
        "path": {"None": None, "5": 5, "a folder": w.tmp, "missing folder":
                 w.tmp / "missing" / "t.json"}}, names={"path": ("t",)})
    cases += [  # a model by its Hub id: offline here, on the session's empty Hub cache
        _refuse(a, "recipe(None)", lambda: tp.recipe(None), "model"),
        _refuse(a, "recipe('org/not-cached')", lambda: tp.recipe("org/not-cached"),
                "org/not-cached", "HF_HUB_OFFLINE"),
        _refuse(a, "recipe(task='nope')", lambda: tp.recipe("org/x", "nope"), "nope"),
        _refuse(a, "recipe(late_chunking=0)", lambda: tp.recipe("org/x", late_chunking=0),
                "late_chunking"),
        _refuse(a, "plan(prompt_len=0)", lambda: tp.plan("org/x", prompt_len=0), "prompt_len"),
        _refuse(a, "plan(gpu='B999')", lambda: tp.plan("org/x", gpu="B999"), "B999"),
        _refuse(a, "plan()", lambda: tp.plan(), "model"),
        _refuse(a, "recipe(revision='v9') of a preset's id",
                lambda: tp.recipe("Qwen/Qwen3-Embedding-8B", revision="v9"), "v9"),
    ]
    cases += documented_answers(a, w)
    cases += late_interaction(a, _sweep)
    cases += score(a, _sweep)
    cases += token_pooling_and_index(a, _sweep)
    cases += models_and_prm(a, w)
    cases += figures(a, w, result)
    cases += explorer_arguments(a, w)
    return cases


def documented_answers(a: str, w: World) -> list[Case]:
    """Inputs that look odd but have a documented answer: each must give it."""
    import numpy as np

    model = w.tiny_model
    hidden = torch.arange(32.0).reshape(4, 8)
    meta = tp.build_metadata([4])

    def answer(name, call, check):
        return Case(a, name, call, expect="answer", check=check)

    return [
        answer("encode('hello') is one prompt", lambda: model.encode("hello"),
               lambda out: len(out) == 1 and torch.equal(out[0], model.encode(["hello"])[0])),
        answer("encode([5]) is one token-id prompt", lambda: model.encode([5]),
               lambda out: len(out) == 1 and torch.equal(out[0], model.encode([[5]])[0])),
        answer("encode([]) encodes nothing", lambda: model.encode([]), lambda out: out == []),
        answer("build_metadata([]) is an empty batch", lambda: tp.build_metadata([]),
               lambda m: m.prompt_lens.numel() == 0),
        answer("AllPool passes int64 hidden states through (no arithmetic)",
               lambda: tp.AllPool()(hidden.long(), meta),
               lambda out: torch.equal(out[0], hidden.long())),
        answer("owned_bytes(a tensor): its rows share one storage",
               lambda: tp.owned_bytes(hidden), lambda n: n == hidden.nbytes),
        answer("simulate(numpy prompt lengths)",
               lambda: tp.simulate(np.array([20, 6]), tp.SimConfig(hidden_size=8),
                                   mode="analytic").prompt_lens, lambda p: p == [20, 6]),
        answer("ModelSource('hi') is one prompt",
               lambda: tp.ModelSource(model, "hi").prompt_lens,
               lambda lens: lens == tp.ModelSource(model, ["hi"]).prompt_lens),
        answer("plot_memory_vs_prompt_length(hardware=bytes) draws that line",
               lambda: tp.plot_memory_vs_prompt_length(
                   tp.sweep([100, 1000], tp.SimConfig(hidden_size=8)), hardware=10**6),
               lambda ax: any("device memory" in t.get_text()
                              for t in ax.get_legend().get_texts())),
    ]


def simconfig_fields(a: str) -> list[Case]:
    numbers = {"hidden_size", "num_labels", "max_num_batched_tokens", "max_num_seqs",
               "long_prefill_token_threshold", "kv_cache_blocks", "block_size",
               "max_model_len", "tensor_parallel_size", "pipeline_parallel_size",
               "data_parallel_size", "activation_peak_bytes", "max_cudagraph_capture_size",
               "num_returned_columns", "step_tag_every", "step_tag_id",
               "kv_cache_memory_bytes", "cpu_kvcache_space"}
    flags = {"use_activation", "enable_chunked_prefill", "async_scheduling", "enforce_eager",
             "allow_long_max_model_len"}
    names = {"task", "pooling", "policy", "model", "hardware", "output_memory", "usage",
             "rows_from", "async_overwrite", "kv_cache_dtype", "dtype", "head_dtype",
             "classifier", "model_runner"}
    allowed_none = {"hidden_size", "max_num_batched_tokens", "max_num_seqs",
                    "long_prefill_token_threshold", "kv_cache_blocks", "max_model_len",
                    "activation_peak_bytes", "max_cudagraph_capture_size",
                    "num_returned_columns", "step_tag_every", "step_tag_id", "use_activation",
                    "enable_chunked_prefill", "async_scheduling", "pooling", "model",
                    "rows_from", "head_dtype", "block_size", "kv_cache_memory_bytes",
                    "cpu_kvcache_space", "classifier", "model_runner"}
    zero_ok = {"activation_peak_bytes", "step_tag_id", "cpu_kvcache_space"}
    base = {"max_num_batched_tokens": 64}
    cases = []
    for field in sorted(numbers | flags | names):
        pool = BAD_NUMBERS if field in numbers else BAD_FLAGS if field in flags else BAD_NAMES
        usable = {label: value for label, value in pool.items()
                  if not ((value is None and field in allowed_none)
                          or (value == 0 and field in zero_ok and not isinstance(value, bool)))}
        for label, value in sample(usable).items():
            if field == "block_size" and label == "10^30":
                continue  # without a model there are no KV bytes: the run is right as it is
            step = {"pooling": "STEP", "task": "token_classify"} if field in (
                "num_returned_columns", "step_tag_every", "step_tag_id") else {}
            kwargs = {**base, **step, field: value}
            cases.append(_refuse(a, f"SimConfig({field}={label})",
                                 lambda kwargs=kwargs: tp.simulate(
                                     [100], tp.SimConfig(**kwargs), mode="analytic"),
                                 field.removesuffix("_size") if field == "hidden_size" else
                                 field))
    cases += [
        _refuse(a, "SimConfig.for_model('nope')", lambda: tp.SimConfig.for_model("nope"),
                "nope"),
        _refuse(a, "SimConfig.for_model(5)", lambda: tp.SimConfig.for_model(5), "preset"),
        _refuse(a, "SimConfig.from_hf_config(5)", lambda: tp.SimConfig.from_hf_config(5),
                "config"),
        _refuse(a, "SimConfig.from_hf_config({})", lambda: tp.SimConfig.from_hf_config({}),
                "config"),
        _refuse(a, "SimConfig.from_vllm_args(5)", lambda: tp.SimConfig.from_vllm_args(5),
                "argv"),
        _refuse(a, "SimConfig.from_vllm_args('')", lambda: tp.SimConfig.from_vllm_args(""),
                "model"),
        _refuse(a, "SimConfig().replace(nope=1)", lambda: tp.SimConfig().replace(nope=1),
                "nope"),
    ]
    return cases


def models_and_prm(a: str, w: World) -> list[Case]:
    model = w.tiny_model
    cases = _sweep(a, "load_model", tp.load_model, {"name_or_path": "tiny-decoder"}, {
        "name_or_path": {"None": None, "''": "", "'nope'": "nope", "5": 5, "[]": []},
        "dtype": {"'float8'": "float8", "5": 5, "'int64'": "int64"},
        "task": {"'nope'": "nope", "5": 5, "'classify'": "classify"},
        "cache_dir": {"5": 5},
    }, names={"name_or_path": ("name",), "cache_dir": ("cache_dir",)})
    cases += _sweep(a, "compare_chunked", tp.models.compare_chunked, {"model": model,
                                                               "prompt": "hello world"}, {
        "model": {"None": None, "'tiny-decoder'": "tiny-decoder"},
        "prompt": {"None": None, "''": "", "5": 5, "[]": [], "[1.5]": [1.5]},
        "chunk_sizes": {"[0]": [0], "8": 8, "['8']": ["8"], "[]": [], "[1.5]": [1.5]},
        "dtypes": {"['float8']": ["float8"], "'float32'": "float32", "[]": []},
        "layer": {"1.5": 1.5, "100": 100, "-100": -100, "'1'": "1"},
    })
    cases += _sweep(a, "ModelSource", tp.ModelSource, {"model": model, "prompts": ["hi"]}, {
        "model": {"None": None, "'tiny-decoder'": "tiny-decoder"},
        "prompts": {"None": None, "['']": [""], "[[1.5]]": [[1.5]], "[{}]": [{}]},
        "layer": {"1.5": 1.5, "100": 100, "'1'": "1"},
        "task": {"'embed'": "embed", "5": 5},
    })
    cases += _sweep(a, "load_prm", tp.load_prm, {"path": w.probe_file, "model": model}, {
        "path": {"5": 5, "'nope'": "nope", "missing": w.tmp / "missing.safetensors"},
        "model": {"'tiny'": "tiny", "5": 5},
        "convention": {"'nope'": "nope", "5": 5},
        "threshold": {"nan": NAN, "'0.5'": "0.5", "inf": INF},
        "returned_token_ids": {"5": 5, "['+']": ["+"]},
        "tag": {"5": 5, "''": ""},
    }, names={"path": ("path",)})
    cases += _sweep(a, "load_prm_dataset", tp.load_prm_dataset, {"split": "dev"}, {
        "split": {"None": None, "'nope'": "nope", "5": 5},
        "path": {"5": 5, "missing": w.tmp / "missing.jsonl"},
    })
    cases += _sweep(a, "prm_memory_table", tp.prm.prm_memory_table, {"prompt_lens": [1024]}, {
        "prompt_lens": {"None": None, "[]": [], "[0]": [0], "[1.5]": [1.5], "'1024'": "1024",
                        "[10**30]": [10**30]},
        "model": {"'nope'": "nope", "5": 5},
        "hardware": {"'nope'": "nope", "5": 5},
        "conventions": {"'two_class'": "two_class", "['nope']": ["nope"], "[]": []},
        "step_tag_every": {"0": 0, "-1": -1, "1.5": 1.5, "'64'": "64"},
        "num_returned_columns": {"0": 0, "1.5": 1.5, "10**9": 10**9},
        "policy": BAD_NAMES,
        "max_num_batched_tokens": {"0": 0, "1.5": 1.5, "'8'": "8", "10^30": 10**30},
        "dtype": {"'nope'": "nope", "5": 5},
        "enable_chunked_prefill": {"'no'": "no", "1": 1},
        "max_model_len": {"0": 0, "1.5": 1.5, "10^30": 10**30},
    }, names={"policy": ("policy",), "prompt_lens": ("prompt",)})
    prm = w.prm
    cases += _sweep(a, "ProcessRewardModel.score", prm.score, {"problem": "2 + 2?",
                                                               "steps": ["4"]}, {
        "problem": {"None": None, "5": 5, "['2+2']": ["2+2"]},
        "steps": {"None": None, "'4'": "4", "[]": [], "[4]": [4], "[None]": [None]},
        "threshold": {"nan": NAN, "'0.5'": "0.5", "inf": INF},
        "chunk_size": {"0": 0, "1.5": 1.5, "'8'": "8", "-1": -1},
    })
    cases += _sweep(a, "ProcessRewardModel.score_records", prm.score_records,
                    {"records": [{"prompt": "2 + 2?", "completions": ["4"]}]}, {
        "records": {"None": None, "5": 5, "[5]": [5], "[{}]": [{}]},
        "batch_size": {"0": 0, "1.5": 1.5, "'8'": "8"},
        "threshold": {"nan": NAN, "'0.5'": "0.5"},
        "progress": {"'yes'": "yes"},
    }, names={"records": ("record",)})
    cases += _sweep(a, "PoolingModel.encode", model.encode, {"prompts": ["hello"]}, {
        "prompts": {"None": None, "['']": [""], "[[1.5]]": [[1.5]], "[[-1]]": [[-1]],
                    "[[10**9]]": [[10**9]], "[{}]": [{}]},
        "task": {"'nope'": "nope", "5": 5},
        "chunk_size": {"0": 0, "1.5": 1.5, "'8'": "8"},
        "layer": {"1.5": 1.5, "100": 100},
    })
    return cases


def figures(a: str, w: World, result) -> list[Case]:
    cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=16)
    frame = tp.sweep([100, 1000], cfg)
    cases = _sweep(a, "plot_memory_timeline", tp.plot_memory_timeline, {"result": result}, {
        "result": {"None": None, "5": 5, "empty frame": pd.DataFrame()},
        "zoom_steps": {"0": 0, "-1": -1, "1.5": 1.5, "'5'": "5"},
        "ax": {"5": 5},
    }, names={"ax": ("ax",)})
    cases += _sweep(a, "plot_memory_vs_prompt_length", tp.plot_memory_vs_prompt_length,
                    {"df": frame}, {
        "df": {"None": None, "5": 5, "empty frame": pd.DataFrame()},
        "y": {"'nope'": "nope", "5": 5},
        "hue": {"'nope'": "nope"},
        "hardware": {"'nope'": "nope", "0 bytes": 0, "[5]": [5]},
    })
    cases += _sweep(a, "plot_ownership_schedule", tp.plot_ownership_schedule,
                    {"result": result}, {"result": {"None": None, "5": 5, "frame": frame}})
    emb = torch.randn(5, 8)
    cases += _sweep(a, "plot_similarity", tp.plot_similarity, {"embeddings": emb}, {
        "embeddings": {"None": None, "[5]": torch.randn(5), "'x'": "x", "[0, 8]":
                       torch.zeros(0, 8), "nan": torch.full((3, 4), NAN)},
        "tokens": {"['a']": ["a"], "'abcde'": "abcde", "5": 5},
        "vmin": {"nan": NAN, "'0'": "0", "2": 2},
        "max_labels": {"-1": -1, "1.5": 1.5},
        "cmap": {"'nope'": "nope", "5": 5},
    })
    cases += _sweep(a, "plot_step_rewards", tp.plot_step_rewards,
                    {"rewards": [0.9, 0.2, 0.8]}, {
        "rewards": {"None": None, "[]": [], "'x'": "x", "[nan]": [NAN], "[2.0]": [2.0]},
        "threshold": {"nan": NAN, "'0.5'": "0.5"},
        "predicted_first_error": {"5": 5, "1.5": 1.5, "-2": -2},
        "true_first_error": {"5": 5, "1.5": 1.5},
        "step_labels": {"[True]": [True], "'abc'": "abc"},
        "step_texts": {"['a']": ["a"], "5": 5},
        "cmap": {"'nope'": "nope"},
    })
    return cases


def explorer_arguments(a: str, w: World) -> list[Case]:
    model, prm = w.tiny_model, w.prm
    cases = _sweep(a, "ownership_explorer", tp.ownership_explorer, {}, {
        "prompt_lens": {"[]": [], "[0]": [0], "[1.5]": [1.5], "'20'": "20", "20": 20,
                        "[10**9]": [10**9], "[None]": [None]},
        "budget": {"0": 0, "1": 1, "1.5": 1.5, "'16'": "16", "10^9": 10**9, "None": None},
        "async_scheduling": BAD_FLAGS,
        "policy": BAD_NAMES,
        "enable_chunked_prefill": BAD_FLAGS,
        "hidden_size": {"0": 0, "-1": -1, "1.5": 1.5, "'8'": "8", "10^12": 10**12},
    })
    run = tp.simulate([20], tp.SimConfig(hidden_size=8, max_num_batched_tokens=8,
                                         policy="legacy"))
    cases += _sweep(a, "buffer_reuse_explorer", tp.buffer_reuse_explorer, {"result": run}, {
        "result": {"None": None, "[20]": [20], "a closed form": tp.simulate(
            [20], tp.SimConfig(hidden_size=8), mode="closed_form")},
        "step": {"-1": -1, "3": 3, "1.5": 1.5, "'1'": "1", "None": None, "True": True},
    }, names={"result": ("result",), "step": ("step",)})
    cases += _sweep(a, "memory_explorer", tp.memory_explorer, {"policies": ("clone",)}, {
        "model": BAD_NAMES, "hardware": BAD_NAMES,
        "prompt_len": {"(1024,)": (1024,), "1024": 1024, "(2048, 1024)": (2048, 1024),
                       "(1000, 2000)": (1000, 2000), "'1K'": "1K"},
        "budget": {"3": 3, "'16K'": "16K", "1.5": 1.5},
        "policies": {"'clone'": "clone", "['copy']": ["copy"], "5": 5},
        # None is vLLM's default (off for a pooling model), a valid value since round five
        "async_scheduling": {k: v for k, v in BAD_FLAGS.items() if v is not None},
    })
    cases += _sweep(a, "token_explorer", tp.token_explorer, {"model": model, "text": "hi"}, {
        "model": {"None": None, "dict": {"a": 1}, "'tiny-decoder'": "tiny-decoder"},
        "text": {"None": None, "''": "", "5": 5, "['hi']": ["hi"]},
        "layer": {"1.5": 1.5, "10^9": 10**9, "-100": -100, "'1'": "1", "None": None},
        "metric": {"'nope'": "nope", "5": 5},
    })
    cases += _sweep(a, "step_reward_explorer", tp.step_reward_explorer,
                    {"prm": prm, "problem": "2+2?", "steps": ["4", "5"]}, {
        "prm": {"None": None, "'probe'": "probe", "model": model},
        "problem": {"None": None, "5": 5, "''": ""},
        "steps": {"None": None, "'4. 5.'": "4. 5.", "[]": [], "[4]": [4], "[None]": [None]},
        "true_first_error": {"5": 5, "1.5": 1.5, "-2": -2, "'1'": "1"},
        "step_labels": {"[True]": [True], "'ab'": "ab", "[1.5, 1]": [1.5, 1]},
    })
    return cases


# --- every explorer control ----------------------------------------------------------------


def explorer_controls(w: World) -> list[Case]:
    a = "explorers"
    cases: list[Case] = []

    def add(ex_name: str, control_name: str, label: str, value, *names: str) -> None:
        cases.append(_refuse(a, f"{ex_name}.{control_name} = {label}",
                             lambda: control(getattr(w, ex_name), control_name, value),
                             *names))

    own = w.ownership
    for label, value in {"0": 0, "1000": 1000, "1.5": 1.5, "-5": -5}.items():
        add("ownership", "prompt_len", label, value, "request 0 tokens")
        add("ownership", "budget", label, value, "tokens per step")
    for label, value in {"'abc'": "abc", "'-1'": "-1", "'1.5'": "1.5", "'0'": "0",
                         "'1e9'": "1e9", "'9' * 40": "9" * 40, "'١٢'": "١٢",
                         }.items():
        add("ownership", "more_requests", label, value, "other requests")
    add("ownership", "more_requests", "17 requests", ", ".join(["5"] * 17), "requests",
        "at most 16")
    for label, value in {"'x'": "x", "'1@'": "1@", "'9@1'": "9@1", "'1@-1'": "1@-1",
                         "'0@1, 0@2'": "0@1, 0@2", "'1@2@3'": "1@2@3"}.items():
        add("ownership", "abort", label, value, "client aborts")
    for label, value in {"'copy'": "copy", "None": None, "5": 5}.items():
        add("ownership", "policy", label, value, "policy")
    for label, value in {"'yes'": "yes", "None": None}.items():
        add("ownership", "async_scheduling", label, value, "async scheduling")
        add("ownership", "chunked", label, value, "chunked prefill")
        add("ownership", "vllm_head", label, value, "vLLM's head")
    for box in own.typed:
        for label, value in {"'abc'": "abc", "''": "", "'nan'": "nan", "'1e400'": "1e400",
                             "'100000'": "100000", "'0'": "0", "'1.5'": "1.5"}.items():
            add("ownership", f"typed:{box}", label, value, box)
    mem = w.memory
    for name, values in {
        "model": {"'nope'": "nope", "None": None}, "hardware": {"'TPU'": "TPU", "5": 5},
        "task": {"'nope'": "nope"}, "dtype": {"'float8'": "float8"},
        "head_dtype": {"'int8'": "int8"}, "budget": {"3": 3, "'16K'": "16K"},
        "prompt_len": {"(1024,)": (1024,), "(3, 5)": (3, 5), "1024": 1024},
        "policies": {"('copy',)": ("copy",), "'clone'": "clone"},
        "tensor_parallel_size": {"0": 0, "9": 9, "1.5": 1.5},
        "async_scheduling": {"'yes'": "yes"},
        "activation": {"'maybe'": "maybe", "None": None},
    }.items():
        description = label_of(getattr(mem, name)) or name
        for label, value in values.items():
            add("memory", name, label, value, description.split(" (")[0])
    for label, text in {"'{not json'": "{not json", "'[1, 2]'": "[1, 2]",
                        "'null'": "null", "missing path": str(w.tmp / "missing.json"),
                        "a text file": str(w.files["text.txt"]),
                        "'{}'": "{}"}.items():
        add("memory", "your_model", label, text, "your model")
    for label, value in {"'0'": "0", "'9'": "9", "'x'": "x"}.items():
        add("memory", "typed:tensor-parallel GPUs", label, value, "tensor-parallel GPUs")
    # a value in the slider's range that the model cannot split over: vLLM's rule, its flag
    add("memory", "tensor_parallel_size", "3 (does not divide 32 heads)", 3,
        "tensor-parallel", "divisible")
    # a valid config (pooling memory does not depend on the context: it is a limit)
    cases.append(Case(a, "memory.your_model = 10^12 positions (a valid config)",
                      lambda: _taken(w.memory, "your_model",
                                     str(w.files["huge_positions/config.json"])),
                      expect="answer", check=lambda ok: ok))
    # 2^31 layers: the KV cache is specified layer by layer, refused with the size it needs
    cases.append(Case(a, "memory.your_model = 2^31 layers (a valid config)",
                      lambda: _taken(w.memory, "your_model",
                                     str(w.files["layers_2_31/config.json"])),
                      expect="answer",
                      check=lambda ok: ok is True or "num_hidden_layers" in ok or ok))
    tok = w.tokens
    for label, value in {"10^9": 10**9, "-100": -100, "1.5": 1.5}.items():
        add("tokens", "layer", label, value, "layer")
    for label, value in {"'nope'": "nope", "None": None}.items():
        add("tokens", "metric", label, value, "metric")
    for label, value in {"''": "", "'   '": "   ", "30,000 chars": "x " * 15_000,
                         "2,000 tokens": "hello " * 2_000}.items():
        add("tokens", "text_input", label, value, "text")
    for label, value in {"'abc'": "abc", "'99'": "99", "'-1'": "-1"}.items():
        add("tokens", "typed:layer", label, value, "layer")
    rew = w.rewards
    for label, value in {"nan": math.nan, "5": 5.0, "-1": -1.0, "'x'": "x"}.items():
        add("rewards", "threshold", label, value, "threshold")
    for label, value in {"'nan'": "nan", "'5'": "5", "'inf'": "inf"}.items():
        add("rewards", "typed:threshold", label, value, "threshold")
    for label, value in {"''": "", "41 steps": "\n".join(["4"] * 41),
                         "13,000 chars": "x" * 13_000}.items():
        add("rewards", "steps", label, value, "steps")
    add("rewards", "problem", "''", "", "problem")
    add("rewards", "problem", "13,000 chars", "x" * 13_000, "problem")
    del own, tok, rew
    return cases


def every_control_is_covered(w: World, cases: Sequence[Case]) -> list[str]:
    """Controls of the four explorers no case sets (the sweep must cover every one)."""
    names = {c.name.split(" = ")[0] for c in cases if c.area == "explorers"}
    missing = []
    for ex_name in ("ownership", "memory", "tokens", "rewards"):
        ex = getattr(w, ex_name)
        for attr, value in vars(ex).items():
            if (isinstance(value, (W.ValueWidget, W.HBox)) and value in ex._controls
                    and f"{ex_name}.{attr}" not in names):
                missing.append(f"{ex_name}.{attr}")
        for box in ex.typed:
            if f"{ex_name}.typed:{box}" not in names:
                missing.append(f"{ex_name}.typed:{box}")
    return missing


# --- the command line ----------------------------------------------------------------------


def cli_cases(w: World) -> list[Case]:
    from .cases_issue import cli

    a = "CLI"
    out_file = str(w.tmp / "cli-out")
    cases = []
    per_command: dict[str, tuple[list[str], dict[str, Sequence[str]]]] = {
        "gate": (["gate", "decoder_embedding"], {
            "--task": ["nope", ""], "--policy": ["nope"]}),
        "simulate": (["simulate", "--prompt-lens", "1000", "--hidden-size", "8"], {
            "--prompt-lens": ["0", "-5", "1.5", "abc", "", "1k..1", "1..1M:5000", "1e400",
                              "9" * 40, "nan"],
            "--policy": ["copy", ""], "--budget": ["0", "1.5", "x", "1e30"],
            "--hidden-size": ["0", "-1", "x"], "--dtype": ["float8", "x"],
            "--head-dtype": ["float8"], "--max-num-seqs": ["0", "x"],
            "--max-model-len": ["0", "x"], "--task": ["nope"], "--hardware": ["nope", ""],
            "--model-preset": ["nope"], "--mode": ["fast"], "--max-steps": ["0", "x"],
            "--max-rows": ["-1", "x"], "--trace": [str(w.tmp), str(w.tmp / "m" / "t.json")],
            "--csv": [str(w.tmp)], "--usage": ["cli"], "--output-memory": ["two"],
            "--abort": ["", "0", "0:", ":3", "a:b", "-1:3", "0:-2", "0:1.5", "5:3", "0:1:2",
                        "0:99999999999999999999", "0:0"],
            "--vllm-args": ["", "vllm serve", "vllm serve X --nope 1",
                            "vllm serve Qwen/Qwen3-Embedding-8B --max-num-seqs x",
                            "vllm serve Qwen/Qwen3-Embedding-8B -tp 3"],
        }),
        "sweep": (["sweep", "--prompt-lens", "1k..8k:3", "--hidden-size", "8"], {
            "--prompt-lens": ["0", "8k..1k", "1..2:0", "x"],
            "--policies": ["copy", ",", ""], "--async": ["maybe"],
            "--out": [str(w.tmp)], "--plot": [str(w.tmp / "m" / "p.png")],
            "--mode": ["fast"],
        }),
        "embed": (["embed", "tiny-decoder", "--text", "hello", "--out",
                   out_file + ".safetensors"], {
            "--text": [""], "--text-file": [str(w.tmp / "missing.txt"), "/dev/zero",
                                            str(w.tmp)],
            "--out": [str(w.tmp), str(w.tmp / "m" / "o.safetensors")],
            "--task": ["nope"], "--chunk-size": ["0", "x"], "--policy": ["copy"],
            "--layer": ["100", "x"], "--dimensions": ["0", "100000"], "--dtype": ["float8"],
        }),
        "report": (["report", "--quick"], {
            "--notebooks": [str(w.tmp / "missing")], "--out": [str(w.files["text.txt"])],
            "--timeout": ["0", "x"],
        }),
        "engine-check": (["engine-check"], {
            "--chunk-sizes": ["a,b", "-1", ""], "--budget": ["0", "x"],
            "--max-num-seqs": ["0"], "--task": ["nope"], "--python": [str(w.tmp)],
        }),
    }
    for command, (base, options) in per_command.items():
        for flag, values in options.items():
            for value in values:
                argv = [*_without(base, flag), flag, value]
                if command == "embed" and flag == "--text-file":
                    argv = [*_without(argv, "--text")]
                need = () if flag in ("--vllm-args",) else (flag.lstrip("-").split("-")[0],)
                shown = value.replace(str(w.tmp), "<tmp>")
                shown = shown if len(shown) <= 40 else shown[:37] + "..."
                cases.append(cli(a, f"tokpool {command} {flag} {shown!r}", argv, *need))
    cases += [
        cli(a, "tokpool (no command)", [], "command"),
        cli(a, "tokpool nope", ["nope"], "nope"),
        cli(a, "tokpool embed (a missing model)", ["embed", "nope-model", "--text", "hi",
                                                   "--out", out_file + "2.safetensors"],
            "nope-model"),
        cli(a, "tokpool gate (a kind that is not one)", ["gate", "nope"], "nope"),
        cli(a, "tokpool plan --prompt-len 32Q", ["plan", "org/x", "--prompt-len", "32Q"],
            "32Q"),
        cli(a, "tokpool plan --gpu B999", ["plan", "org/x", "--gpu", "B999"], "B999"),
        cli(a, "tokpool plan (offline, not cached)", ["plan", "org/not-cached"],
            "org/not-cached"),
        cli(a, "tokpool site (no OUT)", ["site"], "OUT"),
        cli(a, "tokpool site (OUT is a file)", ["site", str(w.files["text.txt"])], "OUT"),
        cli(a, "tokpool site (OUT under a file)",
            ["site", str(w.files["text.txt"] / "site")], "OUT"),
        cli(a, "tokpool site --sample (a value it does not take)",
            ["site", str(w.tmp / "site"), "--sample", "yes"], "yes"),
    ]
    return cases


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag`` and its value."""
    if flag not in argv:
        return list(argv)
    i = argv.index(flag)
    return argv[:i] + argv[i + 2:]


def all_cases(w: World) -> list[Case]:
    return [*top_level(w), *explorer_controls(w), *cli_cases(w)]
