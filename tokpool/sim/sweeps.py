"""``tp.sweep``: memory and time (ESTIMATED) against prompt length, for every policy and mode."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np
import pandas as pd

from ..pooler.keep_rule import SIM_POLICIES
from ..pooler.pooling import RETENTION_POLICIES, check_policy
from .backends.closed_form import single_request
from .backends.limits import check_byte_range, check_work
from .config import SimConfig
from .schedule.scheduler import validate_prompt_lens
from .simulation import simulate
from .vllm_rules import engine_checks

#: Columns of ``tp.sweep``'s DataFrame (bytes are ints; ``est_*`` are ESTIMATES in seconds).
SWEEP_COLUMNS: tuple[str, ...] = (
    "prompt_len", "policy", "async_scheduling", "num_steps", "peak_pooling_bytes",
    "peak_device_bytes", "copy_bytes", "d2h_bytes", "host_bytes", "output_bytes", "corrupted",
    "est_forward_s", "est_pool_s", "est_d2h_s", "est_total_s",
)
_BLOCK = 250_000  # prompt lengths per vectorised block (and per progress tick)
_AUTO_PROGRESS_POINTS = {"closed_form": 2_000_000, "analytic": 500, "tensor": 50}
SweepMode = Literal["closed_form", "analytic", "tensor"]


def sweep(
    prompt_lens: Sequence[int],
    config: SimConfig | None = None,
    *,
    policies: Sequence[str] = RETENTION_POLICIES,
    async_scheduling: Sequence[bool] = (False, True),
    mode: SweepMode = "closed_form",
    progress: bool | None = None,
) -> pd.DataFrame:
    """One single-request simulation per prompt length × policy × async setting.

    ``"closed_form"`` (the default) uses closed forms vectorised over prompt lengths
    (millions of points per second); ``"analytic"`` runs ``simulate(mode="analytic")`` (the
    counting engine loop) per point; ``"tensor"`` runs ``simulate(mode="tensor")`` per point
    (exact, slow; small prompts only). All three give the same numbers (bytes exactly, times to
    rounding): a property test holds them to it.

    Args:
        prompt_lens: prompt lengths; each row simulates one request of that length.
        config: everything else (its ``policy`` and ``async_scheduling`` are overridden).
        policies: retention policies to compare.
        async_scheduling: scheduling modes to compare.
        mode: ``"closed_form"``, ``"analytic"`` or ``"tensor"``.
        progress: show a text bar on stdout (tqdm); ``None``: only when the sweep is long.

    Returns:
        DataFrame with ``SWEEP_COLUMNS``, ordered by prompt length, then policy, then async.
        ``est_*`` columns are roofline ESTIMATES (NaN forward without a model preset).
        ``attrs["looked_past"]``: what vLLM would refuse (a config with ``as_if=True``).

    Raises:
        EngineRefusal: a prompt longer than ``max_model_len`` (unless ``as_if``), or one that
            can never be scheduled.
        ValueError: bad prompt lengths, policy or mode.
        TypeError: ``policies`` or ``async_scheduling`` given as one value instead of a list.

    Example:
        >>> cfg = SimConfig.for_model("Qwen3-Embedding-0.6B", head_dtype=None,
        ...                           use_activation=False)  # pooling alone, no head
        >>> df = sweep([1_000, 30_000], cfg, policies=["clone", "prealloc"],
        ...            async_scheduling=[False])
        >>> df.pivot(index="prompt_len", columns="policy", values="peak_pooling_bytes")
        policy          clone  prealloc
        prompt_len
        1000               0         0
        30000       111771648  61440000
    """
    config = SimConfig() if config is None else config
    if not isinstance(mode, str) or mode not in _AUTO_PROGRESS_POINTS:
        raise ValueError(f"unknown mode {mode!r}; use one of {list(_AUTO_PROGRESS_POINTS)}")
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be True, False or None (only when long), got "
                        f"{progress!r}")
    if not isinstance(config, SimConfig):
        raise TypeError(f"config must be a SimConfig, got {type(config).__name__}")
    lens = np.asarray(validate_prompt_lens(prompt_lens), dtype=np.int64)
    refuse = engine_checks.Refusals(as_if=config.as_if)  # vLLM rejects prompts over the limit
    refuse(engine_checks.check_prompts_fit, lens, config.max_model_len, name=config.model_name)
    if isinstance(policies, str) or not isinstance(policies, Iterable):
        raise TypeError(
            f"policies must be a list of policy names, got {policies!r}; "
            f"e.g. policies=[{policies!r}]"
        )
    policies = list(policies)
    for p in policies:
        check_policy(p, allowed=SIM_POLICIES)
    if isinstance(async_scheduling, bool) or not isinstance(async_scheduling, Iterable):
        raise TypeError(
            f"async_scheduling must be a list of booleans to compare, got {async_scheduling!r}; "
            f"e.g. async_scheduling=[{async_scheduling!r}]"
        )
    modes = list(async_scheduling)
    bad = [a for a in modes if not isinstance(a, (bool, np.bool_))]
    if bad:
        raise TypeError(f"async_scheduling values must be True or False, got {bad}")
    modes = [bool(a) for a in modes]
    if not policies or not modes:
        raise ValueError("give at least one policy and one async_scheduling value")
    combos = [(p, a) for p in policies for a in modes]
    check_byte_range(lens, config, what=f"sweep(mode={mode!r})", per_prompt=True)
    if mode != "closed_form":  # closed forms take no steps
        check_work(lens.tolist(), config, mode=mode, runs=len(combos), per_prompt=True)
    n_points = len(lens) * len(combos)
    show = n_points >= _AUTO_PROGRESS_POINTS[mode] if progress is None else progress
    looked_past = [*config.looked_past, *refuse.looked_past]
    if mode != "closed_form":
        return _marked(_sweep_loop(lens, config, combos, show, mode), looked_past)
    blocks = []
    bar = _bar(n_points, show)
    for lo in range(0, len(lens), _BLOCK):
        block = lens[lo : lo + _BLOCK]
        # [n_block, n_combos] per column, then ravel: prompt-major, then policy, then async.
        per_combo = [single_request(block, config.replace(policy=p, async_scheduling=a))
                     for p, a in combos]
        columns = {
            "prompt_len": np.repeat(block, len(combos)),
            "policy": np.tile(np.array([p for p, _ in combos], dtype=object), len(block)),
            "async_scheduling": np.tile(np.array([a for _, a in combos]), len(block)),
        }
        for name in SWEEP_COLUMNS[3:]:
            stacked = np.stack([np.broadcast_to(c[name], block.shape) for c in per_combo], axis=1)
            columns[name] = stacked.ravel()
        blocks.append(pd.DataFrame(columns, columns=list(SWEEP_COLUMNS)))
        if bar is not None:
            bar.update(len(block) * len(combos))
    if bar is not None:
        bar.close()
    frame = pd.concat(blocks, ignore_index=True) if len(blocks) > 1 else blocks[0]
    return _marked(frame, looked_past)


def _marked(frame: pd.DataFrame, looked_past: list[str]) -> pd.DataFrame:
    """``frame.attrs["looked_past"]``: what vLLM would refuse of this sweep (``as_if=True``;
    empty when it refuses nothing)."""
    frame.attrs["looked_past"] = list(looked_past)
    return frame


def _sweep_loop(lens: np.ndarray, config: SimConfig, combos, show: bool,
                mode: str) -> pd.DataFrame:
    bar = _bar(len(lens) * len(combos), show)
    rows = []
    for n in lens.tolist():
        for p, a in combos:
            cfg = config.replace(policy=p, async_scheduling=a)
            rows.append(simulate([n], cfg, mode=mode).summary())
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return pd.DataFrame(rows, columns=list(SWEEP_COLUMNS))


def _bar(total: int, show: bool):
    if not show:
        return None
    from tqdm.std import tqdm  # on use (import tokpool stays light); text bars survive save+reopen

    # one line on stdout, redrawn in place (carriage return), as tp.prm's scoring bar: a notebook
    # shows it as ordinary output, not a stderr box
    return tqdm(total=total, desc="tokpool sweep", unit="pt", file=sys.stdout, mininterval=0.5)
