"""Where a simulated step's hidden states come from: the ``HiddenStateSource`` protocol.

The simulator owns the step loop and ONE persistent hidden-state buffer
``[max_num_batched_tokens, width]`` (an engine's static CUDA-graph output buffer). Each step it
asks a source to write the rows of the chunks it scheduled into the first rows of that buffer,
then pools them. After a request is delivered, the oracle asks the source what a correct engine
would have delivered (``reference``) and compares, exactly.

Two sources implement the protocol:

- ``SyntheticSource`` (here, the default): every row is a pure function of the token's index in
  the workload, cheap, and different for every token, so an overwritten row is always seen.
- ``tokpool.ModelSource`` (the models package): a real model's hidden states, chunk by chunk.

Write your own by providing the five methods and two attributes below; no base class needed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from ..._deprecation import TokpoolDeprecationWarning
from ...pooler.heads import DTypeLike, resolve_dtype
from ..config import SYNTHETIC_STEP_TAG_ID, SimConfig


@runtime_checkable
class HiddenStateSource(Protocol):
    """What the simulator needs from anything that produces hidden states.

    Attributes:
        width: width of the rows ``fill`` writes. This is the width *pooling sees*: the
            model's hidden size for ``token_embed``/``embed``, ``num_labels`` for
            ``token_classify``/``classify`` (the score head runs inside the model, as for
            process reward models, so the model's output rows are logits).
        dtype: dtype of those rows (the model's activation dtype).

    Call order, per simulation: ``prepare(prompt_lens)`` once; then per step
    ``fill(out, chunks)`` with the step's chunks; ``reference(r)`` and ``token_ids(r)`` any time
    after request ``r``'s last chunk was filled; ``reset(r)`` if ``r`` is preempted (it then
    restarts from position 0): a full KV cache preempts requests, which then restart.

    Optional: ``skip_cached(request, tokens)``, called before ``fill`` when a request starts
    after a prefix-cache hit of ``tokens`` tokens (its first chunk then starts there). A source
    whose rows depend on the position only (``SyntheticSource``) needs none; one that runs a
    model (``tokpool.ModelSource``) computes the cached prefix's KV there.
    """

    width: int
    dtype: torch.dtype

    def prepare(self, prompt_lens: Sequence[int]) -> None:
        """Validate (and allocate for) a workload of ``len(prompt_lens)`` requests.

        Raises:
            ValueError: the source cannot serve these lengths (say which request and why).
        """
        ...

    def fill(self, out: Tensor, chunks: Sequence[tuple[int, int, int]]) -> None:
        """Write one step's rows into ``out`` in place.

        Args:
            out: ``[n_step_tokens, width]`` of ``dtype``, a view of the first
                ``n_step_tokens`` rows of the persistent buffer (never keep a reference).
            chunks: ``(request, start, stop)`` in batch order; rows of positions
                ``start..stop-1`` of ``request`` go to consecutive rows of ``out``, chunk after
                chunk. ``start`` equals the tokens the request had computed before the step.
        """
        ...

    def reference(self, request: int) -> Tensor:
        """``[prompt_len, width]`` CPU tensor of ``dtype``: the rows a correct engine
        delivers for ``request`` before any pooling head (what ALL pooling must return)."""
        ...

    def token_ids(self, request: int) -> Tensor | None:
        """``[prompt_len]`` int64 CPU token ids of ``request`` (STEP pooling selects rows whose
        id is the step tag), or ``None`` when the source has no tokens."""
        ...

    def reset(self, request: int) -> None:
        """Forget ``request``'s progress (preemption): its next chunk starts at position 0."""
        ...


def check_source(source: object, *, width: int, dtype: torch.dtype) -> None:
    """Check that ``source`` implements the protocol and writes ``[.., width]`` rows of ``dtype``.

    Raises:
        TypeError: a method or attribute of the protocol is missing.
        ValueError: the source's width or dtype differs from the simulation's.
    """
    if not hasattr(source, "width") and hasattr(source, "hidden_size"):
        warn_renamed(f"{type(source).__name__}.hidden_size", "width")
        source.width = source.hidden_size  # a source written before the rename keeps working
    missing = [
        name
        for name in ("width", "dtype", "prepare", "fill", "reference", "token_ids", "reset")
        if not hasattr(source, name)
    ]
    if missing:
        raise TypeError(
            f"{type(source).__name__} is not a HiddenStateSource: it lacks {missing} "
            "(see tokpool.sim.HiddenStateSource)"
        )
    if int(source.width) != width:
        raise ValueError(
            f"the source writes rows of width {source.width} but the simulation pools "
            f"rows of width {width}; set SimConfig(hidden_size=...) (token_embed) or "
            "num_labels=... (token_classify) to the source's width"
        )
    if source.dtype != dtype:
        raise ValueError(
            f"the source writes {source.dtype} but SimConfig.dtype is {dtype}; "
            "make them the same"
        )


class SyntheticSource:
    """Deterministic synthetic hidden states, exactly reproducible per (request, position).

    Every token gets a global index ``g`` (its position plus the lengths of the requests before
    it). Row ``g`` is a pure function of ``g``: the first ``D`` columns hold the base-``capacity``
    digits of ``g``, each encoded as an exactly representable value of the dtype with magnitude
    in ``[2**-8, 2**8)``; the other columns repeat column 0 scaled by powers of two (exact too).
    So any two different tokens differ in their first ``D`` columns, and an overwritten row can
    never go unnoticed by ``torch.equal`` (while the workload has at most
    ``capacity ** min(width, D)`` tokens; ``prepare`` warns beyond that).

    Args:
        width: row width (pooling's width; the old keyword ``hidden_size=`` warns).
        dtype: row dtype (``"bfloat16"``, ``torch.float32``, ...).
        step_tag_every: if set, every ``k``-th token (positions ``k-1, 2k-1, ...``) is the step
            tag ``step_tag_id`` in ``token_ids``; otherwise no token is.
        step_tag_id: the tag's id (other tokens never use it).

    Example:
        >>> src = SyntheticSource(8, "bfloat16")
        >>> src.prepare([3, 5])
        >>> buf = torch.empty(4, 8, dtype=torch.bfloat16)
        >>> src.fill(buf, [(0, 0, 3), (1, 0, 1)])
        >>> torch.equal(buf[:3], src.reference(0))
        True
    """

    def __init__(
        self,
        width: int | None = None,
        dtype: DTypeLike = "bfloat16",
        *,
        step_tag_every: int | None = None,
        step_tag_id: int = SYNTHETIC_STEP_TAG_ID,
        hidden_size: int | None = None,
    ) -> None:
        if hidden_size is not None:
            warn_renamed("SyntheticSource(hidden_size=...)", "width")
            width = hidden_size if width is None else width
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ValueError(f"width must be a positive int, got {width!r}")
        if step_tag_every is not None and (
            isinstance(step_tag_every, bool)
            or not isinstance(step_tag_every, int)
            or step_tag_every < 1
        ):
            raise ValueError(
                f"step_tag_every must be a positive int or None, got {step_tag_every!r}"
            )
        self.width = width
        self.dtype: torch.dtype = resolve_dtype(dtype)
        self.step_tag_every = step_tag_every
        self.step_tag_id = int(step_tag_id)
        # Mantissa bits p: values (2**p + m) * 2**(e - p), m < 2**p, e in [-8, 8), +-: all exact.
        self._mantissa_bits = -int(math.log2(torch.finfo(self.dtype).eps))  # explicit mantissa bits
        self.capacity = 1 << (self._mantissa_bits + 5)  # distinct values per column
        self._offsets: list[int] = []
        self._lens: list[int] = []
        self._digits = 1
        # Columns >= D repeat column 0 times +-2**k (k in -4..4): exact, cheap, not all equal.
        col = torch.arange(width, dtype=torch.float64)
        sign = 1.0 - 2.0 * torch.remainder(torch.div(col, 9, rounding_mode="floor"), 2)
        self._col_scale = (sign * torch.exp2(torch.remainder(col, 9) - 4)).to(self.dtype)

    @property
    def hidden_size(self) -> int:
        """The old name of ``width``."""
        warn_renamed("SyntheticSource.hidden_size", "width")
        return self.width

    def __repr__(self) -> str:
        return (
            f"SyntheticSource(width={self.width}, dtype={self.dtype}, "
            f"step_tag_every={self.step_tag_every})"
        )

    def prepare(self, prompt_lens: Sequence[int]) -> None:
        """Record the workload (global token offsets); warn if tokens cannot all be told apart."""
        lens = [int(n) for n in prompt_lens]
        bad = [(i, n) for i, n in enumerate(lens) if n < 1]
        if bad:
            raise ValueError(f"prompt lengths must be >= 1, got (request, length) {bad[:5]}")
        self._lens = lens
        self._offsets = [0]
        for n in lens[:-1]:
            self._offsets.append(self._offsets[-1] + n)
        total = sum(lens)
        digits = 1
        while self.capacity**digits < total:
            digits += 1
        self._digits = digits
        if digits > self.width:
            warnings.warn(
                f"SyntheticSource: {total} tokens need {digits} columns of {self.dtype} to be "
                f"told apart but rows have {self.width}; an overwritten row may go "
                "unnoticed in tensor mode (use float32 or a wider row)",
                stacklevel=2,
            )

    def _check(self, request: int) -> int:
        if not 0 <= request < len(self._lens):
            raise ValueError(
                f"request {request} is not in the prepared workload of {len(self._lens)} "
                "requests; call prepare(prompt_lens) first"
            )
        return self._lens[request]

    def _encode(self, index: Tensor) -> Tensor:
        """Value index in ``[0, capacity)`` → exact value of ``dtype`` (``[n]`` → ``[n]``)."""
        p = self._mantissa_bits
        sign = 1.0 - 2.0 * (index & 1).to(torch.float64)
        exponent = ((index >> 1) & 15).to(torch.float64) - 8.0
        mantissa = ((index >> 5) + (1 << p)).to(torch.float64)
        return (sign * mantissa * torch.exp2(exponent - p)).to(self.dtype)

    def rows(self, global_index: Tensor) -> Tensor:
        """Rows for global token indices: ``[n]`` int64 → ``[n, width]`` of ``dtype``."""
        out = torch.empty((global_index.numel(), self.width), dtype=self.dtype)
        self._write(out, global_index)
        return out

    def _write(self, out: Tensor, g: Tensor) -> None:
        """Rows of global indices ``g`` (``[n]`` int64, on ``out``'s device) into ``out``."""
        cap, width = self.capacity, self.width
        digits = [torch.div(g, cap**d, rounding_mode="floor") % cap for d in range(self._digits)]
        first = self._encode(digits[0])  # [n]
        if self._col_scale.device != out.device:
            self._col_scale = self._col_scale.to(out.device)  # once per device
        torch.mul(first.unsqueeze(1), self._col_scale, out=out)  # [n, width]
        for c in range(min(self._digits, width)):
            # Column c < D carries digit c, shifted per column (a bijection mod cap).
            out[:, c] = self._encode((digits[c] + 1009 * c) % cap)

    def _global(self, request: int, start: int, stop: int, device=None) -> Tensor:
        n = self._check(request)
        if not 0 <= start < stop <= n:
            raise ValueError(
                f"request {request}: chunk [{start}, {stop}) is outside its {n} tokens"
            )
        return torch.arange(start, stop, dtype=torch.int64, device=device) + self._offsets[request]

    def fill(self, out: Tensor, chunks: Sequence[tuple[int, int, int]]) -> None:
        """Write the chunks' rows into ``out`` (``[n_step_tokens, width]``, in place; on
        any device, computed there)."""
        if not chunks:
            return
        g = torch.cat([self._global(r, a, b, out.device) for r, a, b in chunks])  # [n_step_tokens]
        if out.shape != (g.numel(), self.width) or out.dtype != self.dtype:
            raise ValueError(
                f"out is {tuple(out.shape)} {out.dtype} but the chunks {list(chunks)[:4]} need "
                f"({g.numel()}, {self.width}) {self.dtype}"
            )
        self._write(out, g)

    def reference(self, request: int) -> Tensor:
        """``[prompt_len, width]``: the rows a correct engine delivers (pre-head)."""
        return self.rows(self._global(request, 0, self._check(request)))

    def token_ids(self, request: int) -> Tensor:
        """``[prompt_len]`` int64: the step tag every ``step_tag_every`` tokens (never, if
        ``None``), other ids elsewhere."""
        n = self._check(request)
        pos = torch.arange(n, dtype=torch.int64)
        filler = self.step_tag_id + 1 + pos % 97  # never the tag
        if self.step_tag_every is None:
            return filler
        return torch.where((pos + 1) % self.step_tag_every == 0, self.step_tag_id, filler)

    def reset(self, request: int) -> None:
        """Nothing to forget: rows depend on (request, position) only."""
        self._check(request)


def default_source(config: SimConfig) -> SyntheticSource:
    """The synthetic source a config implies (width, dtype, step tags)."""
    return SyntheticSource(
        config.width,
        config.dtype,
        step_tag_every=config.step_tag_every,
        step_tag_id=config.effective_step_tag_id or SYNTHETIC_STEP_TAG_ID,
    )


def warn_renamed(old: str, new: str) -> None:
    """``hidden_size`` of a source was the ROW width pooling sees (``num_labels`` for classify
    tasks), not the model's hidden size: the name is now ``width``."""
    warnings.warn(f"{old} is now {new!r} (the width of the rows pooling sees, not the model's "
                  "hidden size)", TokpoolDeprecationWarning, stacklevel=3)


class PromptTokenIds:
    """A source whose ``token_ids`` are the prompts' own (the pooling kinds that select rows
    by the prompt's tokens: JinaForRanking's markers); everything else is ``source``'s.

    Args:
        source: the hidden-state source (rows, reference, reset).
        token_ids: per request, its prompt token ids (as ``tp.simulate`` was given them).
    """

    def __init__(self, source, token_ids) -> None:
        self.source = source
        self._ids = [torch.as_tensor(list(ids), dtype=torch.int64) for ids in token_ids]

    def __getattr__(self, name: str):
        return getattr(self.source, name)  # width, dtype, prepare, fill, reference, reset

    def token_ids(self, request: int) -> Tensor:
        """``[prompt_len]`` int64: the prompt's token ids."""
        return self._ids[request]
