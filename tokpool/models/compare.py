"""How far chunked prefill drifts from the full forward, per token, per dtype and chunk size."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from .._args import items
from ..pooler.heads import resolve_dtype
from .pooling_model import PoolingModel
from .prompts import Prompt, as_prompt_list
from .source import require_pooling_model


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _hidden(model: PoolingModel, ids: Tensor, chunk_size: int | None, layer: int) -> Tensor:
    # the real path: chunks through the KV cache, rows through AllPool, head without activation
    (out,) = model.encode([ids], task="token_embed", chunk_size=chunk_size, layer=layer,
                          use_activation=False)
    return out.float()  # [prompt_len, hidden]


def compare_chunked(
    model: PoolingModel,
    prompt: Prompt,
    *,
    chunk_sizes: Sequence[int] = (8, 32, 128),
    dtypes: Sequence[torch.dtype | str] = ("float32", "bfloat16"),
    layer: int = -1,
) -> pd.DataFrame:
    """Per-token error of chunked prefill against the full forward of the same model and dtype.

    Both sides run through ``model.encode(task="token_embed", use_activation=False)``, i.e. the
    KV-cache chunk loop, the core's ``AllPool`` and the float32 head cast.

    Args:
        model: a decoder ``PoolingModel`` (encoders cannot be chunked).
        prompt: one prompt (text or token ids).
        chunk_sizes: prefill chunk sizes to compare.
        dtypes: weight dtypes; the model is copied and cast for each one it is not already in.
        layer: hidden states compared (see ``PoolingModel.encode``).

    Returns:
        One row per (dtype, chunk_size, position) with columns ``dtype``, ``chunk_size``,
        ``position``, ``chunk`` (index of the chunk holding the token), ``max_abs_err``,
        ``rel_rms`` (``‖chunked − full‖ / ‖full‖``), ``cosine``, and ``cosine_vs_fp32``
        (chunked in this dtype against the float32 full forward: the dtype's own error).
        ``summarize_chunked`` reduces it to one row per (dtype, chunk_size).

    Raises:
        ValueError: an encoder model, more than one prompt, no or invalid chunk sizes.
    """
    require_pooling_model(model)
    prompts = as_prompt_list(prompt)
    if len(prompts) != 1:
        raise ValueError(f"compare_chunked takes one prompt, got {len(prompts)}")
    chunk_sizes = items("chunk_sizes", chunk_sizes, empty=True, what="a list of chunk sizes")
    dtypes = items("dtypes", dtypes, empty=True, what="a list of dtypes")
    if not chunk_sizes:
        raise ValueError("chunk_sizes is empty; give at least one chunk size")
    for i, c in enumerate(chunk_sizes):
        try:
            model.check_chunk_size(c)
        except (TypeError, ValueError) as err:
            raise type(err)(f"chunk_sizes[{i}]: {err}") from None
    (ids,) = model.token_ids(prompts)
    dtype_list = []
    for i, d in enumerate(dtypes):
        try:
            dtype_list.append(resolve_dtype(d))
        except (TypeError, ValueError) as err:
            raise type(err)(f"dtypes[{i}]: {err}") from None
    if not dtype_list:
        raise ValueError("dtypes is empty; give at least one dtype")
    fp32_full = _hidden(model.with_dtype(torch.float32), ids, None, layer)
    positions = torch.arange(ids.numel())
    frames = []
    for dtype in dtype_list:
        typed = model.with_dtype(dtype)
        full = _hidden(typed, ids, None, layer) if dtype != torch.float32 else fp32_full
        for chunk_size in chunk_sizes:
            chunked = _hidden(typed, ids, chunk_size, layer)
            diff = chunked - full  # [prompt_len, hidden]
            frames.append(pd.DataFrame({
                "dtype": _dtype_name(dtype),
                "chunk_size": chunk_size,
                "position": positions.numpy(),
                "chunk": (positions // chunk_size).numpy(),
                "max_abs_err": diff.abs().amax(dim=-1).numpy(),
                "rel_rms": (diff.norm(dim=-1) / full.norm(dim=-1).clamp_min(1e-30)).numpy(),
                "cosine": F.cosine_similarity(chunked, full, dim=-1).numpy(),
                "cosine_vs_fp32": F.cosine_similarity(chunked, fp32_full, dim=-1).numpy(),
            }))
    return pd.concat(frames, ignore_index=True)


def summarize_chunked(frame: pd.DataFrame) -> pd.DataFrame:
    """``compare_chunked``'s frame reduced to one row per (dtype, chunk_size): worst token
    (``min_cosine``, ``max_abs_err``, ``max_rel_rms``) and ``mean_rel_rms``."""
    grouped = frame.groupby(["dtype", "chunk_size"], sort=False)
    return grouped.agg(
        n_tokens=("position", "size"),
        min_cosine=("cosine", "min"),
        max_abs_err=("max_abs_err", "max"),
        max_rel_rms=("rel_rms", "max"),
        mean_rel_rms=("rel_rms", "mean"),
        min_cosine_vs_fp32=("cosine_vs_fp32", "min"),
    ).reset_index()
