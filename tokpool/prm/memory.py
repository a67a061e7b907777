"""What each PRM convention costs pooling, from the simulator's analytic mode.

The score head runs inside the model, so pooling keeps rows as wide as the model's per-token
output until the request finishes; STEP pooling's selections come only after that:

=============  =======================================  ============================
convention     pooled width (kept across steps)          delivered width (tag rows)
=============  =======================================  ============================
two_class      2 logits                                  2
token_pair     the whole vocabulary (LM-head logits)     |returned_token_ids| (2)
value_head     1 value                                   1
=============  =======================================  ============================

So a token_pair PRM keeps ``vocab / 2`` times the bytes of a two_class PRM on a long prompt,
although all three deliver a few bytes per step.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ..heads import DTypeLike
from ..pooling import RetentionPolicy
from .steps import CONVENTIONS

#: One row per (convention, prompt length); see ``prm_memory_table``.
MEMORY_COLUMNS: dict[str, str] = {
    "convention": "two_class | token_pair | value_head",
    "prompt_len": "prompt tokens (one request)",
    "num_steps": "step tags in the prompt (prompt_len // step_tag_every)",
    "pooled_width": "columns per token that pooling keeps until the finish (before selection)",
    "returned_width": "columns per step delivered (after STEP's column selection)",
    "bytes_per_token": "pooled_width * dtype size: what each prompt token costs pooling",
    "peak_pooling_bytes": "simulated peak device bytes owned by pooling (analytic mode)",
    "buffer_bytes": "the persistent per-step output buffer [max_num_batched_tokens, width]",
    "peak_device_bytes": "peak_pooling_bytes + buffer_bytes",
    "output_bytes": "bytes delivered to the host: num_steps * returned_width * output dtype",
    "share_of_hbm": "peak_device_bytes / the hardware's memory (weights and KV cache not "
                    "included)",
}


def prm_memory_table(
    prompt_lens: Sequence[int] | int = (1_024, 4_096),
    *,
    model: str = "qwen2.5-math-prm-7b",
    hardware: str = "h200",
    conventions: Sequence[str] = CONVENTIONS,
    step_tag_every: int = 64,
    num_returned_columns: int = 2,
    policy: RetentionPolicy = "clone",
    max_num_batched_tokens: int | None = None,
    dtype: DTypeLike = "bfloat16",
    head_dtype: DTypeLike | None = "float32",
    enable_chunked_prefill: bool | None = None,
    max_model_len: int | None = None,
) -> pd.DataFrame:
    """Pooling memory of one PRM request per convention and prompt length.

    Each row is ``tp.simulate([prompt_len], config, mode="analytic")`` with STEP pooling and
    the convention's width: ``num_labels`` 2 (two_class), the preset's vocabulary with
    ``num_returned_columns`` kept (token_pair), 1 (value_head). Only the width changes between
    conventions; model, hardware and scheduler are shared.

    Args:
        prompt_lens: one or several prompt lengths (one request each).
        model: a model preset (``tp.MODEL_PRESETS``; name or Hugging Face id): its hidden size,
            vocabulary and time model.
        hardware: a hardware preset (``tp.HARDWARE_PRESETS``).
        conventions: which conventions to include.
        step_tag_every: one step tag every this many tokens (a step's length).
        num_returned_columns: token_pair's kept columns (good, bad → 2).
        policy: pooling's retention policy (``tp.RETENTION_POLICIES``).
        max_num_batched_tokens: the token budget per step (default vLLM's; a PRM's prompt is
            never chunked by vLLM, so the budget is raised to ``max_model_len``).
        dtype: the model output dtype; ``head_dtype``: the head's (engines: float32).
        enable_chunked_prefill: ``None``: vLLM's rule, which never chunks STEP pooling;
            ``True`` shows what chunking would cost (a setup vLLM does not run).
        max_model_len: longest prompt accepted (default the preset's context: 4,096 tokens
            for Qwen2.5-Math-PRM-7B); longer prompts raise unless it is raised, as vLLM's
            ``--max-model-len``.

    Returns:
        DataFrame with the columns of ``MEMORY_COLUMNS`` plus ``policy`` and ``model``.

    Raises:
        ValueError: an unknown convention, model or hardware preset.

    Example:
        >>> t = tp.prm_memory_table([4_096])
        >>> t.set_index("convention")["peak_pooling_bytes"]  # token_pair: GBs, others KB
    """
    from ..sim import SimConfig, simulate
    from ..sim.vllm_rules.models import resolve_model

    lens = [prompt_lens] if isinstance(prompt_lens, int) else list(prompt_lens)
    unknown = [c for c in conventions if c not in CONVENTIONS]
    if unknown:
        raise ValueError(f"unknown conventions {unknown}; use some of {list(CONVENTIONS)}")
    preset = resolve_model(model)
    if preset is None:
        raise ValueError("model must be a preset name or ModelPreset (tp.MODEL_PRESETS)")
    widths = {"two_class": (2, None), "token_pair": (preset.vocab_size, num_returned_columns),
              "value_head": (1, None)}
    rows = []
    for convention in conventions:
        num_labels, columns = widths[convention]
        config = SimConfig(
            hidden_size=preset.hidden_size, task="token_classify", num_labels=num_labels,
            pooling="STEP", num_returned_columns=columns, step_tag_every=step_tag_every,
            max_num_batched_tokens=max_num_batched_tokens, policy=policy, dtype=dtype,
            head_dtype=head_dtype, use_activation=True, model=preset, hardware=hardware,
            enable_chunked_prefill=enable_chunked_prefill, max_model_len=max_model_len,
        )
        for prompt_len in lens:
            result = simulate([prompt_len], config, mode="analytic")
            rows.append({
                "convention": convention,
                "prompt_len": prompt_len,
                "num_steps": prompt_len // step_tag_every,
                "pooled_width": config.width,
                "returned_width": config.output_width,
                "bytes_per_token": config.width * config.dtype_size,
                "peak_pooling_bytes": result.peak_pooling_bytes,
                "buffer_bytes": result.buffer_bytes,
                "peak_device_bytes": result.peak_device_bytes,
                "output_bytes": int(result.requests["output_bytes"].sum()),
                "share_of_hbm": result.peak_device_bytes / config.hardware.hbm_bytes,
                "policy": policy,
                "chunked": config.enable_chunked_prefill,
                "model": preset.name,
            })
    return pd.DataFrame(rows)
