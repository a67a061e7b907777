"""The pooling task names and vLLM's task rules (no dependencies but the deprecation helper):
the data model, the poolers and the gate (``tokpool.pooler.tasks``, which loads pandas for its
tables) need them; ``tokpool.sim.vllm_rules`` re-exports the rules with the engine's others.

- ``select_pooling_task``: the task an engine serves (vllm/config/model.py,
  ``ModelConfig.get_pooling_task``);
- ``check_selected_task``: a request whose task is not that one, refused in vLLM's words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from .._deprecation import deprecated_alias

PoolingTask = Literal[
    "embed", "classify", "token_embed", "token_classify", "embed&token_classify", "plugin"
]
POOLING_TASKS: tuple[str, ...] = (
    "embed",
    "classify",
    "token_embed",
    "token_classify",
    "embed&token_classify",
    "plugin",
)
#: The runner's own task set: every pooling task but ``plugin`` (served by another runner).
SUPPORTED_TASKS: frozenset[str] = frozenset(POOLING_TASKS) - {"plugin"}
#: Tasks whose output grows with the prompt; the gate before PR #50931 kept them for encoders
#: only.
TOKEN_TASKS: frozenset[str] = frozenset({"token_embed", "token_classify", "embed&token_classify"})


# --- vLLM's task selection and per-request check (vllm/config/model.py, entrypoints)
# ----------------------------------------------------------------------------------

#: Tasks vLLM's ``TokenPoolingMethod`` declares; ``StepPool`` inherits ``AllPool``'s set
#: (vllm/model_executor/layers/pooler/tokwise/methods.py). The head narrows a pooler to one.
TOKEN_POOL_METHOD_TASKS: frozenset[str] = frozenset({"token_embed", "token_classify"})
#: MRV2's pooling runner set (vllm/v1/worker/gpu/pool/pooling_runner.py, ``_SUPPORTED_TASKS``).
RUNNER_TASKS: frozenset[str] = frozenset(
    {"embed", "classify", "token_embed", "token_classify", "embed&token_classify"}
)


#: vLLM's default-task priority when no task is configured (``ModelConfig.get_pooling_task``).
POOLING_TASK_PRIORITY: tuple[str, ...] = (
    "embed&token_classify", "embed", "classify", "token_embed", "token_classify", "plugin",
)


def select_pooling_task(model_tasks: Sequence[str], *, architectures: Sequence[str] = (),
                        configured: str | None = None) -> str | None:
    """The task an engine serves: ``--pooler-config``'s task if set, else, for a
    ``*ForTokenClassification`` architecture, ``token_classify``, else the first of
    ``POOLING_TASK_PRIORITY`` the model supports (vllm/config/model.py,
    ``ModelConfig.get_pooling_task``): a decoder embedding model declaring
    ``{embed, token_embed}`` serves ``embed``, and refuses token_embed requests."""
    if configured is not None:
        return configured
    tasks = set(model_tasks)
    if "token_classify" in tasks and any(
        a.endswith("ForTokenClassification") for a in architectures
    ):
        return "token_classify"
    return next((t for t in POOLING_TASK_PRIORITY if t in tasks), None)


def check_selected_task(
    task: str,
    *,
    selected_task: str,
    supported_tasks: Sequence[str] | frozenset[str],
    entrypoint: Literal["llm", "server"] = "llm",
) -> None:
    """Refuse a request whose task is not the engine's selected task, with vLLM's messages.

    An engine serves the one task ``ModelConfig.get_pooling_task`` selects (``PoolerConfig(
    task=...)`` or the priority order; ``tp.select_task``). vllm/entrypoints/pooling/offline.py,
    ``PoolingOfflineMixin._verify_pooling_task`` (``LLM``): an embedding task the model does
    not support → "Embedding API is not supported by this model. Try converting the model
    using `--convert embed`.", a classification task → its ``--convert classify`` twin;
    vllm/entrypoints/pooling/pooling/serving.py, ``ServingPooling._verify_pooling_task``
    (server) and the ``LLM`` class for other tasks: a task the model does not support →
    "Unsupported task: ..."; a supported task that is not the selected one → "Try switching
    the model's pooling_task ...". ``plugin`` is checked elsewhere and passes here. (The
    worker's own check, ``PoolingRunner.add_request``, only refuses tasks outside model ∩
    runner tasks.)

    Raises:
        ValueError: the request's task is not served.

    Example:
        >>> check_selected_task("token_embed", selected_task="token_classify",
        ...                     supported_tasks=("token_classify",))
        Traceback (most recent call last):
        ValueError: Embedding API is not supported by this model. Try converting the model \
using `--convert embed`.
    """
    if task == "plugin" or task == selected_task:
        return
    supported = tuple(supported_tasks)
    if entrypoint == "llm" and task not in supported:
        if task in ("embed", "token_embed"):
            raise ValueError("Embedding API is not supported by this model. Try converting the "
                             "model using `--convert embed`.")
        if task in ("classify", "token_classify"):
            raise ValueError("Classification API is not supported by this model. Try "
                             "converting the model using `--convert classify`.")
    if task not in supported:
        raise ValueError(f"Unsupported task: {task!r} Supported tasks: {supported}")
    switch = (
        f'via `PoolerConfig(task="{task}")`' if entrypoint == "llm"
        else f"via --pooler-config.task {task}."
    )
    raise ValueError(f"Try switching the model's pooling_task {switch}")


check_request_task = deprecated_alias(
    check_selected_task, "tokpool.sim.vllm_rules.check_request_task", "check_selected_task")
