"""``ModelSource``: real hidden states for the step simulator, under the simulator's schedule.

The simulator owns the step loop and a persistent hidden-state buffer (as an engine's static
CUDA-graph output buffer). Each step it asks the source to ``fill`` that buffer with the rows of
the chunks it scheduled; the source runs each chunk through its request's own KV cache, so
several requests interleave in one step exactly as in an engine. Whatever pooling later delivers
is compared against ``reference(request)``: the host copy of the rows the source produced, so the
oracle is exact (no chunked-vs-full numerical drift enters the corruption check).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor

from ..sim.backends.source import warn_renamed
from .forward import PrefillStream
from .prompts import Prompt

if TYPE_CHECKING:
    from .pooling_model import PoolingModel


def require_pooling_model(model: object, name: str = "model") -> None:
    """``TypeError`` unless ``model`` is a loaded model with ``PoolingModel``'s interface
    (``tp.load_model(...)``: ``token_ids``, ``encode``, ``hidden_size``), not its name or
    path."""
    if not all(hasattr(model, a) for a in ("token_ids", "encode", "hidden_size", "num_layers")):
        hint = (f"; load it first with tp.load_model({model!r})" if isinstance(model, str)
                else "")
        raise TypeError(f"{name} must be a tp.PoolingModel (tp.load_model(...)), got "
                        f"{type(model).__name__} {model!r:.60}{hint}")


class ModelSource:
    """A hidden-state source backed by a real model (the simulator's ``HiddenStateSource``).

    Args:
        model: a ``PoolingModel`` (decoders can be chunked; encoders need whole prompts).
        prompts: the requests' prompts, in request order (text or token ids).
        layer: which hidden states to deliver (see ``PoolingModel.encode``).
        task: ``"token_embed"`` delivers hidden states; ``"token_classify"`` (models with a
            token-classification head) delivers the head's logits, as a process reward model's
            score head runs inside the model.

    Attributes:
        width: width of the rows written by ``fill`` (``num_labels`` for
            ``token_classify``): the width pooling sees.
        dtype: dtype of the rows (the model's).
        prompt_lens: tokens per request: pass these to ``tp.simulate``.

    Example:
        >>> model = tp.load_model("smollm2-135m")
        >>> source = tp.ModelSource(model, ["a prompt", "another one"])
        >>> source.prompt_lens, source.width
        ([2, 2], 576)
        >>> config = tp.SimConfig(hidden_size=576, dtype=source.dtype, max_num_batched_tokens=3)
        >>> tp.simulate(source.prompt_lens, config, source=source).corrupted  # real rows, chunked
        []
    """

    def __init__(
        self,
        model: PoolingModel,
        prompts: Sequence[Prompt],
        *,
        layer: int = -1,
        task: Literal["token_embed", "token_classify"] = "token_embed",
    ) -> None:
        require_pooling_model(model)
        self.model = model
        self.layer = layer
        self.task = task
        self._score = None
        if task == "token_classify":
            self._score = model.classifier
            if self._score is None or "token_classify" not in model.supported_tasks:
                raise ValueError(
                    f"task='token_classify' needs a token-classification head, but {model.name} "
                    f"supports {sorted(model.supported_tasks)}; use task='token_embed'"
                )
            self.width = int(model.hf_model.config.num_labels)
        elif task == "token_embed":
            self.width = model.hidden_size
        else:
            raise ValueError(f"task must be 'token_embed' or 'token_classify', got {task!r}")
        self.dtype = model.dtype
        self._ids = model.token_ids(prompts)
        self._streams = [PrefillStream(model, ids, layer=layer) for ids in self._ids]
        self._produced = [
            torch.zeros((len(ids), self.width), dtype=self.dtype) for ids in self._ids
        ]

    @property
    def hidden_size(self) -> int:
        """The old name of ``width`` (the rows' width: ``num_labels`` for token_classify)."""
        warn_renamed("ModelSource.hidden_size", "width")
        return self.width

    @property
    def prompt_lens(self) -> list[int]:
        return [int(ids.numel()) for ids in self._ids]

    def __len__(self) -> int:
        return len(self._ids)

    def _check_request(self, request: int) -> int:
        if isinstance(request, bool):
            raise TypeError(f"request must be an int index, got {request!r}")
        request = operator.index(request)  # numpy / tensor integers too
        if not 0 <= request < len(self._ids):
            raise ValueError(
                f"request {request} does not exist: this source has {len(self._ids)} prompts"
            )
        return request

    def prepare(self, prompt_lens: Sequence[int]) -> None:
        """Check the simulator's prompt lengths against this source's prompts; start afresh.

        Raises:
            ValueError: a different number of requests or different lengths (listed).
        """
        mine = self.prompt_lens
        theirs = [int(n) for n in prompt_lens]
        if theirs != mine:
            wrong = [(i, a, b) for i, (a, b) in enumerate(zip(theirs, mine, strict=False))
                     if a != b][:5]
            raise ValueError(
                f"the simulation has {len(theirs)} requests but this ModelSource has "
                f"{len(mine)} prompts; mismatched (request, simulated, source) lengths: {wrong}. "
                "Pass source.prompt_lens to tp.simulate"
            )
        for request in range(len(mine)):
            self.reset(request)
            self._produced[request].zero_()

    def fill(self, out: Tensor, chunks: Sequence[tuple[int, int, int]]) -> None:
        """Write this step's hidden states into ``out``, chunk after chunk.

        Args:
            out: ``[n_step_tokens, width]`` in ``dtype``, usually a view of the engine's
                persistent buffer (written in place).
            chunks: ``(request, start, stop)`` in batch order; each continues its request's
                prefill (``start`` = tokens computed so far, after ``skip_cached`` for a
                prefix-cache hit).

        Raises:
            ValueError: ``out`` of the wrong shape or dtype, a chunk that does not continue its
                request (after a preemption, call ``reset`` first), or part of a prompt for an
                encoder model.
        """
        sizes = [stop - start for _, start, stop in chunks]
        if out.dim() != 2 or out.shape != (sum(sizes), self.width):
            raise ValueError(
                f"out has shape {tuple(out.shape)} but the chunks {list(chunks)} need "
                f"({sum(sizes)}, {self.width})"
            )
        if out.dtype != self.dtype:
            raise ValueError(
                f"out has dtype {out.dtype} but this source produces {self.dtype}; allocate "
                "the buffer with source.dtype"
            )
        row = 0
        for request, start, stop in chunks:
            request = self._check_request(request)
            stream = self._streams[request]
            if start != stream.computed:
                raise ValueError(
                    f"request {request}: chunk [{start}, {stop}) does not continue its prefill, "
                    f"which has {stream.computed} tokens computed; call reset({request}) on "
                    "preemption before recomputing"
                )
            hidden = stream.advance(stop)  # [stop - start, hidden]
            if self._score is not None:
                with torch.inference_mode():
                    hidden = self._score(hidden)  # [stop - start, num_labels] logits
            out[row : row + stop - start].copy_(hidden)
            self._produced[request][start:stop].copy_(hidden)  # host copy: the exact oracle
            row += stop - start

    def skip_cached(self, request: int, tokens: int) -> None:
        """A prefix-cache hit: the first ``tokens`` tokens' KV comes from the cache, so the
        request's next chunk starts after them. Their KV is computed here (as the cached blocks
        hold it) and their rows kept for the oracle, but never delivered.

        Raises:
            ValueError: the request has tokens computed already (a hit starts a prefill).
        """
        request = self._check_request(request)
        stream = self._streams[request]
        if stream.computed:
            raise ValueError(f"request {request}: a prefix-cache hit starts a prefill, but "
                             f"{stream.computed} tokens are computed; call reset first")
        prefix = stream.advance(tokens)  # [tokens, hidden]: the cached blocks' KV
        if self._score is not None:
            with torch.inference_mode():
                prefix = self._score(prefix)
        self._produced[request][:tokens].copy_(prefix)

    def reference(self, request: int) -> Tensor:
        """What a correct engine delivers for ``request``: ``[prompt_len, hidden_size]``, the
        rows ``fill`` produced (host copy, the source's dtype).

        Raises:
            ValueError: the request's prefill is not complete.
        """
        request = self._check_request(request)
        stream = self._streams[request]
        if stream.computed != stream.prompt_len:
            raise ValueError(
                f"request {request} has {stream.computed} of {stream.prompt_len} tokens "
                "computed; its reference exists once its prefill finishes"
            )
        return self._produced[request].clone()  # the caller may edit it; ours stays exact

    def token_ids(self, request: int) -> Tensor:
        """``[prompt_len]`` int64 token ids of ``request``."""
        return self._ids[self._check_request(request)]

    def reset(self, request: int) -> None:
        """Drop ``request``'s KV cache (preemption: it restarts from token 0)."""
        self._streams[self._check_request(request)].reset()

    def __repr__(self) -> str:
        return (
            f"ModelSource({self.model.name!r}, n_requests={len(self)}, "
            f"prompt_lens={self.prompt_lens}, dtype={self.dtype})"
        )
