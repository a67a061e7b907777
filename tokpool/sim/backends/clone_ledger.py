"""The counting ledger of the common case in plain integers: the fast analytic engine.

``CountingEngine`` (``backends.counting``) runs any schedule through the general step loop
(``backends.loop``): storages with reference counts, kept views and the memory they pin, an
overwrite tracker, preemptions, aborts, async host copies. Most sweeps run none of that: a
token pooler (``ALL``, no STEP selection) under synchronous scheduling with chunked prefill
and the ``clone`` keep rules (``SimConfig()``: ``vllm serve``'s defaults), no preemption,
no prefix-cache hit, no abort, vLLM's default per-request options. There every unfinished
chunk is an owned clone, a finished chunk is a view of its own step's output read within the
step (by the cat, or by the head's first copy), and the host copy runs in the step: no view
outlives its step, so nothing is ever overwritten or stranded. This module replays exactly
that ledger with integers, step by step in one tight loop, and builds the frames from
columns. ``run_clone_ledger`` returns ``None`` (the caller runs the general loop) wherever
any of those conditions fails; ``tests/test_fast_analytic.py`` compares every frame with the
general loop's on drawn workloads and engines.

Per step, in the general loop's order (bytes of one hidden row ``rb``):

1. each unfinished chunk of ``n`` rows is cloned: ``+n·rb`` (copied; a peak candidate);
2. each finished request with earlier chunks gets its cat (``+T·rb``, copied, a peak
   candidate), and its clones die; a one-shot request hands over its view (no bytes);
3. the head's tensors per finished request (``vllm_rules.classifier.head_tensors``): each
   allocation copied and a peak candidate, transients dying as the head says, all but the
   last dying when the head returns; pooling's cats die after the whole head pass;
4. the host copy delivers each head output (``d2h`` where the platform copies) and frees it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...pooler.keep_rule import KeepRule
from ..config import SimConfig
from ..memory.ledger import REQUEST_COLUMNS, STEP_COLUMNS
from ..memory.views import ViewTracker, overwrites_frame
from ..schedule.scheduler import ScheduledStep

# Called through the module, never copied: the seam tests swap the rule there.
from ..vllm_rules import step_memory as step_memory_rule
from ..vllm_rules.classifier import head_output, head_tensors
from ..vllm_rules.cpu_platform import host_copy_copies
from .loop import CHUNK_COLUMNS
from .progress import ticks

__all__ = ["CloneLedger", "run_clone_ledger"]

_CLONE = KeepRule("clone", None)
_CAT = KeepRule("view", "cat")
_ONE_SHOT = KeepRule("view", "chunk")


@dataclass
class CloneLedger:
    """What the fast ledger hands ``simulate``: the step columns (``STEP_COLUMNS`` but the
    time estimates, plus ``context_sum``) and the frames."""

    step_columns: dict[str, np.ndarray]
    requests: pd.DataFrame
    chunks: pd.DataFrame
    buffer_writes: pd.DataFrame
    overwrites: pd.DataFrame


def _applies(config: SimConfig, pooling_params: Sequence, aborts: Sequence) -> bool:
    """The conservative region (see the module docstring); the schedule is checked as it
    runs (no preemption, no cache hit)."""
    kind = config.pooling_kind
    if (aborts or config.async_scheduling or not config.enable_chunked_prefill
            or not kind.token_level or kind.selects(config) or kind.reads_prompt_token_ids
            or any(p is not None for p in pooling_params)):
        return False
    rules = {(f, first): kind.chunk_rule(config, finished=f, first_chunk=first)
             for f in (False, True) for first in (False, True)}
    return (rules[False, False] == _CLONE and rules[False, True] == _CLONE
            and rules[True, False] == _CAT and rules[True, True] == _ONE_SHOT)


def _head_events(config: SimConfig, rows: np.ndarray, width: int):
    """Every request's head at once (``rows``: ``[n]`` delivered rows; ``head_tensors`` on
    arrays, as the closed forms ask it): per request ``(live-byte changes in order, bytes of
    the delivered tensor left alive, bytes the host copy moves)``, as ``CountingEngine.head``
    counts them; ``None`` where the head allocates nothing or delivers a whole tensor (the
    general loop)."""
    events: list[np.ndarray] = []
    made: list[tuple[int, np.ndarray]] = []  # (id, nbytes) alive
    transients: list[tuple[int, np.ndarray]] = []
    last = None
    for i, t in enumerate(head_tensors(config, rows, width, None)):
        last = t
        if t.view:
            continue
        nbytes = np.broadcast_to(np.asarray(t.nbytes, dtype=np.int64), rows.shape)
        made.append((i, nbytes))
        events.append(nbytes)
        if t.transient:
            transients.append(made[-1])
        else:
            for d in transients:  # torch.cat's inputs die once it exists
                events.append(-d[1])
                made.remove(d)
            transients = []
    if last is not None and last.view and not host_copy_copies(config.hardware):
        return None  # a slice pins its whole tensor on the host: the general loop
    zero = np.zeros(rows.shape, dtype=np.int64)
    if last is None:  # identity head: pooling's own output is delivered
        delivered = rows * (width * config.dtype_size)
    else:
        delivered = np.broadcast_to(np.asarray(last.nbytes, dtype=np.int64), rows.shape)
    if not made:  # pooling's output (or a view of it) is delivered; it dies at the copy
        return [([], 0, d) for d in delivered.tolist()]
    events.extend(-nbytes for _, nbytes in made[:-1])
    per_request = np.stack(events, axis=1).tolist()  # [n, events]
    return list(zip(per_request, (made[-1][1] + zero).tolist(), delivered.tolist(),
                    strict=True))


def run_clone_ledger(prompt_lens: Sequence[int], config: SimConfig,
                     steps: Sequence[ScheduledStep], *, pooling_params: Sequence,
                     aborts: Sequence = ()) -> CloneLedger | None:
    """The analytic ledger of ``steps`` in the clone region, or ``None`` outside it."""
    if not _applies(config, pooling_params, aborts):
        return None
    lens = list(prompt_lens)
    kind = config.pooling_kind
    kept = kind.kept_rows(config, None, len(lens))
    rb = config.width * config.dtype_size
    copies = host_copy_copies(config.hardware)
    block_bytes = config.kv_block_bytes
    persistent_rows = config.buffer_rows
    if not getattr(kept, "keep_all", False):
        return None
    rows = np.asarray(lens, dtype=np.int64)  # every request delivers its whole prompt
    head_of = _head_events(config, rows, kind.output_width(config))
    if head_of is None:
        return None
    delivered_rows = np.asarray(head_output(config, rows, kind.output_width(config), None)[0],
                                dtype=np.int64) + 0 * rows
    outs_by_size: dict[int, tuple[int, int, bool]] = {}  # tokens -> (region, rows, fresh)
    next_region = 1

    n_steps = len(steps)
    col_step = [0] * n_steps
    col_tokens = [0] * n_steps
    col_requests = [0] * n_steps
    col_finished = [0] * n_steps
    col_live = [0] * n_steps
    col_peak = [0] * n_steps
    col_host = [0] * n_steps
    col_copy = [0] * n_steps
    col_d2h = [0] * n_steps
    col_kv = [0] * n_steps
    col_context = [0] * n_steps
    w_region = [0] * n_steps
    w_rows = [0] * n_steps
    first_step = [-1] * len(lens)
    finish_step = [-1] * len(lens)
    num_chunks = [0] * len(lens)
    output_bytes = [0] * len(lens)
    c_step: list[int] = []
    c_req: list[int] = []
    c_start: list[int] = []
    c_stop: list[int] = []
    c_row: list[int] = []
    c_eager: list[bool] = []
    c_kind: list[int] = []  # 0 clone, 1 view + cat, 2 view (one shot)
    owned: dict[int, int] = {}  # request -> bytes of its clones
    live = 0  # device bytes alive
    delivered = 0  # host bytes delivered so far
    prev = None
    for k, step in enumerate(ticks(steps)):
        index = step.index
        if step.preempted or step.cached or (prev is not None and index <= prev):
            return None  # a preemption or a cache hit: the general loop
        prev = index
        peak = live
        copy = d2h = 0
        tokens = context = row = 0
        cats = 0
        for _, start, stop in step.chunks:
            n = stop - start
            tokens += n
            context += (stop * (stop + 1) - start * (start + 1)) // 2
        out = outs_by_size.get(tokens)
        if out is None:
            so = step_memory_rule.step_output(config, tokens, -1, persistent_rows)
            out = outs_by_size[tokens] = (so.region, so.rows_written, so.fresh)
        region, rows_written, fresh = out
        if fresh:
            region = next_region
            next_region += 1
        w_region[k], w_rows[k] = region, rows_written
        for r, start, stop in step.chunks:  # 1. clones (AllPool's first pass)
            n = stop - start
            num_chunks[r] += 1
            if start == 0:
                first_step[r] = index
            c_step.append(index)
            c_req.append(r)
            c_start.append(start)
            c_stop.append(stop)
            c_row.append(row)
            c_eager.append(fresh)
            row += n
            if stop != lens[r]:
                nb = n * rb
                live += nb
                copy += nb
                if live > peak:
                    peak = live
                owned[r] = owned.get(r, 0) + nb
                c_kind.append(0)
            else:
                c_kind.append(2 if start == 0 else 1)
        for r, start, stop in step.chunks:  # 2. cats (AllPool's second pass)
            if stop != lens[r]:
                continue
            if start:
                nb = stop * rb  # [T, W]: every chunk, no stale rows without preemption
                live += nb
                copy += nb
                if live > peak:
                    peak = live
                cats += nb
            live -= owned.pop(r, 0)
        for r in step.finished:  # 3. the head, request by request
            for e in head_of[r][0]:
                live += e
                if e > 0:
                    copy += e
                    if live > peak:
                        peak = live
            finish_step[r] = index
        live -= cats  # pooling's outputs die after the head
        for r in step.finished:  # 4. the host copy, in the step (synchronous)
            _, alive, nbytes = head_of[r]
            if copies:
                d2h += nbytes
            delivered += nbytes
            output_bytes[r] = nbytes
            live -= alive
        col_step[k], col_tokens[k] = index, tokens
        col_requests[k], col_finished[k] = len(step.chunks), len(step.finished)
        col_live[k], col_peak[k] = live, max(peak, live)
        col_host[k], col_copy[k], col_d2h[k] = delivered, copy, d2h
        col_kv[k], col_context[k] = step.kv_blocks * block_bytes, context
    if live != sum(owned.values()):  # an internal bookkeeping error
        raise RuntimeError(f"clone ledger out of balance: {live} vs {sum(owned.values())}")
    zeros = np.zeros(n_steps, dtype=np.int64)
    as64 = np.asarray
    step_columns = {
        "step": as64(col_step, dtype=np.int64),
        "num_scheduled_tokens": as64(col_tokens, dtype=np.int64),
        "num_requests": as64(col_requests, dtype=np.int64),
        "num_finished": as64(col_finished, dtype=np.int64),
        "pool_bytes": as64(col_live, dtype=np.int64),
        "pool_peak_bytes": as64(col_peak, dtype=np.int64),
        "pool_cache_bytes": as64(col_live, dtype=np.int64),  # all of it: clones
        "pool_output_bytes": zeros,
        "pool_head_bytes": zeros.copy(),
        "host_bytes": as64(col_host, dtype=np.int64),
        "copy_bytes": as64(col_copy, dtype=np.int64),
        "d2h_bytes": as64(col_d2h, dtype=np.int64),
        "stranded_bytes": zeros.copy(),
        "kv_bytes": as64(col_kv, dtype=np.int64),
        "num_cached_tokens": zeros.copy(),
        "context_sum": as64(col_context, dtype=np.int64),
    }
    n_req = len(lens)
    finished = as64(finish_step, dtype=np.int64)
    requests = pd.DataFrame({
        "request": np.arange(n_req, dtype=np.int64),
        "prompt_len": as64(lens, dtype=np.int64),
        "first_step": as64(first_step, dtype=np.int64),
        "finish_step": finished,
        "delivered_step": finished.copy(),
        "num_chunks": as64(num_chunks, dtype=np.int64),
        "output_bytes": as64(output_bytes, dtype=np.int64),
        "corrupted": np.zeros(n_req, dtype=bool),
        "stranded_bytes": np.zeros(n_req, dtype=np.int64),
        "num_preemptions": np.zeros(n_req, dtype=np.int64),
        "num_cached_tokens": np.zeros(n_req, dtype=np.int64),
        "delivered_rows": np.where(finished >= 0, delivered_rows, 0),
        "duplicated_rows": np.zeros(n_req, dtype=np.int64),
    }, columns=list(REQUEST_COLUMNS))
    labels = np.array([kind.chunk_label(rule) for rule in (_CLONE, _CAT, _ONE_SHOT)],
                      dtype=object)
    kinds = as64(c_kind, dtype=np.int64)
    steps_read = as64(c_step, dtype=np.int64)
    n_chunks = len(c_step)
    na = pd.array([pd.NA] * n_chunks, dtype="Int64")
    chunks = pd.DataFrame({
        "step": steps_read,
        "request": as64(c_req, dtype=np.int64),
        "token_start": as64(c_start, dtype=np.int64),
        "token_end": as64(c_stop, dtype=np.int64),
        "buffer_row_start": as64(c_row, dtype=np.int64),
        "eager": as64(c_eager, dtype=bool),
        "action": labels[kinds].tolist(),
        "owned": kinds == 0,
        "read_at_step": pd.array(steps_read, dtype="Int64"),  # every chunk: in its step
        "overwritten_at_step": na,
        "overwritten_rows": np.zeros(n_chunks, dtype=np.int64),
        "widest_write": na.copy(),
        "widest_write_step": na.copy(),
    }, columns=list(CHUNK_COLUMNS))
    writes = pd.DataFrame({"step": pd.Series(col_step, dtype="int64"),
                           "region": pd.Series(w_region, dtype="int64"),
                           "rows_written": pd.Series(w_rows, dtype="int64")})
    return CloneLedger(step_columns, requests, chunks, writes, overwrites_frame(ViewTracker()))


def clone_steps_frame(columns: dict[str, np.ndarray], times: dict) -> pd.DataFrame:
    """``SimResult.steps`` from the ledger's columns and the time estimates."""
    frame = pd.DataFrame({name: columns[name] for name in STEP_COLUMNS
                          if not name.startswith("est_")})
    for name, values in times.items():
        frame[name] = values
    return frame[list(STEP_COLUMNS)]
