"""Memory view: peak pooling memory against prompt length for real model and hardware presets."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..plots import figure_png, format_bytes, format_tokens
from ..plots.memory import plot_memory_vs_prompt_length
from ..sim import MODEL_PRESETS, SimConfig, simulate, sweep
from ..sim.results.analysis import prompt_grid
from ..sim.results.peak_parts import peak_parts, peak_words, single_request_peak_parts
from ..sim.startup import mark_startup_refusals, refusal_summary
from ..sim.vllm_rules.devices import resolve_hardware
from ..sim.vllm_rules.kv_cache import kv_cache_memory_bytes
from .view import View, captioned_table_html

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["memory_share_applies", "prompt_grid", "render_memory", "what_sets_the_peak_text"]


def memory_share_applies(hardware: object) -> bool:
    """Whether "a share of the device's memory" means something on ``hardware``: a GPU's
    memory is the engine's alone; a CPU's is the host's RAM, shared with everything on the
    machine and vLLM's CPU platform has no device total, so a share of it would be
    nonsense."""
    return resolve_hardware(hardware).platform != "cpu"


def render_memory(
    *,
    model: str = "Qwen3-Embedding-8B",
    hardware: str = "H100 SXM",
    task: str | None = None,
    dtype: str = "bfloat16",
    head_dtype: str | None = "default",
    prompt_len: tuple[int, int] | None = None,
    policies: Sequence[str] = ("legacy", "clone", "prealloc", "offload"),
    async_scheduling: bool | None = None,
    max_num_batched_tokens: int | None = None,
    use_activation: bool | None = None,
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
        async_scheduling: async or sync scheduling (default ``None``: vLLM's default for a
            pooling model, off: ``VllmConfig.__post_init__``).
        max_num_batched_tokens: the chunk budget per step (default: vLLM's for the model,
            hardware and usage).
        use_activation: the head's activation (normalise / softmax; default ``None``: vLLM's,
            on).
        points_per_doubling: sweep resolution.
        tensor_parallel_size: GPUs the model is split over: weights and KV heads split, each
            GPU of the last stage pools the whole width. With a decoder model, the table also
            gives the share of one GPU's KV-cache memory (vLLM's sizing, utilization 0.92).

    Returns:
        ``View``: ``png`` = the curves, the points vLLM would refuse to start for marked
        (``tp.sim.mark_startup_refusals``: ○ past the context, □ its KV cache); ``html`` = a
        line saying which settings are vLLM's defaults, what sets the peak at the longest
        prompt (``what_sets_the_peak_text``: the chunk cache, or the head's float32 cast and
        activation, which no chunk budget moves), then a table of peaks at a few lengths (and
        the share of device memory), its caption saying where vLLM stops starting; ``table``
        = the full sweep DataFrame with vLLM's verdict per point (``vllm_starts``,
        ``refused_by``, ``refusal``, ``past_context``); ``data["peak_parts"]`` = the parts of
        that peak (``tp.sim.peak_parts``).

    Raises:
        ValueError: an unknown preset, task or dtype, or an empty policy list.
    """
    if not policies:
        raise ValueError("choose at least one policy")
    overrides: dict = {"dtype": dtype, "hardware": hardware}
    if head_dtype != "default":
        overrides["head_dtype"] = head_dtype
    if use_activation is not None:
        overrides["use_activation"] = bool(use_activation)
    if async_scheduling is not None:
        overrides["async_scheduling"] = bool(async_scheduling)

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
    async_scheduling = config.async_scheduling  # None above: vLLM's default, resolved there
    vllm = _vllm_defaults(config)
    head = str(config.head_dtype).removeprefix("torch.") if config.head_casts else "no cast"
    head_words = head + (" + activation" if config.use_activation else ", no activation")
    lens = prompt_grid(*prompt_len, points_per_doubling=points_per_doubling)
    df = sweep(lens, config, policies=list(policies), async_scheduling=(async_scheduling,),
               progress=False)
    # every point vLLM would refuse to start for is marked, by the same start-up checks
    df = mark_startup_refusals(df, config)
    device = resolve_hardware(hardware)  # names resolve in one place
    share = memory_share_applies(device)
    title = (f"{model} · {config.task} · {dtype}\nhead: {head_words} · "  # 2 lines: fits
             f"{'async' if async_scheduling else 'sync'} · "
             + (f"chunk {format_tokens(config.max_num_batched_tokens)} tokens"
                if config.enable_chunked_prefill else "not chunked (vLLM)")
             + (" · vLLM's defaults" if all(vllm.values()) else " · not all vLLM's defaults"))

    def draw() -> Figure:
        # no reference line for a CPU: its "memory" is not the engine's to take a share of
        ax = plot_memory_vs_prompt_length(df, hardware=hardware if share else None,
                                          title=title)
        return ax.figure

    powers = lens[(lens & (lens - 1)) == 0]  # prefer round lengths (powers of two) in the table
    pool = powers if len(powers) >= 2 else lens
    shown = np.unique(pool[np.linspace(0, len(pool) - 1, min(4, len(pool))).round().astype(int)])
    png = figure_png(draw())
    table = df[df["prompt_len"].isin(shown)].pivot(index="policy", columns="prompt_len",
                                                  values="peak_pooling_bytes")
    table = table.reindex([p for p in policies if p in table.index])
    if share:
        hbm = device.hbm_bytes
        kv = _kv_memory_bytes(config)
        cells = table.map(lambda b: f"{format_bytes(b)} ({b / hbm:.1%})"
                          + (f", {b / kv:.1%} of KV" if kv else ""))
        caption = (f"Peak device bytes held by pooling per GPU (share of {hardware}'s "
                   f"{format_bytes(hbm)}"
                   + (f", and of the {format_bytes(kv)} its KV cache gets at "
                      f"tensor-parallel size {tensor_parallel_size}" if kv else "")
                   + "); the model's weights and KV cache come on top.")
    else:
        kv = 0
        cells = table.map(format_bytes)
        caption = (f"Peak bytes held by pooling. {device.name}: pooling's bytes are host "
                   "memory, shared with everything else on the machine, so no share of a "
                   "device's memory is given.")
    if lifted:
        caption += (f" Prompts past {model}'s {context:,}-token context: simulated as if "
                    f"served with --max-model-len {prompt_len[1]:,}, which the model may not "
                    "support.")
    if not df["vllm_starts"].all():  # the marked points, in words (the message shortened)
        caption += " " + " ".join(refusal_summary(df, messages=False))
    cells.columns = [f"{format_tokens(c)} tokens" for c in cells.columns]
    table_html = _defaults_html(config, vllm) + _peak_html(config, policies, int(lens[-1])) \
        + captioned_table_html(cells, caption)
    parts = _peak_run(config, policies, int(lens[-1]))  # what the readout above names
    settings = {"model": model, "hardware": device.name, "task": config.task, "dtype": dtype,
                "head_dtype": head, "policies": list(policies),
                "async_scheduling": async_scheduling,
                "use_activation": config.use_activation,
                "vllm_defaults": vllm,
                "max_num_batched_tokens": config.max_num_batched_tokens,
                "enable_chunked_prefill": config.enable_chunked_prefill,
                "tensor_parallel_size": tensor_parallel_size,
                "prompt_len": [int(prompt_len[0]), int(prompt_len[1])],
                "max_model_len": config.max_model_len, "as_if": bool(lifted),
                "mode": "analytic"}
    return View(html=table_html, png=png, table=df, settings=settings, redraw=draw,
                data={"config": config, "peaks": table, "kv_cache_bytes": kv, "share": share,
                      "peak_parts": parts})


def _vllm_defaults(config: SimConfig) -> dict[str, bool]:
    """Which of the settings a researcher changes are vLLM 0.33.0's defaults for this model,
    hardware and task (``SimConfig.for_model`` resolves them as vLLM does)."""
    base = SimConfig.for_model(config.model.name, task=config.task, hardware=config.hardware,
                               tensor_parallel_size=config.tensor_parallel_size) \
        if config.model is not None and config.model.name in MODEL_PRESETS else None
    if base is None:  # your own model: vLLM's pooling-model defaults
        base = SimConfig(hidden_size=config.hidden_size, task=config.task,
                         hardware=config.hardware)
    return {
        "async_scheduling": config.async_scheduling == base.async_scheduling,
        "head_dtype": config.head_dtype == base.head_dtype,
        "use_activation": config.use_activation == base.use_activation,
        "max_num_batched_tokens": (config.max_num_batched_tokens == base.max_num_batched_tokens
                                   or not config.enable_chunked_prefill),
    }


def _defaults_html(config: SimConfig, vllm: dict[str, bool]) -> str:
    """One line: each setting, labelled vLLM's default or not."""
    def said(key: str, text: str) -> str:
        return f"{text} ({'' if vllm[key] else 'not '}vLLM's default)"

    head = (str(config.head_dtype).removeprefix("torch.") + " head" if config.head_casts
            else "no head cast")
    budget = (f"chunks of {config.max_num_batched_tokens:,} tokens" if
              config.enable_chunked_prefill else "not chunked (vLLM never chunks this model)")
    words = [said("async_scheduling", "async scheduling" if config.async_scheduling
                  else "sync scheduling"),
             said("head_dtype", head),
             said("use_activation", "activation on" if config.use_activation
                  else "activation off"),
             said("max_num_batched_tokens", budget) if config.enable_chunked_prefill
             else budget]
    return ("<div class='tokpool-defaults' style='font-family:sans-serif;font-size:12px;"
            f"color:#333;padding:2px 0'>{html.escape(' · '.join(words))}</div>")


def _shown_policy(policies: Sequence[str]) -> str | None:
    """The policy the peak readout speaks of: clone (vLLM's since PR #50931) when shown, else
    the first one that holds device bytes."""
    if "clone" in policies:
        return "clone"
    return next((p for p in policies if p != "offload"), None)


def _parts(config: SimConfig, policy: str, prompt_len: int) -> dict[str, int]:
    """The parts of ``policy``'s peak for one prompt: from the closed form where it can say
    (``single_request_peak_parts``: no steps run), else from a simulated run."""
    config = config.replace(policy=policy)
    parts = single_request_peak_parts(config, prompt_len)
    if parts is None:
        parts = peak_parts(simulate([prompt_len], config, mode="analytic"))
    return parts


def _peak_run(config: SimConfig, policies: Sequence[str], prompt_len: int) -> dict[str, int]:
    policy = _shown_policy(policies)
    return {} if policy is None else _parts(config, policy, prompt_len)


def what_sets_the_peak_text(config: SimConfig, policy: str, prompt_len: int) -> str:
    """What sets ``policy``'s peak for one ``prompt_len``-token prompt under ``config``, in
    words, and whether the chunk budget moves it: the head's float32 cast and activation are
    alive with the whole pooled output, so a head that sets the peak hides the budget.

    Example:
        >>> cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B")
        >>> print(what_sets_the_peak_text(cfg, "clone", 32_768))  # doctest: +ELLIPSIS
        clone at 32K tokens: peak 1.25 GiB = pooled output 256 MiB + float32 cast 512 MiB + ...
    """
    parts = _parts(config, policy, prompt_len)
    text = f"{policy} at {format_tokens(prompt_len)} tokens: {peak_words(parts)}"
    head_parts = [name for name in parts if name.endswith(" cast") or name in
                  ("classifier logits", "activation")]
    if head_parts and config.enable_chunked_prefill:
        bare = sum(_parts(config.replace(head_dtype=None, use_activation=False), policy,
                          prompt_len).values())
        text += (f". Without the head (not vLLM's default) it would be {format_bytes(bare)}: "
                 "the chunk cache and the cat, the part the chunk budget moves, so under vLLM's "
                 "head the budget changes nothing here (to see it move: activation off, head "
                 "dtype 'same as dtype')")
    elif "chunk cache" in parts and config.enable_chunked_prefill:
        text += ": the chunk budget moves it"
    return text


def _peak_html(config: SimConfig, policies: Sequence[str], prompt_len: int) -> str:
    policy = _shown_policy(policies)
    if policy is None:
        return ""
    text = what_sets_the_peak_text(config, policy, prompt_len)
    return ("<div class='tokpool-peak' style='font-family:sans-serif;font-size:12px;"
            f"color:#333;padding:2px 0 6px'><b>What sets the peak</b> — {html.escape(text)}."
            "</div>")


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
