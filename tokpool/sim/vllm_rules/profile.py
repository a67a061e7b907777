"""What vLLM's start-up profile reserves outside the KV cache — as ESTIMATES, with derivations.

vLLM sizes the KV cache once (vllm/v1/worker/gpu_worker.py, ``determine_available_memory``):

    KV memory = gpu_memory_utilization × total memory (as the driver reports it)
                − weights − profiled activation peak − non-torch memory
                − CUDA-graph memory (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``, on by default,
                  when graphs are captured)

The profiled peak comes from ``profile_run`` (vllm/v1/worker/gpu_model_runner.py): a dummy
forward of a full token budget, then ``_dummy_pooler_run`` for every supported pooling task.
Only a GPU measures these numbers; tokpool models them here, each labelled an ESTIMATE:

- forward: the largest set of live tensors inside one decoder layer over ``T`` budget tokens on
  one tensor-parallel rank: the residual and the normed input ``[T, h]``, then either the
  attention moment (``q, k, v`` ``[T, (n_q + 2·n_kv)·d/tp]`` and its output ``[T, n_q·d/tp]``)
  or the MLP moment (gate+up ``[T, 2·I/tp]`` and the activation ``[T, I/tp]``);
- the pooler pass: the final hidden states ``[T, h]`` in the model dtype, the head's float32
  cast and the activation's output ``[T, w]`` each in the head dtype (w: the pooled width);
- non-torch memory: a flat 512 MiB per rank (cuBLAS workspaces, NCCL buffers when parallel);
- CUDA-graph memory: one ``[max capture size, h]`` output per layer in the graph pool
  (piecewise graphs), when graphs are captured.
"""

from __future__ import annotations

#: ESTIMATE of vLLM's "non-torch memory" per rank (what ``memory_profiling`` sees allocated
#: outside torch's allocator). Measure yours in vLLM's start-up log and pass it.
NON_TORCH_BYTES_ESTIMATE = 512 << 20


def mlp_width(model) -> int:
    """The MLP's intermediate size: the config's when known, else solved from the parameter
    count of a gated MLP (what is left per layer after attention, over 3·h)."""
    known = getattr(model, "intermediate_size", 0)
    if known:
        return int(known)
    h = model.hidden_size
    kv_heads = model.num_key_value_heads or model.num_attention_heads
    attention = (
        h * model.num_attention_heads * model.head_dim      # q
        + 2 * h * kv_heads * model.head_dim                 # k, v
        + model.num_attention_heads * model.head_dim * h    # o
    )
    per_layer = model.matmul_parameters / model.num_layers - attention
    return max(int(per_layer // (3 * h)), 1)


def forward_peak_bytes(model, *, tokens: int, tp: int, dtype_bytes: int) -> int:
    """ESTIMATE: the forward's activation peak per rank over ``tokens`` (see the module)."""
    h = model.hidden_size
    kv_heads = model.num_key_value_heads or model.num_attention_heads
    qkv = (model.num_attention_heads + 2 * kv_heads) * model.head_dim // tp
    attention_moment = qkv + model.num_attention_heads * model.head_dim // tp
    mlp_moment = 3 * mlp_width(model) // tp
    return (
        tokens                                   # the profile's dummy batch: the whole budget
        * (2 * h                                 # residual + normed input
           + max(attention_moment, mlp_moment))  # the layer's widest moment
        * dtype_bytes                            # bytes per element
    )


def pooler_peak_bytes(*, tokens: int, hidden_size: int, width: int, dtype_bytes: int,
                      head_dtype_bytes: int) -> int:
    """ESTIMATE: ``_dummy_pooler_run`` over ``tokens``: hidden states + cast + activation."""
    return tokens * (hidden_size * dtype_bytes + 2 * width * head_dtype_bytes)


def cudagraph_bytes(model, *, max_capture_size: int, tp: int, dtype_bytes: int) -> int:
    """ESTIMATE: piecewise graphs keep one ``[max capture size, h]`` output per layer in the
    graph pool (0 without graphs). The hidden width is not split across ranks."""
    if max_capture_size <= 0:
        return 0
    del tp  # every rank holds full-width layer outputs
    return model.num_layers * max_capture_size * model.hidden_size * dtype_bytes
