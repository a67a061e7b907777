"""Prefix caching as vLLM 0.33.0 decides it for a pooling model, and which requests read it.

- **On by default where the model supports it** (vllm/config/model.py,
  ``ModelConfig.is_prefix_caching_supported``, applied by
  ``EngineArgs._set_default_chunked_prefill_and_prefix_caching_args`` when
  ``--enable-prefix-caching`` is not given): a pooling model supports it when its attention is
  causal (``decoder``) and its pooler is neither MEAN/CLS sequence pooling nor STEP token
  pooling: the same models that chunk. Encoder-only (bidirectional) pooling models, CLS/MEAN
  decoders and STEP-pooled PRMs run without it. ``--enable-prefix-caching`` on such a model
  only logs a warning ("does not officially support prefix caching"); ``--no-enable-prefix-
  caching`` turns it off for any model.
- **Token tasks never read it** (vllm/pooling_params.py, ``PoolingParams.
  _merge_default_parameters``: ``skip_reading_prefix_cache = True`` for ``token_embed`` and
  ``token_classify``; ``KVCacheManager.get_computed_blocks`` then returns no hit). A token task
  returns one row per prompt token, and a token whose KV came from the cache is not computed
  in this request, so it has no hidden state to pool: vLLM recomputes every token instead.
  Their blocks are still cached (``allocate_slots`` → ``cache_blocks``), for requests that do
  read. ``embed`` and ``classify`` (one row from the last token, which vLLM always recomputes:
  a hit stops at ``num_tokens - 1``) read it: a prompt that shares whole blocks with one
  cached before, or a preempted request whose blocks were not yet evicted, starts after them.
"""

from __future__ import annotations

from .defaults import AttnType, SeqPoolingType, TokPoolingType, chunked_prefill_supported

__all__ = ["TOKEN_TASK_SKIP_REASON", "default_prefix_caching", "prefix_caching_supported",
           "reads_prefix_cache"]

#: Why a token task recomputes every token with prefix caching on (for ``explain()``).
TOKEN_TASK_SKIP_REASON = (
    "vLLM skips reading the prefix cache for token tasks (PoolingParams."
    "_merge_default_parameters sets skip_reading_prefix_cache): a cached token's KV is reused "
    "but the token is not computed, so it has no hidden state to pool, and a token task must "
    "return a row for every prompt token; every token is recomputed"
)


def prefix_caching_supported(
    attn_type: AttnType,
    *,
    seq_pooling_type: SeqPoolingType | None = "LAST",
    tok_pooling_type: TokPoolingType | None = "ALL",
) -> bool:
    """Whether vLLM turns prefix caching on by default for this pooling model
    (``ModelConfig.is_prefix_caching_supported``, pooling branch).

    Example:
        >>> prefix_caching_supported("decoder"), prefix_caching_supported("encoder_only")
        (True, False)
        >>> prefix_caching_supported("decoder", tok_pooling_type="STEP")
        False
    """
    if attn_type != "decoder":  # encoder-only; vLLM has no hybrid/encoder-decoder poolers
        return False
    # the decoder branch is is_chunked_prefill_supported's, word for word: one rule
    return chunked_prefill_supported(attn_type, seq_pooling_type=seq_pooling_type,
                                     tok_pooling_type=tok_pooling_type)


def default_prefix_caching(
    requested: bool | None,
    attn_type: AttnType,
    *,
    seq_pooling_type: SeqPoolingType | None = "LAST",
    tok_pooling_type: TokPoolingType | None = "ALL",
) -> bool:
    """``--[no-]enable-prefix-caching`` if given, else vLLM's default for the model
    (``EngineArgs._set_default_chunked_prefill_and_prefix_caching_args``).

    Raises:
        TypeError: ``requested`` neither a bool nor ``None``.
    """
    if requested is None:
        return prefix_caching_supported(attn_type, seq_pooling_type=seq_pooling_type,
                                        tok_pooling_type=tok_pooling_type)
    if not isinstance(requested, bool):
        raise TypeError(f"enable_prefix_caching must be True, False or None (vLLM's default), "
                        f"got {requested!r}")
    return requested


def reads_prefix_cache(task: str) -> bool:
    """Whether a request of ``task`` reads the prefix cache when it is on: not the token tasks
    (``PoolingParams._merge_default_parameters``; ``TOKEN_TASK_SKIP_REASON``).

    Example:
        >>> reads_prefix_cache("embed"), reads_prefix_cache("token_embed")
        (True, False)
    """
    return task not in ("token_embed", "token_classify")
