"""Closed forms for ONE request of T tokens, vectorised over T (numpy), for fast sweeps.

They are the analytic engine's bookkeeping solved by hand for a single request (tests check
them against ``simulate(mode="analytic")`` point by point). With C tokens a step (the budget
B: the long-prefill threshold, ``vllm_rules.scheduling.long_prefill_cap``, is lifted for a lone
request), n = ceil(T / C) steps and last chunk L = T − (n − 1)·C (unchunked: n = 1, L = T),
row bytes r = W·s:

- what each chunk keeps comes from the keep rule (``tokpool.pooler.keep_rule``): unfinished chunks
  kept as clones hold (T − L)·r at most, a prealloc buffer T·r, views and host copies 0 —
  except views of EAGER steps (``output_memory="vllm"``, chunks larger than the largest
  capture size), which pin their step's tensor: (T − L)·r before the final step;
- the final step's pooled output P owns T·r if it is a cat/clone/prealloc buffer (else a view:
  0), and the cat coexists with the (T − L)·r of kept chunks: peak P + (T − L)·r;
- the pooling kind's selection (STEP: T·k·s columns, then m·k·s tag rows) is alive with P;
- the head adds its cast and activation outputs while pooling's output Q is alive;
- offload keeps nothing on the device: everything after the per-chunk copy lives on the host.

Only views kept across steps can be overwritten; for a lone request that is legacy's unfinished
chunks, when their steps write rewritten memory (the teaching buffer, or graph replays): with
n ≥ 2, positions [0, (n − 2)·C + min(C, w)) are read after being overwritten, where w is the
rows the last step writes (L, or its padded capture size).
"""

from __future__ import annotations

import numpy as np

from ...pooler.keep_rule import keep_rule
from ..config import SimConfig

# Called through the modules, never copied: the seam and refusal tests swap the rules there.
from ..vllm_rules import engine_checks, scheduling
from ..vllm_rules import step_memory as step_memory_rule
from ..vllm_rules.classifier import head_peak, head_tensors, whole_tensor_delivered
from ..vllm_rules.cpu_platform import host_copy_copies
from .loop import copies_at_finish


def _sum_forward_full_steps(n, C, M, model, hardware) -> np.ndarray:
    """Σ over full steps j = 0..n−2 of max(FLOPs_j / F, M): FLOPs_j = α + β·j grows with j."""
    a = 2.0 * model.matmul_parameters
    b = 4.0 * model.num_layers * model.num_attention_heads * model.head_dim
    alpha = a * C + b * C * (C + 1) / 2.0  # FLOPs of the first full step
    beta = b * float(C) * C  # extra attention FLOPs per earlier full chunk
    F = hardware.bf16_flops
    full = (n - 1).astype(np.float64)
    # Steps below j0 are bandwidth-bound (time M), the rest compute-bound.
    j0 = np.clip(np.ceil((M * F - alpha) / beta), 0.0, full)
    compute = ((full - j0) * alpha + beta * (full - 1.0 + j0) * (full - j0) / 2.0) / F
    return j0 * M + compute


def single_request(prompt_lens: np.ndarray, config: SimConfig,
                   params=None) -> dict[str, np.ndarray]:
    """Sweep columns for one request per entry of ``prompt_lens`` (``[n]`` int64 → ``[n]``),
    with the request's ``tp.PoolingParams`` (``params``; late chunking: one entry only).

    Raises:
        EngineRefusal: without chunked prefill, a prompt longer than the budget.
        ValueError: a threshold rule that would split a lone prompt without chunked prefill
            (not vLLM 0.33.0's: it lifts the threshold for a lone request).
    """
    cfg = config
    T = np.asarray(prompt_lens, dtype=np.int64)
    B = cfg.max_num_batched_tokens  # the budget
    # The long-prefill threshold for the one request, alone in the engine: vLLM 0.33.0 lifts
    # it (cap 0), so the budget chunks the prompt. C: the most tokens one step takes.
    cap = scheduling.long_prefill_cap(cfg.long_prefill_token_threshold, eligible=1)
    C = min(cap, B) if cap else B
    if cfg.enable_chunked_prefill:
        n = (T + C - 1) // C
    else:
        if T.max(initial=0) > B:  # the refusal names the first such prompt
            engine_checks.check_unchunked_prompts_schedulable(
                T[T > B][:1].tolist(), B, enable_chunked_prefill=False)
        if C < B:  # a split without chunked prefill: the keep rule's other branch
            raise ValueError(
                f"long_prefill_token_threshold={cap} splits a lone prompt without chunked "
                "prefill; closed forms solve whole or chunked prompts only: use "
                "mode='analytic'")
        n = np.ones_like(T)
    L = T - (n - 1) * C
    multi = n >= 2
    s, W = cfg.dtype_size, cfg.width
    rb = W * s  # bytes of one hidden row
    zero = np.zeros_like(T)

    kind = cfg.pooling_kind
    kept = kind.kept_rows(cfg)

    def rule(finished: bool, first: bool):
        return keep_rule(cfg.policy, chunked=cfg.enable_chunked_prefill,
                         async_scheduling=cfg.async_scheduling, finished=finished,
                         first_chunk=first)

    one_shot = rule(True, True)
    if cfg.enable_chunked_prefill:
        unfinished, final = rule(False, True), rule(True, False)
    else:
        unfinished = final = one_shot
    offload = one_shot.keep == "host" and kind.token_level
    # Where the steps write (the step-memory rule): a view of a fresh output pins it, a view of
    # persistent memory is rewritten by later steps that write its rows.
    full_persistent, _ = step_memory_rule.step_memory(cfg, C)
    full_fresh = not bool(full_persistent)
    one_shot_pin = zero

    if not kind.token_level:  # LAST: each step gathers the last row, [1, W]
        gather = rb  # [1, W] per step
        cache_peak, P = np.full_like(T, gather), np.full_like(T, gather)
        copy_pool, d2h_pool = n * gather, zero
        copy_full = np.full_like(T, gather)
        rows_out, width_out = np.ones_like(T), W
        peak_sel, Q, copy_sel = P, P, zero
    else:
        # Device bytes held of the T − L rows computed before the final step.
        held_before = {"clone": (T - L) * rb, "buffer": T * rb, "host": zero,
                       "view": (T - L) * rb if full_fresh else zero}[unfinished.keep]
        # ("chunk" only when chunked prefill is off: then no request has several chunks.)
        owned_output = {"cat": T * rb, "buffer": zero if offload else T * rb, "chunk": zero}
        multi_P = owned_output[final.returns]
        single_P = T * rb if one_shot.keep == "clone" else zero
        P = np.where(multi, multi_P, single_P)
        cache_peak = np.where(multi, held_before, 0)
        if final.returns == "cat":
            cache_peak = np.maximum(cache_peak, P + np.where(multi, held_before, 0))
        copies_before = (T - L) * rb if unfinished.keep == "clone" else zero
        multi_copy = {"cat": copies_before + T * rb, "buffer": multi_P,
                      "chunk": zero}[final.returns]
        copy_pool = np.where(multi, multi_copy, single_P)
        copy_full = np.full_like(T, C * rb if unfinished.keep in ("clone", "buffer") else 0)
        if one_shot.keep == "view" and cfg.async_scheduling and not copies_at_finish(cfg,
                                                                                    params):
            # The host copy reads the view one iteration later: a fresh output stays pinned.
            one_shot_persistent, _ = step_memory_rule.step_memory(cfg, T)
            one_shot_pin = np.where(~one_shot_persistent & ~multi, T * rb, 0)
        d2h_pool = T * rb if offload else zero
        cache_peak = np.maximum(cache_peak, P)
        # The kind's selection (STEP: columns, then tag rows), each alive with P.
        width_out = kind.output_width(cfg)
        rows_out = kept.count(0, zero, T)  # delivered rows: [n]
        sizes = [rows * width * s for rows, width in kind.selection_shapes(cfg, T, rows_out)]
        if offload:
            peak_sel, copy_sel, Q = zero, zero, zero
        else:
            peak_sel = P + kind.selection_peak(cfg, T, rows_out, s)
            copy_sel = sum(sizes, zero)
            Q = sizes[-1] if sizes else P

    # the head's tensors (late chunking's means, cast, the pooler head's classifier,
    # activation): vllm_rules.classifier.head_tensors, the rule every backend asks
    if params is not None and params.late_chunking_size is not None:
        if T.size != 1:
            raise ValueError("late chunking in the closed forms: one prompt length at a time")
        rows_out = int(np.asarray(rows_out).reshape(-1)[0])
    made = head_tensors(cfg, rows_out, width_out, params)
    out_bytes = made[-1].nbytes if made else rows_out * width_out * s  # delivered
    whole_tensor = whole_tensor_delivered(made, on_host=offload,
                                          host_copy_copies=host_copy_copies(cfg.hardware))
    allocated = [t for t in made if not t.view]
    whole = allocated[-1].nbytes if allocated else rows_out * W * s  # the sliced tensor
    if whole_tensor == "delivered":
        out_bytes = whole
    out_bytes = out_bytes + zero
    host_bytes = (whole + zero) if whole_tensor == "pinned" else out_bytes
    if offload:
        peak_head, copy_head = zero, zero
    else:
        extra, allocated_bytes = head_peak(made)
        peak_head = Q + extra
        copy_head = allocated_bytes + zero
    peak = np.maximum.reduce([cache_peak, peak_sel, peak_head, one_shot_pin])
    copy_total = copy_pool + copy_sel + copy_head
    # the host copy: none on vLLM's CPU platform (``.to("cpu")`` of a CPU tensor)
    d2h_total = d2h_pool if offload else (out_bytes if host_copy_copies(cfg.hardware) else zero)
    if kind.token_level and unfinished.keep == "view" and cfg.enable_chunked_prefill \
            and not full_fresh:
        # Views of rewritten memory: every later step writes at least its own C rows, so each
        # full chunk's view is wholly rewritten by the next full step; the last full chunk's
        # view loses the rows the final step writes there, if it writes the persistent memory.
        # Positions [0, (n − 2)·C + those rows) were overwritten before the final cat read them.
        last_persistent, last_rows = step_memory_rule.step_memory(cfg, L)
        last_hit = np.where(last_persistent, np.minimum(C, last_rows), 0)
        stale = np.where(multi, (n - 2) * C + last_hit, 0)
        corrupted = multi & (kept.count(0, zero, stale) > 0)  # a delivered row was rewritten
    else:
        corrupted = np.zeros(T.shape, dtype=bool)

    times = _times(T, n, L, C, rb, copy_total, copy_full, d2h_total, offload, out_bytes, cfg)
    return {
        "num_steps": n + int(cfg.async_scheduling),
        "peak_pooling_bytes": peak,
        "peak_device_bytes": peak + cfg.buffer_bytes,
        "copy_bytes": copy_total,
        "d2h_bytes": d2h_total,
        "host_bytes": host_bytes,
        "output_bytes": out_bytes,
        "corrupted": corrupted,
        **times,
    }


def _times(T, n, L, C, rb, copy_total, copy_full, d2h_total, offload, out_bytes, cfg) -> dict:
    """Σ of the per-step roofline ESTIMATES (see ``backends.timing``), closed form."""
    hw, model = cfg.hardware, cfg.model
    Bh, Bp = hw.hbm_bandwidth, hw.pcie_bandwidth
    full = (n - 1).astype(np.float64)
    d2h_full = C * rb if offload else 0
    pool_full_s = 2.0 * copy_full / Bh
    d2h_full_s = d2h_full / Bp
    start_last = (n - 1) * C
    copy_last = copy_total - (n - 1) * copy_full
    if cfg.async_scheduling:
        d2h_last = L * rb if offload else np.zeros_like(T)
        d2h_drain = 0 if offload else out_bytes
    else:
        d2h_last = d2h_total - (n - 1) * d2h_full
        d2h_drain = 0
    pool_last_s = 2.0 * copy_last / Bh
    d2h_last_s = d2h_last / Bp
    if model is None:
        forward_full = forward_last = np.full(T.shape, np.nan)
        step_full = np.full(T.shape, np.nan)
    else:
        M = model.num_parameters * cfg.dtype_size / Bh  # reading the weights once
        ctx_last = (T * (T + 1) - start_last * (start_last + 1)) // 2
        forward_last = np.maximum(model.flops(L, ctx_last) / hw.bf16_flops, M)
        forward_full = _sum_forward_full_steps(n, C, M, model, hw)
        if not cfg.async_scheduling:
            step_full = forward_full + full * (pool_full_s + d2h_full_s)
        elif d2h_full == 0:
            step_full = forward_full + full * pool_full_s
        else:  # offload: no pooling copies, the host copy overlaps: max(FLOPs/F, M, d2h)
            step_full = _sum_forward_full_steps(n, C, max(M, d2h_full_s), model, hw)
    if cfg.async_scheduling:
        step_last = np.maximum(forward_last + pool_last_s, d2h_last_s) + d2h_drain / Bp
    else:
        step_last = forward_last + pool_last_s + d2h_last_s
    return {
        "est_forward_s": forward_full + forward_last,
        "est_pool_s": 2.0 * copy_total / Bh,
        "est_d2h_s": d2h_total / Bp,
        "est_total_s": step_full + step_last,
    }
