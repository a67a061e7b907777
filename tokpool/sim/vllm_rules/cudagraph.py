"""vLLM 0.33.0's CUDA-graph rules: which steps replay a graph and which run eagerly.

A graph step writes graph-pool memory a later replay rewrites; an eager step writes fresh
memory. The capture sizes (``default_max_cudagraph_capture_size``, ``cudagraph_capture_sizes``,
``resolve_cudagraph_sizes``), the dispatch of a step to a size (``graph_size_for``,
``padded_step_sizes``) and the mode a pooling model runs with (``pooling_cudagraph_mode``).
Each function names the vLLM file and function it restates; ``docs/ENGINE_MODEL.md`` explains
them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from .devices import Hardware, resolve_device
from .sizes import positive_int as _positive_int

__all__ = [
    "BLACKWELL_MAX_CUDAGRAPH_CAPTURE_SIZE",
    "DEFAULT_MAX_CUDAGRAPH_CAPTURE_SIZE",
    "cudagraph_capture_sizes",
    "default_max_cudagraph_capture_size",
    "graph_size_for",
    "padded_step_sizes",
    "pooling_cudagraph_mode",
    "resolve_cudagraph_sizes",
]

#: ``max_cudagraph_capture_size`` when none is given (vllm/config/vllm.py,
#: ``VllmConfig._set_cudagraph_sizes``): 512, or 1024 on data-centre Blackwell (sm_10x).
DEFAULT_MAX_CUDAGRAPH_CAPTURE_SIZE = 512
BLACKWELL_MAX_CUDAGRAPH_CAPTURE_SIZE = 1024

CudaGraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]


def default_max_cudagraph_capture_size(
    gpu: str | Hardware,
    *,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    decode_query_len: int = 1,
) -> int:
    """The largest step (in tokens) that replays a CUDA graph when the user sets no size.

    vllm/config/vllm.py, ``VllmConfig._set_cudagraph_sizes``: the platform ceiling is 1024 on
    data-centre Blackwell (capability 10.x) and 512 elsewhere; it is capped at
    ``max_num_seqs * decode_query_len * 2`` and then at ``max_num_batched_tokens``.

    Args:
        gpu: device preset name or ``DeviceFacts``.
        max_num_seqs: the scheduler's ``max_num_seqs`` (None: no cap from it).
        max_num_batched_tokens: the token budget (None: no cap from it).
        decode_query_len: 1 without speculative decoding.

    Returns:
        The capture-size ceiling in tokens.
    """
    device = resolve_device(gpu)
    size = (
        BLACKWELL_MAX_CUDAGRAPH_CAPTURE_SIZE
        if device.is_data_center_blackwell
        else DEFAULT_MAX_CUDAGRAPH_CAPTURE_SIZE
    )
    if max_num_seqs is not None:
        size = min(_positive_int("max_num_seqs", max_num_seqs) * decode_query_len * 2, size)
    if max_num_batched_tokens is not None:
        size = min(_positive_int("max_num_batched_tokens", max_num_batched_tokens), size)
    return size


#: The largest ``max_capture_size`` whose sizes are listed (65,536 graphs): beyond it the
#: list alone would take seconds to build and gigabytes to hold.
MAX_CAPTURE_SIZE = 1 << 20


def cudagraph_capture_sizes(max_capture_size: int) -> tuple[int, ...]:
    """vLLM's capture-size pattern up to ``max_capture_size`` (ascending).

    ``1, 2, 4``, then multiples of 8 below 256, then multiples of 16 from 256 to the maximum
    (vllm/config/vllm.py, ``VllmConfig._set_cudagraph_sizes``; documented on
    ``CompilationConfig.max_cudagraph_capture_size`` in vllm/config/compilation.py). Sizes
    above the maximum are dropped; 0 gives ``()`` (no graphs). ``resolve_cudagraph_sizes`` adds
    the budget and decode sizes vLLM appends.

    Example:
        >>> cudagraph_capture_sizes(20)
        (1, 2, 4, 8, 16)
    """
    _positive_int("max_capture_size", max_capture_size, minimum=0)
    if max_capture_size > MAX_CAPTURE_SIZE:
        raise ValueError(
            f"max_capture_size={max_capture_size:,}: vLLM would capture a CUDA graph every 16 "
            f"tokens up to it ({max_capture_size // 16:,} graphs); tokpool lists sizes up to "
            f"{MAX_CAPTURE_SIZE:,} tokens (vLLM's default is {DEFAULT_MAX_CUDAGRAPH_CAPTURE_SIZE}"
            "). Set a smaller --max-cudagraph-capture-size, or enforce_eager=True")
    sizes = [s for s in (1, 2, 4) if s <= max_capture_size]
    sizes += list(range(8, min(max_capture_size + 1, 256), 8))
    sizes += list(range(256, max_capture_size + 1, 16))
    return tuple(sizes)


def resolve_cudagraph_sizes(
    gpu: str | Hardware,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    enforce_eager: bool = False,
    max_cudagraph_capture_size: int | None = None,
    cudagraph_capture_sizes_override: Sequence[int] | None = None,
) -> tuple[int, tuple[int, ...]]:
    """The final ``(max_cudagraph_capture_size, cudagraph_capture_sizes)`` of an engine.

    vllm/config/vllm.py, ``VllmConfig._set_cudagraph_sizes`` without speculative decoding and in
    the default ("balanced") performance mode:

    - ``enforce_eager`` → ``(0, ())``: every step runs eagerly;
    - explicit sizes: deduplicated, those ``<= max_num_batched_tokens`` kept, sorted; an explicit
      maximum that disagrees with them raises ``ValueError`` (as vLLM does);
    - otherwise the pattern of ``cudagraph_capture_sizes`` up to the ceiling (default: see
      ``default_max_cudagraph_capture_size``; an explicit maximum is capped at the budget), plus
      ``max_num_batched_tokens`` when it fits, plus ``max_num_seqs`` (the widest decode batch)
      when the ceiling was defaulted and it fits; the final maximum is the largest size.

    Returns:
        ``(max_capture_size, sizes)``.

    Raises:
        ValueError: non-positive sizes, or an explicit maximum inconsistent with explicit sizes.
    """
    _positive_int("max_num_seqs", max_num_seqs)
    _positive_int("max_num_batched_tokens", max_num_batched_tokens)
    if enforce_eager:
        return 0, ()
    decode_sizes: list[int] = []
    ceiling = max_cudagraph_capture_size
    if ceiling is None:
        ceiling = default_max_cudagraph_capture_size(gpu, max_num_seqs=max_num_seqs)
        if max_num_seqs <= ceiling:
            decode_sizes = [max_num_seqs]
    else:
        _positive_int("max_cudagraph_capture_size", ceiling)
    ceiling = min(max_num_batched_tokens, ceiling)
    if cudagraph_capture_sizes_override is not None:
        given = [_positive_int("capture size", int(s)) for s in cudagraph_capture_sizes_override]
        if not given:
            raise ValueError("cudagraph_capture_sizes must hold at least one size")
        sizes = sorted({s for s in given if s <= max_num_batched_tokens})
    else:
        sizes = list(cudagraph_capture_sizes(ceiling))
        if max_num_batched_tokens <= ceiling and max_num_batched_tokens not in sizes:
            sizes.append(max_num_batched_tokens)
        sizes += [s for s in decode_sizes if s <= max_num_batched_tokens]
        sizes = sorted(set(sizes))
    final = sizes[-1] if sizes else 0
    if (
        max_cudagraph_capture_size is not None
        and max_cudagraph_capture_size != final
        and cudagraph_capture_sizes_override is not None
    ):
        raise ValueError(
            f"max_cudagraph_capture_size={max_cudagraph_capture_size} disagrees with the largest "
            f"of cudagraph_capture_sizes ({final}); give one of them or make them agree"
        )
    return final, tuple(sizes)


def graph_size_for(
    num_tokens: int, sizes: Sequence[int], *, enforce_eager: bool = False
) -> int | None:
    """The capture size a step of ``num_tokens`` is padded to, or ``None`` if it runs eagerly.

    vllm/v1/worker/gpu/cudagraph_utils.py, ``CudaGraphManager._init_candidates`` and
    ``dispatch``: a step replays the graph of the smallest capture size ``>= num_tokens``; a
    step larger than every capture size (or any step under ``enforce_eager``) runs eagerly
    (``CUDAGraphMode.NONE``). A graph step's hidden states are ``[padded, hidden]`` rows in
    graph-pool memory that later replays rewrite; an eager step's are a fresh
    ``[num_tokens, hidden]`` allocation that nothing rewrites while a view keeps it alive.

    Args:
        num_tokens: tokens scheduled in the step (>= 1).
        sizes: the engine's capture sizes (``resolve_cudagraph_sizes``), any order.
        enforce_eager: no graphs at all.

    Example:
        >>> sizes = cudagraph_capture_sizes(512)
        >>> graph_size_for(300, sizes), graph_size_for(513, sizes)
        (304, None)
    """
    _positive_int("num_tokens", num_tokens)
    if enforce_eager:
        return None
    padded = int(padded_step_sizes(num_tokens, sorted(sizes)))
    return padded or None


def padded_step_sizes(num_tokens, ascending_sizes: Sequence[int]):
    """``graph_size_for`` over an int or int array: the capture size each step pads to, 0
    where it runs eagerly (``ascending_sizes``: the capture sizes, sorted; empty: all eager).
    The step-memory rule (``step_memory.step_memory``) reads vLLM's dispatch through this."""
    table = np.asarray((*ascending_sizes, 0), dtype=np.int64)  # the 0 answers "past the last"
    return table[np.searchsorted(table[:-1], np.asarray(num_tokens, dtype=np.int64), "left")]


#: The CUDA-graph mode each optimization level asks for (vllm/config/vllm.py,
#: ``OPTIMIZATION_LEVEL_00`` .. ``OPTIMIZATION_LEVEL_03``; ``-O2`` is the default).
OPTIMIZATION_LEVEL_CUDAGRAPH_MODE: dict[int, str] = {
    0: "NONE", 1: "PIECEWISE", 2: "FULL_AND_PIECEWISE", 3: "FULL_AND_PIECEWISE"}


def pooling_cudagraph_mode(
    requested: CudaGraphMode = "FULL_AND_PIECEWISE", *, enforce_eager: bool = False
) -> CudaGraphMode:
    """The CUDA-graph mode a pooling model actually runs with.

    vllm/config/vllm.py, ``VllmConfig.__post_init__``: pooling models do not support full
    graphs, so any mode with FULL graphs becomes ``PIECEWISE``; ``enforce_eager`` gives
    ``NONE``. The default requested mode (optimisation levels O2/O3) is
    ``FULL_AND_PIECEWISE``; ``-O0`` asks for ``NONE`` (``OPTIMIZATION_LEVEL_CUDAGRAPH_MODE``:
    nothing is captured, every step is eager). So a pooling step's output is never MRV2's
    persistent FULL-graph ``hidden_states`` buffer (``ModelCudaGraphManager.
    store_capture_output``): it is the last piecewise graph's output in the graph pool
    (``CUDAGraphWrapper``, vllm/compilation/cuda_graph.py, weak-referenced and rewritten by
    the next replay).
    """
    modes = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
    if requested not in modes:
        raise ValueError(f"unknown cudagraph mode {requested!r}; use one of {list(modes)}")
    if enforce_eager or requested == "NONE":
        return "NONE"
    return "PIECEWISE"
