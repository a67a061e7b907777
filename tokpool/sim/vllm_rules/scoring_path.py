"""Which scoring path a model and serve line take in vLLM 0.33.0, and how its late-interaction
head is resolved from the model's files.

The path (``scoring_path``) is read, never assumed:

- the scoring API exists only for a selected task ``embed`` or ``token_embed``, or ``classify``
  with ``num_labels == 1`` (vllm/entrypoints/pooling/utils.py, ``enable_scoring_api``); the
  selected task is ``ModelConfig.get_pooling_task`` over the model's tasks — ``--pooler-config
  '{"task": ...}'`` if given, else the first of ``embed&token_classify, embed, classify,
  token_embed, ...`` — so a decoder or MiniLM that declares ``embed`` and ``token_embed`` is a
  **bi-encoder** unless started with ``--pooler-config '{"task": "token_embed"}'``;
- ``SCORE_TYPE_MAP`` (vllm/tasks.py): ``embed`` -> bi-encoder, ``token_embed`` ->
  late-interaction, ``classify`` -> cross-encoder; ``ServingScores.__init__``
  (entrypoints/pooling/scoring/serving.py) turns late-interaction into the two-stage
  ``flash-late-interaction`` flow unless the frontend flag ``--disable-flash-late-interaction``
  is given, and serves ``JinaForRanking`` as the one-stage listwise
  ``jina-reranking-scoring`` flow whatever the flag says.

The head (``late_interaction_head``) follows vllm/model_executor/models/colbert.py
(``ColBERTMixin.get_colbert_dim_from_config``: ``colbert_dim``, then ``dim``, then
``projection_dim``; without one, ``pooler_for_token_embed`` loads the sentence-transformers
Dense layers of ``modules.json``, ``adapters._load_st_projector``), roberta.py
(``BgeM3EmbeddingModel``: a ``colbert_linear`` hidden -> hidden, and ``BOSEOSFilter`` drops
the BOS row of ``token_embed`` outputs) and jina.py (``JinaForRanking``: a projector to
``embedding_size`` — 512, set by ``JinaForRankingConfig`` — inside the pooling method, no
head: the model dtype is delivered).

This module imports nothing from the simulator: ``tokpool.sim.vllm_rules.architectures`` and
``hf_config`` read ``LATE_INTERACTION_TASKS`` from here (the one table).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ...pooler.jina_ranking import DOC_TOKEN_ID, QUERY_TOKEN_ID

__all__ = [
    "LATE_INTERACTION_TASKS",
    "LISTWISE_ARCHITECTURES",
    "LateInteractionHead",
    "ScoringPath",
    "late_interaction_head",
    "scoring_path",
]

#: Registered vLLM 0.33.0 pooling classes for late interaction and listwise reranking
#: (vllm/model_executor/models/registry.py) -> the tasks their pooler declares
#: (``DispatchPooler`` keys): the ColBERT family and JinaForRanking are token_embed only;
#: BGE-M3 declares four (roberta.py, ``BgeM3EmbeddingModel._build_pooler``).
LATE_INTERACTION_TASKS: dict[str, tuple[str, ...]] = {
    "HF_ColBERT": ("token_embed",),
    "ColBERTModernBertModel": ("token_embed",),
    "ColBERTJinaRobertaModel": ("token_embed",),
    "ColBERTLfm2Model": ("token_embed",),
    "JinaForRanking": ("token_embed",),
    "BgeM3EmbeddingModel": ("embed", "embed&token_classify", "token_classify", "token_embed"),
}
#: Architectures ``ServingScores`` serves with the listwise ``jina-reranking-scoring`` flow.
LISTWISE_ARCHITECTURES = frozenset({"JinaForRanking"})
#: vllm/model_executor/models/config.py ``JinaForRankingConfig.verify_and_update_model_config``
#: sets ``hf_config.embedding_size = 512``: the projector's output width.
JINA_EMBEDDING_SIZE = 512
#: vllm/tasks.py ``SCORE_TYPE_MAP``.
SCORE_TYPE_MAP = {"embed": "bi-encoder", "classify": "cross-encoder",
                  "token_embed": "late-interaction"}
#: ``ModelConfig.get_pooling_task``'s priority when no task is configured.
_TASK_PRIORITY = ("embed&token_classify", "embed", "classify", "token_embed", "token_classify",
                  "plugin")
#: vllm/transformers_utils/config.py ``_DENSE_MODULE_TYPES``.
_DENSE_TYPES = frozenset({"sentence_transformers.models.Dense",
                          "sentence_transformers.base.modules.dense.Dense",
                          "pylate.models.Dense.Dense"})

PathName = Literal["bi-encoder", "late-interaction", "listwise"]


@dataclass(frozen=True)
class ScoringPath:
    """The scoring flow vLLM's ``/score`` and ``/rerank`` take for a model and serve line.

    Attributes:
        name: ``"bi-encoder"`` (one vector per text, cosine in the API process),
            ``"late-interaction"`` (token rows, MaxSim) or ``"listwise"`` (JinaForRanking:
            one prompt holds every document).
        task: the selected pooling task.
        io_processor: vLLM's ``ScoringIOProcessors`` key.
        two_stage: queries first, their rows cached in the worker, then the documents scored
            there (``flash-late-interaction``); else one stage, every output to the API.
        reason: how the path follows from the model and the flags, in words.
    """

    name: PathName
    task: str
    io_processor: str
    two_stage: bool
    reason: str


def scoring_path(config, *, flash_late_interaction: bool = True) -> ScoringPath:
    """The path vLLM's scoring server takes for ``config`` (a ``SimConfig``).

    Args:
        config: the engine; its ``task`` is the task the engine serves (``from_vllm_args``
            selects it as ``get_pooling_task`` does), its ``model`` the resolved preset.
        flash_late_interaction: the frontend flag ``--enable/--disable-flash-late-interaction``
            (default on).

    Returns:
        The ``ScoringPath``.

    Raises:
        ValueError: a task for which vLLM enables no scoring API, or the cross-encoder path
            (one classify prompt per pair, not simulated here).

    Example:
        >>> import tokpool as tp
        >>> p = scoring_path(tp.SimConfig(hidden_size=8, task="token_embed"))
        >>> p.name, p.io_processor, p.two_stage
        ('late-interaction', 'flash-late-interaction', True)
        >>> scoring_path(tp.SimConfig(hidden_size=8, task="embed")).name
        'bi-encoder'
    """
    if not isinstance(flash_late_interaction, bool):
        raise TypeError(f"flash_late_interaction must be True or False, got "
                        f"{flash_late_interaction!r}")
    task = config.task
    model = config.model
    arch = getattr(model, "architecture", "") or ""
    declared = tuple(getattr(model, "declared_tasks", ()) or ())
    how = _selection_words(task, declared)
    if task == "classify":
        raise ValueError(
            "task 'classify' scores as a cross-encoder (one prompt per query/document pair, "
            "one logit each; vLLM enables it only with num_labels == 1): simulate_score "
            "models the bi-encoder, late-interaction and listwise paths; simulate the pair "
            "prompts with tp.simulate(..., config.replace(task='classify'))")
    if task not in SCORE_TYPE_MAP:
        raise ValueError(
            f"config.task={task!r}: vLLM enables no /score or /rerank for this selected task "
            "(entrypoints/pooling/utils.py enable_scoring_api: embed, token_embed, or classify "
            "with num_labels == 1); start the model with --pooler-config "
            "'{\"task\": \"token_embed\"}' (late interaction) or '{\"task\": \"embed\"}'")
    if arch in LISTWISE_ARCHITECTURES:
        return ScoringPath("listwise", task, "jina-reranking-scoring", False,
                           f"{arch} is served by ServingScores as 'jina-reranking-scoring' "
                           f"(listwise: one prompt per query holds every document; one stage "
                           f"whatever --enable-flash-late-interaction says); {how}")
    if task == "embed":
        return ScoringPath("bi-encoder", task, "bi-encoder", False,
                           f"task 'embed' -> SCORE_TYPE_MAP 'bi-encoder' (one vector per "
                           f"text, cosine in the API process); {how}")
    if flash_late_interaction:
        return ScoringPath("late-interaction", task, "flash-late-interaction", True,
                           f"task 'token_embed' -> SCORE_TYPE_MAP 'late-interaction', and "
                           f"--enable-flash-late-interaction (the default) makes it two "
                           f"stages: queries cached in the worker, documents scored there; "
                           f"{how}")
    return ScoringPath("late-interaction", task, "late-interaction", False,
                       f"task 'token_embed' -> 'late-interaction' with "
                       f"--disable-flash-late-interaction: one stage, every token row of every "
                       f"query and document goes to the API process, MaxSim runs there (as "
                       f"offline LLM.score always does); {how}")


def _selection_words(task: str, declared: tuple[str, ...]) -> str:
    if not declared:
        return f"the engine serves task {task!r}"
    natural = next((t for t in _TASK_PRIORITY if t in declared), None)
    if task == natural:
        extra = (" (get_pooling_task ranks 'embed' above 'token_embed': start with "
                 "--pooler-config '{\"task\": \"token_embed\"}' for late interaction)"
                 if task == "embed" and "token_embed" in declared else "")
        return (f"the model declares {list(declared)} and get_pooling_task selects "
                f"{task!r}{extra}")
    return (f"the model declares {list(declared)}; {task!r} is the configured task "
            f"(--pooler-config), not get_pooling_task's default {natural!r}")


@dataclass(frozen=True)
class LateInteractionHead:
    """What a late-interaction model's pooler delivers per token row, as vLLM builds it.

    Attributes:
        architecture: ``architectures[0]``.
        dim: width of a delivered row.
        projector: where the projection comes from, in words (``None``: no projection).
        drops_bos: the first (BOS) row is dropped (BGE-M3's ``BOSEOSFilter``).
        head_dtype: ``True``: rows delivered in the head dtype (``TokenEmbeddingPoolerHead``
            casts, projects, normalises); ``False``: in the model dtype (JinaForRanking's
            ``TokenPooler`` has no head).
        marker_rows: listwise only: rows are kept at these token ids (documents', then the
            query's), not at every token.
        layers: the tensors the head's projector makes, in order, as ``(width, linear)``
            (``linear``: a ``Linear``'s output; else an activation layer's), in the head dtype
            after its cast (``TokenEmbeddingPoolerHead``: cast, projector, slice, normalise);
            ``()``: no projector in the head (JinaForRanking's is in its pooling method).
    """

    architecture: str
    dim: int
    projector: str | None
    drops_bos: bool = False
    head_dtype: bool = True
    marker_rows: tuple[int, ...] | None = None
    layers: tuple[tuple[int, bool], ...] = ()


def late_interaction_head(source: Any, *, hidden_size: int | None = None,
                          directory: Path | None = None) -> LateInteractionHead:
    """The token_embed head vLLM builds for a model folder or config (offline).

    Args:
        source: a model directory (its ``config.json``, and ``modules.json`` with Dense
            layers), a ``config.json`` path or a dict.
        hidden_size: the backbone width when the config has none.
        directory: the model folder when ``source`` is a dict (its ``modules.json``).

    Returns:
        A ``LateInteractionHead``.

    Raises:
        ValueError: no config.json, or a width that is not a positive int.

    Example:
        >>> late_interaction_head({"architectures": ["HF_ColBERT"], "hidden_size": 768,
        ...                        "dim": 128}).dim
        128
        >>> h = late_interaction_head({"architectures": ["JinaForRanking"],
        ...                            "hidden_size": 1024})
        >>> h.dim, h.head_dtype, h.marker_rows
        (512, False, (151670, 151671))
    """
    cfg, folder = _read(source)
    directory = folder if directory is None else Path(directory)
    arch = (cfg.get("architectures") or [""])[0]
    hidden = _positive(cfg.get("hidden_size", hidden_size), "hidden_size")
    if arch in LISTWISE_ARCHITECTURES:
        dim = JINA_EMBEDDING_SIZE  # JinaForRankingConfig sets it, whatever config.json says
        return LateInteractionHead(arch, dim, f"projector Linear({hidden}, {hidden // 2}) -> "
                                   f"ReLU -> Linear({hidden // 2}, {dim}) in the pooling "
                                   "method, no head", head_dtype=False,
                                   marker_rows=(DOC_TOKEN_ID, QUERY_TOKEN_ID))
    if arch == "BgeM3EmbeddingModel":
        return LateInteractionHead(arch, hidden, f"colbert_linear Linear({hidden}, {hidden})",
                                   drops_bos=True, layers=((hidden, True),))
    if arch in LATE_INTERACTION_TASKS:
        for key in ("colbert_dim", "dim", "projection_dim"):  # `or`: the first truthy one
            if cfg.get(key):
                dim = _positive(cfg[key], key)
                return LateInteractionHead(arch, dim, f"colbert_linear Linear({hidden}, {dim}) "
                                           f"(config.json {key})", layers=((dim, True),))
    dense = _dense_layers(directory)
    layers = _dense_tensors(dense)
    if layers:
        dim = layers[-1][0]
        return LateInteractionHead(arch, dim, "sentence-transformers Dense layers "
                                   f"{[d['folder'] for d in dense]} -> {dim}", layers=layers)
    return LateInteractionHead(arch, hidden, None)


#: ``get_act_fn``'s names (vllm/model_executor/layers/activation.py ``_ACTIVATION_REGISTRY``):
#: an ST Dense layer's activation outside them fails ``_load_st_projector``, which then
#: serves the model with no projector at all.
_ACTIVATIONS = frozenset({"gelu", "gelu_fast", "gelu_new", "gelu_pytorch_tanh", "relu", "relu2",
                          "silu", "swish", "quick_gelu", "tanh", "sigmoid", "xielu"})


def _dense_tensors(dense: list[dict]) -> tuple[tuple[int, bool], ...]:
    """The tensors ``_load_st_projector``'s ``nn.Sequential`` makes: each Linear's output and,
    after it, its activation's (none for Identity); ``()`` where vLLM's loading fails (an
    activation ``get_act_fn`` does not know: vLLM logs it and builds no projector)."""
    out: list[tuple[int, bool]] = []
    for layer in dense:
        width = _positive(layer.get("out_features"), "out_features")
        out.append((width, True))
        name = str(layer.get("activation_function") or "").lower()
        if name.startswith("torch.nn.modules."):
            name = name.rsplit(".", 1)[-1]
            if name == "identity":
                continue
        if name:
            if name not in _ACTIVATIONS:
                return ()
            out.append((width, False))
    return tuple(out)


def _read(source: Any) -> tuple[dict, Path | None]:
    if isinstance(source, Mapping):
        return dict(source), None
    if isinstance(source, (str, Path)):
        path = Path(source)
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise ValueError(f"no config.json at {file}; pass a model directory, a config.json "
                             "path or a dict")
        loaded = json.loads(file.read_text(encoding="utf-8"))
        if not isinstance(loaded, dict):
            raise ValueError(f"{file} does not hold a JSON object")
        return loaded, file.parent
    raise TypeError(f"source must be a model directory, a config.json path or a dict, got "
                    f"{type(source).__name__}")


def _positive(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int in config.json, got {value!r}")
    return value


def _dense_layers(directory: Path | None) -> list[dict]:
    """``try_get_dense_modules`` + ``_load_st_projector``: each Dense module of
    ``modules.json`` whose folder has a config.json and a weights file (vLLM skips a layer whose
    weights do not load)."""
    if directory is None or not (directory / "modules.json").is_file():
        return []
    try:
        modules = json.loads((directory / "modules.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return []  # vLLM: any exception -> no projector
    if isinstance(modules, dict):
        modules = modules.get("modules", [])
    layers = []
    for module in modules if isinstance(modules, list) else []:
        if not isinstance(module, dict) or module.get("type") not in _DENSE_TYPES:
            continue
        folder = directory / str(module.get("path", ""))
        if not (folder / "config.json").is_file():
            continue
        try:
            layer = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue  # vLLM: a layer config it cannot read is skipped
        if not isinstance(layer, dict):
            continue
        if not any((folder / f).is_file() for f in ("model.safetensors", "pytorch_model.bin")):
            continue
        layers.append({**layer, "folder": str(module.get("path", ""))})
    return layers
