"""The KV cache as the installed vLLM plans it for a model folder: its own attention layers,
specs, groups and block count, run on the CPU (the oracle of ``vllm_rules.kv_spec``).

``vllm_kv_cache_facts(folder, ...)`` builds vLLM's ``VllmConfig`` from the folder's
``config.json`` (``EngineArgs.create_engine_config``), builds the model's modules on the
``meta`` device (no weights) so its attention layers exist as vLLM builds them, and asks vLLM:

- each layer's spec: ``get_kv_cache_spec`` (Model Runner V2's, ``vllm/v1/worker/gpu/
  attn_utils.py``: ``Attention.get_kv_cache_spec`` then the backend's
  ``customize_attention_spec``);
- the groups: ``get_global_kv_cache_groups`` (``kv_cache_planning``), over the pipeline
  stages' layers (``get_pp_indices``);
- the blocks and the start-up check: ``get_kv_cache_configs`` with the given memory per rank
  (its ``ValueError`` is returned as text);
- the requests of ``max_model_len`` tokens it holds: ``get_max_concurrency_for_kv_cache_config``.

What a CPU cannot show is set as on a GPU, each with the vLLM rule it stands for: the attention
backend's kernel block sizes are FLASH_ATTN's (``MultipleOf(16)``: the CPU backend's are 32),
the hybrid KV-cache manager is on (``VllmConfig.__post_init__`` turns it off on CPUs only),
Model Runner V2 (its ``max_concurrent_batches``), the legacy NHD (``LBNHC``) KV-cache layout
(the engine core's ``resolve_kv_cache_layout`` picks one from the backends), the per-token-head
dtypes are packed by ``TritonAttentionBackend.customize_spec`` (the only backend that serves
them), and a tensor-parallel rank stores ``ModelConfig.get_num_kv_heads`` heads (the modules
are built for one rank).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import re
import socket
from types import SimpleNamespace
from typing import Any

import torch

from .scheduler import _vllm

__all__ = ["vllm_classifier_facts", "vllm_kv_cache_facts"]

_STATE: dict[str, bool] = {}
_NAMES: dict[str, SimpleNamespace] = {}


@contextlib.contextmanager
def _gpu_like():
    """FLASH_ATTN's kernel block sizes for the CPU backend, and Model Runner V2."""
    from vllm.v1.attention.backend import MultipleOf
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    saved = CPUAttentionBackend.__dict__["get_supported_kernel_block_sizes"]
    env = os.environ.get("VLLM_USE_V2_MODEL_RUNNER")
    CPUAttentionBackend.get_supported_kernel_block_sizes = staticmethod(
        lambda kv_cache_spec=None: [MultipleOf(16)])
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    try:
        yield
    finally:
        CPUAttentionBackend.get_supported_kernel_block_sizes = saved
        if env is None:
            os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
        else:
            os.environ["VLLM_USE_V2_MODEL_RUNNER"] = env


@contextlib.contextmanager
def _quiet_gpu_like():
    """vLLM's logging at ERROR and its stdout swallowed, on the GPU-like platform
    (``_gpu_like``), while a config and model are built."""
    quiet = logging.getLogger("vllm")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with _gpu_like(), contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        quiet.setLevel(level)


def _engine_config(folder: str | os.PathLike, **engine_args: Any) -> Any:
    """vLLM's ``VllmConfig`` for a model folder as a pooling runner (no tokenizer, no weights)."""
    return _vllm()["EngineArgs"](model=str(folder), tokenizer=str(folder), runner="pooling",
                                 skip_tokenizer_init=True, **engine_args).create_engine_config()


def _model_parallel(config: Any) -> None:
    """One process, one rank: vLLM's distributed state, made again for each model (an MoE
    model's expert-parallel group is made from the current config)."""
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.parallel_state import destroy_model_parallel

    if not _STATE.get("distributed"):
        with socket.socket() as probe:  # a free port: other processes may hold a fixed one
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                     distributed_init_method=f"tcp://127.0.0.1:{port}",
                                     backend="gloo")
        _STATE["distributed"] = True
    destroy_model_parallel()
    initialize_model_parallel(1, 1)


def vllm_kv_cache_facts(
    folder: str | os.PathLike, cases: list[dict[str, Any]], *, block_size: int = 16,
    dtype: str = "auto",
) -> list[dict[str, Any]]:
    """vLLM's KV-cache plan of a model folder, for each case: the model's layers are built
    once, then each case sets its engine values on the config, as vLLM's own
    ``_estimate_max_model_len_from_groups`` sets ``max_model_len``.

    Args:
        folder: a directory with a ``config.json`` (no weights are read).
        cases: dicts with ``available_bytes`` (KV memory per rank), ``max_model_len``,
            ``max_num_batched_tokens``, and optionally ``kv_cache_dtype`` (``"auto"``), ``tp``,
            ``pp`` (1), ``async_scheduling`` (False).
        block_size: ``--block-size``.
        dtype: ``--dtype`` (the model's, which the KV cache stores under ``"auto"``).

    Returns:
        Per case: ``layers``: per model layer ``(sliding_window or None, num_kv_heads,
        page_size_bytes)``; ``groups``: ``(sliding_window or None, layer indices)`` per group;
        ``num_blocks`` and ``max_concurrency`` (``None`` when vLLM refuses); ``error``:
        vLLM's start-up refusal text or ``None``; ``max_in_flight_tokens``.

    Raises:
        VllmUnavailableError: vLLM is not installed (``make vllm``).
        AssertionError, ValueError: vLLM refuses to build the model (its message).
    """
    v = _names()
    with _quiet_gpu_like():
        config = _engine_config(folder, block_size=block_size, enable_chunked_prefill=True,
                                dtype=dtype)
        config.scheduler_config.disable_hybrid_kv_cache_manager = False
        # the engine core resolves it from the backends (resolve_kv_cache_layout); with one
        # page size for every layer each layout gives the same bytes per block
        config.cache_config.kv_cache_layout = "LBNHC"
        with v.set_current_vllm_config(config):
            _model_parallel(config)
            cls, _ = v.get_model_architecture(config.model_config)
            with torch.device("meta"):
                cls(vllm_config=config, prefix="")
            built = v.get_kv_cache_spec(config)
        layer_of = {name: int(re.search(r"layers\.(\d+)\.", name).group(1))
                    for name in built}
        num_layers = config.model_config.hf_text_config.num_hidden_layers
        return [_plan(case, config, built, layer_of, num_layers) for case in cases]


def _names() -> SimpleNamespace:
    """The vLLM functions and classes this oracle calls, imported once."""
    if "names" not in _NAMES:
        from vllm.config import set_current_vllm_config
        from vllm.distributed.utils import get_pp_indices
        from vllm.model_executor.model_loader.utils import get_model_architecture
        from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
        from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
        from vllm.v1.core.kv_cache_planning import (
            get_global_kv_cache_groups,
            get_kv_cache_configs,
        )
        from vllm.v1.core.kv_cache_utils import (
            generate_scheduler_kv_cache_config,
            get_max_concurrency_for_kv_cache_config,
        )
        from vllm.v1.kv_cache_interface import (
            AttentionSpec,
            SlidingWindowSpec,
            get_kv_quant_mode,
        )
        from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

        _NAMES["names"] = SimpleNamespace(
            set_current_vllm_config=set_current_vllm_config, get_pp_indices=get_pp_indices,
            get_model_architecture=get_model_architecture,
            STR_DTYPE_TO_TORCH_DTYPE=STR_DTYPE_TO_TORCH_DTYPE,
            TritonAttentionBackend=TritonAttentionBackend,
            get_global_kv_cache_groups=get_global_kv_cache_groups,
            get_kv_cache_configs=get_kv_cache_configs,
            generate_scheduler_kv_cache_config=generate_scheduler_kv_cache_config,
            get_max_concurrency_for_kv_cache_config=get_max_concurrency_for_kv_cache_config,
            AttentionSpec=AttentionSpec, SlidingWindowSpec=SlidingWindowSpec,
            get_kv_quant_mode=get_kv_quant_mode, get_kv_cache_spec=get_kv_cache_spec)
    return _NAMES["names"]


def _plan(case: dict[str, Any], config: Any, built: dict[str, Any], layer_of: dict[str, int],
          num_layers: int) -> dict[str, Any]:
    """One case of ``vllm_kv_cache_facts``."""
    v = _names()
    tp, pp = case.get("tp", 1), case.get("pp", 1)
    dtype = case.get("kv_cache_dtype", "auto")
    config.model_config.max_model_len = case["max_model_len"]
    config.scheduler_config.max_num_batched_tokens = case["max_num_batched_tokens"]
    config.scheduler_config.async_scheduling = case.get("async_scheduling", False)
    config.parallel_config.tensor_parallel_size = tp
    heads = config.model_config.get_num_kv_heads(config.parallel_config)
    config.parallel_config.tensor_parallel_size = 1
    config.parallel_config.pipeline_parallel_size = pp
    specs = {}
    for name, spec in built.items():
        if not isinstance(spec, v.AttentionSpec):
            raise ValueError(f"{name}: {type(spec).__name__} is not an attention spec")
        changes: dict[str, Any] = {"num_kv_heads": heads}
        if dtype != "auto":
            changes.update(dtype=v.STR_DTYPE_TO_TORCH_DTYPE[dtype],
                           kv_quant_mode=v.get_kv_quant_mode(dtype))
        specs[name] = v.TritonAttentionBackend.customize_spec(
            dataclasses.replace(spec, **changes))
    sliding = v.SlidingWindowSpec
    layers = {layer_of[n]: (s.sliding_window if isinstance(s, sliding) else None,
                            s.num_kv_heads, s.page_size_bytes) for n, s in specs.items()}
    workers = []
    for rank in range(pp):
        lo, hi = v.get_pp_indices(num_layers, rank, pp)
        workers.append({n: s for n, s in specs.items() if lo <= layer_of[n] < hi})
    groups = v.get_global_kv_cache_groups(config, workers)
    facts: dict[str, Any] = {
        "layers": [layers.get(i) for i in range(num_layers)],
        "groups": [(g.kv_cache_spec.sliding_window if isinstance(g.kv_cache_spec, sliding)
                    else None, tuple(layer_of[n] for n in g.layer_names)) for g in groups],
        "max_in_flight_tokens": config.max_in_flight_tokens,
        "num_blocks": None, "max_concurrency": None, "error": None,
    }
    try:
        configs = v.get_kv_cache_configs(config, workers, [case["available_bytes"]] * pp,
                                            groups)
    except ValueError as err:
        facts["error"] = str(err)
        return facts
    facts["num_blocks"] = configs[0].num_blocks
    facts["max_concurrency"] = v.get_max_concurrency_for_kv_cache_config(
        config, v.generate_scheduler_kv_cache_config(configs))
    return facts


def vllm_classifier_facts(folder: str | os.PathLike, *, task: str = "token_classify",
                          dtype: str = "auto", convert: str = "auto") -> dict[str, Any]:
    """Where vLLM 0.33.0 puts a classify model's score head: the model class vLLM builds for
    the folder (on the ``meta`` device, no weights) and its pooler for ``task``.

    Returns:
        ``model_class`` (vLLM's class name: an ``as_seq_cls_model`` adapter is
        ``*ForSequenceClassification``), ``classifier_in_pooler_head`` (the pooler head's
        ``classifier`` is the model's ``score``: ``TokenClassifierPoolerHead(classifier=...)``),
        ``classifier_shape`` (``(in, out)`` of that classifier), ``classifier_dtype``, and
        ``head_dtype``.
    """
    v = _names()
    with _quiet_gpu_like():
        config = _engine_config(folder, dtype=dtype, convert=convert)
        with v.set_current_vllm_config(config):
            _model_parallel(config)
            cls, _ = v.get_model_architecture(config.model_config)
            with torch.device("meta"):
                model = cls(vllm_config=config, prefix="")
    pooler = model.pooler
    pooler = getattr(pooler, "poolers_by_task", {task: pooler})[task]
    head = getattr(pooler, "head", None)
    classifier = getattr(head, "classifier", None)
    weight = getattr(classifier, "weight", None)
    return {
        "model_class": type(model).__name__,
        "classifier_in_pooler_head": classifier is not None,
        "classifier_is_score": classifier is not None and classifier is getattr(model, "score",
                                                                                None),
        "classifier_shape": None if weight is None else (int(weight.shape[1]),
                                                         int(weight.shape[0])),
        "classifier_dtype": None if weight is None else str(weight.dtype).removeprefix("torch."),
        "head_dtype": str(config.model_config.head_dtype).removeprefix("torch."),
    }
