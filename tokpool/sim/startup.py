"""Would vLLM start to serve this prompt length? Per point of a sweep, by vLLM's own refusals.

A sweep to a million tokens (``SimConfig(max_model_len=1 << 20, as_if=True)``) is a curve vLLM
could not draw: past the model's context vLLM refuses ``--max-model-len``
(``_get_and_verify_max_len``) unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``, and further out the KV
cache cannot hold one such request (``_check_enough_kv_cache_memory``). ``startup_refusals``
asks, for each prompt length ``n``, the start-up checks every other path runs
(``vllm_rules.engine_checks``, through ``SimConfig``'s one resolution step) for the engine that
serves ``n``: the config as given, started with ``--max-model-len n`` (the shortest context
that takes the prompt) and its KV cache sized from memory as ``vllm serve`` sizes it
(``gpu_memory_utilization``, vLLM's 0.92 unless given; a given ``kv_cache_blocks`` is checked
as ``--num-gpu-blocks-override``). ``mark_startup_refusals`` adds the verdict to a sweep's rows,
and ``tp.plot_memory_vs_prompt_length`` marks the refused points.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .config import SimConfig
from .vllm_rules.engine_checks import EngineRefusal

__all__ = ["CONTEXT_CHECK", "REFUSAL_COLUMNS", "REFUSAL_REASONS", "mark_startup_refusals",
           "refusal_summary", "startup_refusal", "startup_refusals"]

#: The refusal ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` lifts: a context past the model's own.
CONTEXT_CHECK = "_get_and_verify_max_len"
#: vLLM's refusal of a KV cache that cannot hold one ``max_model_len`` request (or none at all).
KV_CHECK = "kv_cache_planning._check_enough_kv_cache_memory"
#: vLLM's default ``--gpu-memory-utilization`` (``CacheConfig.gpu_memory_utilization``).
VLLM_GPU_MEMORY_UTILIZATION = 0.92
#: Why vLLM refuses, in a figure legend's words, by the vLLM function that refuses.
REFUSAL_REASONS: dict[str, str] = {
    CONTEXT_CHECK: "past the model's context",
    KV_CHECK: "its KV cache cannot hold the prompt",
}
#: Columns ``startup_refusals`` returns and ``mark_startup_refusals`` adds.
REFUSAL_COLUMNS = ("vllm_starts", "refused_by", "refusal", "past_context")


def _serving_config(config: SimConfig, prompt_len: int) -> SimConfig:
    """``config`` as the engine that serves ``prompt_len`` is started (looking past refusals)."""
    changes: dict = {"max_model_len": prompt_len, "as_if": True}
    if config.kv_cache_blocks is None and config.model is not None:
        changes["gpu_memory_utilization"] = (config.gpu_memory_utilization
                                             or VLLM_GPU_MEMORY_UTILIZATION)
    if config.enable_chunked_prefill is False and config.max_num_batched_tokens < prompt_len:
        # vLLM raises an unchunked engine's budget to max_model_len (derive_batch_limits)
        changes["max_num_batched_tokens"] = None
    return config.replace(**changes)


def startup_refusal(config: SimConfig, prompt_len: int) -> tuple[EngineRefusal, ...]:
    """vLLM's start-up refusals, in its order, for the engine that serves one prompt length.

    Args:
        config: the sweep's ``SimConfig`` (``as_if`` or not).
        prompt_len: tokens in the prompt.

    Returns:
        The ``EngineRefusal``s (``.follows`` names the vLLM function, ``str()`` its message);
        empty when vLLM starts. A refusal that cannot be looked past (e.g. a ``-tp`` that does
        not split the heads) is returned alone.

    Raises:
        TypeError: ``config`` is not a ``SimConfig``.
        ValueError: ``prompt_len`` is not a positive whole number.

    Example:
        >>> cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H100 SXM")
        >>> startup_refusal(cfg, 32_768)
        ()
        >>> [r.follows for r in startup_refusal(cfg, 1 << 20)]
        ['_get_and_verify_max_len', 'kv_cache_planning._check_enough_kv_cache_memory']
    """
    if not isinstance(config, SimConfig):
        raise TypeError(f"config must be a tp.SimConfig, got {type(config).__name__}; build one "
                        "with tp.SimConfig.for_model(...) or tp.SimConfig(...)")
    if isinstance(prompt_len, bool) or not isinstance(prompt_len, (int, np.integer)) \
            or prompt_len < 1:
        raise ValueError(f"prompt_len must be a whole number >= 1, got {prompt_len!r}")
    try:
        serving = _serving_config(config, int(prompt_len))
    except EngineRefusal as err:  # one as_if cannot look past
        return (err,)
    except ValueError as err:  # the weights and the profiled activations leave no KV memory
        return (EngineRefusal(
            f"vLLM refuses to start: \"No available memory for the cache blocks\" "
            f"({KV_CHECK}): {err}", follows=KV_CHECK),)
    return tuple(serving._resolved.refusals)


def startup_refusals(config: SimConfig, prompt_lens: Sequence[int]) -> pd.DataFrame:
    """Per prompt length, whether vLLM would start to serve it, and if not, why.

    Args:
        config: the sweep's ``SimConfig``.
        prompt_lens: the prompt lengths (e.g. ``tp.viz.prompt_grid(...)``).

    Returns:
        DataFrame, one row per distinct length in order: ``prompt_len``; ``vllm_starts``;
        ``refused_by`` (the vLLM function of the refusal that decides: the first one
        ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` does not lift, else the context one; ``None`` when
        vLLM starts); ``refusal`` (its message); ``past_context`` (the prompt is past the
        model's context: refused by ``_get_and_verify_max_len`` unless
        ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``).

    Example:
        >>> cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H100 SXM")
        >>> f = startup_refusals(cfg, [32_768, 262_144, 524_288])
        >>> f[["prompt_len", "vllm_starts", "past_context"]].to_numpy().tolist()
        [[32768, True, False], [262144, False, True], [524288, False, True]]
        >>> f["refused_by"].tolist()[1:]
        ['_get_and_verify_max_len', 'kv_cache_planning._check_enough_kv_cache_memory']
    """
    lens = sorted({int(n) for n in np.asarray(prompt_lens).reshape(-1)})
    rows = []
    for n in lens:
        refusals = startup_refusal(config, n)
        hard = [r for r in refusals if r.follows != CONTEXT_CHECK]
        decisive = (hard or list(refusals) or [None])[0]
        rows.append({"prompt_len": n, "vllm_starts": not refusals,
                     "refused_by": None if decisive is None else decisive.follows,
                     "refusal": None if decisive is None else str(decisive),
                     "past_context": any(r.follows == CONTEXT_CHECK for r in refusals)})
    columns = ["prompt_len", *REFUSAL_COLUMNS]
    # object columns keep None for "vLLM starts" (pandas would infer strings and NaN)
    return pd.DataFrame({c: pd.Series([r[c] for r in rows], dtype=object if c in
                                      ("refused_by", "refusal") else None) for c in columns})


def mark_startup_refusals(df: pd.DataFrame, config: SimConfig) -> pd.DataFrame:
    """A sweep's rows with vLLM's start-up verdict per prompt length (``REFUSAL_COLUMNS``), so
    ``tp.plot_memory_vs_prompt_length`` marks the points vLLM would refuse.

    Args:
        df: a ``tp.sweep(...)`` DataFrame (a ``prompt_len`` column).
        config: the ``SimConfig`` the sweep ran (concatenated sweeps: mark each before
            ``pd.concat``).

    Returns:
        A copy of ``df`` with the columns added (replaced if present), rows in the same order.

    Raises:
        TypeError / ValueError: not a DataFrame, or no ``prompt_len`` column.
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"df must be a tp.sweep(...) DataFrame, got {type(df).__name__}")
    if "prompt_len" not in df.columns:
        raise ValueError(f"df has no prompt_len column; it has {list(df.columns)}: pass a "
                         "tp.sweep(...) DataFrame")
    verdict = startup_refusals(config, df["prompt_len"].unique()).set_index("prompt_len")
    out = df.drop(columns=[c for c in REFUSAL_COLUMNS if c in df.columns])
    for column in REFUSAL_COLUMNS:
        values = verdict[column]
        out[column] = pd.Series([values[n] for n in df["prompt_len"]], index=df.index,
                                dtype=values.dtype)
    return out


def refusal_summary(verdict: pd.DataFrame, *, messages: bool = True) -> list[str]:
    """Where vLLM stops starting, in sentences: the longest prompt it serves, the first past
    the model's context, the first it refuses for another reason (with vLLM's message).

    Args:
        verdict: ``startup_refusals(...)`` (or a sweep marked by ``mark_startup_refusals``).
        messages: end the refusal's sentence with vLLM's message (``False``: its check only).

    Returns:
        One sentence per boundary (one sentence when vLLM serves every length).

    Example:
        >>> cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H100 SXM")
        >>> lines = refusal_summary(startup_refusals(cfg, [32_768, 65_536, 1 << 20]))
        >>> for line in lines:
        ...     print(line[:48])
        vLLM starts for every prompt up to 32,768 tokens
        From 65,536 tokens the prompt is past the model'
        From 1,048,576 tokens vLLM refuses to start: its
    """
    missing = [c for c in ("prompt_len", *REFUSAL_COLUMNS) if c not in verdict.columns]
    if missing:
        raise ValueError(f"verdict lacks {missing}: pass tp.sim.startup_refusals(config, lens)")
    v = verdict.drop_duplicates("prompt_len").sort_values("prompt_len")
    starts = v.loc[v["vllm_starts"].astype(bool), "prompt_len"]
    lines = []
    if len(starts):
        lines.append(f"vLLM starts for every prompt up to {int(starts.max()):,} tokens."
                     if len(starts) < len(v) else
                     f"vLLM starts for every prompt here (up to {int(starts.max()):,} tokens).")
    context = v[v["past_context"].astype(bool)]
    if len(context):
        lines.append(f"From {int(context['prompt_len'].iloc[0]):,} tokens the prompt is past "
                     "the model's context: vLLM refuses --max-model-len unless "
                     "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (_get_and_verify_max_len); drawn as if.")
    hard = v[~v["vllm_starts"].astype(bool) & (v["refused_by"] != CONTEXT_CHECK)]
    if len(hard):
        first = hard.iloc[0]
        reason = REFUSAL_REASONS.get(first["refused_by"], first["refused_by"])
        lines.append(f"From {int(first['prompt_len']):,} tokens vLLM refuses to start: "
                     f"{reason} ({first['refused_by']}; drawn as if)"
                     + (f": {first['refusal']}" if messages else "."))
    return lines
