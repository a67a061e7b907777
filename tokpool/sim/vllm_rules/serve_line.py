"""A ``vllm serve`` line → the ``SimConfig`` vLLM 0.33.0 would run (``SimConfig.from_vllm_args``).

The flags are parsed by ``args.parse_vllm_args``; this module adds what the line means beyond
its flags: the environment words before ``vllm serve`` (``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``;
``VLLM_CPU_KVCACHE_SPACE=<GiB>``, which the CPU platform reads: ``cpu_platform``),
the API server's usage context and KV-cache sizing, the runner (``--runner``/``--convert``,
``auto`` by default, resolved as vLLM resolves them: ``hf_config.as_served``; a bare
``*ForCausalLM`` is a generative model there, refused), the flags it ignores
(``SimConfig.ignored_flags``), and the task the engine SELECTS (``engine.select_pooling_task``
over the tasks the model declares, ``hf_config.declared_tasks``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from ...pooler.task_names import select_pooling_task

# Refusals are called through the module, never copied: the refusal tests swap them there.
from . import engine_checks
from .args import _tokens, parse_vllm_args
from .cpu_platform import CPU_KVCACHE_SPACE_ENV, read_kvcache_space
from .hf_config import declared_tasks
from .hub import model_source
from .models import ModelPreset
from .runner import read_use_v2_model_runner

__all__ = ["config_from_vllm_args", "declared_tasks"]  # declared_tasks: hf_config's


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


def _revision(argv) -> str | None:
    """The line's ``--revision`` (the Hub revision its model is read at), else ``None``."""
    tokens = _tokens(_without_env(argv))
    for i, token in enumerate(tokens):
        if token.startswith("--revision="):
            return token.split("=", 1)[1]
        if token == "--revision" and i + 1 < len(tokens):
            return tokens[i + 1]
    return None


def config_from_vllm_args(cls, argv, *, model=None, **overrides) -> Any:
    """The config ``cls`` (``SimConfig``) for a ``vllm serve`` line; see
    ``SimConfig.from_vllm_args`` for the arguments and what is derived."""
    env = dict(word.split("=", 1) for word in env_prefix(argv))
    allow_long = env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") == "1"
    fields = parse_vllm_args(_without_env(argv))
    if "ignored" in fields:  # said in the result (SimConfig.ignored_flags), never dropped
        fields["ignored_flags"] = fields.pop("ignored")
    fields.setdefault("allow_long_max_model_len", allow_long)
    if read_kvcache_space(env.get(CPU_KVCACHE_SPACE_ENV)) is not None:
        # read by vLLM's CPU platform only (CpuPlatform.check_and_update_config)
        fields.setdefault("cpu_kvcache_space", read_kvcache_space(env[CPU_KVCACHE_SPACE_ENV]))
    use_v2 = read_use_v2_model_runner(env.get("VLLM_USE_V2_MODEL_RUNNER"))
    if use_v2 is not None:  # VllmConfig.use_v2_model_runner: the environment decides
        fields.setdefault("model_runner", "v2" if use_v2 else "v1")
    runner = fields.pop("runner", "auto")  # vLLM's default: auto, resolved per architecture
    convert = fields.pop("convert", "auto")
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
    # a Hub id: its files as vLLM reads them (cache or Hub), the preset only when they
    # cannot be had (said: hub.PresetAnswersWarning); a preset name: the preset
    source = model_source(source, revision=_revision(argv))
    preset = isinstance(source, ModelPreset)
    if preset:  # tokpool's presets are pooling models: any runner but a generative one
        if runner in ("generate", "draft"):
            engine_checks.check_pooling_runner(
                str(getattr(source, "name", source)), "", runner=runner, runner_type=runner,
                convert_type="none", pooling_class=False, generative_class=True)
        build = functools.partial(cls.for_model, source)
    else:
        build = functools.partial(cls.from_hf_config, source, runner=runner, convert=convert)
    if "task" in fields:
        return build(**fields)
    natural = build(**fields)  # the model's own kind decides which tasks it declares
    if preset:
        declared, archs = declared_tasks(natural.task, convert), ()
    else:  # the tasks vLLM's resolved model declares (hf_config.as_served)
        declared, archs = natural.model.declared_tasks, (natural.model.architecture,)
    selected = select_pooling_task(declared, architectures=archs)
    return natural if selected == natural.task else build(**fields, task=selected)
