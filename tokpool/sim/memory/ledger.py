"""The memory ledger's rows and columns, shared by tensor and analytic mode.

Bytes are *pooling-owned* bytes: storages that pooling, STEP selection and the head create, plus
the owned chunks and buffers pooling keeps between steps. Views of the persistent hidden-state
buffer own nothing and count 0; the buffer itself is counted once, in
``SimResult.peak_device_bytes``. Storages are counted once however many tensors view them.

What the head counts: only the tensors it names — the cast's output (``x.to(head_dtype)``) and
the activation's output (normalised rows / softmax / sigmoid). Temporaries inside an op (the
row norms inside ``F.normalize``, softmax workspaces), index tensors (STEP's row indices, the
cursor's token indices) and the oracle's copies are not counted.

When bytes are alive, per engine iteration: (1) the step writes the buffer; (2) pooling runs
(clones, cat, prealloc/offload copies, STEP selection) — the AllPool output of every finished
request stays alive until the head is done; (3) the head runs request by request (the cast stays
alive while the activation is computed); pooling's pre-head outputs are freed after the head;
(4) host copies: sync copies and frees this step's outputs; async first copies and frees the
previous step's (alive through this step's pooling) and keeps this step's for the next one.

Consequences for one request of T tokens (chunk C, width W, s bytes, n = ceil(T/C),
L = T − (n−1)·C, multi-chunk), matching DESIGN.md:

- clone: peak (2T − L)·W·s (the cat while T − L cached rows are alive); copies (2T − L)·W·s.
- prealloc: peak T·W·s from the first chunk; copies T·W·s.
- offload: 0 device bytes; host bytes T·W·s from the first chunk (the whole host buffer).
- legacy: peak T·W·s (the cat), and corrupted (earlier chunks are views the next step rewrote).
- a float32 head on bf16 (no activation): T·W·4 more once the cat/buffer is the only other
  thing alive, so clone peaks at max((2T − L)·W·s, T·W·s + T·W·4), prealloc at T·W·(s + 4);
  with the activation too, another T·W·4 (cast and activation outputs coexist).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import pandas as pd

#: ``SimResult.steps`` columns, one line each (bytes are ints; times are ESTIMATES in seconds).
STEP_COLUMNS: dict[str, str] = {
    "step": "engine iteration index (a collect-only iteration under async has 0 tokens)",
    "num_scheduled_tokens": "tokens computed in the step (rows written to the buffer)",
    "num_requests": "requests with a chunk in the step",
    "num_finished": "requests whose last prompt token is computed in the step",
    "pool_bytes": "device bytes owned by pooling alive at the end of the step, after its host "
                  "copies (caches, prealloc buffers, and under async the outputs awaiting copy)",
    "pool_peak_bytes": "max device bytes owned by pooling at any moment of the step "
                       "(the start, and right after every allocation: clone, cat, select, head)",
    "pool_cache_bytes": "part of pool_bytes kept by PoolingStates (cloned chunks, prealloc "
                        "buffers)",
    "pool_output_bytes": "part of pool_bytes that is pooling's own output awaiting the host "
                         "copy (when the head allocates nothing)",
    "pool_head_bytes": "part of pool_bytes created by the head (cast / activation) awaiting "
                       "the host copy",
    "host_bytes": "host bytes alive at the end of the step: offload buffers, outputs on the "
                  "host awaiting delivery, and every delivered output so far",
    "copy_bytes": "device bytes written by pooling in the step: clones, cat, prealloc chunk "
                  "copies, STEP selections, LAST gathers, head cast/activation outputs",
    "d2h_bytes": "bytes copied device -> host in the step: delivered outputs (under async, "
                 "the previous step's) and offload's per-chunk copies",
    "stranded_bytes": "part of pool_bytes that is stranded: rows of earlier EAGER steps' "
                      "output tensors that no kept view covers but that views keep alive "
                      "(a view pins its whole step tensor)",
    "kv_bytes": "KV-cache bytes held during the step, per rank: the blocks of the running "
                "requests in every KV-cache group, finishing ones included (× the pool block's "
                "bytes, SimConfig.kv_block_bytes; 0 without a model preset)",
    "num_cached_tokens": "prompt tokens of the requests admitted in the step whose KV came "
                         "from the prefix cache: neither computed nor pooled",
    "est_forward_s": "ESTIMATE: roofline forward time of the step (NaN without a model preset)",
    "est_pool_s": "ESTIMATE: 2 * copy_bytes / HBM bandwidth",
    "est_d2h_s": "ESTIMATE: d2h_bytes / PCIe bandwidth",
    "est_step_s": "ESTIMATE: forward + pool + d2h (sync) or max(forward + pool, d2h) (async)",
}

#: ``SimResult.requests`` columns.
REQUEST_COLUMNS: dict[str, str] = {
    "request": "index in prompt_lens",
    "prompt_len": "prompt tokens",
    "first_step": "step of its first chunk",
    "finish_step": "step of its last chunk (pooling hands over its output)",
    "delivered_step": "step whose host copy delivered it (finish_step + 1 under async)",
    "num_chunks": "steps it was scheduled in",
    "output_bytes": "host bytes of its delivered output",
    "corrupted": "the delivered output differs from the reference",
    "stranded_bytes": "most bytes its kept views pinned at once beyond its own rows (other "
                      "requests' rows of an eager step's output tensor)",
    "num_preemptions": "times the KV cache preempted it (its prefill restarted; its pooling "
                       "state cleaned by Model Runner V2, KEPT by vLLM's V1 runner)",
    "num_cached_tokens": "prompt tokens it did not compute because their KV came from the "
                         "prefix cache (over all its admissions; 0 for token tasks, which vLLM "
                         "recomputes in full)",
    "delivered_rows": "rows of its delivered output (its prompt's, or its step-tag rows; more "
                      "when stale rows were kept)",
    "duplicated_rows": "rows delivered twice: chunks a V1 runner kept across a preemption, "
                       "to which the resumed prefill appended its recomputed chunks "
                       "(GPUModelRunner._update_states; the output is corrupted)",
}


@dataclass
class StepRecord:
    """One row of ``SimResult.steps`` before time estimates (see ``STEP_COLUMNS``)."""

    step: int
    num_scheduled_tokens: int
    num_requests: int
    num_finished: int
    pool_bytes: int
    pool_peak_bytes: int
    pool_cache_bytes: int
    pool_output_bytes: int
    pool_head_bytes: int
    host_bytes: int
    copy_bytes: int
    d2h_bytes: int
    stranded_bytes: int
    kv_bytes: int
    context_sum: int  # Σ (position + 1) over the step's tokens, for the time model
    num_cached_tokens: int = 0


@dataclass
class RequestRecord:
    """One row of ``SimResult.requests`` (see ``REQUEST_COLUMNS``)."""

    request: int
    prompt_len: int
    first_step: int = -1
    finish_step: int = -1
    delivered_step: int = -1
    num_chunks: int = 0
    output_bytes: int = 0
    corrupted: bool = False
    stranded_bytes: int = 0
    num_preemptions: int = 0
    delivered_rows: int = 0
    duplicated_rows: int = 0
    num_cached_tokens: int = 0


BYTE_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in fields(StepRecord) if f.name.endswith("_bytes")
)


def steps_frame(records: list[StepRecord], times: dict) -> pd.DataFrame:
    """``SimResult.steps``: records plus time estimates, in ``STEP_COLUMNS`` order."""
    frame = pd.DataFrame([vars(r) for r in records], columns=[f.name for f in fields(StepRecord)])
    for name, values in times.items():
        frame[name] = values
    return frame[list(STEP_COLUMNS)].astype(
        {c: "int64" for c in STEP_COLUMNS if not c.startswith("est_")}
    )


def requests_frame(records: list[RequestRecord]) -> pd.DataFrame:
    """``SimResult.requests`` in ``REQUEST_COLUMNS`` order."""
    frame = pd.DataFrame([vars(r) for r in records], columns=list(REQUEST_COLUMNS))
    return frame.astype({c: "int64" for c in REQUEST_COLUMNS if c != "corrupted"} |
                        {"corrupted": bool})
