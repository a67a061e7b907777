"""A ``vllm serve`` line → the ``SimConfig`` vLLM 0.33.0 would run (``SimConfig.from_vllm_args``).

The flags are parsed by ``args.parse_vllm_args``; this module adds what the line means beyond
its flags: the environment words before ``vllm serve`` (``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``),
the API server's usage context and KV-cache sizing, and the task the engine SELECTS
(``engine.select_pooling_task`` over the tasks the model declares, ``declared_tasks``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from .args import parse_vllm_args
from .engine import select_pooling_task
from .models import MODEL_PRESETS, ModelPreset

__all__ = ["config_from_vllm_args", "declared_tasks"]


def declared_tasks(kind_task: str, convert: str | None) -> tuple[str, ...]:
    """The tasks vLLM's pooling model declares, from the task tokpool reads off the model's
    kind (``hf_config``) or ``--convert``: embedding adapters declare ``embed`` and
    ``token_embed``, classification adapters ``classify`` and ``token_classify``, PRMs and
    ``*ForTokenClassification`` models ``token_classify`` alone
    (vllm/model_executor/models/adapters.py; ``Qwen2ForProcessRewardModel``)."""
    if convert == "embed" or (convert in (None, "auto", "none")
                              and kind_task in ("embed", "token_embed")):
        return ("embed", "token_embed")
    if convert == "classify" or kind_task == "classify":
        return ("classify", "token_classify")
    return ("token_classify",)


def env_prefix(argv) -> list[str]:
    """``VAR=value`` words before ``vllm serve`` (the line's environment)."""
    if not isinstance(argv, str | list | tuple):
        raise TypeError(f"argv (the vLLM line) must be a command line string or a list of "
                        f"strings, got {argv!r}")
    words = argv.split() if isinstance(argv, str) else list(argv)
    prefix = []
    for word in words:
        if "=" not in word or word.startswith("-"):
            break
        prefix.append(word)
    return prefix


def _without_env(argv):
    n = len(env_prefix(argv))
    if not n:
        return argv
    if isinstance(argv, str):
        return argv.split(None, n)[n] if len(argv.split()) > n else ""
    return list(argv)[n:]


def config_from_vllm_args(cls, argv, *, model=None, **overrides) -> Any:
    """The config ``cls`` (``SimConfig``) for a ``vllm serve`` line; see
    ``SimConfig.from_vllm_args`` for the arguments and what is derived."""
    allow_long = "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in env_prefix(argv)
    fields = parse_vllm_args(_without_env(argv))
    fields.setdefault("allow_long_max_model_len", allow_long)
    fields.pop("runner", None)  # "auto" or "pooling": the simulator is a pooling runner
    convert = fields.pop("convert", None)
    named = fields.pop("model", None)
    source = model if model is not None else named
    extra = sorted(set(fields) - {f.name for f in dataclasses.fields(cls) if f.init})
    if extra:
        raise ValueError(f"{extra} parsed from the vLLM flags have no SimConfig field")
    fields.setdefault("gpu_memory_utilization", 0.92)
    # `vllm serve` runs the OpenAI API server: its usage context picks the defaults
    # (vllm/entrypoints/openai/api_server.py builds the engine with
    # UsageContext.OPENAI_API_SERVER: an H100/H200 budget of 8192, not the LLM class's 16384)
    fields.setdefault("usage", "server")
    fields.update(overrides)
    if source is None:
        raise ValueError("from_vllm_args needs a model: in the line (vllm serve MODEL) or "
                         "as model=... (a preset name, hub id, directory or config dict)")
    names = {k.lower() for k in MODEL_PRESETS} | {
        m.hf_id.lower() for m in MODEL_PRESETS.values()}
    if isinstance(source, ModelPreset) or (isinstance(source, str)
                                           and source.lower() in names):
        build = functools.partial(cls.for_model, source)
    else:
        build = functools.partial(cls.from_hf_config, source)
    if "task" in fields:
        return build(**fields)
    natural = build(**fields)  # the model's own kind decides which tasks it declares
    selected = select_pooling_task(declared_tasks(natural.task, convert))
    return natural if selected == natural.task else build(**fields, task=selected)
