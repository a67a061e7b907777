"""What a step's in-step peak is made of: the chunk cache, pooling's output, the head's tensors.

The ledger (``SimResult.steps``) gives each step's peak as one number, ``pool_peak_bytes``, and
the bytes alive at the step's *end* by category. The peak of a finishing step is a moment
inside it — the ``cat`` beside the cached chunks, or the head's float32 cast and activation
beside pooling's output — that the end-of-step categories never show (they are freed by the
host copy). ``peak_parts`` names that moment's tensors, for a step with one request in it:

- ``"chunk cache"``: the request's kept chunks (clones, a prealloc buffer, views pinning eager
  step tensors), alive while the ``cat`` is made;
- ``"pooled output"``: pooling's output for the request (the ``cat``, the prealloc buffer, a
  STEP selection), ``[rows, width]`` in the model dtype; ``"STEP selection"``: a STEP pooler's
  selected columns and tag rows while the full rows are still alive;
- the head's tensors, from ``vllm_rules.classifier.head_allocations`` (the rule the backends
  ask): ``"float32 cast"`` (``x.to(head_dtype)``), ``"classifier logits"``, ``"activation"``;
- ``"head output"``: a finished output made by the head and awaiting its host copy (a step
  whose peak is its start or its end, as under async scheduling).

Each candidate moment is summed from those rules and compared with the ledger's peak; the one
that equals it is returned, so the parts always add up to ``pool_peak_bytes`` to the byte. A
step with several requests (their tensors interleave) is not broken down: one part,
``"pooling (several requests, not broken down)"``, holds the whole peak.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..._text import format_bytes as _format_bytes
from ...pooler.keep_rule import keep_rule
from ..backends.closed_form import single_request
from ..vllm_rules.classifier import head_allocations, head_element_bytes

if TYPE_CHECKING:
    from .result import SimResult

__all__ = ["NOT_BROKEN_DOWN", "peak_parts", "single_request_peak_parts", "what_sets_the_peak"]

#: The one part of a peak ``peak_parts`` cannot break down (a step with several requests).
NOT_BROKEN_DOWN = "pooling (several requests, not broken down)"


def _head_names(config) -> list[str]:
    """Names of ``head_allocations``' tensors, in its order (cast, classifier, activation)."""
    names = []
    if config.head_casts:
        names.append(f"{str(config.head_dtype).removeprefix('torch.')} cast")
    if config.task in ("token_classify", "classify") and config.classifier == "pooler_head":
        names.append("classifier logits")
    if config.use_activation:
        names.append("activation")
    return names


def peak_parts(result: SimResult, step: int | None = None) -> dict[str, int]:
    """The tensors alive at the moment of a step's peak, by part, summing to its
    ``pool_peak_bytes`` to the byte.

    Args:
        result: a ``tp.simulate(...)`` result (``mode="tensor"`` or ``"analytic"``).
        step: the engine step (default: the step with the run's highest peak).

    Returns:
        ``{part: bytes}`` in stacking order (chunk cache, pooled output, then the head's
        tensors in the order the head makes them), parts of 0 bytes left out; ``{}`` for a
        peak of 0 bytes; ``{NOT_BROKEN_DOWN: peak}`` for a step with several requests.

    Raises:
        TypeError: not a result with a step ledger.
        ValueError: a step the run does not have.

    Example:
        >>> r = tp.simulate([32_768], tp.SimConfig.for_model("Qwen3-Embedding-8B"))
        >>> {part: n // 2**20 for part, n in tp.sim.peak_parts(r).items()}  # MiB
        {'pooled output': 256, 'float32 cast': 512, 'activation': 512}
    """
    steps = getattr(result, "steps", None)
    if steps is None or not hasattr(result, "requests"):
        raise TypeError(f"result must be a tp.simulate(...) result in tensor or analytic mode, "
                        f"got {type(result).__name__}")
    if len(steps) == 0:
        return {}
    if step is None:
        step = int(steps["step"].iloc[int(steps["pool_peak_bytes"].to_numpy().argmax())])
    rows = steps.index[steps["step"] == step]
    if len(rows) == 0:
        raise ValueError(f"step {step!r}: the run has steps {int(steps['step'].min())} to "
                         f"{int(steps['step'].max())}")
    i = steps.index.get_loc(rows[0])
    row = steps.iloc[i]
    peak = int(row["pool_peak_bytes"])
    if peak == 0:
        return {}
    before = steps.iloc[i - 1] if i > 0 else None
    start_cache = int(before["pool_cache_bytes"]) if before is not None else 0
    start_all = int(before["pool_bytes"]) if before is not None else 0
    end = {"chunk cache": int(row["pool_cache_bytes"]),
           "pooled output": int(row["pool_output_bytes"]),
           "head output": int(row["pool_head_bytes"])}
    candidates: list[dict[str, int]] = []
    finishing = result.requests[result.requests["finish_step"] == step]
    if int(row["num_requests"]) <= 1 and len(finishing) == 1 and start_all == start_cache:
        cfg = result.config
        request = finishing.iloc[0]
        kind = cfg.pooling_kind
        out_rows, width = int(request["delivered_rows"]), kind.output_width(cfg)
        pooled = out_rows * width * cfg.dtype_size  # [rows, width]: pooling's output
        full = out_rows * cfg.width * cfg.dtype_size  # [rows, W]: before a STEP selection
        size = head_element_bytes(cfg)
        head = dict(zip(_head_names(cfg), (n * w * size for n, w in
                                            head_allocations(cfg, out_rows, width)),
                        strict=True))
        candidates += [
            {"pooled output": pooled, **head},  # the head's last tensor is made
            head,  # ... beside a view of the step's hidden states (a one-shot view: 0 owned)
            {"chunk cache": start_cache, "pooled output": full},  # the cat beside the cache
            {"chunk cache": start_cache},  # what the step started with
            {"pooled output": full, kind.selection_label: int(  # STEP: columns, tag rows
                kind.selection_peak(cfg, int(request["prompt_len"]), out_rows,
                                    cfg.dtype_size))},
        ]
    elif len(finishing) == 0:  # the cache grows: the peak is the start or the end
        candidates.append(end)
        if before is not None:
            candidates.append({"chunk cache": start_cache,
                               "pooled output": int(before["pool_output_bytes"]),
                               "head output": int(before["pool_head_bytes"])})
    else:
        return {NOT_BROKEN_DOWN: peak}
    candidates.append(end)
    for parts in candidates:
        if sum(parts.values()) == peak:
            return {name: n for name, n in parts.items() if n}
    return {NOT_BROKEN_DOWN: peak}


def what_sets_the_peak(result: SimResult) -> str:
    """The run's highest peak in words: its step, its parts, and what sets it.

    Example:
        >>> r = tp.simulate([32_768], tp.SimConfig.for_model("Qwen3-Embedding-8B"))
        >>> print(tp.sim.what_sets_the_peak(r))  # doctest: +NORMALIZE_WHITESPACE
        peak 1.25 GiB in step 3 = pooled output 256 MiB + float32 cast 512 MiB + activation
        512 MiB: the head sets it, not the chunk cache
    """
    steps = result.steps
    step = int(steps["step"].iloc[int(steps["pool_peak_bytes"].to_numpy().argmax())]) \
        if len(steps) else None
    return peak_words(peak_parts(result), step=step)


def format_bytes(n: float) -> str:
    """Bytes as the figures write them (three significant digits: ``1.25 GiB``)."""
    return _format_bytes(n, significant=3)


def peak_words(parts: dict[str, int], *, step: int | None = None) -> str:
    """``peak_parts``' answer in words: the total, the parts, and what sets the peak."""
    if not parts:
        return "pooling holds nothing on the device"
    total = sum(parts.values())
    sum_text = " + ".join(f"{name} {format_bytes(n)}" for name, n in parts.items())
    head = [name for name in parts if name.endswith(" cast") or name in
            ("classifier logits", "activation")]
    if head:
        why = "the head sets it, not the chunk cache"
    elif "chunk cache" in parts and "pooled output" in parts:
        why = "the cat beside the cached chunks sets it"
    elif NOT_BROKEN_DOWN in parts:
        why = "several requests share the step"
    else:
        why = f"the {next(iter(parts))} sets it"
    where = f" in step {step}" if step is not None else ""
    return f"peak {format_bytes(total)}{where} = {sum_text}: {why}"


def single_request_peak_parts(config, prompt_len: int) -> dict[str, int] | None:
    """``peak_parts`` of one ``prompt_len``-token request without running its steps: the
    closed form's peak (``backends.closed_form.single_request``) split into the same parts,
    for a token-level pooler without a selection (ALL: ``token_embed``); ``None`` where it
    cannot say (a STEP selection, LAST, a split the moments do not match), so the caller
    runs ``tp.simulate`` and asks ``peak_parts``. The tests check both give the same parts.

    Example:
        >>> cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B", max_model_len=1 << 20, as_if=True)
        >>> parts = single_request_peak_parts(cfg, 1 << 20)  # 64 steps, none of them run
        >>> {part: n // 2**30 for part, n in parts.items()}  # GiB
        {'pooled output': 8, 'float32 cast': 16, 'activation': 16}
    """
    kind = config.pooling_kind
    if not kind.token_level or kind.selects(config):
        return None
    T = int(prompt_len)
    peak = int(single_request(np.array([T]), config)["peak_pooling_bytes"][0])
    if peak == 0:
        return {}
    C = config.max_num_batched_tokens if config.enable_chunked_prefill else T
    last = T - (-(-T // C) - 1) * C  # the last chunk's tokens
    row = config.width * config.dtype_size
    size = head_element_bytes(config)
    head = dict(zip(_head_names(config), (n * w * size for n, w in
                                          head_allocations(config, T, config.width)),
                    strict=True))
    buffered = T > C and keep_rule(config.policy, chunked=config.enable_chunked_prefill,
                                   async_scheduling=config.async_scheduling, finished=False,
                                   first_chunk=True).keep == "buffer"
    candidates = [{"pooled output": T * row, **head}, head,
                  {"chunk cache": (T - last) * row, "pooled output": T * row}]
    if buffered and not head:  # a prealloc buffer's peak is first reached at the first chunk
        candidates.insert(0, {"chunk cache": T * row})
    for parts in candidates:
        if sum(parts.values()) == peak:
            return {name: n for name, n in parts.items() if n}
    return None
