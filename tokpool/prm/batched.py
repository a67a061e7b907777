"""Several PRM prompts in one padded forward: what ``ProcessRewardModel.score_records`` runs.

The engine path (``PoolingModel.encode``) runs each request through the transformer on its own,
as a chunked-prefill engine schedules it. To score a dataset, stacking prompts into one
``[batch, max_len]`` forward is about twice as fast on a CPU. Prompts are **right**-padded and
attention is causal, so every real token attends to exactly the tokens it attends to alone: its
hidden state equals the unpadded one up to float rounding (the matrix shapes differ, so the sums
run in another order). The rows are then cut back to each prompt's length and go through the
same ``StepPool`` + head as a single prompt (``step_rewards``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..models.forward import resolve_layer


def _pad(token_ids: Sequence[Sequence[int]]) -> Tensor:
    tensors = [torch.as_tensor(list(ids), dtype=torch.long) for ids in token_ids]
    return nn.utils.rnn.pad_sequence(tensors, batch_first=True)  # [batch, max_len], right-padded


def padded_hidden(model, token_ids: Sequence[Sequence[int]], *, layer: int = -1) -> list[Tensor]:
    """Hidden states of several prompts from one padded forward.

    Args:
        model: a decoder ``PoolingModel``.
        token_ids: the prompts' ids.
        layer: ``-1`` for the final hidden states (after the final norm), ``k`` for the output
            of layer ``k`` (``0`` = embeddings), as ``PoolingModel.encode(layer=...)``. A Llama-
            style transformer (``embed_tokens``, ``rotary_emb``, ``layers``) stops after layer
            ``k``; others run whole and return ``hidden_states[k]``.

    Returns:
        Per prompt, ``[n_tokens, hidden]`` in the model's dtype.

    Raises:
        ValueError: an encoder model (its padding would need an attention mask).
    """
    if model.attn_type != "decoder":
        raise ValueError(f"padded batches need a causal decoder; {model.name} is "
                         f"{model.attn_type}: score its prompts one at a time")
    index = resolve_layer(layer, model.num_layers)
    base = model.base_model
    ids = _pad(token_ids).to(model.device)  # [batch, max_len]
    with torch.inference_mode():
        if index is None:
            hidden = base(input_ids=ids).last_hidden_state  # [batch, max_len, hidden]
        elif all(hasattr(base, a) for a in ("embed_tokens", "rotary_emb", "layers")):
            hidden = base.embed_tokens(ids)  # [batch, max_len, hidden]
            positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
            rope = base.rotary_emb(hidden, positions)
            for block in base.layers[:index]:
                hidden = block(hidden, position_embeddings=rope, position_ids=positions)
        else:
            hidden = base(input_ids=ids, output_hidden_states=True).hidden_states[index]
    return [hidden[i, : len(t)] for i, t in enumerate(token_ids)]  # [n_tokens, hidden] each
