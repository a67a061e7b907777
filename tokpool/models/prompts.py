"""Prompts in, validated token-id tensors out."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

#: One prompt: text, or its token ids (a list of ints or a 1-D integer tensor).
Prompt = str | Sequence[int] | Tensor


def _is_id_list(x) -> bool:
    return (
        isinstance(x, Sequence)
        and not isinstance(x, (str, bytes))
        and len(x) > 0
        and all(isinstance(v, int) and not isinstance(v, bool) for v in x)
    )


def as_prompt_list(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    """One prompt or a batch of prompts → a list of prompts.

    A string, a flat list of ints or a 1-D tensor is one prompt; a 2-D tensor is one prompt
    per row; any other sequence is a batch.
    """
    if isinstance(prompts, str) or _is_id_list(prompts):
        return [prompts]
    if isinstance(prompts, Tensor):
        if prompts.dim() <= 1:
            return [prompts]
        if prompts.dim() == 2:
            return list(prompts)
        raise ValueError(
            f"a tensor of prompts must be [prompt_len] or [n_prompts, prompt_len], got shape "
            f"{tuple(prompts.shape)}"
        )
    if isinstance(prompts, Sequence) and not isinstance(prompts, bytes):
        return list(prompts)
    raise TypeError(
        f"prompts must be a string, a list of token ids, or a list of those; got "
        f"{type(prompts).__name__}"
    )


def to_token_ids(
    prompts: Prompt | Sequence[Prompt],
    *,
    tokenizer,
    vocab_size: int,
    max_length: int,
    max_length_reason: str,
    model_name: str,
) -> list[Tensor]:
    """Tokenize and validate prompts.

    Returns:
        One ``[prompt_len]`` int64 CPU tensor per prompt.

    Raises:
        TypeError: a prompt that is neither text nor token ids.
        ValueError: an empty prompt, token ids outside the vocabulary, a prompt longer than the
            model accepts (both numbers named), or text for a model without a tokenizer.
    """
    out = []
    for i, prompt in enumerate(as_prompt_list(prompts)):
        if isinstance(prompt, str):
            if tokenizer is None:
                raise ValueError(
                    f"prompt {i} is text but {model_name} has no tokenizer; pass token ids "
                    "(lists of ints) instead"
                )
            if not prompt:
                raise ValueError(f"prompt {i} is an empty string; every prompt needs text")
            ids = torch.tensor(tokenizer(prompt, add_special_tokens=True)["input_ids"],
                               dtype=torch.int64)
        elif isinstance(prompt, Tensor):
            if prompt.dim() > 1 or prompt.is_floating_point() or prompt.dtype == torch.bool:
                raise TypeError(
                    f"prompt {i}: a token-id tensor must be 1-D integers, got shape "
                    f"{tuple(prompt.shape)} dtype {prompt.dtype}"
                )
            ids = prompt.detach().to("cpu", torch.int64).reshape(-1)
        elif isinstance(prompt, Sequence) and not isinstance(prompt, bytes):
            bad = [v for v in prompt if isinstance(v, bool) or not isinstance(v, int)]
            if bad:
                raise TypeError(
                    f"prompt {i}: token ids must be ints, got {bad[:3]!r}; pass text as a str"
                )
            ids = torch.tensor(list(prompt), dtype=torch.int64)
        else:
            raise TypeError(
                f"prompt {i} is a {type(prompt).__name__}; a prompt is a str or a list of token "
                "ids"
            )
        n = int(ids.numel())
        if n == 0:
            raise ValueError(f"prompt {i} is empty (0 tokens); every prompt needs a token")
        if n > max_length:
            raise ValueError(
                f"prompt {i} has {n} tokens but {model_name} accepts at most {max_length} "
                f"({max_length_reason}); shorten or split the prompt"
            )
        outside = ids[(ids < 0) | (ids >= vocab_size)]
        if outside.numel():
            raise ValueError(
                f"prompt {i} has token ids outside the vocabulary [0, {vocab_size}): "
                f"{outside[:5].tolist()}"
            )
        out.append(ids)
    return out
