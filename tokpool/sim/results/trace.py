"""Chrome trace (Perfetto / chrome://tracing) of a simulation, on the ESTIMATED timeline.

Tracks: the engine (steps, forward, pooling, host copies), one track per request (its chunks
and what pooling did with each: clone, view, cat, prealloc/offload copy, gather), and counters
for pooling's device bytes and the host bytes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .result import SimResult

_NOMINAL_STEP_S = 1e-3  # used when there is no model preset (forward time unknown)


#: What pooling does with one chunk (keys of ``chunk_kind``), in words for the trace.
CHUNK_ACTIONS: dict[str, str] = {
    "gather": "gather last row",
    "offload": "offload copy to host",
    "clone": "clone chunk",
    "view": "keep view",
    "prealloc": "copy into prealloc buffer",
    "view + cat": "view + cat",
}


def chunk_kind(config, prompt_len: int, start: int, stop: int) -> str:
    """What pooling does with one chunk ``[start, stop)`` of a ``prompt_len``-token request:
    the pooling kind's label (the keep rule's, ``tokpool.pooler.keep_rule``; ``"gather"`` for
    sequence pooling).

    Returns:
        One of ``"gather"``, ``"offload"``, ``"clone"``, ``"view"``, ``"prealloc"``,
        ``"view + cat"`` (the final chunk, joined by a concat).
    """
    kind = config.pooling_kind
    return kind.chunk_label(kind.chunk_rule(config, finished=stop == prompt_len,
                                            first_chunk=start == 0))


def pooling_action(result: SimResult, request: int, start: int, stop: int) -> str:
    """What pooling does with one chunk, in words (for the trace)."""
    kind = chunk_kind(result.config, result.prompt_lens[request], start, stop)
    one_shot = start == 0 and stop == result.prompt_lens[request]
    words = CHUNK_ACTIONS[kind]
    return f"{words} (one shot)" if one_shot and kind in ("clone", "view") else words


def chrome_trace(result: SimResult) -> dict:
    """The trace as a JSON-ready dict (``{"traceEvents": [...]}``); timestamps in µs."""
    steps = result.steps
    nominal = bool(steps["est_forward_s"].isna().any())
    by_index = {s.index: s for s in result.schedule}
    events: list[dict] = [
        _meta("process_name", 0, 0, "engine (ESTIMATED times)"),
        _meta("thread_name", 0, 0, "steps"),
        _meta("thread_name", 0, 1, "forward"),
        _meta("thread_name", 0, 2, "pooling"),
        _meta("thread_name", 0, 3, "host copy (d2h)"),
        _meta("thread_name", 0, 4, "async race window"),
        _meta("process_name", 1, 0, "requests"),
    ]
    events += [_meta("thread_name", 1, r, f"request {r}") for r in range(len(result.prompt_lens))]
    t = 0.0
    ends: dict[int, float] = {}
    for row in steps.itertuples(index=False):
        forward = _NOMINAL_STEP_S if nominal and row.num_scheduled_tokens else row.est_forward_s
        forward = 0.0 if math.isnan(forward) else forward
        duration = (forward + row.est_pool_s + row.est_d2h_s if not result.config.async_scheduling
                    else max(forward + row.est_pool_s, row.est_d2h_s))
        args = {c: int(getattr(row, c)) for c in ("num_scheduled_tokens", "pool_bytes",
                                                   "pool_peak_bytes", "copy_bytes", "d2h_bytes")}
        events.append(_span(f"step {row.step}", 0, 0, t, duration, args))
        if forward:
            events.append(_span("forward", 0, 1, t, forward, {}))
        if row.copy_bytes:
            events.append(_span("pooling copies", 0, 2, t + forward, row.est_pool_s,
                                {"copy_bytes": int(row.copy_bytes)}))
        if row.d2h_bytes:
            start = t if result.config.async_scheduling else t + forward + row.est_pool_s
            args = {"d2h_bytes": int(row.d2h_bytes)}
            name = "device -> host"
            if result.config.async_scheduling and row.num_scheduled_tokens:
                # The race window: last step's copies run while this step's forward writes.
                name = "device -> host (races this step's forward)"
                args["overwrite_at"] = result.config.async_overwrite
                events.append(_span("race window", 0, 4, t, max(forward, row.est_d2h_s),
                                    {"copy_s": float(row.est_d2h_s), "forward_s": forward,
                                     "overwrite_at": result.config.async_overwrite}))
            events.append(_span(name, 0, 3, start, row.est_d2h_s, args))
        step = by_index.get(int(row.step))
        if step is not None and row.num_scheduled_tokens:
            for r, a, b in step.chunks:
                events.append(_span(f"chunk [{a}, {b})", 1, r, t, forward,
                                    {"tokens": b - a}))
                events.append(_span(pooling_action(result, r, a, b), 1, r, t + forward,
                                    max(row.est_pool_s, 1e-9), {}))
        events.append({"name": "bytes", "ph": "C", "ts": (t + duration) * 1e6, "pid": 0,
                       "args": {"pool_bytes": int(row.pool_bytes),
                                "host_bytes": int(row.host_bytes)}})
        t += duration
        ends[int(row.step)] = t
    for rec in result.requests.itertuples(index=False):
        events.append({"name": "corrupted" if rec.corrupted else "delivered", "ph": "i",
                       "s": "t", "pid": 1, "tid": int(rec.request),
                       "ts": ends.get(int(rec.delivered_step), t) * 1e6,
                       "args": {"output_bytes": int(rec.output_bytes)}})
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "tokpool": "step simulator; times are roofline ESTIMATES"
                       + ("; no model preset, forward drawn as a nominal 1 ms" if nominal else ""),
            "config": repr(result.config),
        },
    }


def _meta(kind: str, pid: int, tid: int, name: str) -> dict:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def _span(name: str, pid: int, tid: int, start_s: float, dur_s: float, args: dict) -> dict:
    return {"name": name, "ph": "X", "pid": pid, "tid": tid, "ts": start_s * 1e6,
            "dur": max(dur_s, 0.0) * 1e6, "args": args}


def write_chrome_trace(result: SimResult, path: str | Path) -> Path:
    """Write ``chrome_trace(result)`` as JSON; returns the path."""
    path = Path(path)
    path.write_text(json.dumps(chrome_trace(result)))
    return path
