"""Would the installed vLLM start this engine? Its own start-up checks, run on the CPU.

``vllm_startup_refusal(...)`` builds the engine config the schedule oracle uses
(``scheduler._engine_config``: ``EngineArgs(...).create_engine_config()``, whose
``SchedulerConfig`` checks the budget, ``max_num_seqs`` and the long-prefill threshold against
``max_model_len``) and then plans the KV cache as the engine core does at start-up:
``get_global_kv_cache_groups`` and ``get_kv_cache_configs`` over one stand-in attention layer
per KV-cache group (``FullAttentionSpec``, or ``SlidingWindowSpec`` for a window), with
``num_gpu_blocks_override`` set to the given blocks (tokpool's ``kv_cache_blocks``). The
override makes vLLM plan against ``blocks x bytes per block``, so the stand-in's page size
cancels out and the check is vLLM's ``_check_enough_kv_cache_memory`` on block counts: the
oracle of ``engine_checks.check_kv_cache_holds_one_sequence`` for a config without a model.

It returns vLLM's refusal text, or ``None`` when vLLM would start.
``vllm_prompt_refusal(prompt_lens, ...)`` asks the input processor of that engine
(``InputProcessor._validate_prompt_len``) about each prompt, as a request arrives.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Sequence
from types import SimpleNamespace

from .scheduler import _engine_config, _vllm

__all__ = ["vllm_prompt_refusal", "vllm_startup_refusal"]


def vllm_startup_refusal(
    *,
    max_model_len: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    enable_chunked_prefill: bool,
    kv_cache_blocks: int | None,
    block_size: int = 16,
    long_prefill_token_threshold: int | None = None,
    async_scheduling: bool = False,
    kv_cache_groups: Sequence[int | None] = (None,),
) -> str | None:
    """vLLM's start-up refusal for these flags (``None``: vLLM starts).

    Args:
        max_model_len, max_num_batched_tokens, max_num_seqs, enable_chunked_prefill,
            block_size, long_prefill_token_threshold, async_scheduling: vLLM's flags.
        kv_cache_blocks: ``--num-gpu-blocks-override`` (``None``: not checked, the blocks
            are sized from memory, which needs a model).
        kv_cache_groups: each group's sliding window (``None``: full attention).

    Returns:
        The ``ValueError`` text vLLM raises while building its config or planning its KV
        cache, or ``None``.

    Raises:
        VllmUnavailableError: vLLM cannot be imported (``make vllm``).
    """
    m = _vllm()
    try:
        config = _engine_config(max_num_batched_tokens, max_num_seqs, enable_chunked_prefill,
                                long_prefill_token_threshold or 0, block_size,
                                async_scheduling, False, max_model_len)
    except ValueError as err:  # SchedulerConfig / ModelConfig (pydantic's errors are too)
        return str(err)
    if kv_cache_blocks is None:
        return None
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs

    spec = {"block_size": block_size, "num_kv_heads": 1, "head_size": 1,
            "dtype": m["torch"].float32}
    layers = {f"layer{g}": (m["FullAttentionSpec"](**spec) if window is None else
                            m["SlidingWindowSpec"](**spec, sliding_window=window))
              for g, window in enumerate(kv_cache_groups)}
    cache = config.cache_config
    saved = cache.num_gpu_blocks_override, cache.kv_cache_layout
    cache.num_gpu_blocks_override = kv_cache_blocks  # the config is cached: restored below
    # the engine core resolves the layout from the backends (resolve_kv_cache_layout); with
    # one page size for every layer each layout gives the same bytes per block
    cache.kv_cache_layout = "LBNHC"
    quiet = logging.getLogger("vllm")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # its "Overriding num_gpu_blocks" line
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            groups = get_global_kv_cache_groups(config, [layers])
            page = max(s.page_size_bytes for s in layers.values())
            get_kv_cache_configs(config, [layers], [kv_cache_blocks * page * len(layers)],
                                 groups)
    except ValueError as err:
        return str(err)
    finally:
        cache.num_gpu_blocks_override, cache.kv_cache_layout = saved
        quiet.setLevel(level)
    return None


def vllm_prompt_refusal(prompt_lens: Sequence[int], *, max_model_len: int,
                        max_num_batched_tokens: int, max_num_seqs: int,
                        enable_chunked_prefill: bool, block_size: int = 16,
                        long_prefill_token_threshold: int | None = None,
                        async_scheduling: bool = False) -> str | None:
    """vLLM's refusal of the first prompt its input processor rejects (``None``: every prompt
    is accepted): ``InputProcessor._validate_prompt_len`` of the engine these flags build (an
    empty prompt, one over ``max_model_len``; a pooling runner needs no room for an output
    token). Call it for an engine ``vllm_startup_refusal`` starts.

    Raises:
        VllmUnavailableError: vLLM cannot be imported (``make vllm``).
    """
    _vllm()
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.engine.input_processor import InputProcessor

    config = _engine_config(max_num_batched_tokens, max_num_seqs, enable_chunked_prefill,
                            long_prefill_token_threshold or 0, block_size, async_scheduling,
                            False, max_model_len)
    # the method reads these four attributes of its processor (a text-only model)
    processor = SimpleNamespace(skip_prompt_length_check=False,
                                model_config=config.model_config, mm_encoder_cache_size=0,
                                supports_mm_inputs=False)
    for n in prompt_lens:
        try:
            InputProcessor._validate_prompt_len(processor, int(n), "decoder")
        except VLLMValidationError as err:  # a client error (not a ValueError)
            return str(err)
    return None
