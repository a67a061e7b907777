"""Running a prompt through a transformers model, whole or in chunks with a KV cache.

A ``PrefillStream`` is one request's prefill: it owns the request's token ids and (for decoders)
its ``DynamicCache``, and ``advance(stop)`` computes the hidden states of the next tokens, up to
``stop``, attending to everything computed before. That is what a chunked-prefill engine does
for each request in each step; the encode loop and ``ModelSource`` both drive these streams.
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from .pooling_model import PoolingModel

ENCODER_CHUNK_REASON = (
    "encoder models attend bidirectionally: every token's hidden state depends on the whole "
    "prompt, so a prompt cannot be prefilled in chunks (engines disable chunked prefill for "
    "encoders)"
)


def resolve_layer(layer: int, num_layers: int) -> int | None:
    """Index into transformers' ``hidden_states`` tuple (embeddings + one per layer).

    Returns ``None`` for the last layer, which is read from ``last_hidden_state`` (the final
    norm applied: what an engine pools).

    Raises:
        TypeError: ``layer`` is not an int.
        ValueError: ``layer`` is outside ``[-(num_layers + 1), num_layers]``.
    """
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise TypeError(f"layer must be an int, got {layer!r}")
    n = num_layers + 1
    if not -n <= layer < n:
        raise ValueError(
            f"layer={layer} is outside [{-n}, {n - 1}]: the model has {num_layers} layers plus "
            "the embedding output (layer 0); use -1 for the final hidden states"
        )
    index = layer % n
    return None if index == n - 1 else index


@lru_cache(maxsize=32)
def _forward_params(forward_cls: type) -> frozenset[str]:
    return frozenset(inspect.signature(forward_cls.forward).parameters)


def _new_cache(config):
    from transformers import DynamicCache

    try:
        return DynamicCache(config=config)
    except TypeError:  # transformers < 4.56 takes no config
        return DynamicCache()


class PrefillStream:
    """One request's prefill through ``model``: token ids, KV cache, tokens computed so far.

    Args:
        model: the ``PoolingModel`` whose transformer runs.
        token_ids: ``[prompt_len]`` int64.
        layer: which hidden states to return (see ``resolve_layer``).
    """

    def __init__(self, model: PoolingModel, token_ids: Tensor, *, layer: int = -1) -> None:
        self.model = model
        self.token_ids = token_ids
        self.layer_index = resolve_layer(layer, model.num_layers)
        self.computed = 0
        self.cache = None

    @property
    def prompt_len(self) -> int:
        return int(self.token_ids.numel())

    def reset(self) -> None:
        """Drop the KV cache and start over (preemption)."""
        self.computed = 0
        self.cache = None

    def advance(self, stop: int) -> Tensor:
        """Compute tokens ``[computed, stop)``; returns their hidden states ``[n, hidden]``.

        Raises:
            ValueError: ``stop`` does not move forward within the prompt, or an encoder is asked
                for part of its prompt.
        """
        start = self.computed
        if not start < stop <= self.prompt_len:
            raise ValueError(
                f"cannot advance a prefill from token {start} to {stop}: the prompt has "
                f"{self.prompt_len} tokens and {start} are computed"
            )
        whole = start == 0 and stop == self.prompt_len
        if self.model.attn_type == "encoder_only" and not whole:
            raise ValueError(
                f"tokens [{start}, {stop}) of a {self.prompt_len}-token prompt requested: "
                f"{ENCODER_CHUNK_REASON}"
            )
        with torch.inference_mode():
            hidden = self._forward(start, stop, use_cache=not whole)
        self.computed = stop
        if self.computed == self.prompt_len:
            self.cache = None  # why: the prefill is over; free the KV cache
        return hidden

    def _forward(self, start: int, stop: int, *, use_cache: bool) -> Tensor:
        base = self.model.base_model
        device = self.model.device
        params = _forward_params(type(base))
        ids = self.token_ids[start:stop].to(device).unsqueeze(0)  # [1, n]
        positions = torch.arange(start, stop, device=device)
        kwargs: dict = {
            "input_ids": ids,
            # covers past + current tokens: the new tokens attend to the whole cache
            "attention_mask": torch.ones((1, stop), dtype=torch.long, device=device),
            "position_ids": positions.unsqueeze(0),
            "output_hidden_states": self.layer_index is not None,
            "use_cache": use_cache,
        }
        if use_cache:
            if self.cache is None:
                self.cache = _new_cache(self.model.hf_model.config)
            # transformers renamed past_key_values to cache (5.x) and dropped cache_position
            kwargs["cache" if "cache" in params else "past_key_values"] = self.cache
            if "cache_position" in params:
                kwargs["cache_position"] = positions
        out = base(**kwargs)
        if self.layer_index is None:
            return out.last_hidden_state[0]  # [n, hidden]
        return out.hidden_states[self.layer_index][0]  # [n, hidden]
