"""The engine configuration as the installed vLLM resolves it: ``EngineArgs(...)
.create_engine_config()`` on a model folder (a ``config.json``, no weights), on the CPU.

``vllm_engine_facts(folder, usage=..., **engine_args)`` returns the fields tokpool's resolution
step (``tokpool.sim.vllm_rules.resolve``) also derives, so the two can be compared
(``tests/test_parity_config.py``):

- ``max_model_len`` (``ModelConfig.max_model_len``: config keys, RoPE scaling, a
  sentence-transformers ``max_seq_length``, the flag);
- ``max_num_batched_tokens``, ``max_num_seqs`` (``SchedulerConfig``, by usage context on
  vLLM's CPU platform: device-dependent tiers are checked with vLLM's platform patched, in
  ``tests/test_parity_vllm.py``);
- ``enable_chunked_prefill`` (``ModelConfig.is_chunked_prefill_supported`` and the flag);
- ``head_dtype`` (``ModelConfig.head_dtype``);
- ``selected_task``: ``ModelConfig.get_pooling_task`` over the tasks the model declares
  (passed in: loading the model class would need weights).

Not compared here: CUDA-graph capture sizes (vLLM's CPU platform captures none; checked with a
patched platform in ``tests/test_parity_vllm.py``), async scheduling (the CPU platform forces it
off), device memory.

``vllm_serve_facts(line, folder, ...)`` runs a whole ``vllm serve`` line the way ``vllm serve``
does: vLLM's own serve parser (``make_arg_parser``, ``validate_parsed_serve_args``), the model
tag as the model (``vllm/entrypoints/cli/serve.py``), ``AsyncEngineArgs.from_cli_args`` and
``create_engine_config`` under the API server's usage context; it adds the runner vLLM
resolved (``runner_type``, ``convert_type``), the model dtype, the attention type and the
optimization level.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from typing import Any

from ...pooler.vllm_bridge import VllmUnavailableError
from .scheduler import _vllm

_USAGE = {"llm": "LLM_CLASS", "server": "OPENAI_API_SERVER"}


def vllm_engine_facts(folder: str | os.PathLike, *, usage: str = "llm",
                      declared_tasks: tuple[str, ...] = (), **engine_args: Any) -> dict[str, Any]:
    """Resolve vLLM's engine config for a model folder and return the compared fields.

    Args:
        folder: a directory with a ``config.json`` (and, for sentence-transformers models,
            ``modules.json`` / ``sentence_bert_config.json``); no weights are read.
        usage: ``"llm"`` (the ``LLM`` class) or ``"server"`` (``vllm serve``).
        declared_tasks: the tasks the model's pooler declares, for ``selected_task``.
        **engine_args: ``EngineArgs`` fields (``max_num_batched_tokens=512``,
            ``pooler_config=PoolerConfig(task=...)`` as a dict ``{"task": ...}``, ...).

    Raises:
        VllmUnavailableError: vLLM is not installed (``make vllm``).
        ValueError: vLLM refuses the configuration (its message).
    """
    m = _vllm()
    from vllm.config import PoolerConfig
    from vllm.usage.usage_lib import UsageContext

    if usage not in _USAGE:
        raise ValueError(f"unknown usage {usage!r}; use 'llm' or 'server'")
    pooler = engine_args.pop("pooler_config", None)
    if isinstance(pooler, dict):
        pooler = PoolerConfig(**pooler)
    args = m["EngineArgs"](model=str(folder), tokenizer=str(folder), runner="pooling",
                           skip_tokenizer_init=True, pooler_config=pooler, **engine_args)
    quiet = logging.getLogger("vllm")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            config = args.create_engine_config(usage_context=getattr(UsageContext,
                                                                     _USAGE[usage]))
    except (ValueError, TypeError) as err:
        raise ValueError(str(err)) from err
    finally:
        quiet.setLevel(level)
    model, scheduler = config.model_config, config.scheduler_config
    selected = model.get_pooling_task(tuple(declared_tasks)) if declared_tasks else None
    return {
        "max_model_len": int(model.max_model_len),
        "max_num_batched_tokens": int(scheduler.max_num_batched_tokens),
        "max_num_seqs": int(scheduler.max_num_seqs),
        "enable_chunked_prefill": bool(scheduler.enable_chunked_prefill),
        "head_dtype": str(model.head_dtype).removeprefix("torch."),
        "selected_task": selected,
    }


def _serve_parser():
    """vLLM's ``vllm serve`` parser, as its CLI builds it (a ``serve`` subcommand of ``vllm``)."""
    m = _vllm()
    if "serve_parser" not in m:
        from vllm.entrypoints.common.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        top = FlexibleArgumentParser(prog="vllm")
        sub = top.add_subparsers(dest="subparser")
        make_arg_parser(sub.add_parser("serve", prog="vllm serve"))
        m["serve_parser"] = top
    return m["serve_parser"]


def vllm_parse_serve_line(tokens: list[str]):
    """vLLM's namespace for ``vllm serve`` + ``tokens`` (its parser and
    ``validate_parsed_serve_args``).

    Raises:
        ValueError: vLLM's parser refuses the line (its message, e.g. the ``--task`` hint).
    """
    from vllm.entrypoints.common.cli_args import validate_parsed_serve_args

    parser = _serve_parser()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            namespace = parser.parse_args(["serve", *tokens])
    except SystemExit:
        raise ValueError(err.getvalue().strip().splitlines()[-1] if err.getvalue() else
                         "vLLM's parser refused the line") from None
    try:
        validate_parsed_serve_args(namespace)
    except Exception as error:  # TypeError, ValueError, vLLM's VLLMValidationError
        raise ValueError(str(error)) from None
    return namespace


def vllm_serve_facts(tokens: list[str], *, declared_tasks=None) -> dict[str, Any]:
    """What vLLM 0.33.0 resolves for ``vllm serve`` + ``tokens`` (the model tag first: a
    folder with a ``config.json``; no weights or tokenizer are loaded).

    Args:
        tokens: the line after ``vllm serve``.
        declared_tasks: ``convert_type -> tasks`` the model declares (loading the model class
            would need weights), for ``selected_task``.

    Returns:
        ``runner_type``, ``convert_type``, ``dtype``, ``max_model_len``,
        ``max_num_batched_tokens``, ``max_num_seqs``, ``enable_chunked_prefill``,
        ``head_dtype``, ``attn_type`` (pooling runners), ``tok_pooling_type``,
        ``optimization_level``, ``enable_prefix_caching``, ``selected_task``.

    Raises:
        ValueError: vLLM refuses the line or the configuration (its message).
    """
    m = _vllm()
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext

    namespace = vllm_parse_serve_line(tokens)
    if getattr(namespace, "model_tag", None) is not None:  # vllm/entrypoints/cli/serve.py
        namespace.model = namespace.model_tag
    args = AsyncEngineArgs.from_cli_args(namespace)
    args.tokenizer = args.model
    args.skip_tokenizer_init = True
    quiet = logging.getLogger("vllm")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = args.create_engine_config(
                usage_context=UsageContext.OPENAI_API_SERVER)
    except (ValueError, TypeError, NotImplementedError, RuntimeError) as err:
        raise ValueError(f"{type(err).__name__}: {err}") from err
    finally:
        quiet.setLevel(level)
    _ = m  # vLLM is importable (VllmUnavailableError otherwise), its CPU platform set
    model, scheduler = config.model_config, config.scheduler_config
    pooling = model.runner_type == "pooling"
    selected = None
    if pooling and declared_tasks is not None:
        try:
            selected = model.get_pooling_task(tuple(declared_tasks(model.convert_type)))
        except RuntimeError as err:  # an undeclared --pooler-config.task: the engine's refusal
            raise ValueError(f"RuntimeError: {err}") from err
    return {
        "runner_type": model.runner_type,
        "convert_type": model.convert_type,
        "dtype": str(model.dtype).removeprefix("torch."),
        "max_model_len": int(model.max_model_len),
        "max_num_batched_tokens": int(scheduler.max_num_batched_tokens),
        "max_num_seqs": int(scheduler.max_num_seqs),
        "enable_chunked_prefill": bool(scheduler.enable_chunked_prefill),
        "head_dtype": str(model.head_dtype).removeprefix("torch.") if pooling else None,
        "attn_type": model.attn_type if pooling else None,
        "tok_pooling_type": model.pooler_config.tok_pooling_type if pooling else None,
        "optimization_level": int(config.optimization_level),
        "enable_prefix_caching": bool(config.cache_config.enable_prefix_caching),
        "selected_task": selected,
    }


def vllm_cpu_platform_facts(tokens: list[str], *, env: dict[str, str] | None = None
                            ) -> dict[str, Any]:
    """What vLLM 0.33.0's CPU platform makes of ``vllm serve`` + ``tokens``, with ``env`` set
    while the config is built (``VLLM_CPU_KVCACHE_SPACE``, ``VLLM_USE_V2_MODEL_RUNNER``).

    ``create_engine_config`` builds the ``VllmConfig``, whose ``__post_init__`` runs
    ``CpuPlatform.check_and_update_config`` (KV bytes from the environment, async scheduling
    off, no capture sizes); the block size is the one ``CpuPlatform.
    update_block_size_for_backend`` picks for the ``CPU_ATTN`` backend (its
    ``_preferred_block_size_for_backends(..., 128, ...)``; the executor calls it once the
    model's layers exist, which needs weights); the runner is ``VllmConfig.
    use_v2_model_runner``.

    Returns:
        ``kv_cache_memory_bytes``, ``num_gpu_blocks_override``, ``block_size``,
        ``user_specified_block_size``, ``async_scheduling``, ``cudagraph_capture_sizes``,
        ``use_v2_model_runner``, ``device_type``.

    Raises:
        ValueError: vLLM refuses the line (its message).
    """
    _vllm()
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    namespace = vllm_parse_serve_line(tokens)
    if getattr(namespace, "model_tag", None) is not None:
        namespace.model = namespace.model_tag
    args = AsyncEngineArgs.from_cli_args(namespace)
    args.tokenizer = args.model
    args.skip_tokenizer_init = True
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    quiet = logging.getLogger("vllm")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        import vllm.envs as envs

        if hasattr(envs, "disable_envs_cache"):
            envs.disable_envs_cache()  # vLLM caches envs after start-up: read them again
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
            cache = config.cache_config
            block_size = cache.block_size
            if not cache.user_specified_block_size:
                block_size = current_platform._preferred_block_size_for_backends(
                    [CPUAttentionBackend], 128, config)
            runner_v2 = bool(config.use_v2_model_runner)
    except (ValueError, TypeError, NotImplementedError, RuntimeError) as err:
        raise ValueError(f"{type(err).__name__}: {err}") from err
    finally:
        quiet.setLevel(level)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {
        "kv_cache_memory_bytes": cache.kv_cache_memory_bytes,
        "num_gpu_blocks_override": cache.num_gpu_blocks_override,
        "block_size": int(block_size),
        "user_specified_block_size": bool(cache.user_specified_block_size),
        "async_scheduling": bool(config.scheduler_config.async_scheduling),
        "cudagraph_capture_sizes": list(config.compilation_config.cudagraph_capture_sizes or []),
        "use_v2_model_runner": runner_v2,
        "device_type": config.device_config.device_type,
    }


__all__ = ["VllmUnavailableError", "vllm_cpu_platform_facts", "vllm_engine_facts",
           "vllm_parse_serve_line", "vllm_serve_facts"]
