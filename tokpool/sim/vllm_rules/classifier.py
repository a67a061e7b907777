"""Where a classify model's score head runs, as vLLM 0.33.0 builds the model, and what the
pooler head allocates (pure functions, one place for both).

Two ways vLLM serves ``token_classify`` (and ``classify``):

- **the score head inside the model** (``"model"``): vLLM's native token-classification and
  reward classes run their classifier in ``forward`` (vllm/model_executor/models/roberta.py
  ``RobertaForTokenClassification.forward``: ``return self.classifier(hidden_states)``;
  qwen2_rm.py ``Qwen2RewardBaseModel.forward``: ``self.score(...)``), so pooling keeps
  ``num_labels``-wide rows of logits. The classes: registry.py ``_TOKEN_CLASSIFICATION_MODELS``
  and ``_REWARD_MODELS`` (``NATIVE_SCORE_HEAD_CLASSES``, checked against vLLM's registry in
  ``tests/test_parity_classifier.py``);
- **the classifier in the pooler head** (``"pooler_head"``): an architecture vLLM adapts —
  a ``*ForTokenClassification`` or ``*ForSequenceClassification`` it does not register
  (``LlamaForTokenClassification``), or any model under ``--convert classify`` — is
  ``as_seq_cls_model(cls)`` (vllm/model_executor/models/adapters.py): a
  ``ReplicatedLinear(hidden_size, num_labels, params_dtype=head_dtype)`` named ``score``,
  handed to ``DispatchPooler.for_seq_cls(pooler_config, classifier=self.score)``, so
  ``TokenClassifierPoolerHead`` runs it. Pooling keeps ``hidden_size``-wide rows (the cache
  is ``hidden_size / num_labels`` times larger), and the head makes ``[T, num_labels]``.

``head_tensors`` (``head_allocations`` without a request's ``tp.PoolingParams``) lists what
the pooler head allocates per finished request, in order
(``TokenClassifierPoolerHead.forward_chunk`` / ``TokenEmbeddingPoolerHead.forward_chunk``):
the cast to the head dtype (``pooled_data.to(head_dtype)``: no copy when the dtype is
already the head's), the classifier's logits, the activation's output. They are all alive at
the activation (``forward_chunk``'s locals) and all but the last die when it returns. Both
backends and the closed forms ask it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ...pooler.late_chunking import (
    LATE_CHUNK_DTYPE,
    late_chunk_rows,
    late_chunk_tensors,
)

__all__ = [
    "NATIVE_SCORE_HEAD_CLASSES",
    "ClassifierPlacement",
    "HeadTensor",
    "classifier_runs_in",
    "drops_bos",
    "head_allocations",
    "head_output",
    "head_peak",
    "head_tensors",
    "pooled_width",
    "projector_layers",
]

ClassifierPlacement = Literal["model", "pooler_head"]

#: vllm/model_executor/models/registry.py (0.33.0): ``_TOKEN_CLASSIFICATION_MODELS`` and
#: ``_REWARD_MODELS``, the registered classes whose own ``forward`` runs the score head.
NATIVE_SCORE_HEAD_CLASSES: frozenset[str] = frozenset({
    # _TOKEN_CLASSIFICATION_MODELS
    "BertForTokenClassification", "ClefFlashForJointSchema", "ClefOmniForJointSchema",
    "ModernBertForTokenClassification", "OpenAIPrivacyFilterForTokenClassification",
    "Qwen3ASRForcedAlignerForTokenClassification", "RobertaForTokenClassification",
    "XLMRobertaForTokenClassification",
    # _REWARD_MODELS
    "InternLM2ForRewardModel", "Qwen2ForRewardModel", "Qwen2ForProcessRewardModel",
})


def classifier_runs_in(architecture: str, convert_type: str) -> ClassifierPlacement:
    """Where the score head runs for ``architecture`` served with vLLM's resolved
    ``convert_type`` (``architectures.resolve_runner``).

    Example:
        >>> classifier_runs_in("LlamaForTokenClassification", "classify")
        'pooler_head'
        >>> classifier_runs_in("Qwen2ForProcessRewardModel", "none")
        'model'
    """
    if architecture in NATIVE_SCORE_HEAD_CLASSES:
        return "model"
    # as_seq_cls_model: the adapter's `score` goes to the pooler head (DispatchPooler.for_seq_cls)
    return "pooler_head" if convert_type == "classify" else "model"


def pooled_width(config) -> int:
    """Width of the rows pooling keeps: ``num_labels`` when the score head ran in the model,
    else ``hidden_size`` (embed tasks, and the adapter's classifier in the pooler head)."""
    if config.task in ("token_classify", "classify") and config.classifier == "model":
        return config.num_labels
    return config.hidden_size


def head_allocations(config, rows, width) -> list[tuple[object, int]]:
    """The tensors the pooler head allocates for one finished request of ``rows`` pooled rows
    of ``width`` columns, in order, as ``(rows, columns)``, each of ``head_element_bytes``:
    the cast (when the head dtype differs), the classifier's ``[rows, num_labels]`` logits
    (the adapter's classifier in the pooler head), the activation (``use_activation``). The
    last is the delivered output; ``[]``: the head hands pooling's tensor over as it is.
    A request with its own ``tp.PoolingParams``: ``head_tensors``.

    Example:
        >>> import tokpool as tp
        >>> cfg = tp.SimConfig(hidden_size=8, task="token_classify", classifier="pooler_head",
        ...                    num_labels=2)
        >>> head_allocations(cfg, 5, cfg.width)
        [(5, 8), (5, 2), (5, 2)]
    """
    return [(t.rows, t.cols) for t in head_tensors(config, rows, width)]


@dataclass(frozen=True)
class HeadTensor:
    """One tensor of the head's pass over a request: ``[rows, cols]`` of ``itemsize`` bytes.

    ``transient``: dies once the next tensor that is not transient exists (the inputs of
    late chunking's ``torch.cat``); ``view``: no allocation, a view of the tensor before it
    (the Matryoshka slice ``[..., :dimensions]``, delivered as it is when no activation
    follows)."""

    rows: Any
    cols: int
    itemsize: int
    transient: bool = False
    view: bool = False

    @property
    def nbytes(self) -> Any:
        return self.rows * self.cols * self.itemsize


def head_tensors(config, rows, width, params=None) -> list[HeadTensor]:
    """What the pooler head makes for one finished request, in order — THE head rule of the
    simulator: the counting backend allocates these, the tensor backend's stages make them,
    the closed forms sum them, and the last one is what the request delivers
    (``head_output``).

    ``TokenEmbeddingPoolerHead.forward_chunk`` (vllm/model_executor/layers/pooler/tokwise/
    heads.py): late chunking first (``params.late_chunking_size``: the float32 chunk means,
    ``tokpool.late_interaction.late_chunk_tensors``, then their cast to the head dtype — or,
    without one, back to the hidden states' dtype — when that is not float32); else the cast
    to the head dtype; the projector (``projector_layers``: ColBERT's ``colbert_linear``, ST
    Dense layers); the Matryoshka slice (``params.dimensions``: a view); the
    normalisation (``use_activation``, the request's or the engine's) on the sliced rows.
    ``TokenClassifierPoolerHead``: the cast, the classifier's logits, the activation.

    Args:
        config: the ``SimConfig``.
        rows: the rows pooling hands the head (an int, or a numpy array in the closed forms
            without late chunking).
        width: their width.
        params: the request's ``tp.PoolingParams`` (``None``: the engine's defaults).

    Returns:
        ``HeadTensor``s in order; ``[]``: pooling's tensor is delivered as it is.

    Example:
        >>> import tokpool as tp
        >>> cfg = tp.SimConfig(hidden_size=8)  # bfloat16 rows, float32 head, normalised
        >>> chunked = tp.PoolingParams(late_chunking_size=512)
        >>> [(t.rows, t.cols, t.itemsize) for t in head_tensors(cfg, 32_768, 8, chunked)]
        [(64, 8, 4), (64, 8, 4)]
    """
    if not config.pooling_kind.has_head:
        return []  # TokenPooler(head=None) (JinaForRanking): pooling's output, as it is
    embed = config.task in ("token_embed", "embed")
    activation = config.use_activation
    if params is not None and params.use_activation is not None:
        activation = bool(params.use_activation)
    chunk = params.late_chunking_size if params is not None else None
    dims = params.dimensions if params is not None and embed else None
    out: list[HeadTensor] = []
    size = config.dtype_size  # of the tensor the head holds now
    if chunk is not None and embed:
        out += [HeadTensor(n, w, LATE_CHUNK_DTYPE.itemsize, transient)
                for n, w, transient in late_chunk_tensors(rows, width, chunk)]
        rows = late_chunk_rows(rows, chunk)
        target = config.head_dtype if config.head_dtype is not None else config.dtype
        size = target.itemsize
        if target != LATE_CHUNK_DTYPE:
            out.append(HeadTensor(rows, width, size))  # means.to(target): [rows, width]
    elif config.head_casts:
        size = config.head_dtype.itemsize
        out.append(HeadTensor(rows, width, size))  # pooled_data.to(head_dtype): [rows, width]
    layers = projector_layers(config)
    for i, (width, _linear) in enumerate(layers):  # self.projector(pooled_data)
        # nn.Sequential: each output but the last dies as the next is made (counted alive
        # until the last exists: a bound); the cast stays alive (forward_chunk's local)
        out.append(HeadTensor(rows, width, size, transient=i < len(layers) - 1))
    if not embed and config.classifier == "pooler_head":
        width = config.num_labels
        out.append(HeadTensor(rows, width, size))  # self.classifier(pooled_data): [rows, L]
    if dims is not None:
        width = dims  # embeddings[..., :dimensions]: a view
        if not activation:
            out.append(HeadTensor(rows, width, size, view=True))
    if activation:
        out.append(HeadTensor(rows, width, size))  # activation(embeddings): [rows, width]
    if drops_bos(config) and chunk is None:  # BOSEOSFilter: output[1:], a view
        out.append(HeadTensor(_minus_one(rows), width, size, view=True))
    return out


def drops_bos(config) -> bool:
    """The token_embed output loses its first row after the head (BGE-M3's ``BOSEOSFilter``:
    ``pooled_data[1:]`` when the prompt starts with BOS, which the simulator takes every
    prompt to do; late-chunked outputs keep it)."""
    head = getattr(config.model, "late_interaction", None)
    return config.task == "token_embed" and head is not None and head.drops_bos


def _minus_one(rows):
    return np.maximum(rows - 1, 0) if isinstance(rows, np.ndarray) else max(rows - 1, 0)


def projector_layers(config) -> tuple[tuple[int, bool], ...]:
    """The tensors the token_embed head's projector makes (``LateInteractionHead.layers``,
    read from the model folder by ``SimConfig.from_hf_config``: ColBERT's ``colbert_linear``,
    BGE-M3's, Sentence-Transformers Dense layers), as ``(width, linear)``; ``()``: none."""
    if config.task != "token_embed":
        return ()
    head = getattr(config.model, "late_interaction", None)
    return head.layers if head is not None else ()


def head_output(config, rows, width, params=None) -> tuple[Any, int, int]:
    """``(rows, cols, itemsize)`` a request delivers: the head's last tensor, or pooling's
    when the head makes none (``head_tensors``)."""
    made = head_tensors(config, rows, width, params)
    if made:
        return made[-1].rows, made[-1].cols, made[-1].itemsize
    return rows, width, config.dtype_size


def whole_tensor_delivered(made: list[HeadTensor], *, on_host: bool,
                           host_copy_copies: bool) -> Literal["delivered", "pinned"] | None:
    """What a slice (the head's last tensor a view: a Matryoshka slice, BGE-M3's dropped BOS
    row) hands the user, by where the tensor lives: ``"pinned"`` where no host copy is made —
    an output already on the host (offload), or vLLM's CPU platform (``.to("cpu")`` of a CPU
    tensor is the tensor itself) — so the user gets the slice (its bytes are the output) while
    the view keeps the whole tensor alive in host memory; ``None`` where the host copy copies
    only the slice's elements (or no view). (``"delivered"``, the whole tensor counted as the
    output, is no longer returned: tensor mode measures the slice's bytes as the output.)"""
    if not made or not made[-1].view:
        return None
    if on_host or not host_copy_copies:
        return "pinned"
    return None


def head_peak(made: list[HeadTensor]) -> tuple[Any, Any]:
    """``(most bytes alive, bytes allocated)`` over the head's tensors (views allocate
    nothing; a transient dies once the next tensor that is not transient exists; the rest
    live until the head returns). Works on numpy arrays of rows."""
    alive = peak = allocated = 0
    transient = 0
    for t in made:
        if t.view:
            continue
        alive = alive + t.nbytes
        allocated = allocated + t.nbytes
        peak = _max(peak, alive)
        if t.transient:
            transient = transient + t.nbytes
        else:
            alive, transient = alive - transient, 0
    return peak, allocated


def _max(a, b):
    return np.maximum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else \
        max(a, b)


def head_element_bytes(config) -> int:
    """Bytes per element of what the head allocates: the head dtype's (or the model dtype's
    when the head keeps it)."""
    return (config.head_dtype.itemsize if config.head_casts else config.dtype_size)
