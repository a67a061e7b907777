"""Pooling heads: what runs on pooled hidden states before they leave the engine.

Order (vLLM's): cast to the head dtype (engines default to float32) → projector or classifier →
Matryoshka slice ``[..., :dimensions]`` (embed heads) → calibration ``(x - mean) / sigma``
(classify heads) → activation when ``use_activation`` (embed: L2 normalise per token; classify:
softmax over labels when there are ≥ 2, sigmoid when there is 1).

Every head maps ``None`` (an unfinished request) to ``None`` and takes either one tensor or a
list with one entry per request.

NaN/Inf policy: a head refuses non-finite values instead of passing them on (an Inf would turn
into NaN after normalising, and a NaN reward reads as "no error" to a threshold). Each head
checks its input after the cast to the head dtype (so a float16 overflow is caught too) and its
output after a projector, classifier or calibration; both raise ``NonFiniteError`` (a
``ValueError``) saying how many values, which row, and what to do. The check is one ``sum``
reduction per tensor (no mask is allocated unless it fails); ``check_finite=False`` turns it off
for a head whose NaNs you want to see.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ._checks import check_flag, check_rows_match, first_nonfinite
from .metadata import PoolingMetadata

DTypeLike = torch.dtype | str
_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "float64": torch.float64,
}
FLOAT_DTYPES: tuple[torch.dtype, ...] = (
    torch.float32, torch.bfloat16, torch.float16, torch.float64
)


def resolve_dtype(dtype: DTypeLike | None, *, what: str = "dtype") -> torch.dtype | None:
    """``"float32"``/``"bf16"``/``torch.float16``… → ``torch.dtype`` (``None`` stays ``None``).

    Raises:
        ValueError: a name or dtype that is not a floating-point type pooling can use.
    """
    if dtype is None:
        return None
    if isinstance(dtype, str):
        key = dtype.lower().removeprefix("torch.")
        if key not in _DTYPES:
            raise ValueError(f"unknown {what} {dtype!r}; use one of {sorted(set(_DTYPES))}")
        return _DTYPES[key]
    if isinstance(dtype, torch.dtype):
        if dtype not in FLOAT_DTYPES:
            raise ValueError(f"{what} must be a floating-point dtype, got {dtype}")
        return dtype
    raise TypeError(f"{what} must be a torch.dtype or a name, got {type(dtype).__name__}")


_SIZES: dict[object, int] = {}  # dtype (or name) -> bytes per element, asked once each


def dtype_size(dtype: DTypeLike) -> int:
    """Bytes per element of a (named) dtype."""
    try:
        return _SIZES[dtype]
    except (KeyError, TypeError):  # not asked yet, or not a dtype at all (resolve_dtype says)
        size = torch.empty((), dtype=resolve_dtype(dtype)).element_size()
    _SIZES[dtype] = size
    return size


class NonFiniteError(ValueError):
    """A head met NaN or ±Inf in its input or produced one; the message says where."""


def check_finite(x: Tensor, what: str) -> Tensor:
    """Return ``x`` when it holds no NaN/±Inf; else raise ``NonFiniteError`` naming ``what``.

    Raises:
        NonFiniteError: the count, the first offending value and its row, and what to do.
    """
    problem = first_nonfinite(x)
    if problem is not None:
        raise NonFiniteError(
            f"{what}: {problem}; fix the model or the inputs upstream (a NaN output is not a "
            "score), or pass check_finite=False to the head to let them through"
        )
    return x


def _check_real(value: object, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number or None, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


def _each(pooled, fn):
    if pooled is None:
        return None
    if isinstance(pooled, Tensor):
        return fn(pooled)
    return [None if p is None else fn(p) for p in pooled]


def _check_width(module: object, x: Tensor, what: str) -> None:
    """A linear layer's ``in_features`` must equal the rows' width (else torch's matmul error)."""
    expected = getattr(module, "in_features", None)
    if isinstance(expected, int) and x.shape[-1] != expected:
        raise ValueError(
            f"{what} takes rows of width {expected} but the pooled rows have width "
            f"{x.shape[-1]} (shape {tuple(x.shape)}); use a {what} built for this model's "
            "hidden size"
        )


def _check_rows(x: Tensor, what: str) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{what} expects tensors, got {type(x).__name__}")
    if x.dim() not in (1, 2):
        raise ValueError(f"{what} expects [n_tokens, width] or [width], got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(
            f"{what} expects floating-point hidden states, got dtype {x.dtype} (shape "
            f"{tuple(x.shape)}): token ids or labels, not hidden states? Pass the model's "
            "hidden states, or cast with .float()"
        )


class TokenEmbeddingHead:
    """Per-token embedding head (``token_embed``; also ``embed`` on a pooled vector).

    Args:
        head_dtype: cast before anything else (``None`` keeps the input dtype).
        projector: optional ``[.., hidden] -> [.., embed_dim]`` module (sentence-transformers'
            Dense layer).
        normalize: L2-normalise each row when ``use_activation``.
        check_finite: raise ``NonFiniteError`` on NaN/±Inf (see the module's NaN/Inf policy).

    Call: ``head(pooled, *, dimensions=None, use_activation=True)``; ``pooled`` is
    ``[n_tokens, hidden]`` (or a list of those / ``None``) → ``[n_tokens, dimensions or D]``.
    """

    def __init__(
        self,
        *,
        head_dtype: DTypeLike | None = torch.float32,
        projector: Callable[[Tensor], Tensor] | None = None,
        normalize: bool = True,
        check_finite: bool = True,
    ) -> None:
        self.head_dtype = resolve_dtype(head_dtype, what="head_dtype")
        if projector is not None and not callable(projector):
            raise TypeError(f"projector must be callable (a module), got {projector!r}")
        self.projector = projector
        self.normalize = check_flag(normalize, "normalize")
        self.check_finite = check_flag(check_finite, "check_finite")

    def get_supported_tasks(self) -> frozenset[str]:
        return frozenset({"token_embed", "embed"})

    def __call__(self, pooled, *, dimensions: int | None = None, use_activation: bool = True):
        return _each(pooled, lambda x: self.forward_one(x, dimensions, use_activation))

    def forward_one(
        self, x: Tensor, dimensions: int | None = None, use_activation: bool = True
    ) -> Tensor:
        _check_rows(x, "TokenEmbeddingHead")
        check_flag(use_activation, "use_activation")
        raw = x
        if self.head_dtype is not None:
            x = x.to(self.head_dtype)
        if self.check_finite:
            _check_input(raw, x, "TokenEmbeddingHead")
        if self.projector is not None:
            _check_width(self.projector, x, "projector")
            x = self.projector(x)  # [n_tokens, embed_dim]
            if self.check_finite:
                check_finite(x, "TokenEmbeddingHead projector output")
        if dimensions is not None:
            x = x[..., : check_dimensions(dimensions, x.shape[-1])]  # Matryoshka
        if use_activation and self.normalize:
            x = F.normalize(x, p=2, dim=-1)
        return x


def check_dimensions(dimensions: int, width: int) -> int:
    """Validate a Matryoshka ``dimensions`` against the embedding width."""
    if isinstance(dimensions, bool) or not isinstance(dimensions, int):
        raise TypeError(f"dimensions must be an int, got {dimensions!r}")
    if not 1 <= dimensions <= width:
        raise ValueError(
            f"dimensions={dimensions} is outside [1, {width}]: the embedding has {width} "
            "dimensions; ask for at most that many (or None for all)"
        )
    return dimensions


ClassifierActivation = Literal["auto", "softmax", "sigmoid", "none"]


class TokenClassifierHead:
    """Per-token classification head (``token_classify``; also ``classify`` on pooled rows).

    Args:
        head_dtype: cast before the classifier (``None`` keeps the input dtype).
        classifier: optional ``[.., hidden] -> [.., num_labels]`` module; without it the input
            already holds logits (a score head inside the model, as for PRMs).
        logit_mean, logit_sigma: affine calibration ``(logit - mean) / sigma``; both finite,
            ``sigma > 0``.
        activation: ``"auto"`` is softmax for ≥ 2 labels, sigmoid for 1.
        check_finite: raise ``NonFiniteError`` on NaN/±Inf (see the module's NaN/Inf policy).

    Raises:
        ValueError: an unknown activation, ``logit_sigma <= 0``, a non-finite calibration.
        TypeError: a calibration value that is not a number, a flag that is not a bool.

    Call: ``head(pooled, *, use_activation=True)``: ``[n_tokens, hidden]`` →
    ``[n_tokens, num_labels]``.
    """

    def __init__(
        self,
        *,
        head_dtype: DTypeLike | None = torch.float32,
        classifier: Callable[[Tensor], Tensor] | None = None,
        logit_mean: float | None = None,
        logit_sigma: float | None = None,
        activation: ClassifierActivation = "auto",
        check_finite: bool = True,
    ) -> None:
        _check_activation(activation)
        self.logit_mean = _check_real(logit_mean, "logit_mean")
        self.logit_sigma = _check_real(logit_sigma, "logit_sigma")
        if self.logit_sigma is not None and self.logit_sigma <= 0:
            raise ValueError(
                f"logit_sigma must be > 0, got {logit_sigma}: it divides the logits, and a "
                "negative scale would invert every probability (zero divides by zero)"
            )
        if classifier is not None and not callable(classifier):
            raise TypeError(f"classifier must be callable (a module), got {classifier!r}")
        self.head_dtype = resolve_dtype(head_dtype, what="head_dtype")
        self.classifier = classifier
        self.activation = activation
        self.check_finite = check_flag(check_finite, "check_finite")

    def get_supported_tasks(self) -> frozenset[str]:
        return frozenset({"token_classify", "classify"})

    def __call__(self, pooled, *, use_activation: bool = True):
        return _each(pooled, lambda x: self.forward_one(x, use_activation))

    def forward_one(self, x: Tensor, use_activation: bool = True) -> Tensor:
        _check_rows(x, "TokenClassifierHead")
        check_flag(use_activation, "use_activation")
        raw = x
        if self.head_dtype is not None:
            x = x.to(self.head_dtype)
        if self.check_finite:
            _check_input(raw, x, "TokenClassifierHead")
        if self.classifier is not None:
            _check_width(self.classifier, x, "classifier")
        logits = self.classifier(x) if self.classifier is not None else x
        if logits.dim() != x.dim() or logits.shape[-1] < 1:
            raise ValueError(
                f"the classifier must map [n_tokens, hidden] to [n_tokens, num_labels>=1], "
                f"got {tuple(x.shape)} -> {tuple(logits.shape)}"
            )
        if self.logit_mean is not None:
            logits = logits - self.logit_mean
        if self.logit_sigma is not None:
            logits = logits / self.logit_sigma
        if self.check_finite and logits is not x:
            check_finite(logits, "TokenClassifierHead logits (after classifier/calibration)")
        if use_activation:
            logits = apply_classifier_activation(logits, self.activation)
        return logits  # [n_tokens, num_labels]


def _check_activation(activation: object) -> None:
    if activation not in ("auto", "softmax", "sigmoid", "none"):
        raise ValueError(
            f"unknown activation {activation!r}; use 'auto', 'softmax', 'sigmoid' or 'none'"
        )


def _check_input(raw: Tensor, cast: Tensor, head: str) -> None:
    """The head's input after the cast; says so when the cast itself overflowed."""
    problem = first_nonfinite(cast)
    if problem is None:
        return
    if cast is not raw and first_nonfinite(raw) is None:
        raise NonFiniteError(
            f"{head}: casting {raw.dtype} to head dtype {cast.dtype} overflowed ({problem}); "
            f"the values exceed {cast.dtype}'s range — use head_dtype=torch.float32"
        )
    raise NonFiniteError(
        f"{head} input ({cast.dtype}, shape {tuple(cast.shape)}): {problem}; fix the model or "
        "the inputs upstream (a NaN output is not a score), or pass check_finite=False to the "
        "head to let them through"
    )


def apply_classifier_activation(
    logits: Tensor, activation: ClassifierActivation = "auto"
) -> Tensor:
    """Softmax over labels (≥ 2 labels) or sigmoid (1 label), or as ``activation`` says.

    Raises:
        ValueError: an activation name other than auto/softmax/sigmoid/none.
    """
    _check_activation(activation)
    if activation == "none":
        return logits
    if activation == "sigmoid" or (activation == "auto" and logits.shape[-1] == 1):
        return torch.sigmoid(logits)
    return torch.softmax(logits, dim=-1)


def _whole_prompts(metadata: PoolingMetadata, what: str) -> list[int]:
    cursor = metadata.get_pooling_cursor()
    if cursor.is_partial_prefill():
        raise RuntimeError(f"partial prefill is not supported with {what}: encoders see the "
                           "whole prompt at once")
    return metadata.prompt_lens.tolist()


def _kept_span(ids: Tensor | None, n: int, first_id: int | None, last_id: int | None):
    start, stop = 0, n
    if ids is not None and n:
        if first_id is not None and int(ids[0]) == first_id:
            start = 1
        if last_id is not None and int(ids[n - 1]) == last_id:
            stop = max(start, n - 1)
    return start, stop


class SpladeSparsePooler:
    """SPLADE ``embed`` for MLM-head encoders: per request, over kept tokens,
    ``max(log1p(relu(mlm_head(h))))`` → ``[vocab]``; CLS/SEP stripped; zeros if nothing kept.

    Call: ``pooler(hidden_states [n_tokens, hidden], metadata)`` → ``[n_requests, vocab]``.
    """

    def __init__(
        self,
        mlm_head: Callable[[Tensor], Tensor],
        *,
        cls_token_id: int | None = 101,
        sep_token_id: int | None = 102,
        pooling: Literal["max", "sum"] = "max",
        remove_cls_sep: bool = True,
    ) -> None:
        if pooling not in ("max", "sum"):
            raise ValueError(f"SPLADE pooling must be 'max' or 'sum', got {pooling!r}")
        self.mlm_head = mlm_head
        self.cls_token_id = cls_token_id
        self.sep_token_id = sep_token_id
        self.pooling = pooling
        self.remove_cls_sep = remove_cls_sep

    def get_supported_tasks(self) -> frozenset[str]:
        return frozenset({"embed"})

    def __call__(self, hidden_states: Tensor, metadata: PoolingMetadata) -> Tensor:
        check_rows_match(hidden_states, metadata, "SpladeSparsePooler")
        lens = _whole_prompts(metadata, "SPLADE pooling")
        ids = (
            metadata.get_prompt_token_ids_cpu()
            if self.remove_cls_sep and metadata.prompt_token_ids is not None
            else [None] * len(lens)
        )
        vocab = int(self.mlm_head(hidden_states[:0]).shape[-1])
        rows, offset = [], 0
        for n, req_ids in zip(lens, ids, strict=True):
            hs = hidden_states[offset : offset + n]  # [n, hidden]
            offset += n
            start, stop = _kept_span(req_ids, n, self.cls_token_id, self.sep_token_id)
            if stop <= start:
                rows.append(hs.new_zeros((vocab,)))
                continue
            scores = torch.log1p(torch.relu(self.mlm_head(hs[start:stop])))  # [kept, vocab]
            rows.append(scores.amax(dim=0) if self.pooling == "max" else scores.sum(dim=0))
        if not rows:
            return hidden_states.new_zeros((0, vocab))
        return torch.stack(rows)  # [n_requests, vocab]


class BgeM3Pooler:
    """BGE-M3-style ``embed&token_classify``: one flat vector per request,
    ``[normalised dense CLS embedding (hidden), relu(sparse_linear(h)) per non-special token]``.

    Args:
        sparse_linear: ``[.., hidden] -> [.., 1]`` token-weight layer.
        head_dtype: cast before both heads.
        bos_token_id, eos_token_id: special tokens dropped from the sparse part (first/last).

    Call: ``pooler(hidden_states [n_tokens, hidden], metadata)`` → list of
    ``[hidden + n_kept_tokens]``.
    """

    def __init__(
        self,
        sparse_linear: Callable[[Tensor], Tensor],
        *,
        head_dtype: DTypeLike | None = torch.float32,
        bos_token_id: int | None = 0,
        eos_token_id: int | None = 2,
    ) -> None:
        self.sparse_linear = sparse_linear
        self.dense_head = TokenEmbeddingHead(head_dtype=head_dtype)
        self.head_dtype = self.dense_head.head_dtype
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id

    def get_supported_tasks(self) -> frozenset[str]:
        return frozenset({"embed&token_classify"})

    def __call__(self, hidden_states: Tensor, metadata: PoolingMetadata) -> list[Tensor]:
        check_rows_match(hidden_states, metadata, "BgeM3Pooler")
        lens = _whole_prompts(metadata, "BGE-M3 pooling")
        ids = (
            metadata.get_prompt_token_ids_cpu()
            if metadata.prompt_token_ids is not None
            else [None] * len(lens)
        )
        out, offset = [], 0
        for n, req_ids in zip(lens, ids, strict=True):
            hs = hidden_states[offset : offset + n]  # [n, hidden]
            offset += n
            if n == 0:
                raise ValueError("BGE-M3 pooling needs at least one token (the CLS) per request")
            dense = self.dense_head.forward_one(hs[0])  # [hidden], normalised
            start, stop = _kept_span(req_ids, n, self.bos_token_id, self.eos_token_id)
            x = hs[start:stop]
            if self.head_dtype is not None:
                x = x.to(self.head_dtype)
            weights = torch.relu(self.sparse_linear(x))  # [kept, 1]
            if weights.dim() != 2 or weights.shape[-1] != 1:
                raise ValueError(
                    f"sparse_linear must map [n, hidden] to [n, 1], got {tuple(weights.shape)}"
                )
            out.append(torch.cat([dense.reshape(-1), weights.reshape(-1).to(dense.dtype)]))
        return out
