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

``head_allocations`` lists what the pooler head allocates per finished request, in order
(``TokenClassifierPoolerHead.forward_chunk`` / ``TokenEmbeddingPoolerHead.forward_chunk``):
the cast to the head dtype (``pooled_data.to(head_dtype)``: no copy when the dtype is
already the head's), the classifier's logits, the activation's output. They are all alive at
the activation (``forward_chunk``'s locals) and all but the last die when it returns. Both
backends and the closed forms ask it.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "NATIVE_SCORE_HEAD_CLASSES",
    "ClassifierPlacement",
    "classifier_runs_in",
    "head_allocations",
    "pooled_width",
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

    Example:
        >>> import tokpool as tp
        >>> cfg = tp.SimConfig(hidden_size=8, task="token_classify", classifier="pooler_head",
        ...                    num_labels=2)
        >>> head_allocations(cfg, 5, cfg.width)
        [(5, 8), (5, 2), (5, 2)]
    """
    shapes: list[tuple[object, int]] = []
    if config.head_casts:
        shapes.append((rows, width))  # pooled_data.to(head_dtype): [rows, width]
    if config.task in ("token_classify", "classify") and config.classifier == "pooler_head":
        width = config.num_labels
        shapes.append((rows, width))  # self.classifier(pooled_data): [rows, num_labels]
    if config.use_activation:
        shapes.append((rows, width))  # activation(logits): [rows, width]
    return shapes


def head_element_bytes(config) -> int:
    """Bytes per element of what the head allocates: the head dtype's (or the model dtype's
    when the head keeps it)."""
    return (config.head_dtype.itemsize if config.head_casts else config.dtype_size)
