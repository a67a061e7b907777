"""Text → steps → tag positions → STEP pooling → one reward per step.

A process reward model scores every step of a reasoning chain. The prompt carries a *step tag*
token after each step; the engine's STEP pooling keeps only the rows at those tags (and, for
LM-head PRMs, only a couple of vocabulary columns), and a head turns each kept row into a reward.
Three conventions are in use:

=============  ==============================  ===========================  ================
convention     model family                    per-token width               reward
=============  ==============================  ===========================  ================
two_class      Qwen2.5-Math-PRM                2 logits                      softmax[..., 1]
token_pair     Math-Shepherd (LM head)         vocab; keep (good, bad)       softmax[..., 0]
value_head     Skywork PRM                     1 scalar                      sigmoid
=============  ==============================  ===========================  ================
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from .._args import items
from ..pooler.heads import NonFiniteError, TokenClassifierHead
from ..pooler.metadata import build_metadata
from ..pooler.pooling import StepPool

Convention = Literal["two_class", "token_pair", "value_head"]
CONVENTIONS: tuple[str, ...] = ("two_class", "token_pair", "value_head")

#: Tried in order when ``format_steps(tag=None)``: the first one the tokenizer keeps as ONE token
#: wins. ``<extra_0>`` is Qwen2.5-Math-PRM's tag, ``ки`` Math-Shepherd's; ``<file_sep>`` is a
#: special token of SmolLM2's (StarCoder-derived) vocabulary that never occurs in arithmetic text.
STEP_TAG_CANDIDATES: tuple[str, ...] = ("<extra_0>", "ки", "<file_sep>")

#: Which column of the activated head output is the "step is correct" probability.
_POSITIVE_INDEX: dict[str, int] = {"two_class": 1, "token_pair": 0, "value_head": 0}
_WIDTH: dict[str, int] = {"two_class": 2, "token_pair": 2, "value_head": 1}


@dataclass(frozen=True)
class FormattedSteps:
    """A PRM prompt: the text, its token ids, and where the step tags sit.

    Unpacks as ``token_ids, step_tag_id = format_steps(...)``.

    Attributes:
        text: the whole prompt as the engine would receive it.
        token_ids: ``[n_tokens]`` ids of ``text`` (no extra special tokens added).
        step_tag_id: the tag's token id (STEP pooling's row selector).
        tag: the tag string.
        tag_positions: ``[n_steps]`` token index of each step's tag.
        step_spans: per step, the token range ``[start, stop)`` of its text up to and including
            its tag.
    """

    text: str
    token_ids: list[int]
    step_tag_id: int
    tag: str
    tag_positions: list[int]
    step_spans: list[tuple[int, int]]

    @property
    def num_steps(self) -> int:
        return len(self.tag_positions)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    def __iter__(self) -> Iterator[Any]:
        # why: the contract is "token ids plus the tag id"; allow tuple unpacking.
        return iter((self.token_ids, self.step_tag_id))


def _single_token_id(tokenizer, tag: str) -> int | None:
    ids = tokenizer.encode(tag, add_special_tokens=False)
    return int(ids[0]) if len(ids) == 1 else None


def _suggest_tags(tokenizer, limit: int = 6) -> list[str]:
    """Single-token strings worth trying as a tag: the candidates that fit, then unused
    special tokens of the vocabulary."""
    found = [t for t in STEP_TAG_CANDIDATES if _single_token_id(tokenizer, t) is not None]
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    chat_tokens = {tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token,
                   tokenizer.unk_token, "<|im_start|>", "<|im_end|>"}
    for _, token in sorted(decoder.items()):
        text = str(token)
        if text not in found and text not in chat_tokens:
            found.append(text)
    return found[:limit]


def resolve_step_tag(tokenizer, tag: str | None = None) -> tuple[str, int]:
    """The step tag string and its token id, checking it is one token.

    Args:
        tokenizer: a Hugging Face tokenizer.
        tag: the tag; ``None`` picks the first of ``STEP_TAG_CANDIDATES`` that is one token.

    Returns:
        ``(tag, tag_id)``.

    Raises:
        ValueError: the tag splits into several tokens (the pieces and alternatives are named),
            or is empty.
    """
    if tag is None:
        for candidate in STEP_TAG_CANDIDATES:
            tag_id = _single_token_id(tokenizer, candidate)
            if tag_id is not None:
                return candidate, tag_id
        raise ValueError(
            f"none of the default step tags {list(STEP_TAG_CANDIDATES)} is a single token of "
            f"this tokenizer; pass tag= one of {_suggest_tags(tokenizer)}"
        )
    if not isinstance(tag, str) or not tag:
        raise ValueError(f"tag must be a non-empty string, got {tag!r}")
    ids = tokenizer.encode(tag, add_special_tokens=False)
    if len(ids) != 1:
        pieces = [tokenizer.decode([i]) for i in ids]
        raise ValueError(
            f"step tag {tag!r} is {len(ids)} tokens {pieces} (ids {ids}) for this tokenizer; "
            "STEP pooling selects rows by ONE token id, so the tag must be a single token. "
            f"Try one of {_suggest_tags(tokenizer)}"
        )
    return tag, int(ids[0])


def format_steps(
    problem: str,
    steps: Sequence[str],
    *,
    tokenizer,
    tag: str | None = None,
    separator: str = "\n",
    chat: bool = True,
    system: str | None = None,
) -> FormattedSteps:
    """Build a PRM prompt with the step tag after every step, and tokenize it.

    The assistant turn is ``step_1 + tag + separator + step_2 + tag + ... + step_n + tag``
    (``separator=""`` gives Qwen2.5-Math-PRM's exact layout). With ``chat=True`` and a tokenizer
    that has a chat template, the problem is the user turn and the steps the assistant turn;
    otherwise the prompt is ``problem + "\\n\\n" + steps``.

    Args:
        problem: the question.
        steps: the solution, one string per step (none may be empty or contain the tag).
        tokenizer: a Hugging Face tokenizer.
        tag: the step tag; ``None`` picks the first of ``STEP_TAG_CANDIDATES`` that this
            tokenizer keeps as one token (``<file_sep>`` for SmolLM2).
        separator: text after each tag but the last.
        chat: use the tokenizer's chat template when it has one.
        system: optional system message (chat only).

    Returns:
        ``FormattedSteps``; unpacks as ``token_ids, step_tag_id``.

    Raises:
        ValueError: no steps; an empty step; the tag is several tokens; the tag already occurs
            in the problem or a step; the tokenized prompt does not hold one tag per step.

    Example:
        >>> tok = tp.load_model("smollm2-135m").tokenizer
        >>> ids, tag_id = tp.prm.format_steps("2+3*4?", ["3*4 = 12", "2+12 = 14"],
        ...                                   tokenizer=tok)
        >>> len(ids), tag_id, ids.count(tag_id)  # one tag token per step
        (56, 5, 2)
    """
    if not isinstance(problem, str):
        raise TypeError(f"problem must be the question as a str, got {problem!r:.60} "
                        f"({type(problem).__name__})")
    if isinstance(steps, str):
        raise TypeError("steps must be a list of strings, one per step, not one string "
                        "(split it: steps=text.splitlines())")
    steps = items("steps", steps, empty=True, what="a list of strings, one per step")
    if not steps:
        raise ValueError("format_steps needs at least one step (steps is empty)")
    bad = [i for i, s in enumerate(steps) if not isinstance(s, str) or not s.strip()]
    if bad:
        raise ValueError(f"steps {bad} are empty or not strings; every step needs text")
    if tokenizer is None or not callable(getattr(tokenizer, "encode", None)):
        raise TypeError(
            f"format_steps needs a Hugging Face tokenizer (tokenizer=...), got {tokenizer!r}; "
            "e.g. tp.load_prm(...).tokenizer or transformers.AutoTokenizer.from_pretrained(...)"
        )
    tag, tag_id = resolve_step_tag(tokenizer, tag)
    holders = (["the problem"] if tag in problem else []) + [
        f"step {i}" for i, s in enumerate(steps) if tag in s
    ]
    if holders:
        raise ValueError(
            f"the step tag {tag!r} already occurs in {' and '.join(holders)}; it would add rows "
            "that are not step ends. Remove it from the text or choose another tag="
        )
    body = separator.join(step + tag for step in steps)
    if chat and getattr(tokenizer, "chat_template", None):
        messages = [] if system is None else [{"role": "system", "content": system}]
        messages += [{"role": "user", "content": problem},
                     {"role": "assistant", "content": body}]
        text = tokenizer.apply_chat_template(messages, tokenize=False)
        body_start = text.rindex(body)
    else:
        text = problem + "\n\n" + body
        body_start = len(problem) + 2
    token_ids = [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]
    tag_positions = [i for i, t in enumerate(token_ids) if t == tag_id]
    if len(tag_positions) != len(steps):
        raise ValueError(
            f"the tokenized prompt holds the tag {tag!r} {len(tag_positions)} times for "
            f"{len(steps)} steps: it merged with its neighbours or occurs in the template; "
            "choose a special token as tag= (or another separator=)"
        )
    step_starts, char = [], body_start
    for step in steps:
        step_starts.append(char)
        char += len(step) + len(tag) + len(separator)
    first_tokens = [_token_at_char(tokenizer, text, c) for c in step_starts]
    spans = [(start, pos + 1) for start, pos in zip(first_tokens, tag_positions, strict=True)]
    return FormattedSteps(text, token_ids, tag_id, tag, tag_positions, spans)


def _token_at_char(tokenizer, text: str, char: int) -> int:
    """Index of the first token of ``text`` that starts at or after ``char``."""
    # why: tokenizing the prefix is exact at our step boundaries, which follow a special tag or
    # a chat-template newline, and works for slow tokenizers that have no offset mapping.
    return len(tokenizer.encode(text[:char], add_special_tokens=False))


def _as_token_ids(token_ids: Sequence[int] | Tensor) -> Tensor:
    if isinstance(token_ids, Tensor):
        if token_ids.dim() != 1 or token_ids.is_floating_point():
            raise TypeError(
                f"token_ids must be a 1-D integer tensor, got shape {tuple(token_ids.shape)} "
                f"and dtype {token_ids.dtype}"
            )
        return token_ids.detach().to("cpu", torch.int64)
    if isinstance(token_ids, (str, bytes)):
        raise TypeError("token_ids must be ids (a list of ints or a tensor), not text; "
                        "use format_steps() to tokenize a problem and its steps")
    ids = list(token_ids)
    bad = [v for v in ids if isinstance(v, bool) or not isinstance(v, (int, np.integer))]
    if bad:
        raise TypeError(f"token_ids must be whole token ids, got {bad[:3]!r}; ids are never "
                        "rounded (pass the ids format_steps() returned)")
    return torch.as_tensor(ids, dtype=torch.int64).reshape(-1)


def _as_token_id(value) -> int:
    if isinstance(value, Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool):
        raise TypeError(f"step_tag_id must be an int token id, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"step_tag_id must be an int token id, got {value!r}") from None


def _check_columns(convention: str, returned_token_ids, width: int) -> list[int] | None:
    if convention != "token_pair":
        if returned_token_ids is not None:
            raise ValueError(
                f"returned_token_ids only applies to convention='token_pair' (vocabulary "
                f"columns); {convention!r} uses the head's own {_WIDTH[convention]} output(s). "
                "Drop returned_token_ids="
            )
        return None
    if returned_token_ids is None or isinstance(returned_token_ids, (str, bytes)):
        raise ValueError(
            "convention='token_pair' needs returned_token_ids=(good_id, bad_id): the two "
            "vocabulary columns to keep (Math-Shepherd: the ids of '+' and '-')"
        )
    columns = [int(c) for c in returned_token_ids]
    if len(columns) != 2 or columns[0] == columns[1]:
        raise ValueError(
            f"convention='token_pair' needs exactly 2 distinct returned_token_ids (good, bad), "
            f"got {columns}"
        )
    out_of_range = [c for c in columns if not 0 <= c < width]
    if out_of_range:
        raise ValueError(
            f"returned_token_ids {out_of_range} are outside the per-token width {width}; "
            "token_pair expects vocabulary logits [n_tokens, vocab_size]"
        )
    return columns


def _check_width(convention: str, per_token: Tensor) -> None:
    width = per_token.shape[1]
    if convention == "two_class" and width != 2:
        hint = ("use convention='value_head' for one scalar per token" if width == 1 else
                "for vocabulary logits use convention='token_pair' with returned_token_ids=")
        raise ValueError(
            f"convention='two_class' expects 2 logits per token (Qwen2.5-Math-PRM's score "
            f"head), got per_token of shape {tuple(per_token.shape)}; {hint}"
        )
    if convention == "value_head" and width != 1:
        raise ValueError(
            f"convention='value_head' expects 1 value per token ([n_tokens] or [n_tokens, 1]), "
            f"got per_token of shape {tuple(per_token.shape)}; use 'two_class' for 2 logits"
        )
    if convention == "token_pair" and width < 2:
        raise ValueError(
            f"convention='token_pair' expects vocabulary logits [n_tokens, vocab_size], got "
            f"per_token of shape {tuple(per_token.shape)}"
        )


def _checked_inputs(per_token, token_ids, step_tag_id, convention, returned_token_ids):
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; use one of {list(CONVENTIONS)}")
    if not isinstance(per_token, Tensor):
        raise TypeError(f"per_token must be a Tensor, got {type(per_token).__name__}")
    if per_token.dim() == 1:
        per_token = per_token.unsqueeze(-1)  # [n_tokens, 1]
    if per_token.dim() != 2:
        raise ValueError(
            f"per_token must be [n_tokens, width] for one prompt, got {tuple(per_token.shape)}; "
            "score prompts one at a time"
        )
    ids = _as_token_ids(token_ids)
    if ids.numel() != per_token.shape[0]:
        raise ValueError(
            f"per_token has {per_token.shape[0]} rows but token_ids has {ids.numel()} ids; "
            "pass the model's output for exactly these token ids (same prompt, no padding)"
        )
    step_tag_id = _as_token_id(step_tag_id)
    _check_width(convention, per_token)
    columns = _check_columns(convention, returned_token_ids, per_token.shape[1])
    if not bool((ids == step_tag_id).any()):
        raise ValueError(
            f"no step tag (id {step_tag_id}) in the {ids.numel()} prompt tokens, so there is no "
            "step to score. Put the tag after every step: tp.format_steps(problem, steps, "
            "tokenizer=tok) returns the token ids and the tag id to pass here"
        )
    return per_token, ids, step_tag_id, columns


def step_logits(
    per_token: Tensor,
    token_ids: Sequence[int] | Tensor,
    *,
    step_tag_id: int,
    convention: Convention,
    returned_token_ids: Sequence[int] | None = None,
) -> Tensor:
    """The rows (and columns) STEP pooling keeps for a PRM, before the head: what
    ``step_rewards`` activates. Pooling does no arithmetic, so these are exactly
    ``per_token[tag_rows][:, returned_token_ids]``.

    Args: as ``step_rewards``.

    Returns:
        ``[n_steps, 2]`` (two_class, token_pair) or ``[n_steps, 1]`` (value_head), in
        ``per_token``'s dtype.

    Raises:
        As ``step_rewards``.
    """
    per_token, ids, step_tag_id, columns = _checked_inputs(
        per_token, token_ids, step_tag_id, convention, returned_token_ids
    )
    meta = build_metadata(
        [ids.numel()],
        prompt_token_ids=[ids],
        step_tag_id=step_tag_id,
        returned_token_ids=columns,
        task="token_classify",
    )
    (pooled,) = StepPool()(per_token, meta)  # [n_steps, 2 | 2 | 1]
    return pooled


def step_rewards(
    per_token: Tensor,
    token_ids: Sequence[int] | Tensor,
    *,
    step_tag_id: int,
    convention: Convention,
    returned_token_ids: Sequence[int] | None = None,
) -> Tensor:
    """One reward in [0, 1] per step, through the engine's STEP pooling and classifier head.

    ``StepPool`` keeps the columns ``returned_token_ids`` (token_pair only), then the rows whose
    prompt token is ``step_tag_id``; ``TokenClassifierHead`` (float32) applies the activation
    over what is left, so a token_pair softmax runs over the two kept columns only.

    Args:
        per_token: the PRM's output for one prompt, ``[n_tokens, width]`` (``[n_tokens]`` is
            read as width 1): ``two_class`` width 2, ``value_head`` width 1, ``token_pair``
            the vocabulary.
        token_ids: the prompt's ``[n_tokens]`` ids (``format_steps(...).token_ids``).
        step_tag_id: the tag token's id.
        convention: ``"two_class"`` (softmax over 2 logits, index 1), ``"token_pair"``
            (softmax over the (good, bad) columns, index 0) or ``"value_head"`` (sigmoid).
        returned_token_ids: ``(good_id, bad_id)`` for ``token_pair``; not allowed otherwise.

    Returns:
        ``[n_steps]`` float32 rewards, one per tag, in prompt order.

    Raises:
        ValueError: unknown convention; a width that does not fit it; ``per_token`` and
            ``token_ids`` of different lengths; no tag in ``token_ids``.
        TypeError: ``per_token`` is not a tensor, or ``token_ids`` are not integer ids.

    Example:
        >>> tok = tp.load_model("smollm2-135m").tokenizer
        >>> ids, tag = tp.prm.format_steps("2+3*4?", ["3*4 = 12", "2+12 = 14"], tokenizer=tok)
        >>> logits = torch.zeros(len(ids), 2)  # [n_tokens, 2] two-class logits
        >>> logits[torch.tensor(ids) == tag] = torch.tensor([[-2.0, 2.0], [1.0, -1.0]])
        >>> tp.prm.step_rewards(logits, ids, step_tag_id=tag, convention="two_class")
        tensor([0.9820, 0.1192])
    """
    pooled = step_logits(per_token, token_ids, step_tag_id=step_tag_id, convention=convention,
                         returned_token_ids=returned_token_ids)
    activation = "sigmoid" if convention == "value_head" else "softmax"
    probs = TokenClassifierHead(activation=activation).forward_one(pooled)  # float32
    return probs[:, _POSITIVE_INDEX[convention]]  # [n_steps]


def first_error_from_rewards(rewards: Sequence[float] | Tensor, threshold: float = 0.5) -> int:
    """Index of the first step whose reward is below ``threshold``; ``-1`` when none is.

    NaN/Inf policy: ``-1`` means "every step passed", so it is returned only for rewards that
    were all compared. A NaN reward compares false with anything and would read as a pass; an
    infinite reward is no probability either. Both are refused, as is a NaN or infinite
    threshold (``nan`` would pass every step, ``inf`` fail every one).

    Args:
        rewards: ``[n_steps]`` finite rewards, one per step, in order.
        threshold: a finite number; a reward strictly below it is an error.

    Returns:
        The index of the first reward ``< threshold``, or ``-1``.

    Raises:
        NonFiniteError: a NaN or ±Inf reward (the message names the step and the value).
        ValueError: a NaN or infinite threshold; rewards that are not one number per step.
        TypeError: a threshold that is not a real number.

    Example:
        >>> tp.prm.first_error_from_rewards([0.9, 0.3, 0.8])
        1
    """
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise TypeError(f"threshold must be a real number, got {threshold!r}")
    if not math.isfinite(threshold):
        raise ValueError(
            f"threshold must be finite, got {threshold}: a NaN threshold passes every step "
            "(every comparison is false) and would report -1, 'no error'"
        )
    try:
        values = torch.as_tensor(rewards, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"rewards must be numbers, one per step, got {rewards!r}: {err}") from None
    if values.dim() > 1 and sum(d > 1 for d in values.shape) > 1:
        raise ValueError(f"rewards must be 1-D (one per step), got shape {tuple(values.shape)}")
    values = values.reshape(-1)
    bad = (~torch.isfinite(values)).nonzero(as_tuple=True)[0]
    if bad.numel():
        i = int(bad[0])
        raise NonFiniteError(
            f"reward of step {i} is {values[i].item()} ({bad.numel()} of {values.numel()} "
            "rewards are NaN or Inf); a broken reward is not 'no error' — fix the model or its "
            "inputs"
        )
    below = (values < threshold).nonzero(as_tuple=True)[0]
    return int(below[0]) if below.numel() else -1
