"""Pooling tasks, the runner's task gate (before and after vLLM PR #50931), task selection.

The gate answers one question: given what a model's pooler declares, which tasks will the
pooling runner serve? Before PR #50931 (gate policy ``"pre_50931"``) vLLM's Model Runner V2
filtered token-level tasks out of every model that was not ``encoder_only``, so a decoder's
``token_embed`` was refused. After it (``"current"``), the runner serves the model's declared
tasks intersected with its own set.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from .._deprecation import TokpoolDeprecationWarning
from .task_names import (
    POOLING_TASKS,
    SUPPORTED_TASKS,
    TOKEN_TASKS,
    check_selected_task,
    select_pooling_task,
)

GatePolicy = Literal["current", "pre_50931"]
AttnType = Literal["decoder", "encoder_only", "encoder_decoder"]

GATE_POLICIES: tuple[str, ...] = ("current", "pre_50931")
#: The gate policy's old name: "legacy" also names a retention policy (``tp.AllPool``).
_OLD_GATE_POLICY = "legacy"


def gate_policy(policy: str) -> str:
    """Check a gate policy; the old name ``"legacy"`` still works and warns."""
    if policy == _OLD_GATE_POLICY:
        warnings.warn('gate policy "legacy" is now "pre_50931" ("legacy" also names a '
                      "retention policy of AllPool)", TokpoolDeprecationWarning, stacklevel=3)
        return "pre_50931"
    _check_choice(policy, GATE_POLICIES, "gate policy")
    return policy


ATTN_TYPES: tuple[str, ...] = ("decoder", "encoder_only", "encoder_decoder")


RUNNER_NAME = "The pooling runner (vLLM Model Runner V2)"
_FALLBACK = "another runner (VLLM_USE_V2_MODEL_RUNNER=0)"


class UnsupportedTaskError(ValueError):
    """A task the runner will not serve for this model; the message says what would work."""


def _check_tasks(tasks: Iterable[str], what: str) -> tuple[str, ...]:
    if isinstance(tasks, str):
        raise TypeError(f"{what} must be a collection of task names, not the string {tasks!r}")
    try:
        tasks = tuple(tasks)
    except TypeError:
        raise TypeError(
            f"{what} must be a collection of task names, got {type(tasks).__name__}"
        ) from None
    unknown = [t for t in tasks if t not in POOLING_TASKS]
    if unknown:
        raise ValueError(
            f"unknown pooling task(s) {unknown} in {what}; known tasks: {list(POOLING_TASKS)}"
        )
    return tasks


def _check_architectures(architectures: Iterable[str]) -> tuple[str, ...]:
    if isinstance(architectures, str):
        raise TypeError(
            f"architectures must be a collection of names, not the string {architectures!r}; "
            f"write architectures=({architectures!r},)"
        )
    try:
        names = tuple(architectures)
    except TypeError:
        raise TypeError(
            f"architectures must be a collection of names, got {type(architectures).__name__}"
        ) from None
    bad = [a for a in names if not isinstance(a, str)]
    if bad:
        raise TypeError(f"architectures must hold strings, got {bad[:3]}")
    return names


def _check_choice(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; choose one of {list(allowed)}")


def select_task(
    model_tasks: Iterable[str],
    *,
    requested: str | None = None,
    architectures: Iterable[str] = (),
) -> str | None:
    """Pick the task a model runs, with vLLM's priority.

    Args:
        model_tasks: tasks the model's pooler declares.
        requested: a task the user asked for; it must be one of ``model_tasks``.
        architectures: HF architecture names; ``*ForTokenClassification`` prefers
            ``token_classify``.

    Returns:
        The selected task, or ``None`` when the model declares no task.

    Raises:
        ValueError: ``requested`` is not among ``model_tasks`` (both are named).
        TypeError: a string where a collection is expected (``model_tasks``,
            ``architectures``), or a ``requested`` that is not a string.
    """
    tasks = _check_tasks(model_tasks, "model_tasks")
    architectures = _check_architectures(architectures)
    if requested is not None:
        if not isinstance(requested, str):
            raise TypeError(f"requested must be one task name or None, got {requested!r}")
        _check_tasks([requested], "requested")
        if requested not in tasks:
            raise ValueError(
                f"task {requested!r} is not supported by this model, which supports "
                f"{sorted(tasks)}; request one of those or leave the task unset"
            )
        return requested
    return select_pooling_task(tasks, architectures=architectures)


def runner_tasks(*, attn_type: str = "decoder", policy: str = "current") -> frozenset[str]:
    """The runner's task set for a model of this attention type under a gate policy."""
    policy = gate_policy(policy)
    _check_choice(attn_type, ATTN_TYPES, "attn_type")
    if policy == "pre_50931" and attn_type != "encoder_only":
        return SUPPORTED_TASKS - TOKEN_TASKS
    return SUPPORTED_TASKS


def gate(
    model_tasks: Iterable[str],
    *,
    requested: str | None = None,
    attn_type: str = "decoder",
    policy: str = "current",
    architectures: Iterable[str] = (),
) -> frozenset[str]:
    """The tasks the pooling runner serves for this model.

    ``policy="current"`` is vLLM after PR #50931 (model tasks ∩ runner set);
    ``policy="pre_50931"`` is the rule before it (token tasks only for ``encoder_only``;
    the old name ``"legacy"`` warns).

    Raises:
        UnsupportedTaskError: the selected task is outside the runner's set, or the model has
            no task the runner serves. The message has vLLM's shape, hint included.
    """
    tasks = tuple(sorted(_check_tasks(model_tasks, "model_tasks")))
    enabled = runner_tasks(attn_type=attn_type, policy=policy)
    selected = select_task(tasks, requested=requested, architectures=architectures)
    if selected not in enabled:
        hint = (
            f"Set an explicitly supported task or use {_FALLBACK}."
            if enabled.intersection(tasks)
            else f"Use {_FALLBACK} to use this model."
        )
        raise UnsupportedTaskError(
            f"{RUNNER_NAME} supports pooling tasks {sorted(enabled)}, but this model selects "
            f"{selected!r} from {list(tasks)}. {hint}"
        )
    served = enabled.intersection(tasks)
    if not served:  # unreachable when `selected` is served; kept for vLLM's message shape
        raise UnsupportedTaskError(
            f"{RUNNER_NAME} supports pooling tasks {sorted(enabled)}, but this model supports "
            f"{list(tasks)}. Use {_FALLBACK} to use this model."
        )
    return frozenset(served)


def check_request_task(
    task: str,
    served: Iterable[str],
    *,
    selected: str | None = None,
    entrypoint: Literal["llm", "server"] = "llm",
) -> None:
    """Per-request check, as the runner does when a request is added; with ``selected``, also
    vLLM's engine rule: an engine serves only its SELECTED task (``PoolerConfig(task=...)``,
    or ``tp.select_task``'s priority), and refuses the model's other tasks per request
    (``vllm/entrypoints/pooling``: ``_verify_pooling_task``; ``tokpool.sim.vllm_rules``).

    Args:
        task: the request's task.
        served: what the runner serves for the model (``tp.gate``).
        selected: the engine's selected task; ``None`` checks ``served`` only.
        entrypoint: ``"llm"`` (the ``LLM`` class) or ``"server"``: the hint's wording.

    Raises:
        UnsupportedTaskError: ``Unsupported task: 'X'. Supported tasks: [...]``, or, with
            ``selected``, the entry point's own message first (vLLM checks there before a
            request reaches the runner): the ``LLM`` class's "Embedding API is not supported
            by this model. Try converting the model using `--convert embed`." (and its
            classification twin) for a task the model lacks, "Try switching the model's
            pooling_task ..." for a served but unselected task.
    """
    served = sorted(served)
    if selected is not None:
        try:
            check_selected_task(task, selected_task=selected, supported_tasks=served,
                                entrypoint=entrypoint)
        except ValueError as err:
            raise UnsupportedTaskError(str(err)) from None
    if task not in served:
        raise UnsupportedTaskError(f"Unsupported task: {task!r}. Supported tasks: {served}")


@dataclass(frozen=True)
class ModelKind:
    """A kind of pooling model the mission cares about, as its pooler declares it."""

    name: str
    example: str
    tasks: frozenset[str]
    attn_type: str = "decoder"
    architectures: tuple[str, ...] = ()
    note: str = ""


MODEL_KINDS: dict[str, ModelKind] = {
    k.name: k
    for k in (
        ModelKind(
            "decoder_embedding",
            "Qwen3-Embedding-8B",
            frozenset({"embed", "token_embed"}),
            architectures=("Qwen3ForCausalLM",),
            note="LAST pooling for embed, ALL for token_embed",
        ),
        ModelKind(
            "decoder_sequence_classifier",
            "Skywork-Reward-V2 (outcome reward model)",
            frozenset({"classify", "token_classify"}),
            architectures=("LlamaForSequenceClassification",),
            note="one score per sequence; token_classify scores every token",
        ),
        ModelKind(
            "process_reward_model",
            "Qwen2.5-Math-PRM-7B",
            frozenset({"token_classify"}),
            architectures=("Qwen2ForProcessRewardModel",),
            note="STEP pooling: rows at step-tag tokens",
        ),
        ModelKind(
            "token_classification",
            "a *ForTokenClassification decoder (NER, tagging)",
            frozenset({"classify", "token_classify"}),
            architectures=("Qwen2ForTokenClassification",),
            note="architecture name makes token_classify the default",
        ),
        ModelKind(
            "bge_m3_encoder",
            "BAAI/bge-m3",
            frozenset({"embed", "token_embed", "token_classify", "embed&token_classify"}),
            attn_type="encoder_only",
            architectures=("BgeM3EmbeddingModel",),
            note="dense CLS + sparse per-token weights in one output",
        ),
        ModelKind(
            "splade_encoder",
            "naver/splade-v3",
            frozenset({"embed", "token_embed"}),
            attn_type="encoder_only",
            architectures=("BertSpladeSparseEmbeddingModel",),
            note="embed = max over tokens of log1p(relu(MLM logits))",
        ),
        ModelKind(
            "listwise_decoder_reranker",
            "jinaai/jina-reranker-v3",
            frozenset({"token_embed"}),
            architectures=("JinaForRanking",),
            note="per-token embeddings of query and documents, scored outside",
        ),
        ModelKind(
            "plugin_only",
            "a model served by an IO-processor plugin",
            frozenset({"plugin"}),
            note="needs a runner with plugin support",
        ),
    )
}


def model_kind(name: str) -> ModelKind:
    """Look up a catalogue entry by name (see ``MODEL_KINDS``)."""
    try:
        return MODEL_KINDS[name]
    except KeyError:
        raise ValueError(
            f"unknown model kind {name!r}; known kinds: {sorted(MODEL_KINDS)}"
        ) from None


def _served_or_error(kind: ModelKind, policy: str, task: str | None = None) -> str:
    try:
        served = gate(kind.tasks, attn_type=kind.attn_type, policy=policy,
                      architectures=kind.architectures)
    except UnsupportedTaskError:
        return "refused"
    if task is None:
        return ", ".join(sorted(served))
    return "yes" if task in served else "no"


def task_table(
    kinds: Iterable[str] | None = None, *, tasks: Iterable[str] | None = None
) -> pd.DataFrame:
    """For each model kind: its tasks, default task, and what each gate policy serves.

    Args:
        kinds: catalogue names (default: all of ``MODEL_KINDS``).
        tasks: task columns to show (default: every pooling task).

    Returns:
        DataFrame indexed by kind with columns ``example``, ``attn_type``, ``model_tasks``,
        ``default_task``, ``served_pre_50931``, ``served_current`` and, per task,
        ``pre_50931:<task>``
        and ``current:<task>`` holding ``"yes"``, ``"no"`` or ``"refused"`` (the gate raised).
    """
    if kinds is not None and (isinstance(kinds, str) or not isinstance(kinds, Iterable)):
        raise TypeError(f"kinds must be a list of model kinds from {list(MODEL_KINDS)}, got "
                        f"{kinds!r}")
    names = list(MODEL_KINDS) if kinds is None else list(kinds)
    columns = list(POOLING_TASKS) if tasks is None else list(_check_tasks(tasks, "tasks"))
    rows = []
    for name in names:
        kind = model_kind(name)
        row = {
            "kind": name,
            "example": kind.example,
            "attn_type": kind.attn_type,
            "model_tasks": ", ".join(sorted(kind.tasks)),
            "default_task": select_task(kind.tasks, architectures=kind.architectures),
            "served_pre_50931": _served_or_error(kind, "pre_50931"),
            "served_current": _served_or_error(kind, "current"),
        }
        for policy in GATE_POLICIES[::-1]:
            for task in columns:
                row[f"{policy}:{task}"] = _served_or_error(kind, policy, task)
        rows.append(row)
    return pd.DataFrame(rows).set_index("kind")
