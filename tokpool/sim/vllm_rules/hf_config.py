"""A ``ModelPreset`` from a Hugging Face ``config.json`` (offline; no weights read).

``preset_from_hf_config(source)`` reads a model directory, a ``config.json`` path, a dict or a
``transformers.PretrainedConfig`` and returns an ``HFModelPreset``: a ``ModelPreset`` with the
KV-cache geometry (KV heads, dtype) added. ``simconfig_fields_from_hf`` turns it into
``SimConfig`` keyword arguments.

Pooling types follow vLLM 0.33.0's ``@default_pooling_type`` decorators
(``vllm/model_executor/models/*.py``): ``BertModel``/``ModernBertModel`` and their
``*ForSequenceClassification``: CLS (so ``encoder_only``, ``vllm_rules.pooling_attn_type``);
``*ForTokenClassification``: ALL; ``Qwen2ForProcessRewardModel``: STEP (qwen2_rm.py); decoders
(``VllmModelForPooling``): LAST/ALL. A sentence-transformers ``modules.json`` in the directory
overrides the sequence pooling (as vLLM's ``get_pooling_config`` does).

What vLLM derives from the files is derived the same way: ``max_model_lens`` (the length keys,
a ``tokenizer_config.json`` cap, RoPE scaling, LongRoPE's default), the dtype it serves
(``HFModelPreset.served_dtype``), EmbeddingGemma's bidirectional attention, the Qwen2 PRM's
step tag; ``as_served`` resolves the runner and conversion (``architectures``) into the tasks
the model declares. ``tests/test_parity_config.py`` checks it against vLLM's own
``create_engine_config``.

The parameter count is counted family by family (``tokpool.sim.vllm_rules.hf_families``: experts
included, a family it cannot count refused by name) and equals transformers' own model built
from the config, and the published totals (``docs/PARAMETER_COUNTS.md``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...pooler.heads import dtype_size, resolve_dtype
from . import engine_checks
from .architectures import (
    FLOAT16_UNSUPPORTED,
    is_generative_class,
    is_pooling_class,
    resolve_runner,
    runs_on_transformers_backend,
)
from .classifier import classifier_runs_in
from .defaults import pooling_attn_type
from .hf_families import checked_hf_config, count_parameters
from .hub import hub_folder, hub_id_of_folder, is_hub_id
from .kv_spec import attention_head_size, check_kv_layout, layer_sliding_windows
from .models import ModelPreset
from .scoring_path import (
    LATE_INTERACTION_TASKS,
    LateInteractionHead,
    late_interaction_head,
)
from .st_config import read_sentence_transformers_config

__all__ = [
    "HFModelPreset",
    "as_served",
    "declared_tasks",
    "estimate_num_parameters",
    "max_model_lens",
    "preset_from_hf_config",
    "simconfig_fields_from_hf",
]

#: Encoders (CLS pooling, encoder-only attention).
_ENCODERS = {"bert", "roberta", "xlm-roberta", "modernbert"}


@dataclass(frozen=True)
class HFModelPreset(ModelPreset):
    """A ``ModelPreset`` read from a config.json, with what the KV cache needs.

    Attributes:
        torch_dtype: the checkpoint's dtype name (``"bfloat16"``, ...).
        architecture: ``architectures[0]`` of the config.
        model_type: the config's ``model_type``.
        intermediate_size: the MLP width.
        sentence_transformers: the folder holds a sentence-transformers pooling config
            (``modules.json`` with a Pooling module): ``--runner auto`` serves it as a
            pooling model whatever its architecture.
        declared_tasks: the tasks the model declares as vLLM serves it (``as_served``: after
            its runner and conversion are resolved); the engine refuses any other
            (``engine_checks.check_configured_task``). Empty: not resolved yet.
        classifier: where a classify task's score head runs as vLLM builds the model
            (``classifier.classifier_runs_in``, resolved by ``as_served``): ``"model"`` or
            ``"pooler_head"`` (vLLM's ``as_seq_cls_model`` adapter).
        late_interaction: the token_embed head vLLM builds from the folder (ColBERT's
            projection, sentence-transformers Dense layers, BGE-M3's BOS filter,
            JinaForRanking's marker rows: ``tokpool.sim.vllm_rules.scoring_path``).
        is_matryoshka, matryoshka_dimensions, embedding_size: the config's keys of those names
            (``ModelConfig.is_matryoshka``: a non-empty ``matryoshka_dimensions`` or
            ``is_matryoshka``; ``embedding_size``: the row width a request's ``dimensions``
            may cut, default the hidden size), read by ``engine_checks.check_pooling_params``.
    """

    torch_dtype: str = "bfloat16"
    architecture: str = ""
    model_type: str = ""
    intermediate_size: int = 0
    sentence_transformers: bool = False
    declared_tasks: tuple[str, ...] = ()
    classifier: str = "model"
    late_interaction: LateInteractionHead | None = None
    is_matryoshka: bool = False
    matryoshka_dimensions: tuple[int, ...] | None = None
    embedding_size: int | None = None

    @property
    def served_dtype(self) -> str:
        """The dtype vLLM serves a pooling model in under ``--dtype auto``
        (vllm/config/model.py, ``_resolve_auto_dtype``, ``is_pooling_model=True``): the
        checkpoint's, but a float32 checkpoint runs in float16 — in bfloat16 for the model
        types vLLM refuses float16 for (Gemma-2/3, GLM-4: ``architectures.FLOAT16_UNSUPPORTED``),
        whose float16 checkpoints run in bfloat16 too. Every device in tokpool's table
        supports both (compute capability >= 8.0, or vLLM's CPU platform)."""
        if self.model_type in FLOAT16_UNSUPPORTED and self.torch_dtype in ("float32",
                                                                          "float16"):
            return "bfloat16"
        return "float16" if self.torch_dtype == "float32" else self.torch_dtype

    @property
    def dtype_bytes(self) -> int:
        """Bytes per weight / KV element as served (``served_dtype``)."""
        return dtype_size(resolve_dtype(self.served_dtype, what="torch_dtype"))

    @property
    def num_kv_heads(self) -> int:
        """Key/value heads (grouped-query attention): ``num_key_value_heads``."""
        return self.num_key_value_heads or self.num_attention_heads

    def kv_bytes_per_token(self, dtype_bytes: int | None = None) -> int:
        """``ModelPreset.kv_bytes_per_token`` in the served dtype by default (vLLM's
        ``--kv-cache-dtype auto``); 0 for encoder-only models."""
        return super().kv_bytes_per_token(self.dtype_bytes if dtype_bytes is None else dtype_bytes)


#: The largest config file read (config.json, tokenizer_config.json): real ones are a few
#: KiB (a model's config.json with a long id2label table well under 1 MiB).
MAX_CONFIG_FILE_BYTES = 16 << 20


def read_small_text(file: Path) -> str:
    """The text of a config file, its size checked BEFORE it is read: a file over
    ``MAX_CONFIG_FILE_BYTES`` (a damaged or sparse 2 GB file named config.json) is refused at
    once instead of being read and parsed for tens of seconds.

    Raises:
        ValueError: the file is larger than ``MAX_CONFIG_FILE_BYTES``, with its size.
        UnicodeDecodeError: the file is not UTF-8 text.
    """
    size = file.stat().st_size
    if size > MAX_CONFIG_FILE_BYTES:
        raise ValueError(
            f"{file} is {size:,} bytes, larger than any config file ({MAX_CONFIG_FILE_BYTES:,} "
            "bytes at most; a model's config.json is a few KiB), so it is not read; pass the "
            "model's own config.json (a damaged or unfinished download? fetch it again)")
    with open(file, encoding="utf-8") as f:
        return f.read(MAX_CONFIG_FILE_BYTES + 1)  # a file growing meanwhile: still bounded


def _load(source: Any, revision: str | None = None) -> tuple[dict, Path | None]:
    """The config as a dict, and the model directory when there is one (a Hub id: its
    snapshot folder of small files, ``hub.hub_folder``)."""
    if is_hub_id(source):
        source = hub_folder(source, revision=revision)
    elif revision is not None:
        raise ValueError(f"revision={revision!r} is for a Hub id ('org/name'); {source!r:.80} "
                         "is not one: leave revision out")
    if isinstance(source, Mapping):
        return dict(source), None
    if hasattr(source, "to_dict") and callable(source.to_dict):  # PretrainedConfig
        return source.to_dict(), None
    if isinstance(source, (str, Path)):
        path = Path(source)
        directory = path if path.is_dir() else path.parent
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise ValueError(
                f"no config.json at {file}; pass a model directory, a config.json path, a "
                "Hub id ('org/name': its config files are fetched, never weights), a dict or "
                "a transformers.PretrainedConfig"
            )
        try:
            loaded = json.loads(read_small_text(file))
        except UnicodeDecodeError as err:
            raise ValueError(f"{file} is not a text file ({err.reason} at byte {err.start}); "
                             "pass the model's config.json") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{file} is not valid JSON: {err}") from err
        if not isinstance(loaded, dict):
            raise ValueError(f"{file} holds {type(loaded).__name__} {loaded!r:.60}, not a JSON "
                             "object; a config.json is {{\"hidden_size\": ..., ...}}")
        return loaded, directory
    raise TypeError(
        "source must be a model directory, a config.json path, a dict or a "
        f"transformers.PretrainedConfig, got {type(source).__name__}"
    )


def _kind(arch: str, model_type: str) -> str:
    """``"token_classify"``, ``"prm"``, ``"reward"``, ``"seq_classify"``, ``"encoder"`` or
    ``"decoder"``."""
    if arch.endswith("ForProcessRewardModel"):
        return "prm"
    if arch.endswith("ForRewardModel"):
        return "reward"
    if arch.endswith("ForTokenClassification"):
        return "token_classify"
    if arch.endswith("ForSequenceClassification"):
        return "seq_classify"
    if model_type in _ENCODERS:
        return "encoder"
    return "decoder"


def _num_labels(cfg: dict) -> int | None:
    if isinstance(cfg.get("id2label"), Mapping) and cfg["id2label"]:
        return len(cfg["id2label"])
    value = cfg.get("num_labels")
    return int(value) if value is not None else None


def estimate_num_parameters(cfg: Mapping, *, include_lm_head: bool | None = None) -> int:
    """Parameter count from a config dict (embeddings, layers with their experts, norms, head).

    Args:
        cfg: the config.json as a dict (``preset_from_hf_config`` validates it first).
        include_lm_head: count an untied LM head (``vocab x hidden``); default: for
            ``*ForCausalLM``/``*LMHeadModel`` architectures with untied embeddings. Pass
            ``False`` for an embedding model whose checkpoint has no LM head (Qwen3-Embedding).

    Returns:
        The parameter count (int).
    """
    cfg = checked_hf_config(cfg)
    arch = (cfg.get("architectures") or [""])[0]
    return count_parameters(cfg, kind=_kind(arch, str(cfg["model_type"])),
                            include_lm_head=include_lm_head, num_labels=_num_labels(cfg) or 2)


#: vllm/model_executor/models/config.py, ``Qwen2ForProcessRewardModelConfig``: the step tag
#: a Qwen2 PRM pools at when ``--pooler-config`` names none (Qwen2.5-Math-PRM's ``<extra_0>``).
_PRM_STEP_TAG_ID = 151651


def _is_causal(cfg: Mapping, arch: str, encoder: bool) -> bool:
    """The config's ``is_causal`` as vLLM reads it (``ModelConfig.attn_type``): EmbeddingGemma's
    ``Gemma3TextModel`` sets it from ``use_bidirectional_attention``
    (vllm/model_executor/models/config.py, ``Gemma3TextModelConfig``), making the model
    encoder-only: no KV cache, no chunked prefill."""
    if arch == "Gemma3TextModel":
        return not cfg.get("use_bidirectional_attention", False)
    return bool(cfg.get("is_causal", not encoder))


def _st_pooling(directory: Path | None) -> str | None:
    if directory is None or not (directory / "modules.json").is_file():
        return None
    st = read_sentence_transformers_config(directory, dense=True)
    return st.pooling if st is not None else None


def preset_from_hf_config(
    source: Any,
    *,
    name: str | None = None,
    step_tag_id: int | None = None,
    include_lm_head: bool | None = None,
    revision: str | None = None,
) -> HFModelPreset:
    """A ``ModelPreset`` (``HFModelPreset``) from a Hugging Face config, offline.

    Args:
        source: a model directory, a ``config.json`` path, a Hub id (``"BAAI/bge-m3"``: its
            small config files from the Hub cache or the Hub, ``hub.hub_folder``; never
            weights), a dict or a ``transformers.PretrainedConfig``.
        name: the preset's name (default: the Hub id, the directory name or
            ``_name_or_path``).
        step_tag_id: STEP pooling's tag token (a PRM's tag is in its tokenizer, not its
            config; Qwen2.5-Math-PRM's is 151651).
        include_lm_head: count an untied LM head; default ``False``: vLLM serves the model as a
            pooling model, which loads no LM head (see ``estimate_num_parameters``).

    Returns:
        The preset: ``max_model_len`` as vLLM derives its default (``max_model_lens``),
        ``derived_max_model_len`` the most a ``--max-model-len`` may ask without
        ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` where that differs (LongRoPE).

    Raises:
        ValueError: a missing config, or keys it lacks (named).
        TypeError: a source of another type.
    """
    cfg, directory = _load(source, revision)
    if include_lm_head is None:
        # A *ForCausalLM served as a pooling model drops its LM head: vLLM's adapters
        # (vllm/model_executor/models/adapters.py, _create_pooling_model_cls) load the backbone
        # and the pooler only, so neither the weights nor the KV budget count it.
        include_lm_head = False
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and "hidden_size" not in cfg:  # multimodal wrappers
        if cfg.get("vision_config") is not None:
            arch = (cfg.get("architectures") or ["this model"])[0]
            raise ValueError(
                f"{arch} carries a vision tower (vision_config) whose parameters tokpool does "
                "not count; pass its text_config (the language model alone) to size the "
                "text part, or a ModelPreset with the whole model's parameter count"
            )
        cfg = {**cfg, **text, "architectures": cfg.get("architectures")}
    check_kv_layout(cfg)  # a KV layout tokpool does not model is refused by its name first
    cfg = checked_hf_config(cfg)
    archs = cfg.get("architectures") or []
    if isinstance(archs, str):
        raise TypeError(f"architectures must be a list of names, not the string {archs!r}")
    arch = archs[0] if archs else ""
    model_type = str(cfg.get("model_type", ""))
    kind = _kind(arch, model_type)
    heads = int(cfg["num_attention_heads"])
    head_dim = attention_head_size(cfg)  # as vLLM's attention layers are built
    encoder = model_type in _ENCODERS
    if kind == "prm" and step_tag_id is None:
        step_tag_id = _PRM_STEP_TAG_ID  # Qwen2ForProcessRewardModelConfig's default
    # vLLM's @default_pooling_type: encoders CLS (ForTokenClassification: ALL), PRM STEP
    seq_pooling = "CLS" if encoder else "LAST"
    tok_pooling = "STEP" if kind == "prm" or step_tag_id is not None else "ALL"
    default_seq = seq_pooling
    seq_pooling = _st_pooling(directory) or seq_pooling
    attn_type = pooling_attn_type(default_seq, is_causal=_is_causal(cfg, arch, encoder))
    labels = _num_labels(cfg)
    if kind == "prm":
        labels = 2  # Qwen2ForProcessRewardModel sets num_labels = 2 (qwen2_rm.py)
    elif kind == "reward":
        labels = 1  # Qwen2ForRewardModel sets num_labels = 1 (qwen2_rm.py)
    task = {"prm": "token_classify", "token_classify": "token_classify",
            "reward": "token_classify", "seq_classify": "classify",
            "encoder": "embed"}.get(kind, "token_embed")
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
    max_len, limit = max_model_lens(cfg, directory)
    hub_id = hub_id_of_folder(directory)
    default_name = hub_id or (directory.name if directory is not None
                              else cfg.get("_name_or_path") or arch or model_type or "hf-model")
    return HFModelPreset(
        name=name or str(default_name),
        hf_id=hub_id or str(cfg.get("_name_or_path") or ""),
        hidden_size=int(cfg["hidden_size"]),
        num_layers=int(cfg["num_hidden_layers"]),
        num_attention_heads=heads,
        head_dim=head_dim,
        num_parameters=estimate_num_parameters(cfg, include_lm_head=include_lm_head),
        vocab_size=int(cfg["vocab_size"]),
        # kept for any task: --convert classify serves a decoder with its config's labels
        # (adapters._resolve_num_labels)
        num_labels=labels if task in ("token_classify", "classify") or labels else None,
        default_task=task,
        step_tag_id=step_tag_id,
        max_model_len=int(max_len) if max_len is not None else None,
        derived_max_model_len=limit if limit != max_len else None,
        attn_type=attn_type,
        seq_pooling_type=seq_pooling,
        tok_pooling_type=tok_pooling,
        num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
        torch_dtype=str(dtype).replace("torch.", ""),
        architecture=arch,
        model_type=model_type,
        intermediate_size=int(cfg.get("intermediate_size") or 0),
        sentence_transformers=_st_pooling(directory) is not None,
        **_matryoshka(cfg),
        # each layer's window as vLLM builds the model (kv_spec); encoders keep no KV cache
        sliding_windows=(None if attn_type == "encoder_only"
                         else _windows_or_none(layer_sliding_windows(cfg))),
        late_interaction=late_interaction_head(cfg, directory=directory),
    )


def _matryoshka(cfg: dict) -> dict:
    """``is_matryoshka`` / ``matryoshka_dimensions`` / ``embedding_size`` as vLLM's
    ``ModelConfig`` reads them from the config (vllm/config/model.py)."""
    mds = cfg.get("matryoshka_dimensions")
    if mds is not None and (isinstance(mds, str) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in mds)):
        raise ValueError(f"matryoshka_dimensions must be a list of ints, got {mds!r}")
    size = cfg.get("embedding_size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ValueError(f"embedding_size must be an int >= 1, got {size!r}")
    return {"is_matryoshka": bool(mds) or bool(cfg.get("is_matryoshka", False)),
            "matryoshka_dimensions": tuple(mds) if mds is not None else None,
            "embedding_size": size}


def _windows_or_none(windows: tuple[int | None, ...]) -> tuple[int | None, ...] | None:
    """``None`` when no layer slides (the preset's default: full attention everywhere)."""
    return windows if any(w is not None for w in windows) else None


def simconfig_fields_from_hf(source: Any, *, runner: str = "pooling", convert: str = "auto",
                             **overrides) -> dict:
    """``SimConfig`` keyword arguments for a Hugging Face config (then ``overrides``).

    ``SimConfig.from_hf_config(source, **overrides)`` is
    ``cls(**simconfig_fields_from_hf(source, **overrides))``. ``step_tag_id``,
    ``include_lm_head`` and ``revision`` (a Hub id's) in ``overrides`` go to
    ``preset_from_hf_config``.

    Args:
        source: see ``preset_from_hf_config``.
        runner: vLLM's ``--runner``: ``"pooling"`` (default: tokpool simulates a pooling
            runner, as ``LLM(model, runner="pooling")``) or ``"auto"`` (vLLM's own choice:
            a bare ``*ForCausalLM`` is served as a generative model, and refused here;
            ``from_vllm_args`` passes the line's, ``auto`` by default).
        convert: vLLM's ``--convert`` (``auto``, ``none``, ``embed``, ``classify``): which
            pooling adapter, hence which tasks the model declares (``as_served``).

    Returns:
        ``model`` (served: ``as_served``), ``task`` (default: the model's own task, else the
        last it declares), ``dtype``, ``num_labels`` (classify tasks), ``pooling`` (the
        model's token pooling for token tasks: STEP for PRMs, whatever the task, as vLLM's
        ``PoolerConfig`` carries it), ``step_tag_id`` (when given; the preset holds vLLM's
        default, as ``for_model``'s presets do), then the overrides.

    Raises:
        EngineRefusal: a model vLLM would not serve as a pooling model
            (``engine_checks.check_pooling_runner``); a ``task`` it does not declare is
            refused by the resolution step (``engine_checks.check_configured_task``).
    """
    step_tag_id = overrides.pop("step_tag_id", None)
    preset = as_served(preset_from_hf_config(
        source, step_tag_id=step_tag_id, include_lm_head=overrides.pop("include_lm_head", None),
        revision=overrides.pop("revision", None),
    ), runner=runner, convert=convert)
    declared = preset.declared_tasks
    task = overrides.pop("task", None) or (
        preset.default_task if preset.default_task in declared else declared[-1])
    dtype = preset.served_dtype
    fields: dict = {"model": preset, "task": task, "dtype": dtype}
    if task in ("token_classify", "classify") and preset.num_labels is not None:
        fields["num_labels"] = preset.num_labels
    if task in ("token_embed", "token_classify"):
        fields["pooling"] = preset.tok_pooling_type  # the pooler's token pooling (PRMs: STEP)
        if step_tag_id is not None:  # the preset keeps vLLM's default tag; synthetic prompts
            fields["step_tag_id"] = step_tag_id  # carry none (step_tag_every places them)
    if task == "embed" or task == "classify":
        fields["pooling"] = "LAST"
    if preset.architecture.endswith("ForRewardModel"):
        fields["use_activation"] = False  # Qwen2ForRewardModelConfig's default
    if preset.late_interaction is not None and preset.late_interaction.marker_rows:
        fields["pooling"] = "JINA_RANKING"  # JinaForRankingPool; its TokenPooler has no head
    fields.update(overrides)
    return fields


def as_served(preset: HFModelPreset, *, runner: str = "pooling",
              convert: str = "auto") -> HFModelPreset:
    """The preset as vLLM serves it once its runner and conversion are resolved
    (``architectures.resolve_runner``): with the tasks it then declares
    (``declared_tasks``), and encoder-only when vLLM can only build it on its Transformers
    backend (``architectures.runs_on_transformers_backend``: CLS pooling). A model vLLM would
    not serve as a pooling model is refused (``engine_checks.check_pooling_runner``).

    Example:
        >>> bare = preset_from_hf_config({"architectures": ["Qwen3ForCausalLM"],
        ...     "model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 1,
        ...     "num_attention_heads": 1, "vocab_size": 10, "max_position_embeddings": 64})
        >>> as_served(bare).declared_tasks, as_served(bare, convert="classify").declared_tasks
        (('embed', 'token_embed'), ('classify', 'token_classify'))
    """
    runner_type, convert_type = resolve_runner(
        preset.architecture, runner=runner, convert=convert,
        sentence_transformers=preset.sentence_transformers)
    engine_checks.check_pooling_runner(
        preset.name, preset.architecture or preset.model_type, runner=runner,
        runner_type=runner_type, convert_type=convert_type,
        pooling_class=is_pooling_class(preset.architecture),
        generative_class=is_generative_class(preset.architecture))
    tasks = (LATE_INTERACTION_TASKS[preset.architecture]  # their poolers' own (late interaction)
             if preset.architecture in LATE_INTERACTION_TASKS and convert_type == "none"
             else declared_tasks(preset.default_task, convert_type))
    changes: dict[str, Any] = {"declared_tasks": tasks,
                               "classifier": classifier_runs_in(preset.architecture,
                                                                convert_type)}
    if runs_on_transformers_backend(preset.architecture, runner_type, convert_type):
        # Transformers' pooling classes default to CLS (EmbeddingMixin, ...): encoder-only,
        # so no KV cache and no sliding windows either
        changes.update(seq_pooling_type="CLS", attn_type=pooling_attn_type("CLS"),
                       sliding_windows=None)
    return dataclasses.replace(preset, **changes)


def declared_tasks(kind_task: str, convert: str | None) -> tuple[str, ...]:
    """The tasks vLLM's pooling model declares, from the task tokpool reads off the model's
    kind (``preset_from_hf_config``) and the conversion vLLM resolved
    (``architectures.resolve_runner``): embedding adapters declare ``embed`` and
    ``token_embed``, classification adapters ``classify`` and ``token_classify``
    (vllm/model_executor/models/adapters.py; ``DispatchPooler.for_embedding`` /
    ``for_seq_cls``), native PRMs, reward models and ``*ForTokenClassification`` models
    ``token_classify`` alone (``Qwen2ForProcessRewardModel``)."""
    if convert == "embed" or (convert in (None, "auto", "none")
                              and kind_task in ("embed", "token_embed")):
        return ("embed", "token_embed")
    if convert == "classify" or kind_task == "classify":
        return ("classify", "token_classify")
    return ("token_classify",)


#: config.json keys vLLM reads a maximum length from (the smallest wins), in its order
#: (vllm/transformers_utils/model_arch_config_convertor.py, derive_max_model_len_and_key).
MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                "model_max_length", "max_target_positions", "max_sequence_length",
                "max_seq_length", "seq_len")
#: RoPE types whose factor does NOT scale the derived length (vllm/config/model.py,
#: _get_and_verify_max_len).
_UNSCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def _tokenizer_max_length(cfg: Mapping, directory: Path | None) -> int | None:
    """``model_max_length`` of the folder's ``tokenizer_config.json``, which vLLM reads only for
    pooling models with absolute position embeddings (``ModelConfig.get_and_verify_max_len``:
    ``position_embedding_type == "absolute"`` in config.json; BERT, XLM-R)."""
    if directory is None or cfg.get("position_embedding_type") != "absolute":
        return None
    file = directory / "tokenizer_config.json"
    if not file.is_file():
        return None
    try:
        value = json.loads(read_small_text(file)).get("model_max_length")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as err:
        raise ValueError(f"{file} is not a JSON object: {err}") from None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _rope_types(cfg: Mapping) -> list[Mapping]:
    """The config's RoPE parameter dicts (one per layer type when nested), as vLLM iterates
    them (``iter_rope_parameters``; the legacy ``su`` is ``longrope``)."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    if not isinstance(rope, Mapping):
        return []
    nested = [v for v in rope.values() if isinstance(v, Mapping)]
    return nested if nested and len(nested) == len(rope) else [rope]


def max_model_lens(cfg: Mapping, directory: Path | None = None) -> tuple[int | None, int | None]:
    """``(default, derived)``: the ``max_model_len`` vLLM serves a model with when none is given,
    and the most a ``--max-model-len`` may ask without ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``
    (vllm/config/model.py, ``_get_and_verify_max_len``, in its order):

    1. the smallest of ``MAX_LEN_KEYS`` in config.json (``model_max_length`` wins when set);
    2. capped by the folder's ``tokenizer_config.json`` ``model_max_length`` for a pooling model
       with absolute position embeddings (an XLM-R folder: 514 positions, 512 tokens; without
       that file vLLM takes 514: positions start after the padding index only inside the
       model, ``RobertaEmbedding.forward``);
    3. times a RoPE scaling factor (``linear``, ``dynamic``, ...; not LongRoPE, YaRN, Llama-3
       or Gemma-3, whose lengths are already scaled);
    4. replaced by a sentence-transformers folder's ``max_seq_length``.

    The default is that length, but for LongRoPE (Phi-3's 128K configs):
    ``original_max_position_embeddings``, "to avoid performance degradation for shorter
    sequences". A ``--max-model-len`` up to the derived length is accepted, and up to
    config.json's ``model_max_length`` if that is longer. ``(None, None)``: no length key.

    Example:
        >>> max_model_lens({"max_position_embeddings": 131072, "rope_scaling": {
        ...     "type": "longrope"}, "original_max_position_embeddings": 4096})
        (4096, 131072)
    """
    lengths = [cfg[k] for k in MAX_LEN_KEYS if isinstance(cfg.get(k), int)
               and not isinstance(cfg.get(k), bool)]
    derived = min(lengths) if lengths else None
    if isinstance(cfg.get("model_max_length"), int):
        derived = cfg["model_max_length"]
    tokenizer_cap = _tokenizer_max_length(cfg, directory)
    if derived is not None and tokenizer_cap is not None:
        derived = min(derived, tokenizer_cap)
    ropes = _rope_types(cfg)
    kinds = [r.get("rope_type", r.get("type")) for r in ropes]
    kinds = ["longrope" if k == "su" else k for k in kinds]
    if derived is not None and ropes and "gemma3" not in str(cfg.get("model_type", "")):
        factor = 1.0
        for rope, kind in zip(ropes, kinds, strict=True):
            if kind not in _UNSCALED_ROPE and isinstance(rope.get("factor"), (int, float)):
                factor = rope["factor"] or 1.0
        derived = int(derived * factor)
    st = read_sentence_transformers_config(directory, dense=True) if directory is not None else None
    if st is not None and st.max_seq_length is not None:
        derived = st.max_seq_length  # all-MiniLM-L6-v2: 512 -> 256
    if derived is None:
        return None, None
    default = derived
    if "longrope" in kinds:
        original = cfg.get("original_max_position_embeddings")
        for rope in ropes:  # transformers 5 may keep it inside the rope parameters
            original = original or rope.get("original_max_position_embeddings")
        if isinstance(original, int) and not isinstance(original, bool):
            default = original
    limit = derived
    if isinstance(cfg.get("model_max_length"), int):
        limit = max(limit, cfg["model_max_length"])
    return int(default), int(limit)


def derived_max_model_len(cfg: Mapping, directory: Path | None = None) -> int | None:
    """vLLM's default ``max_model_len`` from a model's files (``max_model_lens``' first
    value: vllm/config/model.py, ``_get_and_verify_max_len``). ``None``: no length key."""
    return max_model_lens(cfg, directory)[0]
