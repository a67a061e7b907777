"""Analysis of a simulation, next to the engine: per-chunk frames, per-request stories.

Plots and widgets draw from these; they do not re-derive what the engine decided. Everything
here reads ``SimResult.chunks`` (what the keep rule did with each chunk, when it was read, which
step overwrote it), which the one engine loop records while it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..._args import whole
from ..._text import format_range
from ..backends.source import default_source
from ..vllm_rules.prefix_cache import TOKEN_TASK_SKIP_REASON, reads_prefix_cache
from ..vllm_rules.runner import STALE_CACHE_SOURCE, keeps_pooling_state_on_preemption

if TYPE_CHECKING:
    from .result import SimResult


def _check_result(result: object, what: str) -> None:
    """``TypeError`` unless ``result`` is a ``SimResult`` (its fields: ``result.py`` imports
    this module); ``ValueError`` for a closed form."""
    if not all(hasattr(result, a) for a in ("config", "chunks", "steps", "mode")):
        raise TypeError(f"{what}: result must be a SimResult (tp.simulate(...)), got "
                        f"{type(result).__name__}")
    if result.mode == "closed_form":
        result._needs_steps(what)


def schedule_frame(result: SimResult) -> pd.DataFrame:
    """``result.chunks`` under the column names plots used first (kept for callers).

    Returns:
        DataFrame with ``step``, ``request``, ``start``, ``stop`` (prompt positions,
        half-open), ``buffer_start``, ``buffer_stop`` (rows of the step's output memory),
        ``kind`` (the keep rule's label: ``clone``, ``view``, ``view + cat``, ``prealloc``,
        ``offload``, ``gather``), ``read_step`` (the step whose cat, copy or host copy read a
        VIEW kept past its step; ``-1`` when the chunk was copied or read in its own step) and
        ``overwritten_step`` (first step that rewrote such a view's rows before that read;
        ``-1`` when none did).
    """
    _check_result(result, "schedule_frame")
    chunks = result.chunks
    read = chunks["read_at_step"].fillna(-1).astype("int64")
    kept_past_step = (~chunks["owned"]) & (read > chunks["step"])
    return pd.DataFrame({
        "step": chunks["step"], "request": chunks["request"],
        "start": chunks["token_start"], "stop": chunks["token_end"],
        "buffer_start": chunks["buffer_row_start"],
        "buffer_stop": chunks["buffer_row_start"] + chunks["token_end"] - chunks["token_start"],
        "kind": chunks["action"],
        "read_step": read.where(kept_past_step, -1),
        "overwritten_step": chunks["overwritten_at_step"].fillna(-1).astype("int64"),
    })


def overwritten_requests(result: SimResult) -> list[int]:
    """Requests with a kept view overwritten before it was read (rows of any kind; a request is
    corrupted when a delivered row is among them)."""
    hit = result.chunks["overwritten_at_step"].notna()
    return sorted(int(r) for r in np.unique(result.chunks.loc[hit, "request"]))


def lucky_requests(result: SimResult) -> dict[int, str]:
    """Requests delivered intact only because no step wrote far enough into the buffer.

    A view that pooling keeps of the persistent buffer past its own step is safe only while
    every later write stops short of its rows; a request whose views all survived that way is
    intact *by luck*: one more token scheduled in the next step and it is corrupted. Read from
    ``result.chunks`` (``widest_write``: the most rows a step wrote while the view was kept,
    the view tracker's record).

    Returns:
        request -> why, e.g. ``"step 2 wrote only rows 0–2"`` (inclusive rows; ``"nothing
        wrote the buffer before step 3 read it"`` when no step wrote it meanwhile), for every
        intact request with such a view; empty when none.
    """
    _check_result(result, "lucky_requests")
    kept = _kept_views(result.chunks)
    corrupted = set(result.corrupted)
    out: dict[int, str] = {}
    for r, mine in kept.groupby("request", sort=True):
        if int(r) in corrupted or (mine["overwritten_rows"] > 0).any():
            continue
        wrote = mine["widest_write"].dropna()
        if len(wrote):  # the widest write that reached one of its views
            i = wrote.astype("int64").idxmax()
            w, at = int(mine.at[i, "widest_write"]), int(mine.at[i, "widest_write_step"])
            out[int(r)] = f"step {at} wrote only row{'s' * (w > 1)} {format_range(0, w)}"
        else:
            out[int(r)] = (f"nothing wrote the buffer before step "
                           f"{int(mine['read_at_step'].max())} read it")
    return out


def _kept_views(chunks: pd.DataFrame) -> pd.DataFrame:
    """Chunks kept as views of the persistent output memory past their own step."""
    read = chunks["read_at_step"].fillna(-1).astype("int64")
    return chunks[(~chunks["owned"]) & (~chunks["eager"]) & (read > chunks["step"])]


def explain(result: SimResult) -> list[str]:
    """One sentence per request: how its chunks were kept, and what went wrong if anything.

    Returns:
        ``len(prompt_lens)`` strings, request order. Token ranges are inclusive, as in every
        figure (``0–7`` is tokens 0 to 7).
    """
    chunks = result.chunks
    corrupted = set(result.corrupted)
    cfg = result.config
    # a token task with prefix caching on reads nothing: say why where a hit was possible
    recomputed = (TOKEN_TASK_SKIP_REASON if cfg.enable_prefix_caching
                  and not reads_prefix_cache(cfg.task) else None)
    shared = _shares_a_block(result.prompt_token_ids, cfg.block_size)
    lucky = lucky_requests(result)
    lines = []
    aborts = {} if getattr(result, "aborts", None) is None else {
        int(a.request): a for a in result.aborts.itertuples() if a.outcome != "no-op"}
    for rec in result.requests.itertuples(index=False):
        mine = chunks[chunks["request"] == rec.request]
        abort = aborts.get(rec.request)
        if mine.empty:  # aborted before its first chunk
            lines.append(f"request {rec.request} ({rec.prompt_len} tokens): aborted at step "
                         f"{abort.step if abort is not None else '?'} before its first chunk "
                         "(the client hung up): nothing computed, kept or sent.")
            continue
        actions = ", ".join(dict.fromkeys(mine["action"]))
        first_step, last_step = int(mine["step"].min()), int(mine["step"].max())
        steps = (f"step {first_step}" if first_step == last_step
                 else f"steps {first_step} to {last_step}")
        head = (f"request {rec.request} ({rec.prompt_len} tokens, {len(mine)} chunk"
                f"{'s' if len(mine) != 1 else ''} in {steps}): {actions}")
        hits = mine[mine["overwritten_at_step"].notna()]
        if len(hits):
            first, last = hits.iloc[0], hits.iloc[-1]
            reader = ("the cat that joins its chunks" if int(last["token_end"]) < rec.prompt_len
                      else "its host copy")
            end = last if len(hits) > 1 else first
            span = f"tokens {format_range(int(first['token_start']), int(end['token_end']))}"
            verdict = (f"; {span} ({len(hits)} chunk{'s' if len(hits) > 1 else ''}) were kept "
                       f"as views and rewritten from step {int(first['overwritten_at_step'])} "
                       f"before {reader} read them")
            verdict += " → CORRUPTED" if rec.request in corrupted else " (no delivered row hit)"
        elif (not cfg.enable_chunked_prefill and cfg.pooling_kind.token_level
              and int(mine.iloc[-1]["token_start"]) > 0):
            # its last chunk (the one delivered) starts past token 0: the rows before it are
            # missing (a sequence kind's last row is the prompt's own: nothing is missing)
            last = mine.iloc[-1]
            verdict = (f"; chunked prefill is off, yet long_prefill_token_threshold split it: "
                       "pooling keeps no chunk without chunked prefill and hands each over, and "
                       "the engine drops an unfinished request's output (vLLM 0.33.0's AllPool "
                       "and finished_mask), so only its last chunk, tokens "
                       f"{format_range(int(last['token_start']), int(last['token_end']))}, is "
                       "delivered → CORRUPTED")
        elif int(getattr(rec, "duplicated_rows", 0)):
            verdict = ""  # said with its preemption below
        elif rec.request in lucky:
            views = _kept_views(mine)
            rows = ", ".join(format_range(int(c.buffer_row_start),
                                          int(c.buffer_row_start + c.token_end - c.token_start))
                             for c in views.itertuples(index=False))
            verdict = (f" → intact by luck ({lucky[rec.request]}; its view{'s' * (len(views) > 1)}"
                       f" of the reused buffer: rows {rows}, which a longer step would have "
                       "rewritten)")
        elif abort is not None and abort.outcome == "aborted":
            verdict = (f" → ABORTED at step {abort.step} (the client hung up): the runner "
                       f"freed its pooling state ({abort.freed_pool_bytes:,} B) in that step; "
                       "nothing delivered")
        else:
            verdict = " → corrupted" if rec.request in corrupted else " → intact"
            if abort is not None:  # output dropped
                verdict += (f"; the client hung up at step {abort.step}, while its last step "
                            "was in flight (async): computed and copied, never sent")
        restarts = int(getattr(rec, "num_preemptions", 0))
        cached = int(getattr(rec, "num_cached_tokens", 0))
        duplicated = int(getattr(rec, "duplicated_rows", 0))
        if restarts:
            restart = ("restarted after the blocks the prefix cache still held" if cached
                       else "restarted from token 0")
            times = f"{restarts} time{'s' if restarts > 1 else ''}"
            if duplicated:
                verdict += (
                    f"; preempted {times} (KV cache full) under vLLM's V1 model runner, which "
                    f"keeps the request's pooling state: its prefill {restart} and appended "
                    f"its recomputed chunks to the stale ones, held while it waited, so it "
                    f"was delivered with {int(rec.delivered_rows):,} rows for a "
                    f"{rec.prompt_len:,}-token prompt ({duplicated:,} duplicated rows) → "
                    f"CORRUPTED ({STALE_CACHE_SOURCE})")
            elif (keeps_pooling_state_on_preemption(cfg.model_runner)
                  and cfg.pooling_kind.token_level):
                verdict += (f"; preempted {times} (KV cache full) under vLLM's V1 model "
                            f"runner, which keeps its pooling state "
                            f"(GPUModelRunner._update_states), but nothing was cached yet: its "
                            f"prefill {restart}")
            else:
                verdict += (f"; preempted {times} (KV cache full): each time its pooling "
                            f"state was cleaned (Model Runner V2: PoolingRunner.remove_request)"
                            f" and its prefill {restart}, so its chunks include the "
                            "discarded attempts")
        if cached:
            verdict += (f"; {cached:,} of its prompt tokens came from the prefix cache (their "
                        "KV was already in cached blocks: not computed, not pooled again)")
        elif recomputed is not None and (restarts or rec.request in shared):
            verdict += f"; {recomputed}"

        verdict += _what_the_pooler_kept(result, rec)
        pinned = int(getattr(rec, "stranded_bytes", 0))
        if pinned > 0:
            verdict += (f"; its views stranded {pinned:,} bytes of other rows (kept alive "
                        "and unusable: a view keeps its whole step tensor in memory)")
        if result.looked_past:
            verdict += ("; simulated AS IF vLLM accepted the run, which it refuses "
                        "(SimResult.looked_past)")
        lines.append(head + verdict + ".")
    return lines


def _what_the_pooler_kept(result: SimResult, rec) -> str:
    """What the request's pooler and head made of its rows, where that is not every row as it
    is: JinaForRanking's marker rows, late chunking's chunk means, a Matryoshka slice."""
    cfg = result.config
    params = (result.pooling_params or [None] * (rec.request + 1))[rec.request]
    rows = int(rec.delivered_rows)
    held = f"while pooling held all {rec.prompt_len:,} rows until the prompt finished"
    if not cfg.pooling_kind.has_head:  # JINA_RANKING
        return (f"; JinaForRanking kept its {rows} marker rows (documents', then the query's), "
                f"projected to {cfg.output_width} in the model dtype, no head "
                f"({int(rec.output_bytes):,} B delivered), {held}")
    text = ""
    if params is not None and params.late_chunking_size is not None:
        text += (f"; late chunking at {params.late_chunking_size:,} tokens: the head mean-pooled "
                 f"its rows into {rows:,} chunk rows ({int(rec.output_bytes):,} B delivered), "
                 f"{held}")
    if params is not None and params.dimensions is not None:
        text += f"; dimensions={params.dimensions}: each delivered row is sliced to that width"
    return text


def _shares_a_block(token_ids, block_size: int) -> set[int]:
    """Requests whose first full block equals an earlier prompt's (a prefix-cache hit was
    possible)."""
    if token_ids is None:
        return set()
    seen, out = set(), set()
    for r, ids in enumerate(token_ids):
        if len(ids) < block_size:
            continue
        first = tuple(ids[:block_size])
        if first in seen:
            out.add(r)
        seen.add(first)
    return out


def prompt_grid(low: int, high: int, *, points_per_doubling: int = 2) -> np.ndarray:
    """Prompt lengths from ``low`` to ``high``, evenly spaced on a log axis (ints, unique)."""
    if not 1 <= low <= high:
        raise ValueError(f"need 1 <= low <= high, got low={low}, high={high}")
    n = max(2, round(float(np.log2(high / low)) * points_per_doubling) + 1)
    return np.unique(np.geomspace(low, high, n).round().astype(np.int64))



def corruption_table(result: SimResult, request: int, *, column: int = 0,
                     values: bool = False) -> pd.DataFrame:
    """What each row of a request's delivered output actually holds, in tokens.

    Every row of the default synthetic source identifies its token exactly, so each delivered
    row can be traced back to the (request, position) whose hidden state it really is: the
    table says "expected token 3, found token 16" where the raw numbers differ only in
    decimals.

    Args:
        result: a tensor-mode ``tp.simulate(...)`` result run with the default synthetic source,
            one row per position (ALL pooling) and no activation (``use_activation=False``).
        request: which request's output to inspect.
        column: which hidden-state column ``values`` prints.
        values: add the raw numbers (``expected_value`` / ``delivered_value``, column
            ``column``) and the old ``expected`` / ``holds`` labels (``"r0 t5"``).

    Returns:
        DataFrame, one row per position: ``position``, ``expected_token`` (the position's
        own token), ``found_request`` / ``found_token`` (whose row was delivered there; NA when
        the row is no token of the run), ``ok``, and ``reads``, the row in words
        (``"token 3 ✓"``, ``"expected token 3, found token 16"``, ``"… found request 1's token
        2"``); with ``values=True`` also the columns above.

    Raises:
        ValueError: an analytic result, another pooling or an activation, or a bad request.

    Example:
        >>> cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=8, policy="legacy",
        ...                    head_dtype=None, use_activation=False)
        >>> table = tp.sim.corruption_table(tp.simulate([20], cfg), 0)
        >>> table.loc[0, "reads"]
        'expected token 0, found token 16'
    """
    import torch  # imported on use: the frames above need no torch

    _check_result(result, "corruption_table")
    cfg = result.config
    if result.outputs is None:
        raise ValueError("corruption_table needs a tensor-mode result (mode='tensor')")
    kind = cfg.pooling_kind
    if not kind.token_level or kind.selects(cfg) or cfg.use_activation:
        raise ValueError("corruption_table needs one delivered row per prompt position (ALL "
                         "pooling, or STEP without a selection) and no activation "
                         "(use_activation=False)")
    whole("request", request, minimum=0, maximum=len(result.prompt_lens) - 1,
          why=f" (the result has {len(result.prompt_lens)} requests)")
    whole("column", column, minimum=0, maximum=cfg.width - 1,
          why=f" (the hidden states are {cfg.width} wide)")
    if not isinstance(values, bool):
        raise TypeError(f"values must be True or False, got {values!r}")
    source = default_source(cfg)  # the source simulate used for this config
    source.prepare(result.prompt_lens)

    def key(row: torch.Tensor) -> bytes:  # exact bit pattern of one row
        return row.contiguous().view(torch.uint8).numpy().tobytes()

    owner: dict[bytes, tuple[int, int]] = {}
    for r in range(len(result.prompt_lens)):
        ref = source.reference(r).to(cfg.output_dtype)  # [prompt_len, W]
        for p in range(ref.shape[0]):
            owner[key(ref[p])] = (r, p)
    expected = source.reference(request).to(cfg.output_dtype)  # [prompt_len, W]
    delivered = result.outputs[request]  # [prompt_len, W]
    rows = []
    for p in range(expected.shape[0]):
        found = owner.get(key(delivered[p]))
        ok = bool(torch.equal(expected[p], delivered[p]))
        if ok:
            reads = f"token {p} ✓"
        elif found is None:
            reads = f"expected token {p}, found no token of this run"
        elif found[0] == request:
            reads = f"expected token {p}, found token {found[1]}"
        else:
            reads = f"expected token {p}, found request {found[0]}'s token {found[1]}"
        row = {"position": p, "expected_token": p,
               "found_request": None if found is None else found[0],
               "found_token": None if found is None else found[1], "ok": ok, "reads": reads}
        if values:
            row |= {"expected": f"r{request} t{p}",
                    "holds": "?" if found is None else f"r{found[0]} t{found[1]}",
                    "expected_value": float(expected[p, column]),
                    "delivered_value": float(delivered[p, column])}
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.astype({"found_request": "Int64", "found_token": "Int64"})
