"""A process reward model as tokpool runs it: ``ProcessRewardModel`` (format the steps, run the
model, read the rewards at the tag rows) and what it says about one solution (``StepScores``).

Probes (``probe``) and fine-tuned adapters (``finetuned``) both load into this one class.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch
from torch import Tensor, nn

from .._args import flag, items, number, whole
from .batched import padded_hidden
from .steps import (
    CONVENTIONS,
    Convention,
    FormattedSteps,
    first_error_from_rewards,
    format_steps,
    step_rewards,
)

if TYPE_CHECKING:
    import pandas as pd

    from .probe import ProbeHead


@dataclass(frozen=True)
class StepScores:
    """What a PRM says about one solution.

    Attributes:
        rewards: ``[n_steps]`` float32 in [0, 1], the probability each step is correct.
        first_error: index of the first step with reward below ``threshold``; ``-1`` when all
            pass.
        threshold: the cut used for ``first_error``.
        steps: the step texts.
        formatted: the prompt that was scored (text, token ids, tag positions).
    """
    rewards: Tensor
    first_error: int
    threshold: float
    steps: list[str] = field(repr=False)
    formatted: FormattedSteps = field(repr=False)

    def to_frame(self) -> pd.DataFrame:
        """One row per step: ``step``, ``text``, ``reward``, ``passed``."""
        rewards = self.rewards.tolist()
        return pd.DataFrame({
            "step": range(len(rewards)),
            "text": self.steps,
            "reward": rewards,
            "passed": [r >= self.threshold for r in rewards],
        })


def check_threshold(threshold: object) -> float:
    """A reward cut: a finite number (rewards are probabilities in [0, 1]; a cut above 1
    marks every step an error, one at or below 0 none).

    Raises:
        TypeError: not a number (``"0.5"`` too).
        ValueError: NaN or infinite (a NaN cut compares False with every reward).
    """
    return number("threshold", threshold)


def check_records(records: object) -> list[dict[str, Any]]:
    """Dataset records (``tp.load_prm_dataset``): a list of dicts with ``prompt`` and
    ``completions``; the first bad one is named by its index.

    Raises:
        TypeError: not a list, or a record that is not a dict.
        ValueError: a record without ``prompt`` or ``completions``.
    """
    out = items("records", records, empty=True, what="a list of dataset records (dicts with "
                "'prompt' and 'completions', as tp.load_prm_dataset returns)")
    for i, record in enumerate(out):
        if not isinstance(record, dict):
            raise TypeError(f"record {i} must be a dict with 'prompt' and 'completions', got "
                            f"{record!r:.60} ({type(record).__name__})")
        missing = [k for k in ("prompt", "completions") if k not in record]
        if missing:
            raise ValueError(f"record {i} has no {' or '.join(map(repr, missing))} (it has "
                             f"{sorted(record)[:8]}); each record needs 'prompt' (the problem) "
                             "and 'completions' (its steps)")
    return out


class ProcessRewardModel:
    """A PRM: formats steps, runs the model, and turns tag rows into rewards.

    Build one with ``tp.load_prm``. Attributes are plain and may be changed (e.g.
    ``prm.threshold = 0.3``).

    Attributes:
        model: the ``PoolingModel`` (or, with remote code, the transformers model).
        tokenizer: its tokenizer.
        convention: ``"two_class"``, ``"token_pair"`` or ``"value_head"``.
        threshold: ``first_error`` is the first step whose reward is below it.
        tag, separator, chat, system: how ``format_steps`` lays out the prompt.
        returned_token_ids: ``(good, bad)`` vocabulary ids for ``token_pair``.
        head: the probe head (probe PRMs only) and ``layer``, the hidden states it reads.
        info: provenance (file, base model, training metrics, …).
    """
    def __init__(
        self,
        model: Any,
        *,
        tokenizer: Any = None,
        convention: Convention,
        threshold: float = 0.5,
        tag: str | None = None,
        separator: str = "\n",
        chat: bool = True,
        system: str | None = None,
        returned_token_ids: Sequence[int] | None = None,
        head: ProbeHead | None = None,
        layer: int = -1,
        remote: bool = False,
        info: dict[str, Any] | None = None,
    ) -> None:
        if convention not in CONVENTIONS:
            raise ValueError(f"unknown convention {convention!r}; use one of {list(CONVENTIONS)}")
        self.model = model
        self.tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        if self.tokenizer is None:
            raise ValueError("a PRM needs a tokenizer to format steps; pass tokenizer=")
        self.convention = convention
        self.threshold = check_threshold(threshold)
        self.tag, self.separator, self.chat, self.system = tag, separator, chat, system
        self.returned_token_ids = None if returned_token_ids is None else list(returned_token_ids)
        self.head, self.layer, self.remote = head, layer, remote
        self.info = dict(info or {})

    def __repr__(self) -> str:
        what = f"probe(layer={self.layer})" if self.head is not None else "model"
        name = getattr(self.model, "name", type(self.model).__name__)
        return (f"ProcessRewardModel({name!r}, {what}, convention={self.convention!r}, "
                f"tag={self.tag!r}, threshold={self.threshold:.3f})")

    def format(self, problem: str, steps: Sequence[str]) -> FormattedSteps:
        """The prompt this PRM scores (see ``tp.format_steps``)."""
        return format_steps(problem, steps, tokenizer=self.tokenizer, tag=self.tag,
                            separator=self.separator, chat=self.chat, system=self.system)

    def per_token(self, token_ids: Sequence[int] | Tensor, *,
                  chunk_size: int | None = None) -> Tensor:
        """The model's per-token output for one prompt, before STEP pooling.

        Returns:
            ``[n_tokens, 2]`` (two_class), ``[n_tokens, 1]`` (value_head) or
            ``[n_tokens, vocab]`` (token_pair) float32 logits.
        """
        ids = [int(i) for i in token_ids]
        if self.remote:
            with torch.inference_mode():
                out = self.model(input_ids=torch.tensor([ids]))
            logits = out.logits if hasattr(out, "logits") else out[0]
            return logits[0].float()  # [n_tokens, num_labels]
        if self.head is not None:
            (hidden,) = self.model.encode([ids], task="token_embed", layer=self.layer,
                                          use_activation=False, chunk_size=chunk_size)
            with torch.inference_mode():
                return self.head(hidden)  # [n_tokens, num_labels]
        if self.convention == "token_pair":
            (hidden,) = self.model.encode([ids], task="token_embed", use_activation=False,
                                          chunk_size=chunk_size)
            lm_head = self.model.hf_model.get_output_embeddings()
            with torch.inference_mode():
                return lm_head(hidden.to(self.model.dtype)).float()  # [n_tokens, vocab]
        (logits,) = self.model.encode([ids], task="token_classify", use_activation=False,
                                      chunk_size=chunk_size)
        return logits  # [n_tokens, num_labels]

    def score(
        self,
        problem: str,
        steps: Sequence[str],
        *,
        threshold: float | None = None,
        chunk_size: int | None = None,
    ) -> StepScores:
        """Score every step of a solution.

        Args:
            problem: the question.
            steps: the solution, one string per step.
            threshold: overrides ``self.threshold`` for ``first_error``.
            chunk_size: prefill in chunks of this many tokens (the rewards do not change).

        Returns:
            ``StepScores`` with one reward per step.

        Example:
            >>> prm = tp.load_prm()
            >>> prm.score("Mia has 3 apples. She buys 4 more. How many?",
            ...           ["3 + 4 = 8.", "So the answer is 8."]).first_error
            -1
        """
        cut = check_threshold(self.threshold if threshold is None else threshold)
        whole("chunk_size", chunk_size, minimum=1, optional=True)
        formatted = self.format(problem, steps)
        per_token = self.per_token(formatted.token_ids, chunk_size=chunk_size)
        rewards = step_rewards(per_token, formatted.token_ids, step_tag_id=formatted.step_tag_id,
                               convention=self.convention,
                               returned_token_ids=self.returned_token_ids)
        return StepScores(rewards, first_error_from_rewards(rewards, cut), cut, list(steps),
                          formatted)

    def per_token_batch(self, token_ids: Sequence[Sequence[int]]) -> list[Tensor]:
        """``per_token`` for several prompts, in one padded forward where the model allows.

        Probe and ``token_classify`` PRMs on a decoder run ``tokpool.prm.batched.padded_hidden``
        (right padding, causal attention: equal to one-at-a-time up to float rounding); other
        PRMs (remote code, ``token_pair``, encoders) run the prompts one at a time.

        Returns:
            One ``[n_tokens, width]`` float32 tensor per prompt, as ``per_token``.
        """
        model = self.model
        classifier = getattr(model, "classifier", None)
        batchable = (not self.remote and getattr(model, "attn_type", None) == "decoder"
                     and (self.head is not None or classifier is not None))
        if not batchable:
            return [self.per_token(ids) for ids in token_ids]
        if self.head is not None:
            hidden = padded_hidden(model, token_ids, layer=self.layer)
            with torch.inference_mode():
                return [self.head(h) for h in hidden]  # [n_tokens, num_labels] each
        hidden = padded_hidden(model, token_ids)
        weight, bias = classifier.weight.float(), classifier.bias
        bias = None if bias is None else bias.float()
        with torch.inference_mode():  # float32 head, as the engine's token_classify head
            return [nn.functional.linear(h.float(), weight, bias) for h in hidden]

    def score_records(
        self,
        records: Sequence[dict[str, Any]],
        *,
        batch_size: int = 8,
        progress: bool = False,
        threshold: float | None = None,
    ) -> list[StepScores]:
        """``score`` every dataset record (``prompt``, ``completions``), ``batch_size`` prompts
        per forward (``per_token_batch``), prompts of similar length together.

        Args:
            records: dataset records (``tp.load_prm_dataset``).
            batch_size: prompts per forward (1: the engine path, ``score``, one at a time).
            progress: show one progress line on stdout (a text bar updated in place).
            threshold: overrides ``self.threshold`` for ``first_error``.

        Returns:
            One ``StepScores`` per record, in order. Rewards equal ``score``'s up to float
            rounding (about 1e-6).

        Raises:
            ValueError: ``batch_size`` below 1; a record ``format_steps`` refuses.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        cut = check_threshold(self.threshold if threshold is None else threshold)
        flag("progress", progress)
        records = check_records(records)
        formatted = [self.format(r["prompt"], r["completions"]) for r in records]
        order = sorted(range(len(records)), key=lambda i: formatted[i].num_tokens)
        results: list[StepScores | None] = [None] * len(records)
        bar = None
        if progress:
            from tqdm.std import tqdm  # text, not a widget: readable after save-and-reopen

            what = "probe" if self.head is not None else getattr(self.model, "name", "PRM")
            # one line on stdout, redrawn in place (carriage return): a notebook shows it as
            # ordinary output, not a stderr box
            bar = tqdm(total=len(records), desc=f"scoring ({what})", unit="example",
                       file=sys.stdout, mininterval=0.5)
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            if batch_size == 1:
                per_token = [self.per_token(formatted[rows[0]].token_ids)]
            else:
                per_token = self.per_token_batch([formatted[i].token_ids for i in rows])
            for i, logits in zip(rows, per_token, strict=True):
                f = formatted[i]
                rewards = step_rewards(logits, f.token_ids, step_tag_id=f.step_tag_id,
                                       convention=self.convention,
                                       returned_token_ids=self.returned_token_ids)
                results[i] = StepScores(rewards, first_error_from_rewards(rewards, cut), cut,
                                        list(records[i]["completions"]), f)
            if bar is not None:
                bar.update(len(rows))
        if bar is not None:
            bar.close()
        return results  # type: ignore[return-value]  # every index was filled above
