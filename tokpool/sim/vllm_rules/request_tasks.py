"""Which task each request of a workload runs (vLLM's ``PoolingParams.task``), and whether a
mixed workload is one tokpool's simulator runs.

A pooling model's pooler is vLLM's ``DispatchPooler`` (vllm/model_executor/layers/pooler/
special.py): ``DispatchPooler.for_embedding`` serves ``token_embed`` (``AllPool``) with
``embed`` (``LastPool``), ``for_seq_cls`` serves ``token_classify`` with ``classify``. The
worker accepts a request whose task is among the model's pooler tasks and the runner's
(``PoolingRunner.add_request``, vllm/v1/worker/gpu/pool/pooling_runner.py: "Unsupported task:
... Supported tasks: [...]"); its ``forward`` groups consecutive requests of one task and runs
each group's pooler on the group's rows alone (vLLM PR 36614). The API server and ``LLM``
accept only the engine's selected task (``tokpool.pooler.task_names.check_selected_task``), so
a mixed batch reaches an engine through its request API (``LLMEngine.add_request`` with a
``PoolingParams(task=...)`` per request).

The simulator runs such a workload when the engine pools with ALL (or LAST) and no
late-interaction head: the token requests follow ``AllPool``'s keep rule, the sequence ones
gather one row in each step and keep nothing (``tokpool.sim.backends.mixed``).

Example:
    >>> from tokpool.sim import SimConfig
    >>> cfg = SimConfig(hidden_size=8)
    >>> request_tasks([None, tp.PoolingParams(task="embed")], cfg)
    ['token_embed', 'embed']
    >>> request_tasks([tp.PoolingParams(task="classify")], cfg)
    Traceback (most recent call last):
    ValueError: pooling_params[0].task='classify': Unsupported task: 'classify'. Supported ...
"""

from __future__ import annotations

from collections.abc import Sequence

from ...pooler.keep_rule import VLLM_POLICY, keep_rule

__all__ = ["DISPATCH_PAIRS", "check_mixed_run", "request_tasks", "served_tasks"]

#: The tasks one model's ``DispatchPooler`` serves, by any one of them (vLLM 0.33.0's
#: ``DispatchPooler.for_embedding`` / ``for_seq_cls`` keys).
DISPATCH_PAIRS: dict[str, tuple[str, str]] = {
    "token_embed": ("embed", "token_embed"),
    "embed": ("embed", "token_embed"),
    "token_classify": ("classify", "token_classify"),
    "classify": ("classify", "token_classify"),
}


def served_tasks(config) -> tuple[str, ...]:
    """The tasks the simulated engine serves per request: its task and the twin its
    ``DispatchPooler`` holds (sorted, as vLLM lists them); only its own under STEP or
    JINA_RANKING pooling, or with a late-interaction head."""
    if (not config.pooling_kind.serves_twin_task
            or getattr(config.model, "late_interaction", None)):
        return (config.task,)
    return DISPATCH_PAIRS.get(config.task, (config.task,))


def request_tasks(params: Sequence, config) -> list[str] | None:
    """Each request's task (``PoolingParams.task``, else the engine's), or ``None`` when
    every request runs the engine's own task (the unmixed run).

    Raises:
        ValueError: a task the engine does not serve, in the worker's words
            (``PoolingRunner.add_request``).
    """
    served = served_tasks(config)
    tasks = []
    for i, p in enumerate(params):
        task = getattr(p, "task", None) or config.task
        if task not in served:
            raise ValueError(
                f"pooling_params[{i}].task={task!r}: Unsupported task: {task!r}. Supported "
                f"tasks: {sorted(served)} (vLLM's PoolingRunner.add_request; this engine "
                f"serves {config.task!r} with the {config.pooling_kind.name} pooler"
                + (f" and its twin {sorted(set(served) - {config.task})[0]!r}"
                   if len(served) > 1 else "") + "). Leave task=None for the engine's task")
        tasks.append(task)
    return None if all(t == config.task for t in tasks) else tasks


def check_mixed_run(config, *, prompt_token_ids=None) -> None:
    """Refuse, in words, a mixed-task run the simulator does not model.

    Raises:
        ValueError: offload or vLLM's own pooler as the policy, or prompts given as token
            ids with prefix caching on (each task reads the cache its own way).
    """
    # ask the ownership table (keep_rule.py decides from a policy name), not the name
    on_host = keep_rule(config.policy, async_scheduling=False, finished=False,
                        first_chunk=True).keep == "host"
    if on_host or config.policy == VLLM_POLICY:
        raise ValueError(
            f"a workload mixing tasks runs with policy 'clone', 'legacy' or 'prealloc' "
            f"(tokpool's DispatchPooler), not {config.policy!r}; give every request the "
            "engine's task, or pick another policy")
    if prompt_token_ids is not None and config.enable_prefix_caching:
        raise ValueError(
            "a workload mixing tasks takes prompt lengths, or token ids with "
            "enable_prefix_caching=False: token tasks never read the prefix cache and "
            "sequence tasks do (PoolingParams.skip_reading_prefix_cache), which tokpool's "
            "scheduler does not model per request")
