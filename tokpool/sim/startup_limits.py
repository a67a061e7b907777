"""Where vLLM stops starting, as limits, not as the nearest points of a sweep.

``tp.sim.refusal_summary`` speaks of a sweep's grid ("from 46,341 tokens"); ``startup_limits``
finds the boundaries themselves by bisection over ``startup_refusal`` (each check is
monotone in the prompt length): the longest prompt vLLM starts for, the model's context (the
longest prompt ``_get_and_verify_max_len`` accepts) and the longest whose KV cache vLLM can
plan (``_check_enough_kv_cache_memory``: the same number as vLLM's own "estimated maximum
model length"). ``limit_summary`` says them in sentences.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .config import SimConfig
from .startup import CONTEXT_CHECK, KV_CHECK, REFUSAL_REASONS, startup_refusal

__all__ = ["StartupLimits", "limit_summary", "startup_limits"]


@dataclass(frozen=True)
class StartupLimits:
    """The longest prompts vLLM serves under one config (``None``: no limit up to ``upto``).

    Attributes:
        starts_up_to: the longest prompt vLLM starts for, every check passed.
        context: the longest prompt within the model's context (``_get_and_verify_max_len``).
        kv_cache: the longest prompt whose KV cache vLLM can plan (other checks).
        kv_refusal: vLLM's message just past ``kv_cache`` (``None`` when there is none).
        upto: the longest prompt looked at.
    """

    starts_up_to: int | None
    context: int | None
    kv_cache: int | None
    kv_refusal: str | None
    upto: int


def _last_true(ok: Callable[[int], bool], upto: int) -> int | None:
    """The largest ``n`` in ``[1, upto]`` with ``ok(n)`` for a monotone ``ok`` (``None``: none;
    ``upto`` when all)."""
    if ok(upto):
        return upto
    if not ok(1):
        return None
    low, high = 1, upto  # ok(low), not ok(high)
    while high - low > 1:
        mid = (low + high) // 2
        if ok(mid):
            low = mid
        else:
            high = mid
    return low


def startup_limits(config: SimConfig, upto: int = 1 << 20) -> StartupLimits:
    """The prompt lengths at which vLLM stops starting, found exactly (bisection).

    Args:
        config: the sweep's ``SimConfig`` (``as_if`` or not).
        upto: the longest prompt to look at.

    Returns:
        A ``StartupLimits``.

    Raises:
        TypeError: ``config`` is not a ``SimConfig``.
        ValueError: ``upto`` is not a whole number >= 1.

    Example:
        >>> cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H100 SXM")
        >>> limits = tp.sim.startup_limits(cfg)
        >>> limits.starts_up_to, limits.context, limits.kv_cache  # `vllm serve`, one H100
        (40960, 40960, 416912)
    """
    if not isinstance(config, SimConfig):
        raise TypeError(f"config must be a tp.SimConfig, got {type(config).__name__}")
    if isinstance(upto, bool) or not isinstance(upto, int) or upto < 1:
        raise ValueError(f"upto must be a whole number >= 1, got {upto!r}")

    def follows(n: int) -> set[str]:
        return {r.follows for r in startup_refusal(config, n)}

    kv = _last_true(lambda n: not (follows(n) - {CONTEXT_CHECK}), upto)
    refusal = None
    if kv is not None and kv < upto:
        hard = [r for r in startup_refusal(config, kv + 1) if r.follows != CONTEXT_CHECK]
        refusal = str(hard[0]) if hard else None
    return StartupLimits(
        starts_up_to=_last_true(lambda n: not follows(n), upto),
        context=_last_true(lambda n: CONTEXT_CHECK not in follows(n), upto),
        kv_cache=kv, kv_refusal=refusal, upto=upto)


def limit_summary(limits: StartupLimits, *, messages: bool = True) -> list[str]:
    """The limits in sentences: the longest prompt served, then each refusal from where it
    begins (one past its limit), with vLLM's message.

    Args:
        limits: ``startup_limits(...)``.
        messages: end the KV-cache sentence with vLLM's message.

    Returns:
        One sentence per limit below ``limits.upto``.
    """
    if not isinstance(limits, StartupLimits):
        raise TypeError(f"limits must be tp.sim.startup_limits(...), got "
                        f"{type(limits).__name__}")
    if limits.starts_up_to is None:
        lines = ["vLLM starts for no prompt length here."]
    elif limits.starts_up_to == limits.upto:
        return [f"vLLM starts for every prompt up to {limits.upto:,} tokens."]
    else:
        lines = [f"vLLM starts for every prompt up to {limits.starts_up_to:,} tokens."]
    if limits.context is not None and limits.context < limits.upto:
        lines.append(f"Past {limits.context:,} tokens the prompt is past the model's context: "
                     "vLLM refuses such a --max-model-len unless "
                     "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; drawn as if.")
    if limits.kv_cache is not None and limits.kv_cache < limits.upto:
        reason = REFUSAL_REASONS.get(KV_CHECK, "")
        # a reader's sentence: vLLM's message without the private function it cites
        said = (limits.kv_refusal or "").replace(f"{KV_CHECK}; ", "").replace(f" ({KV_CHECK})", "")
        lines.append(f"Past {limits.kv_cache:,} tokens vLLM refuses to start: {reason}; drawn "
                     "as if" + (f": {said}" if messages and said else "."))
    return lines
