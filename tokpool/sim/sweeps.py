"""``tp.sweep``: memory and time (ESTIMATED) against prompt length, for every policy and mode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

from ..pooling import RETENTION_POLICIES, check_policy
from .closed_form import single_request
from .config import SimConfig
from .scheduler import check_prompt_lens
from .simulation import simulate

#: Columns of ``tp.sweep``'s DataFrame (bytes are ints; ``est_*`` are ESTIMATES in seconds).
SWEEP_COLUMNS: tuple[str, ...] = (
    "prompt_len", "policy", "async_scheduling", "num_steps", "peak_pooling_bytes",
    "peak_device_bytes", "copy_bytes", "d2h_bytes", "host_bytes", "output_bytes", "corrupted",
    "est_forward_s", "est_pool_s", "est_d2h_s", "est_total_s",
)
_BLOCK = 250_000  # prompt lengths per vectorised block (and per progress tick)
_AUTO_PROGRESS_POINTS = {"analytic": 2_000_000, "tensor": 50}


def sweep(
    prompt_lens: Sequence[int],
    config: SimConfig | None = None,
    *,
    policies: Sequence[str] = RETENTION_POLICIES,
    async_scheduling: Sequence[bool] = (False, True),
    mode: Literal["analytic", "tensor"] = "analytic",
    progress: bool | None = None,
) -> pd.DataFrame:
    """One single-request simulation per prompt length × policy × async setting.

    Analytic mode uses closed forms vectorised over prompt lengths (millions of points per
    second); tensor mode runs ``simulate(mode="tensor")`` per point (exact, slow; small
    prompts only). Both give the same numbers (bytes exactly, times to rounding).

    Args:
        prompt_lens: prompt lengths; each row simulates one request of that length.
        config: everything else (its ``policy`` and ``async_scheduling`` are overridden).
        policies: retention policies to compare.
        async_scheduling: scheduling modes to compare.
        mode: ``"analytic"`` or ``"tensor"``.
        progress: show a tqdm bar; ``None``: only when the sweep is long.

    Returns:
        DataFrame with ``SWEEP_COLUMNS``, ordered by prompt length, then policy, then async.
        ``est_*`` columns are roofline ESTIMATES (NaN forward without a model preset).

    Raises:
        ValueError: bad prompt lengths, policy or mode; prompts that can never be scheduled.

    Example:
        >>> df = sweep([1_000, 100_000], SimConfig.for_model("Qwen3-Embedding-0.6B"))
        >>> df.pivot(index="prompt_len", columns=["policy", "async_scheduling"],
        ...          values="peak_pooling_bytes")  # doctest: +SKIP
    """
    config = SimConfig() if config is None else config
    if mode not in ("analytic", "tensor"):
        raise ValueError(f"unknown mode {mode!r}; use 'analytic' or 'tensor'")
    lens = np.asarray(check_prompt_lens(prompt_lens), dtype=np.int64)
    policies = list(policies)
    for p in policies:
        check_policy(p)
    modes = [bool(a) for a in async_scheduling]
    if not policies or not modes:
        raise ValueError("give at least one policy and one async_scheduling value")
    combos = [(p, a) for p in policies for a in modes]
    n_points = len(lens) * len(combos)
    show = n_points >= _AUTO_PROGRESS_POINTS[mode] if progress is None else progress
    if mode == "tensor":
        return _sweep_tensor(lens, config, combos, show)
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
    return pd.concat(blocks, ignore_index=True) if len(blocks) > 1 else blocks[0]


def _sweep_tensor(lens: np.ndarray, config: SimConfig, combos, show: bool) -> pd.DataFrame:
    bar = _bar(len(lens) * len(combos), show)
    rows = []
    for n in lens.tolist():
        for p, a in combos:
            cfg = config.replace(policy=p, async_scheduling=a)
            rows.append(simulate([n], cfg, mode="tensor").summary())
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return pd.DataFrame(rows, columns=list(SWEEP_COLUMNS))


def _bar(total: int, show: bool):
    if not show:
        return None
    from tqdm.auto import tqdm  # imported on use: import tokpool stays light

    return tqdm(total=total, desc="tokpool sweep", unit="pt")
