"""vLLM 0.33.0's batch limits: the token budget and ``max_num_seqs`` by device, usage and model.

``batch_defaults`` (per device and usage context), ``derive_batch_limits`` (adjusted to the
model) and ``engine_batch_limits`` (then vLLM's check of them, ``engine_checks``). Each names
the vLLM file and function it restates.
"""

from __future__ import annotations

from typing import Literal

from .devices import GiB, Hardware, resolve_device
from .engine_checks import check_scheduler_limits
from .sizes import positive_int as _positive_int

__all__ = ["batch_defaults", "derive_batch_limits", "engine_batch_limits"]

Usage = Literal["llm", "server", "engine"]


def batch_defaults(
    gpu: str | Hardware, usage: Usage = "llm", *, world_size: int = 1
) -> tuple[int, int]:
    """vLLM's default ``(max_num_batched_tokens, max_num_seqs)`` for a device and usage context.

    vllm/engine/arg_utils.py, ``EngineArgs.get_batch_defaults`` (``usage``: ``"llm"`` is the
    ``LLM`` class, ``"server"`` the OpenAI API server, ``"engine"`` any other context, which
    falls back to ``SchedulerConfig``'s 2048 tokens and 128 sequences):

    ============================================  ==============  ==============
    device                                        LLM class       API server
    ============================================  ==============  ==============
    >= 160 GiB (B200, GB200, B300)                16384, 1024     16384, 1024
    >= 70 GiB, not A100, not GB10 (H100, H200)    16384, 1024     8192, 1024
    anything else (A100, L4, GB10, ...)           8192, 256       2048, 256
    CPU (times ``world_size``)                    4096, 256       2048, 128
    ============================================  ==============  ==============

    These are the defaults before ``engine_batch_limits`` adjusts them to the model.
    """
    device = resolve_device(gpu)
    _positive_int("world_size", world_size)
    if usage not in ("llm", "server", "engine"):
        raise ValueError(f"unknown usage {usage!r}; use 'llm', 'server' or 'engine'")
    if device.platform == "cpu":
        tokens = {"llm": 4096 * world_size, "server": 2048 * world_size}
        seqs = {"llm": 256 * world_size, "server": 128 * world_size}
    elif device.total_memory_bytes >= 160 * GiB:
        tokens, seqs = {"llm": 16384, "server": 16384}, {"llm": 1024, "server": 1024}
    elif (
        device.total_memory_bytes >= 70 * GiB
        and "a100" not in device.driver_name.lower()
        and device.capability != (12, 1)
    ):
        tokens, seqs = {"llm": 16384, "server": 8192}, {"llm": 1024, "server": 1024}
    else:
        tokens, seqs = {"llm": 8192, "server": 2048}, {"llm": 256, "server": 256}
    # SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS / DEFAULT_MAX_NUM_SEQS (config/scheduler.py)
    return tokens.get(usage, 2048), seqs.get(usage, 128)


def derive_batch_limits(
    gpu: str | Hardware,
    usage: Usage = "llm",
    *,
    max_model_len: int | None,
    enable_chunked_prefill: bool,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    world_size: int = 1,
) -> tuple[int, int]:
    """The engine's ``(max_num_batched_tokens, max_num_seqs)`` for a model, before vLLM's
    checks (``engine_batch_limits`` adds them).

    vllm/engine/arg_utils.py, ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``
    (default performance mode, no batched DP MoE, no multimodal prefix-LM). Only values the
    user did not give are adjusted:

    - budget: the ``batch_defaults`` value; without chunked prefill raised to at least
      ``max_model_len`` (a whole prompt must fit one step); then capped at
      ``max_num_seqs * max_model_len``;
    - ``max_num_seqs``: the default, capped at the budget.

    Without a ``max_model_len`` (no model: no context) the defaults are only capped by each
    other.
    """
    if max_model_len is not None:
        _positive_int("max_model_len", max_model_len)
    default_tokens, default_seqs = batch_defaults(gpu, usage, world_size=world_size)
    seqs = default_seqs if max_num_seqs is None else _positive_int("max_num_seqs", max_num_seqs)
    if max_num_batched_tokens is None:
        tokens = default_tokens
        if max_model_len is not None:
            if not enable_chunked_prefill:
                tokens = max(max_model_len, tokens)
            tokens = min(seqs * max_model_len, tokens)
    else:
        tokens = _positive_int("max_num_batched_tokens", max_num_batched_tokens)
    if max_num_seqs is None:
        seqs = min(seqs, tokens)
    return tokens, seqs


def engine_batch_limits(
    gpu: str | Hardware,
    usage: Usage = "llm",
    *,
    max_model_len: int,
    enable_chunked_prefill: bool,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    world_size: int = 1,
) -> tuple[int, int]:
    """The engine's final ``(max_num_batched_tokens, max_num_seqs)`` for a model:
    ``derive_batch_limits``, then vLLM's ``SchedulerConfig.verify_max_model_len``
    (``engine_checks.check_scheduler_limits``).

    Raises:
        EngineRefusal: without chunked prefill, a given budget below ``max_model_len`` (vLLM
            refuses it: such prompts could never be scheduled), or a budget below
            ``max_num_seqs``.
    """
    _positive_int("max_model_len", max_model_len)
    tokens, seqs = derive_batch_limits(
        gpu, usage, max_model_len=max_model_len, enable_chunked_prefill=enable_chunked_prefill,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        world_size=world_size)
    check_scheduler_limits(
        max_num_batched_tokens=tokens, max_num_seqs=seqs, max_model_len=max_model_len,
        enable_chunked_prefill=enable_chunked_prefill, long_prefill_token_threshold=None)
    return tokens, seqs
