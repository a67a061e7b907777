"""What to run for a model and a pooling task: the ``vllm serve`` line, the ``LLM(...)`` call and
one request body for vLLM 0.33.0's matching endpoint (``tp.recipe``).

The task is the one vLLM's engine would select for the model (``SimConfig.from_vllm_args``:
``vllm_rules.select_pooling_task`` over the tasks the model declares as vLLM serves it), or the
one asked for, configured by ``--pooler-config`` — a task the model does not declare is refused
with vLLM's refusal (``engine_checks.check_configured_task``), never given a recipe. Every
recipe's serve line resolves through ``SimConfig.from_vllm_args`` with no refusal (its
``config``); its body validates against vLLM's own request model (``request_model``:
``tests/test_parity_recipe.py``).

Endpoints follow ``vllm/entrypoints/pooling/factories.py`` (``register_pooling_api_routers``):
``embed`` → ``/v1/embeddings``; ``token_embed`` → ``/v1/embeddings`` (``TokenEmbeddingRequest``;
late chunking via ``late_chunking_params``), and a late-interaction model (ColBERT's head,
JinaForRanking's listwise pool) scores on ``/score`` and ``/rerank``; ``token_classify`` (PRMs)
→ ``/pooling`` with ``task``; ``classify`` → ``/classify``.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from ..sim import MODEL_PRESETS, SimConfig

__all__ = ["Recipe", "recipe"]

_PROTOCOL = "vllm.entrypoints.pooling"
#: endpoint kind -> (HTTP path, vLLM's request model that validates the body)
ENDPOINTS = {
    "embed": ("/v1/embeddings", f"{_PROTOCOL}.embed.protocol.EmbeddingCompletionRequest"),
    "token_embed": ("/v1/embeddings",
                    f"{_PROTOCOL}.token_embed.protocol.TokenEmbeddingRequest"),
    "late_interaction": ("/score",
                         f"{_PROTOCOL}.scoring.protocol.ScoreQueriesDocumentsRequest"),
    "listwise": ("/rerank", f"{_PROTOCOL}.scoring.protocol.RerankRequest"),
    "token_classify": ("/pooling", f"{_PROTOCOL}.pooling.protocol.PoolingCompletionRequest"),
    "classify": ("/classify", f"{_PROTOCOL}.classify.protocol.ClassificationCompletionRequest"),
}
TASKS = ("embed", "token_embed", "token_classify", "classify")
_QUERY = "What does token-level pooling keep?"
_DOCS = ["AllPool keeps one row per prompt token.", "LastPool keeps the last token's row."]


@dataclass(frozen=True)
class Recipe:
    """What to run for a model and a pooling task (``tp.recipe``).

    Attributes:
        model: the Hub id or folder.
        task: the pooling task the engine serves (vLLM's selection, or the one asked for).
        kind: ``"embed"``, ``"token_embed"``, ``"late_interaction"`` (ColBERT-style: two-stage
            ``/score`` and ``/rerank``), ``"listwise"`` (JinaForRanking: ``/rerank``),
            ``"token_classify"`` (PRMs) or ``"classify"``.
        serve_line: one line, ``vllm serve MODEL --runner pooling ...``.
        llm_call: the offline equivalent: ``LLM(...)`` and its ``embed`` / ``encode`` /
            ``score`` call, as Python source.
        endpoint: ``"POST /path"``.
        request_body: one request body for that endpoint (JSON-ready).
        request_model: vLLM's pydantic request model (dotted path) the body validates against.
        config: the ``SimConfig`` the serve line resolves to (``SimConfig.from_vllm_args``).
        notes: what the recipe assumes (a step tag, a token pair, a late-chunking size).
    """

    model: str
    task: str
    kind: str
    serve_line: str
    llm_call: str
    endpoint: str
    request_body: dict[str, Any]
    request_model: str
    config: SimConfig = field(repr=False, compare=False)
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.serve_line


def _kind(cfg: SimConfig) -> str:
    head = getattr(cfg.model, "late_interaction", None)
    if cfg.task == "token_embed" and head is not None:
        return "listwise" if cfg.pooling == "JINA_RANKING" else "late_interaction"
    return cfg.task


def _preset_pooler(model: str) -> dict[str, Any]:
    """A token-pair PRM's ``--pooler-config`` (Math-Shepherd: STEP over its step tag, keeping
    the "+"/"-" token pair): what its config.json cannot say."""
    for preset in MODEL_PRESETS.values():
        if model.lower() in (preset.hf_id.lower(), preset.name.lower()) and (
                preset.returned_token_ids is not None):
            return {"task": "token_classify", "tok_pooling_type": "STEP",
                    "step_tag_id": preset.step_tag_id,
                    "returned_token_ids": list(preset.returned_token_ids)}
    return {}


def _body(kind: str, model: str, cfg: SimConfig, late_chunking: int | None) -> dict[str, Any]:
    if kind in ("embed", "classify"):
        return {"model": model, "input": [_QUERY]}
    if kind == "token_embed":
        body: dict[str, Any] = {"model": model, "input": _DOCS[0]}
        if late_chunking is not None:
            body["late_chunking_params"] = {"chunk_size": late_chunking}
        return body
    if kind == "late_interaction":
        return {"model": model, "queries": _QUERY, "documents": _DOCS}
    if kind == "listwise":
        return {"model": model, "query": _QUERY, "documents": _DOCS}
    # token_classify: a PRM scores the rows of its step tags; the text carries them
    tag = " ки" if cfg.returned_token_ids is not None else "<extra_0>"
    steps = "Step 1: 2 + 2 = 4." + tag + "Step 2: 4 * 3 = 12." + tag
    return {"model": model, "input": "What is (2 + 2) * 3? " + steps, "task": "token_classify"}


def _llm_call(kind: str, model: str, pooler: dict[str, Any], body: dict[str, Any]) -> str:
    args = [f"model={model!r}", "runner='pooling'"]
    if pooler:
        args.append(f"pooler_config={pooler!r}")
    head = f"from vllm import LLM\nllm = LLM({', '.join(args)})\n"
    if kind in ("late_interaction", "listwise"):
        docs = body["documents"]
        query = body.get("queries", body.get("query"))
        return head + f"scores = llm.score({query!r}, {docs!r})"
    if kind == "embed":
        return head + f"outputs = llm.embed({body['input']!r})"
    if kind == "classify":
        return head + f"outputs = llm.classify({body['input']!r})"
    return head + f"outputs = llm.encode({[body['input']]!r}, pooling_task={kind!r})"


def recipe(model: str, task: str | None = None, *, revision: str | None = None,
           late_chunking: int | None = None, **flags: Any) -> Recipe:
    """What to run to serve ``model`` for ``task`` with vLLM 0.33.0.

    Args:
        model: a Hub id (``"BAAI/bge-m3"``: its small config files, cache or Hub, never
            weights) or a model folder.
        task: ``"embed"``, ``"token_embed"``, ``"token_classify"`` or ``"classify"``;
            ``None``: the task vLLM's engine would select for the model.
        revision: the Hub revision (``--revision``).
        late_chunking: ``token_embed``: ask for late chunking with this chunk size (the
            request's ``late_chunking_params``).
        **flags: more ``vllm serve`` flags by their ``EngineArgs`` names
            (``max_model_len=8192`` → ``--max-model-len 8192``).

    Returns:
        The ``Recipe``; ``str(recipe)`` is its one-line ``vllm serve`` command.

    Raises:
        ValueError: a model vLLM would not serve for that task (vLLM's refusal), a Hub id
            that cannot be had (in words), a bad argument.
    """
    if not isinstance(model, str) or not model.strip():
        raise TypeError(f"model must be a Hub id or a folder path, got {model!r}")
    if late_chunking is not None and (isinstance(late_chunking, bool) or not isinstance(
            late_chunking, int) or late_chunking < 1):
        raise ValueError(f"late_chunking must be a chunk size in tokens (an int >= 1), got "
                         f"{late_chunking!r}")
    if task is not None and task not in TASKS:
        raise ValueError(f"task {task!r} is not a pooling task vLLM serves; use one of "
                         f"{list(TASKS)}, or None for the task vLLM selects for the model")
    words = ["vllm", "serve", model, "--runner", "pooling"]
    if revision is not None:
        words += ["--revision", str(revision)]
    for name, value in flags.items():
        words += [f"--{name.replace('_', '-')}", str(value)]
    pooler = _preset_pooler(model)
    if task is not None and pooler.get("task", task) != task:
        pooler = {}
    if task is not None and not pooler:
        selected = SimConfig.from_vllm_args(shlex.join(words)).task
        if selected != task:
            pooler = {"task": task}
    if pooler:
        words += ["--pooler-config", json.dumps(pooler, separators=(",", ":"))]
    line = shlex.join(words)
    cfg = SimConfig.from_vllm_args(line)  # vLLM's refusal for an undeclared task
    kind = _kind(cfg)
    if late_chunking is not None and kind == "late_interaction":
        kind = "token_embed"  # the same engine: /v1/embeddings serves its token rows
    if late_chunking is not None and kind != "token_embed":
        raise ValueError(f"late_chunking is for a token_embed model served plainly; {model} "
                         f"serves {kind}: leave late_chunking out")
    body = _body(kind, model, cfg, late_chunking)
    path, request_model = ENDPOINTS[kind]
    notes = []
    if kind == "late_interaction":
        notes.append("also POST /rerank {model, query, documents}: the same two stages")
    if kind == "token_classify":
        tag = cfg.effective_step_tag_id or cfg.model.step_tag_id  # vLLM's default tag
        notes.append(f"STEP pooling keeps the rows of step tag {tag}")
    if late_chunking is not None:
        notes.append(f"late chunking: chunks of {late_chunking} tokens after one forward pass")
    return Recipe(model=model, task=cfg.task, kind=kind, serve_line=line,
                  llm_call=_llm_call(kind, model, pooler, body), endpoint=f"POST {path}",
                  request_body=body, request_model=request_model, config=cfg,
                  notes=tuple(notes))
