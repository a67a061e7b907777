"""The roofline time ESTIMATE of one engine step.

Everything here is an estimate from spec-sheet numbers, not a measurement: an ideal roofline
(no kernel inefficiency, no launch overhead, perfect overlap where overlap is modelled). Use it to
compare policies and prompt lengths with each other, not to predict absolute latency.

Per step (``c`` tokens scheduled, attention context summed over those tokens ``ctx``):

- forward  = max(FLOPs / peak FLOP/s, weight bytes / HBM bandwidth), with
  FLOPs = 2 · (parameters − vocab · hidden) · c            (matmuls; the embedding lookup is free)
        + 4 · layers · (heads · head_dim) · ctx             (QKᵀ and AV, causal: ctx = Σ (pos + 1))
- pool     = 2 · copy_bytes / HBM bandwidth                 (every pooling copy reads and writes)
- d2h      = d2h_bytes / PCIe host bandwidth
- step     = forward + pool + d2h                           (synchronous scheduling)
           = max(forward + pool, d2h)                       (async: the host copy overlaps)
"""

from __future__ import annotations

import numpy as np

from ..vllm_rules.devices import Hardware
from ..vllm_rules.models import ModelPreset


def estimate_step_times(
    tokens,
    context_sum,
    copy_bytes,
    d2h_bytes,
    *,
    model: ModelPreset | None,
    hardware: Hardware,
    weight_bytes_per_parameter: int,
    async_scheduling: bool,
) -> dict[str, np.ndarray]:
    """Roofline ESTIMATES for steps (arrays in, arrays out; see the module docstring).

    Args:
        tokens: ``[n_steps]`` tokens computed per step (0 for a collect-only step).
        context_sum: ``[n_steps]`` Σ (position + 1) over those tokens.
        copy_bytes: ``[n_steps]`` device bytes written by pooling.
        d2h_bytes: ``[n_steps]`` bytes copied device → host.
        model: the model; ``None`` gives NaN forward times (unknown).
        hardware: the accelerator.
        weight_bytes_per_parameter: bytes per weight (the model dtype's size).
        async_scheduling: overlap the host copy with the step (see module docstring).

    Returns:
        ``est_forward_s``, ``est_pool_s``, ``est_d2h_s``, ``est_step_s``, each ``[n_steps]``.
    """
    tokens = np.asarray(tokens, dtype=np.float64)
    if model is None:
        forward = np.full(tokens.shape, np.nan)
    else:
        compute = model.flops(tokens, np.asarray(context_sum, dtype=np.float64))
        compute_s = compute / hardware.bf16_flops
        weights_s = model.num_parameters * weight_bytes_per_parameter / hardware.hbm_bandwidth
        # A step that computes nothing (collect-only) reads no weights.
        forward = np.where(tokens > 0, np.maximum(compute_s, weights_s), 0.0)
    pool = 2.0 * np.asarray(copy_bytes, dtype=np.float64) / hardware.hbm_bandwidth
    d2h = np.asarray(d2h_bytes, dtype=np.float64) / hardware.pcie_bandwidth
    step = np.maximum(forward + pool, d2h) if async_scheduling else forward + pool + d2h
    return {"est_forward_s": forward, "est_pool_s": pool, "est_d2h_s": d2h, "est_step_s": step}
