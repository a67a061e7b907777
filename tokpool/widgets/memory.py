"""Memory view: peak pooling memory against prompt length for real model and hardware presets.

``render_memory`` is pure (settings in, ``View`` out); ``memory_explorer`` wires model,
hardware, task, dtype, budget and prompt-length controls to it.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ipywidgets as W
import numpy as np

from .. import _args as checks
from .._args import as_whole
from ..plots import figure_png, format_bytes, format_tokens
from ..plots.memory import plot_memory_vs_prompt_length
from ..pooler.pooling import RETENTION_POLICIES
from ..sim import HARDWARE_PRESETS, MODEL_PRESETS, ModelPreset, SimConfig, simulate, sweep
from ..sim.results.analysis import prompt_grid
from ..sim.results.peak_parts import peak_parts, peak_words, single_request_peak_parts
from ..sim.startup import mark_startup_refusals, refusal_summary
from ..sim.vllm_rules.devices import resolve_hardware
from ..sim.vllm_rules.hub import model_source
from ..sim.vllm_rules.kv_cache import kv_cache_memory_bytes
from ..sim.vllm_rules.serve_line import declared_tasks
from .base import _WIDE, Explorer, MultiToggle, _mark_toggle, _slider_layout
from .view import View, captioned_table_html

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["MemoryExplorer", "context_range", "memory_explorer", "memory_share_applies",
           "prompt_grid", "render_memory", "what_sets_the_peak_text"]


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
                               tensor_parallel_size=config.tensor_parallel_size,
                               usage=config.usage) \
        if config.model is not None and config.model.name in MODEL_PRESETS else None
    if base is None:  # your own model: vLLM's pooling-model defaults
        base = SimConfig(hidden_size=config.hidden_size, task=config.task,
                         hardware=config.hardware, usage=config.usage)
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
    deployment = "vllm serve" if config.usage == "server" else "the offline LLM class"
    words = [f"{deployment} on {config.hardware.name}",
             said("async_scheduling", "async scheduling" if config.async_scheduling
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


#: Tasks the memory view draws (a model's declared tasks among these are offered).
MEMORY_TASKS: tuple[str, ...] = ("token_embed", "token_classify", "embed")
#: Devices the memory explorer offers: those whose memory a share makes sense of (GPUs).
MEMORY_HARDWARE: tuple[str, ...] = tuple(n for n, h in HARDWARE_PRESETS.items()
                                         if memory_share_applies(h))


def _own_source(text: str) -> Any:
    """What the "your model" box holds, as ``SimConfig.from_hf_config`` takes it: a config
    pasted as JSON, else a path."""
    if text.startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"your model: the text is not valid JSON ({err}); paste a "
                             "config.json's contents, or give a path") from None
    return text


def _memory_model(model: Any) -> tuple[str, str]:
    """``memory_explorer(model=...)`` as ``(preset, your-model text)``: a preset, or what the
    "your model" box takes (a Hub id, a config.json path or folder, a config dict), checked."""
    if isinstance(model, str) and model in MODEL_PRESETS:
        return model, ""
    if isinstance(model, str | os.PathLike):
        text = os.fspath(model)
        if not text.strip():
            raise ValueError(f"model is empty; give a preset ({list(MODEL_PRESETS)}), a "
                             "config.json path, a model directory or a config dict")
        if isinstance(source := model_source(text), ModelPreset):  # a preset's name, or its
            return source.name, ""  # Hub id whose files cannot be had (said: a warning)
        if not (Path(text).expanduser().exists() or text[:1] == "{" or isinstance(source, Path)):
            raise ValueError(f"model {text!r} is neither a preset ({list(MODEL_PRESETS)}), a "
                             "Hub id, nor a config.json path or model directory that exists")
        text = str(Path(text).expanduser()) if isinstance(source, str) and text[:1] != "{" else text
    elif isinstance(model, Mapping) or callable(getattr(model, "to_dict", None)):
        config = dict(model) if isinstance(model, Mapping) else model.to_dict()
        try:
            text = json.dumps(config, default=str)
        except (TypeError, ValueError) as err:
            raise TypeError(f"model: the config cannot be written as JSON for the 'your model' "
                            f"box ({err}); save it as a config.json and pass its path") from None
    else:
        raise TypeError(f"model must be a preset name, a config.json path, a model directory, "
                        f"a config dict or a transformers config, got {type(model).__name__}")
    try:
        SimConfig.from_hf_config(_own_source(text))
    except (ValueError, TypeError) as err:
        raise ValueError(f"model: {err}") from err
    return next(iter(MODEL_PRESETS)), text


#: Prompt lengths the memory explorer's range slider offers: powers of two, 256 … 1M.
MEMORY_LENGTHS: tuple[int, ...] = tuple(1 << k for k in range(8, 21))
#: Chunk budgets (``max_num_batched_tokens``) the memory explorer offers.
MEMORY_BUDGETS: tuple[int, ...] = tuple(1 << k for k in range(8, 15))


def context_range(max_model_len: int | None) -> tuple[int, int]:
    """The memory explorer's opening range: 1K up to the longest offered length that fits the
    model's context (``max_model_len``; 1M when unknown), at least 1K–2K."""
    context = max_model_len or MEMORY_LENGTHS[-1]
    fits = [n for n in MEMORY_LENGTHS if n <= context]
    high = max(fits[-1] if fits else 2048, 2048)
    return (1024, high)


def _dtype_name(dtype: Any) -> str:
    return "no cast" if dtype is None else str(dtype).removeprefix("torch.")


class MemoryExplorer(Explorer):
    """Peak pooling memory vs prompt length for model and hardware presets.

    Attributes:
        model: ``Dropdown`` of ``tp.MODEL_PRESETS``.
        hardware: ``Dropdown`` of the GPUs in ``tp.HARDWARE_PRESETS`` (``MEMORY_HARDWARE``).
        task: ``Dropdown``: ``"default"`` (the model's task, named in the label), then the
            tasks the model declares (``declared_tasks()``; vLLM refuses any other).
        dtype: ``Dropdown`` of hidden-state dtypes.
        head_dtype: ``Dropdown``: ``"default"`` (vLLM's, named in the label), ``"same"`` (no
            cast: the head runs in ``dtype``) or ``"float32"``.
        activation: ``Dropdown``: ``"default"`` (vLLM's: on) or ``"off"``: the head's
            activation (normalise / softmax), whose float32 output is alive with the cast.
        budget: ``SelectionSlider``, the chunk budget (``max_num_batched_tokens``; starts at
            vLLM's for the model and GPU), which sets the clone policy's (2T − L) peak — unless
            the head sets the peak, as under vLLM's float32 head and activation: the "What sets
            the peak" line above the table says which part does.
        prompt_len: ``SelectionRangeSlider`` over 256 … 1M tokens (value: ``(low, high)``).
        policies: ``MultiToggle`` of the retention policies (value: a tuple of names).
        async_scheduling: ``ToggleButton`` (starts off: vLLM's default for a pooling model).
        your_model: ``Text``: a config.json path, a model directory or a config as JSON; when
            set it replaces the ``model`` preset (``SimConfig.from_hf_config``).
        tensor_parallel_size: ``IntSlider`` 1 … 8, GPUs the model is split over (weights and
            KV heads split; each GPU pools the whole width; the table's "of KV" share).
    """
    def __init__(self, *, model: Any = "Qwen3-Embedding-8B", hardware: str = "H100 SXM",
                 prompt_len: tuple[int, int] | None = None, budget: int | None = None,
                 policies: Sequence[str] | None = None,
                 async_scheduling: bool | None = None) -> None:

        preset, own = _memory_model(model)  # a preset name, or what "your model" takes
        if hardware not in MEMORY_HARDWARE:
            checks.choice("hardware", hardware, HARDWARE_PRESETS)
            raise ValueError(f"hardware {hardware!r}: the memory explorer gives pooling's share "
                             "of a device's memory, which a CPU's RAM (the host's, shared with "
                             f"everything) has not; choose one of {list(MEMORY_HARDWARE)}, or "
                             "call tp.viz.render_memory(hardware='CPU') for the bytes alone")
        if async_scheduling is None:
            # (imported here: only this explorer asks; the file's imports are shared)
            from ..sim.vllm_rules.defaults import default_async_scheduling

            # vLLM's default for a pooling model: off (vllm/config/vllm.py,
            # VllmConfig.__post_init__: "Disabling asynchronous scheduling by default for
            # pooling model"), as tokpool's rule room says (defaults.default_async_scheduling)
            async_scheduling = default_async_scheduling("pooling")
        checks.flag("async_scheduling", async_scheduling)
        if policies is not None:
            checks.each("policies", checks.items("policies", policies, what="a list of "
                        "retention policies"), lambda n, v: checks.choice(n, v,
                                                                          RETENTION_POLICIES))
        if prompt_len is None:
            context = (SimConfig.from_hf_config(_own_source(own)).max_model_len if own
                       else MODEL_PRESETS[preset].max_model_len)
            prompt_len = context_range(context)
        self._note = ""
        bounds = checks.items("prompt_len", prompt_len, what="a (shortest, longest) pair")
        if len(bounds) != 2:
            raise ValueError(f"prompt_len must be a (shortest, longest) pair of prompt "
                             f"lengths, got {prompt_len!r}")
        for value in bounds:
            if as_whole(value) not in MEMORY_LENGTHS:
                raise ValueError(f"prompt_len bounds must be powers of two from 256 to 1M "
                                 f"({format_tokens(1 << 20)}); got {value!r}")
        if bounds[0] > bounds[1]:
            raise ValueError(f"prompt_len runs backwards: {prompt_len!r}; give (shortest, "
                             "longest)")
        prompt_len = (int(bounds[0]), int(bounds[1]))
        if budget is None:  # `vllm serve`'s budget for the model and GPU, where offered
            default = SimConfig.for_model(preset, hardware=hardware).max_num_batched_tokens
            budget = default if default in MEMORY_BUDGETS else SimConfig().max_num_batched_tokens
        if as_whole(budget) not in MEMORY_BUDGETS:
            raise ValueError(f"budget must be one of {list(MEMORY_BUDGETS)}; got {budget!r}")
        self.model = W.Dropdown(options=list(MODEL_PRESETS), value=preset, description="model",
                                tooltip="a model preset (the 'your model' box, when filled, "
                                        "replaces it)")
        self.hardware = W.Dropdown(options=list(MEMORY_HARDWARE), value=hardware,
                                   description="hardware",
                                   tooltip="the GPU: its memory is the reference line and the "
                                           "table's shares (GPUs only: a CPU's RAM is the "
                                           "host's)")
        self.your_model = W.Text(value=own, continuous_update=False, description="your model",
                                 placeholder="config.json path, model directory or JSON",
                                 tooltip="a config.json path, a model directory or a config "
                                         "pasted as JSON; empty: the model preset",
                                 style=_WIDE, layout=W.Layout(width="440px"))
        self.task = W.Dropdown(options=self._task_options(), value="default",
                               description="task",
                               tooltip="the pooling task: only the tasks the model declares "
                                       "(vLLM refuses any other)")
        self.dtype = W.Dropdown(options=["bfloat16", "float16", "float32"], value="bfloat16",
                                description="dtype", tooltip="the hidden states' dtype")
        self.head_dtype = W.Dropdown(options=self._head_options(preset), value="default",
                                     description="head dtype", style=_WIDE,
                                     tooltip="the pooling head's dtype (vLLM's pooling heads: "
                                             "float32)")
        self.activation = W.Dropdown(options=[("default: on (vLLM's)", "default"),
                                              ("off (not vLLM's default)", "off")],
                                     value="default", description="activation", style=_WIDE,
                                     tooltip="the head's activation (normalise / softmax): "
                                             "its float32 output is alive with the cast, so "
                                             "with it the head sets the peak")
        self.budget = W.SelectionSlider(
            options=[(format_tokens(n), n) for n in MEMORY_BUDGETS], value=budget,
            description="chunk budget (tokens/step)", continuous_update=False, style=_WIDE,
            tooltip="max_num_batched_tokens: tokens per engine step (drag, or the arrow keys)",
            layout=_slider_layout())
        self.prompt_len = W.SelectionRangeSlider(
            options=[(format_tokens(n), n) for n in MEMORY_LENGTHS],
            value=prompt_len, description="prompt length", continuous_update=False,
            tooltip="the shortest and longest prompt drawn (drag the handles, or the arrow keys)",
            style=_WIDE, layout=W.Layout(width="440px"),
        )
        chosen = tuple(RETENTION_POLICIES) if policies is None else tuple(policies)
        self.policies = MultiToggle(RETENTION_POLICIES, chosen, description="policies")
        self.async_scheduling = W.ToggleButton(value=async_scheduling,
                                               description="async scheduling", icon="bolt",
                                               layout=W.Layout(width="auto"))
        _mark_toggle(self.async_scheduling,
                     on="async scheduling is on (not vLLM's default for a pooling model): "
                        "click for sync scheduling",
                     off="async scheduling is off (sync: vLLM's default for a pooling model): "
                         "click to turn it on")
        self.tensor_parallel_size = W.IntSlider(value=1, min=1, max=8, continuous_update=False,
                                                description="tensor-parallel GPUs", style=_WIDE,
                                                tooltip="GPUs the model is split over (1 to 8)",
                                                layout=_slider_layout())
        super().__init__([self.model, self.hardware, self.task, self.dtype, self.head_dtype,
                          self.activation, self.budget, self.prompt_len, self.policies,
                          self.async_scheduling, self.your_model, self.tensor_parallel_size])
        self._space_readouts()
        self.task.__dict__["_tokpool_refuse"] = self._refuse_task  # says why, not only what
        self.model.observe(self._relabel, names="value")
        self.your_model.observe(self._relabel, names="value")
        self.prompt_len.observe(self._widen, names="value")
        self._watch(self.model, self.hardware, self.task, self.dtype, self.head_dtype,
                    self.activation, self.budget, self.prompt_len, self.policies,
                    self.async_scheduling, self.your_model, self.tensor_parallel_size)
        self.update()

    def _space_readouts(self) -> None:
        """A slider's readout ("16K") and the next control's label ("prompt length") ran into
        each other ("16Kprompt length"): each slider row keeps a gap after its readout."""
        row = self.children[1]
        for box in row.children:
            if isinstance(box, W.HBox) and any(isinstance(c, W.SelectionSlider |
                                                          W.SelectionRangeSlider)
                                               for c in box.children):
                box.layout.margin = "0 18px 0 0"
                for label in box.children:
                    if isinstance(label, W.Label):
                        label.layout.margin = "0 0 0 6px"

    def _own_config(self) -> SimConfig | None:
        """The "your model" box's config as the simulator reads it (``None``: empty, or not
        readable; the render says why)."""
        own = self.your_model.value.strip()
        if not own:
            return None
        try:
            return SimConfig.from_hf_config(_own_source(own))
        except (ValueError, TypeError):
            return None

    def declared_tasks(self) -> tuple[str, ...]:
        """The tasks the shown model declares as vLLM serves it, which the view can draw
        (``hf_config.declared_tasks``, as ``vllm serve`` resolves them); the task menu offers
        these only."""
        own = self._own_config()
        if own is not None:
            declared = own.model.declared_tasks
        else:
            declared = declared_tasks(MODEL_PRESETS[self.model.value].default_task, "auto")
        return tuple(t for t in declared if t in MEMORY_TASKS)

    def _refuse_task(self, message: str) -> None:
        own = self._own_config()
        name = own.model.name if own is not None else self.model.value
        self.fail(f"{message}: {name} declares {list(self.declared_tasks())} as vLLM serves it, "
                  "and vLLM refuses any other task (check_configured_task); pick another "
                  "model for that task")

    def _task_options(self) -> list[tuple[str, str]]:
        own = self._own_config()
        default = own.task if own is not None else MODEL_PRESETS[self.model.value].default_task
        return [(f"default ({default})", "default"), *((t, t) for t in self.declared_tasks())]

    @staticmethod
    def _head_options(model: str) -> list[tuple[str, str]]:

        default = _dtype_name(SimConfig.for_model(model).head_dtype)
        return [(f"default: {default} (vLLM's)", "default"),
                ("same as dtype, no cast (not vLLM's default)", "same"),
                ("float32", "float32")]

    def _relabel(self, change: dict[str, Any]) -> None:
        # the labels name the new model's defaults and its declared tasks; a task it does
        # not declare goes back to its default (said above the figure), else values stay
        with self.hold_trait_notifications():
            task, head = self.task.value, self.head_dtype.value
            self.task.unobserve(self._on_change, names="value")
            self.head_dtype.unobserve(self._on_change, names="value")
            try:
                options = self._task_options()
                if task not in [v for _, v in options]:
                    self._note = (f"task {task} is not one the model declares (vLLM would "
                                  f"refuse it): back to its default, {options[0][0]}")
                    task = "default"
                self.task.options = options
                self.head_dtype.options = self._head_options(self.model.value)
                self.task.value, self.head_dtype.value = task, head
            finally:
                self._watch(self.task, self.head_dtype)

    def _widen(self, change: dict[str, Any]) -> None:
        """A range collapsed to one length (both handles on 8K) is widened by one step, so
        there is a curve to draw and the two handles can be told apart again."""
        low, high = change["new"]
        if low != high:
            return
        i = MEMORY_LENGTHS.index(low)
        widened = ((low, MEMORY_LENGTHS[i + 1]) if i + 1 < len(MEMORY_LENGTHS)
                   else (MEMORY_LENGTHS[i - 1], high))
        self._note = (f"a range needs two lengths: {format_tokens(low)}–{format_tokens(high)} "
                      f"was widened to {format_tokens(widened[0])}–{format_tokens(widened[1])}")
        self.prompt_len.value = widened

    def _on_change(self, change: dict[str, Any] | None = None) -> None:
        if change is not None and change.get("owner") is self.prompt_len:
            low, high = change["new"]
            if low == high:
                return  # _widen moves the handles apart; that change redraws
        super()._on_change(change)

    def render(self) -> View:
        view = self._render()
        if self._note:
            note, self._note = self._note, ""
            view = dataclasses.replace(view, html=(
                '<div class="tokpool-note" style="font-family:sans-serif;color:#0057a0;'
                f'padding:2px 0">ⓘ {html.escape(note)}</div>' + view.html))
        return view

    def _render(self) -> View:
        task = None if self.task.value == "default" else self.task.value
        head: str | None = {"default": "default", "same": self.dtype.value}.get(
            self.head_dtype.value, self.head_dtype.value)
        own = self.your_model.value.strip()
        model: Any = self.model.value
        if own:
            model = _own_source(own)
            try:
                return self._render_memory(model, task, head)
            except (ValueError, TypeError) as err:  # the config.json the box names
                raise ValueError(f"your model: {err}") from err
        return self._render_memory(model, task, head)

    def _render_memory(self, model: Any, task: str | None, head: str | None) -> View:
        return render_memory(
            model=model, hardware=self.hardware.value, task=task,
            tensor_parallel_size=self.tensor_parallel_size.value,
            dtype=self.dtype.value, head_dtype=head, prompt_len=self.prompt_len.value,
            policies=self.policies.value, async_scheduling=self.async_scheduling.value,
            max_num_batched_tokens=self.budget.value,
            use_activation=None if self.activation.value == "default" else False,
        )


def memory_explorer(*, model: Any = "Qwen3-Embedding-8B", hardware: str = "H100 SXM",
                    prompt_len: tuple[int, int] | None = None, budget: int | None = None,
                    policies: Sequence[str] | None = None,
                    async_scheduling: bool | None = None) -> MemoryExplorer:
    """Explore peak pooling memory against prompt length for model and hardware presets.

    Args:
        model: a model preset (``tp.MODEL_PRESETS``), or what the explorer's "your model" box
            takes: a config.json path, a model directory, a config dict or a transformers
            config (it fills that box).
        hardware: initial device (``tp.HARDWARE_PRESETS``, GPUs: a share of a CPU's RAM,
            the host's, means nothing).
        prompt_len: initial ``(shortest, longest)`` prompt; powers of two from 256 to 1M
            (default: 1K up to the model's context, ``context_range``).
        budget: initial chunk budget (a power of two, 256 … 16K; default: vLLM's for the
            model and GPU).
        policies: the retention policies shown at first (default: all four).
        async_scheduling: start with async scheduling on or off (default: off, vLLM's default
            for a pooling model).

    The explorer opens with vLLM 0.33.0's defaults (sync scheduling, float32 head with its
    activation, vLLM's chunk budget): its first table is what ``tp.simulate`` gives for
    ``SimConfig.for_model(model, hardware=hardware)``.

    Returns:
        The explorer widget; e.g. ``ex.prompt_len.value = (1024, 65536)`` redraws it.

    Raises:
        ValueError: a range bound or budget the controls do not offer; a model that is neither
            a preset nor a readable config (the reason is named).

    Example:
        >>> ex = tp.memory_explorer(model={"architectures": ["Qwen3ForCausalLM"],
        ...     "model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 4,
        ...     "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000,
        ...     "max_position_embeddings": 8192})
        >>> ex.your_model.value[:16], ex.declared_tasks()
        ('{"architectures"', ('embed', 'token_embed'))
    """
    return MemoryExplorer(model=model, hardware=hardware, prompt_len=prompt_len, budget=budget,
                          policies=policies, async_scheduling=async_scheduling)
