"""Memory view: peak pooling memory against prompt length for real model and hardware presets."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..plots import figure_png, format_bytes, format_tokens
from ..plots.memory import plot_memory_vs_prompt_length
from ..sim import MODEL_PRESETS, SimConfig, sweep
from ..sim.results.analysis import prompt_grid
from ..sim.vllm_rules.devices import resolve_hardware
from ..sim.vllm_rules.kv_cache import kv_cache_memory_bytes
from .view import View

__all__ = ["prompt_grid", "render_memory"]


def render_memory(
    *,
    model: str = "Qwen3-Embedding-8B",
    hardware: str = "H100 SXM",
    task: str | None = None,
    dtype: str = "bfloat16",
    head_dtype: str | None = "default",
    prompt_len: tuple[int, int] | None = None,
    policies: Sequence[str] = ("legacy", "clone", "prealloc", "offload"),
    async_scheduling: bool = True,
    max_num_batched_tokens: int | None = None,
    points_per_doubling: int = 2,
    tensor_parallel_size: int = 1,
) -> View:
    """Peak pooling memory vs prompt length for a model and hardware preset (analytic sweep).

    Args:
        model: a name in ``tp.MODEL_PRESETS``, or YOUR model: a config.json path, a model
            directory or a config dict (``SimConfig.from_hf_config``).
        hardware: a name in ``tp.HARDWARE_PRESETS`` (its memory is the reference line).
        task: ``token_embed``, ``token_classify`` or ``embed`` (default: the preset's).
        dtype: hidden-state dtype.
        head_dtype: the head's dtype: ``"default"`` (the simulator's default), ``None`` or
            ``dtype`` itself (no cast), ``"float32"`` (engines' pooling heads).
        prompt_len: ``(shortest, longest)`` prompt in tokens (default: 1K to the model's
            context, its ``max_model_len``). Past the context the engine is simulated as if
            served with vLLM's ``--max-model-len`` raised to the longest prompt, and the
            caption says so.
        policies: retention policies to compare.
        async_scheduling: async or sync scheduling.
        max_num_batched_tokens: the chunk budget per step (default: the simulator's).
        points_per_doubling: sweep resolution.
        tensor_parallel_size: GPUs the model is split over: weights and KV heads split, each
            GPU of the last stage pools the whole width. With a decoder model, the table also
            gives the share of one GPU's KV-cache memory (vLLM's sizing, utilization 0.92).

    Returns:
        ``View``: ``png`` = the curves; ``html`` = a table of peaks at a few lengths (and the
        share of device memory); ``table`` = the full sweep DataFrame.

    Raises:
        ValueError: an unknown preset, task or dtype, or an empty policy list.
    """
    if not policies:
        raise ValueError("choose at least one policy")
    overrides: dict = {"dtype": dtype, "hardware": hardware}
    if head_dtype != "default":
        overrides["head_dtype"] = head_dtype

    overrides["tensor_parallel_size"] = tensor_parallel_size
    if isinstance(model, str) and model in MODEL_PRESETS:
        preset = SimConfig.for_model(model, task=task, **overrides)
    else:  # your own model: a config.json, a directory or a dict
        preset = SimConfig.from_hf_config(model, **({"task": task} if task else {}),
                                          **overrides)
        model = preset.model.name
    context = preset.max_model_len or 1 << 20
    if prompt_len is None:
        prompt_len = (min(1024, context), context)
    lifted = prompt_len[1] > context
    changes: dict = {"max_model_len": prompt_len[1], "as_if": True} if lifted else {}
    # vLLM never chunks some models (PRMs' STEP pooling, encoders): their whole prompt is one
    # step and the budget is raised to max_model_len, so a chunk budget does not apply.
    if max_num_batched_tokens is not None and preset.enable_chunked_prefill:
        changes["max_num_batched_tokens"] = max_num_batched_tokens
    config = preset.replace(**changes) if changes else preset
    head = str(config.head_dtype).removeprefix("torch.") if config.head_casts else "no cast"
    lens = prompt_grid(*prompt_len, points_per_doubling=points_per_doubling)
    df = sweep(lens, config, policies=list(policies), async_scheduling=(async_scheduling,),
               progress=False)
    ax = plot_memory_vs_prompt_length(
        df, hardware=hardware,
        title=f"{model} · {config.task} · {dtype} (head: {head}) · "
              f"{'async' if async_scheduling else 'sync'} · "
              + (f"chunk {format_tokens(config.max_num_batched_tokens)} tokens"
                 if config.enable_chunked_prefill else "not chunked (vLLM)"),
    )
    png = figure_png(ax.figure)
    hbm = resolve_hardware(hardware).hbm_bytes  # names resolve in one place; None: a CPU
    powers = lens[(lens & (lens - 1)) == 0]  # prefer round lengths (powers of two) in the table
    pool = powers if len(powers) >= 2 else lens
    shown = np.unique(pool[np.linspace(0, len(pool) - 1, min(4, len(pool))).round().astype(int)])
    table = df[df["prompt_len"].isin(shown)].pivot(index="policy", columns="prompt_len",
                                                  values="peak_pooling_bytes")
    table = table.reindex([p for p in policies if p in table.index])
    kv = _kv_memory_bytes(config)
    cells = table.map(lambda b: format_bytes(b)
                      + (f" ({b / hbm:.1%})" if hbm else "")
                      + (f", {b / kv:.1%} of KV" if kv else ""))
    cells.columns = [f"{format_tokens(c)} tokens" for c in cells.columns]
    if hbm:
        share = f"share of {hardware}'s {format_bytes(hbm)}"
    else:  # vLLM's CPU platform: the host's memory, no device total to take a share of
        share = f"{hardware}: host memory, no device total to take a share of"
    caption = (f"Peak device bytes held by pooling per GPU ({share}"
               + (f", and of the {format_bytes(kv)} its KV cache gets at "
                  f"tensor-parallel size {tensor_parallel_size}" if kv else "")
               + "); the model's weights and KV cache come on top.")
    if lifted:
        caption += (f" Prompts past {model}'s {context:,}-token context: simulated as if "
                    f"served with --max-model-len {prompt_len[1]:,}, which the model may not "
                    "support.")
    table_html = _table_html(cells, caption)
    return View(html=table_html, png=png, table=df,
                data={"config": config, "peaks": table, "kv_cache_bytes": kv})


def _kv_memory_bytes(config) -> int:
    """One GPU's KV-cache memory as vLLM sizes it (0: an encoder, or no room)."""
    if config.model is None or config.kv_bytes_per_token == 0:
        return 0
    if config.hardware.hbm_bytes is None:  # the CPU: sized from bytes given, if any
        return config.kv_cache_blocks * config.kv_block_bytes if config.kv_cache_blocks else 0
    try:
        return kv_cache_memory_bytes(
            config.model, gpu_memory_bytes=config.hardware.hbm_bytes,
            gpu_memory_utilization=config.gpu_memory_utilization or 0.92,
            tp=config.tensor_parallel_size, pp=config.pipeline_parallel_size,
            activation_peak_bytes=config.estimated_activation_peak_bytes,
            dtype_bytes=config.dtype_size)
    except ValueError:  # the weights alone do not fit: no KV cache at all
        return 0


def _table_html(cells: pd.DataFrame, caption: str) -> str:
    head = "".join(f"<th style='padding:2px 10px'>{html.escape(str(c))}</th>"
                   for c in cells.columns)
    rows = "".join(
        f"<tr><th style='text-align:left;padding:2px 10px'>{html.escape(str(i))}</th>"
        + "".join(f"<td style='padding:2px 10px;text-align:right'>{html.escape(v)}</td>"
                  for v in row)
        + "</tr>"
        for i, row in zip(cells.index, cells.to_numpy(), strict=True)
    )
    return (
        "<table style='font-family:sans-serif;font-size:12px;border-collapse:collapse'>"
        f"<caption style='caption-side:bottom;text-align:left;color:#555;padding-top:4px'>"
        f"{html.escape(caption)}</caption><tr><th></th>{head}</tr>{rows}</table>"
    )
