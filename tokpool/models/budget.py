"""How many bytes ``PoolingModel.encode`` will hold at its peak, estimated before it runs.

The encode loop prefills every prompt at once, step by step (``engine.run_prefill``), so at the
worst step all of these are alive together; each term below is one line with its unit:

- outputs: every finished request's head output, float32 (the head dtype);
- pooling: the chunks ``AllPool`` keeps (token tasks), plus the final concat of the longest;
- KV caches: one per decoder request prefilled in chunks, all alive until each finishes;
- one forward: the step's hidden rows, the MLP activations and the attention scores of the
  longest chunk (eager attention; SDPA needs only its mask), and every layer's hidden states
  when ``layer`` asks for an inner one.

It is an estimate of the largest terms, not an allocator trace: weights, small buffers and
allocator slack are left out. ``ensure_fits`` compares it with the memory limit.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..guard import ensure_fits

FLOAT32_BYTES = torch.empty((), dtype=torch.float32).element_size()


def estimate_encode_bytes(
    model,
    prompt_lens: Sequence[int],
    *,
    task: str,
    chunk_size: int | None,
    layer: int = -1,
    dimensions: int | None = None,
) -> int:
    """Estimated peak bytes of ``model.encode`` for prompts of these lengths.

    Args:
        model: a ``PoolingModel``.
        prompt_lens: tokens per prompt.
        task: the request task (``embed`` outputs one row per prompt, token tasks one per token).
        chunk_size: most tokens of one request per step (``None``: whole prompts).
        layer: ``-1`` for the final hidden states; another value keeps every layer's output.
        dimensions: Matryoshka width of embeddings (``None``: the hidden size).

    Returns:
        Bytes (an int).
    """
    cfg = model.hf_model.config
    s = model.dtype.itemsize  # bytes per hidden-state element
    hidden = model.hidden_size
    heads = int(getattr(cfg, "num_attention_heads", 1) or 1)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or hidden // heads)
    intermediate = int(getattr(cfg, "intermediate_size", None) or 4 * hidden)
    eager = getattr(cfg, "_attn_implementation", "eager") in (None, "eager")
    lens = [int(n) for n in prompt_lens]
    if not lens:
        return 0
    total, longest = sum(lens), max(lens)

    if task == "token_classify":
        out_width = int(getattr(cfg, "num_labels", 2) or 2)
    else:
        out_width = dimensions or hidden
    per_token_output = task in ("token_embed", "token_classify")
    outputs = (total if per_token_output else len(lens)) * out_width * FLOAT32_BYTES  # bytes
    pooling = (total + longest) * hidden * s if per_token_output else 0  # chunks + final cat
    chunked = chunk_size is not None and model.attn_type == "decoder"
    kv_cache = (
        2  # keys and values
        * model.num_layers
        * total  # tokens cached, all requests alive together
        * kv_heads * head_dim * s
    ) if chunked else 0
    chunk = min(longest, chunk_size) if chunked else longest  # rows of the longest forward
    step_rows = sum(min(n, chunk_size) for n in lens) if chunked else total
    scores = chunk * longest * heads * s if eager else chunk * longest  # scores, or bool mask
    forward = (
        step_rows * hidden * s  # the step's concatenated hidden rows
        + chunk * intermediate * s * 2  # gate/up projections of the MLP
        + scores
        + (model.num_layers + 1) * chunk * hidden * s * (layer != -1)  # all hidden states
    )
    return int(outputs + pooling + kv_cache + forward)


def ensure_encode_fits(
    model,
    prompt_lens: Sequence[int],
    *,
    task: str,
    chunk_size: int | None,
    layer: int = -1,
    dimensions: int | None = None,
) -> None:
    """Raise ``MemoryLimitError`` before ``encode`` allocates more than the limit allows."""
    need = estimate_encode_bytes(model, prompt_lens, task=task, chunk_size=chunk_size,
                                 layer=layer, dimensions=dimensions)
    n, total = len(prompt_lens), sum(prompt_lens)
    cheaper = "encode fewer prompts per call"
    if task in ("token_embed", "token_classify"):
        cheaper += ", ask for dimensions= (smaller embeddings) or task='embed' (one row each)"
    eager = getattr(model.hf_model.config, "_attn_implementation", "eager") in (None, "eager")
    if eager and model.attn_type == "decoder" and chunk_size is None:
        cheaper += ", or pass chunk_size= (eager attention scores shrink with the chunk)"
    ensure_fits(
        need,
        what=f"{model.name}.encode of {n} prompt(s), {total:,} tokens, task {task!r}",
        cheaper=cheaper,
        device=model.device,
    )
