"""``tp.simulate``: run one workload through the simulated engine, in tensor or analytic mode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from .analytic import run_analytic
from .config import SimConfig
from .hardware import estimate_step_times
from .ledger import requests_frame, steps_frame
from .result import SimResult
from .scheduler import check_prompt_lens, schedule
from .source import SYNTHETIC_STEP_TAG_ID, HiddenStateSource, SyntheticSource, check_source
from .tensor import run_tensor

SimMode = Literal["tensor", "analytic"]


def default_source(config: SimConfig) -> SyntheticSource:
    """The synthetic source a config implies (width, dtype, step tags)."""
    return SyntheticSource(
        config.width,
        config.dtype,
        step_tag_every=config.step_tag_every,
        step_tag_id=config.effective_step_tag_id or SYNTHETIC_STEP_TAG_ID,
    )


def simulate(
    prompt_lens: Sequence[int],
    config: SimConfig | None = None,
    *,
    mode: SimMode = "tensor",
    source: HiddenStateSource | None = None,
    arrival_steps: Sequence[int] | None = None,
) -> SimResult:
    """Replay an engine's prefill steps around token-level pooling and account for every byte.

    Args:
        prompt_lens: prompt length per request (each >= 1).
        config: the engine (default ``SimConfig()``).
        mode: ``"tensor"`` runs real tensors through the core's poolers and heads, measures
            real storages and checks every output against the source's reference;
            ``"analytic"`` computes the same ledger with integers (no allocation; fast for
            million-token prompts). Both agree to the byte on every column.
        source: where hidden states come from (tensor mode); default a ``SyntheticSource``.
            In analytic mode only its ``token_ids`` are used (STEP tag rows).
        arrival_steps: per request, the first step it may be scheduled in (default all 0).

    Returns:
        A ``SimResult`` (``steps``, ``requests``, ``corrupted``, peaks).

    Raises:
        ValueError: bad prompt lengths or mode, or a prompt that can never be scheduled.
        TypeError: non-integer prompt lengths, or a source missing part of the protocol.

    Example:
        >>> r = simulate([3000], SimConfig(hidden_size=8, max_num_batched_tokens=1024),
        ...              mode="analytic")
        >>> r.peak_pooling_bytes == (2 * 3000 - 952) * 8 * 2  # clone: (2T - L)·W·s
        True
    """
    config = SimConfig() if config is None else config
    if not isinstance(config, SimConfig):
        raise TypeError(f"config must be a SimConfig, got {type(config).__name__}")
    if mode not in ("tensor", "analytic"):
        raise ValueError(f"unknown mode {mode!r}; use 'tensor' or 'analytic'")
    lens = check_prompt_lens(prompt_lens)
    steps = schedule(
        lens,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_num_seqs=config.max_num_seqs,
        enable_chunked_prefill=config.enable_chunked_prefill,
        arrival_steps=arrival_steps,
    )
    outputs = None
    if source is not None:
        check_source(source, width=config.width, dtype=config.dtype)
        source.prepare(lens)  # the source validates the lengths (both modes)
    if mode == "tensor":
        if source is None:
            source = default_source(config)
            source.prepare(lens)
        records, requests, corrupted, outputs = run_tensor(lens, config, steps, source)
    else:
        records, requests, corrupted = run_analytic(lens, config, steps, source=source)
    times = estimate_step_times(
        [r.num_scheduled_tokens for r in records],
        [r.context_sum for r in records],
        [r.copy_bytes for r in records],
        [r.d2h_bytes for r in records],
        model=config.model,
        hardware=config.hardware,
        weight_bytes_per_parameter=config.dtype_size,
        async_scheduling=config.async_scheduling,
    )
    frame = steps_frame(records, times)
    peak = int(frame["pool_peak_bytes"].max())
    return SimResult(
        config=config,
        mode=mode,
        prompt_lens=lens,
        steps=frame,
        requests=requests_frame(requests),
        corrupted=sorted(corrupted),
        peak_pooling_bytes=peak,
        buffer_bytes=config.buffer_bytes,
        peak_device_bytes=peak + config.buffer_bytes,
        schedule=steps,
        outputs=outputs,
    )
