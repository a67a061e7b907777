"""What each PRM convention costs pooling as vLLM 0.33.0 serves it, from the simulator.

Pooling keeps every row of the prompt until the request finishes; STEP pooling's selections
come only after that. What those rows are depends on the convention:

=============  ===============================================  ==========================
convention     pooled rows (kept until the finish)               delivered width (tag rows)
=============  ===============================================  ==========================
two_class      2 float32 logits from the score head, computed    2
               AFTER the compiled backbone: fresh every step
               (``Qwen2RewardBaseModel.forward``)
token_pair     the backbone's hidden rows (hidden-size wide):    |returned_token_ids| (2)
               a pooling model loads no LM head
               (``adapters._create_pooling_model_cls``), so
               STEP selects columns of the hidden states
value_head     1 float32 value from the score head                1
=============  ===============================================  ==========================

So a token_pair PRM keeps ``hidden × 2 bytes / (2 × 4 bytes)`` times the bytes of a two_class
PRM per token (1,024× for a 4096-wide bf16 model) — not the vocabulary-wide rows an LM head
would give — although all three deliver a few bytes per step.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from .._args import items
from ..pooler.heads import DTypeLike
from ..pooler.pooling import RetentionPolicy
from ..sim import SimConfig, simulate
from ..sim.vllm_rules.models import resolve_model
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
    as_if: bool = False,
) -> pd.DataFrame:
    """Pooling memory of one PRM request per convention and prompt length.

    Each row is ``tp.simulate([prompt_len], config, mode="analytic")`` with STEP pooling and
    the convention's rows as vLLM 0.33.0 serves them (module docstring): 2 float32 score-head
    logits (two_class), the backbone's hidden rows with ``num_returned_columns`` kept
    (token_pair), 1 float32 value (value_head). Model, hardware and scheduler are shared.

    Args:
        prompt_lens: one or several prompt lengths (one request each).
        model: a model preset (``tp.MODEL_PRESETS``; name or Hugging Face id): its hidden size
            (token_pair's rows) and time model.
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
            ``--max-model-len`` (past the context vLLM refuses it too: see ``as_if``).
        as_if: simulate past vLLM's refusals on purpose (``SimConfig(as_if=True)``): a
            prompt past the model's context, chunking a model vLLM does not chunk.

    Returns:
        DataFrame with the columns of ``MEMORY_COLUMNS`` plus ``policy`` and ``model``.

    Raises:
        ValueError: an unknown convention, model or hardware preset.

    Example:
        >>> t = tp.prm.prm_memory_table([4_096])
        >>> t.set_index("convention")["peak_pooling_bytes"]  # token_pair: KB, others bytes
        convention
        two_class      1024
        token_pair    16640
        value_head      512
        Name: peak_pooling_bytes, dtype: int64
    """
    lens = [prompt_lens] if isinstance(prompt_lens, int) and not isinstance(
        prompt_lens, bool) else items("prompt_lens", prompt_lens, what="a prompt length or a "
                                      "list of them")
    conventions = items("conventions", conventions, what="a list of conventions")
    unknown = [c for c in conventions if c not in CONVENTIONS]
    if unknown:
        raise ValueError(f"unknown conventions {unknown}; use some of {list(CONVENTIONS)}")
    preset = resolve_model(model)
    if preset is None:
        raise ValueError("model must be a preset name or ModelPreset (tp.MODEL_PRESETS)")
    # (rows' width, STEP columns, where the rows come from, their dtype)
    widths = {"two_class": (2, None, "score_head", head_dtype or dtype),
              "token_pair": (preset.hidden_size, num_returned_columns, "backbone", dtype),
              "value_head": (1, None, "score_head", head_dtype or dtype)}
    rows = []
    for convention in conventions:
        num_labels, columns, rows_from, row_dtype = widths[convention]
        config = SimConfig(
            hidden_size=preset.hidden_size, task="token_classify", num_labels=num_labels,
            pooling="STEP", num_returned_columns=columns, step_tag_every=step_tag_every,
            max_num_batched_tokens=max_num_batched_tokens, policy=policy, dtype=row_dtype,
            rows_from=rows_from,
            head_dtype=head_dtype, use_activation=True, model=preset, hardware=hardware,
            enable_chunked_prefill=enable_chunked_prefill, max_model_len=max_model_len,
            as_if=as_if,
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
                # NaN on the CPU platform: no device memory total to take a share of
                "share_of_hbm": (float("nan") if config.hardware.hbm_bytes is None
                                 else result.peak_device_bytes / config.hardware.hbm_bytes),
                "policy": policy,
                "chunked": config.enable_chunked_prefill,
                "model": preset.name,
            })
    return pd.DataFrame(rows)
