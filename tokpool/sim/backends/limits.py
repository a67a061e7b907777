"""Bounds checked before a simulation starts: bytes that int64 can hold, and work that ends.

- ``check_byte_range``: the step tables, sweeps and closed forms count bytes in int64 (numpy,
  pandas). A count above ``INT64_MAX`` would wrap to a wrong number, so a run whose byte counts
  can reach it is refused first, with the bound and the inputs that set it.
- ``check_work``: the counting and tensor engines run one Python iteration per engine step and
  keep a record per step and per request. A run whose step count is bounded below by
  ``ceil(tokens / budget)`` plus its requests above ``max_engine_records()`` (default
  ``DEFAULT_MAX_RECORDS``, about 20 s of counting; ``TOKPOOL_MAX_STEPS`` changes it, ``off``
  removes it) is refused with the number and the cheaper mode.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
from collections.abc import Iterator, Sequence

import numpy as np

__all__ = ["DEFAULT_MAX_RECORDS", "INT64_MAX", "MAX_STEPS_ENV", "check_byte_range",
           "check_work", "engine_record_limit", "max_engine_records"]

INT64_MAX = 2**63 - 1
#: Environment variable that bounds the engine steps + requests one run may take.
MAX_STEPS_ENV = "TOKPOOL_MAX_STEPS"
#: Default bound: the counting engine runs ~50k steps/s, so about 20 s.
DEFAULT_MAX_RECORDS = 1_000_000
_OVERRIDE: contextvars.ContextVar[int | None] = contextvars.ContextVar("tokpool_max_records",
                                                                      default=None)


@contextlib.contextmanager
def engine_record_limit(limit: int) -> Iterator[None]:
    """Within the block, ``max_engine_records()`` is ``limit`` (the CLI's ``--max-steps``)."""
    token = _OVERRIDE.set(limit)
    try:
        yield
    finally:
        _OVERRIDE.reset(token)


def max_engine_records() -> int | None:
    """The bound on steps + requests per run (``TOKPOOL_MAX_STEPS``; ``None``: no bound).

    Raises:
        ValueError: a ``TOKPOOL_MAX_STEPS`` that is not a positive integer or ``off``.
    """
    if _OVERRIDE.get() is not None:
        return _OVERRIDE.get()
    text = os.environ.get(MAX_STEPS_ENV, "").strip().replace("_", "")
    if not text:
        return DEFAULT_MAX_RECORDS
    if text.lower() in ("off", "none", "unlimited"):
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{MAX_STEPS_ENV}={os.environ[MAX_STEPS_ENV]!r} is not a positive "
                         "integer or 'off'")
    return int(text)


def check_byte_range(prompt_lens: Sequence[int], config, *, what: str = "this run",
                     per_prompt: bool = False) -> None:
    """Refuse inputs whose byte counts could pass ``INT64_MAX`` (they would wrap).

    Every pooled byte count of a run is at most 8 x tokens x width x the largest element size
    (the hidden dtype's or the head's): the cat and the kept chunks (2T rows), the selection,
    the head's cast and activation; totals add every request's tokens.

    Args:
        prompt_lens: the prompt lengths.
        config: the ``SimConfig``.
        what: the run, for the message.
        per_prompt: one request per prompt (a sweep): the longest prompt bounds it.

    Raises:
        ValueError: the bound, the tokens and width that set it, and what to change.
    """
    total = _exact_sum(prompt_lens)
    tokens = int(max(prompt_lens)) if per_prompt else total
    head = config.output_dtype.itemsize if config.head_casts else 0
    element = max(config.dtype_size, head)
    bound = 8 * tokens * config.width * element + config.buffer_bytes
    if bound > INT64_MAX:
        raise ValueError(
            f"{what}: {tokens:,} tokens x width {config.width:,} x {element} B can give byte "
            f"counts up to {bound:.3g} B, beyond int64 ({INT64_MAX:.3g}): tokpool refuses "
            "rather than report a wrapped number. Use shorter prompts or a smaller width"
        )
    # KV bytes in use: whole blocks, at most every request's tokens rounded up to blocks in
    # every KV-cache group
    block = config.block_size
    blocks = (total // block + len(prompt_lens) + 1) * len(config.kv_group_windows)
    if config.kv_cache_blocks is not None:
        blocks = min(blocks, config.kv_cache_blocks)
    kv = blocks * config.kv_block_bytes
    if kv > INT64_MAX:
        raise ValueError(
            f"{what}: KV-cache bytes can reach {kv:.3g} B ({blocks:,} blocks of block_size="
            f"{block:,} tokens, {config.kv_block_bytes:,} B each), beyond int64 "
            f"({INT64_MAX:.3g}): tokpool refuses rather than report a wrapped number. Use "
            "vLLM's block sizes (--block-size 16, the default, up to a few hundred)"
        )


def check_work(prompt_lens: Sequence[int], config, *, mode: str, runs: int = 1,
               per_prompt: bool = False, scheduler: str = "tokpool") -> None:
    """Refuse a run the step engines cannot finish in reasonable time and memory.

    Args:
        prompt_lens: the prompt lengths.
        config: the ``SimConfig`` (its token budget bounds the steps below).
        mode: ``"tensor"`` or ``"analytic"`` (``"closed_form"`` takes no steps: no bound).
        runs: simulations per prompt list (a sweep: policies x async settings).
        per_prompt: one simulation per prompt (a sweep).
        scheduler: ``"vllm"``: vLLM's own scheduler also hashes and allocates every KV block
            in Python, about as fast as the counting engine runs steps, so its blocks count
            as records too.

    Raises:
        ValueError: the estimated steps and requests, the bound, and the cheaper mode.
    """
    limit = max_engine_records()
    if mode == "closed_form" or limit is None:
        return
    budget = config.max_num_batched_tokens
    if per_prompt:
        steps = sum(-(-n // budget) for n in prompt_lens)
    else:
        steps = math.ceil(sum(prompt_lens) / budget)
    records = (steps + len(prompt_lens)) * runs
    blocks = (sum(-(-int(n) // config.block_size) for n in prompt_lens)
              if scheduler == "vllm" else 0)
    if records + blocks <= limit:
        return
    n = len(prompt_lens)
    if blocks and records <= limit:
        raise ValueError(
            f"scheduler='vllm' on {n:,} prompt{'s' if n > 1 else ''} ({sum(prompt_lens):,} "
            f"tokens) makes {blocks:,} KV blocks of {config.block_size} tokens, each hashed and "
            f"allocated in Python: {records + blocks:,} records, above the bound {limit:,} "
            f"({MAX_STEPS_ENV}); use scheduler='tokpool' (the same schedule), or set "
            f"{MAX_STEPS_ENV} higher (or 'off')"
        )
    cheaper = ("mode='closed_form' (one request per prompt, no step table: "
               "tp.sweep(..., mode='closed_form'))" if per_prompt or n == 1 else
               "fewer or shorter prompts")
    raise ValueError(
        f"{mode} simulation of {n:,} prompt{'s' if n > 1 else ''} ({sum(prompt_lens):,} "
        f"tokens{f', {runs} runs each' if runs > 1 else ''}) at a budget of {budget:,} tokens "
        f"per step is at least {records:,} engine steps + requests, above the bound {limit:,} "
        f"({MAX_STEPS_ENV}, or --max-steps on the command line); use {cheaper}, raise "
        f"max_num_batched_tokens, or set {MAX_STEPS_ENV} higher (or 'off')"
    )


def _exact_sum(prompt_lens) -> int:
    """The exact sum as a Python int; a numpy array is summed in int64 when it cannot wrap
    (sweeps pass hundreds of thousands of lengths)."""
    if isinstance(prompt_lens, np.ndarray) and prompt_lens.size and (
            int(prompt_lens.max()) < (1 << 62) // prompt_lens.size):
        return int(prompt_lens.sum(dtype=np.int64))
    return sum(int(n) for n in prompt_lens)

