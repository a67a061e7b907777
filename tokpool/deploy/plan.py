"""A verdict first: would vLLM 0.33.0 start a model's engine and serve a prompt of this length,
then the pooling peak by its parts, the KV cache's concurrent requests of that length, and the
recipe (``tp.plan``, ``tokpool plan``).

Every number is the simulator's (``SimConfig.from_vllm_args`` for the deployment,
``sim.startup.startup_refusal`` for vLLM's start-up refusals, ``tp.simulate`` /
``peak_parts`` for the pooling peak, the resolved KV cache for concurrency), and names its
deployment: ``vllm serve`` (the API server's defaults), the device, the flags given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..sim import SimConfig, simulate
from ..sim.results.peak_parts import peak_parts, single_request_peak_parts
from ..sim.startup import startup_refusal
from ..sim.vllm_rules.args import parse_vllm_args
from ..sim.vllm_rules.devices import resolve_hardware
from ..sim.vllm_rules.engine_checks import EngineRefusal
from .recipe import Recipe, recipe

__all__ = ["Plan", "plan"]


@dataclass(frozen=True)
class Plan:
    """What ``tp.plan`` found: a verdict, then the numbers behind it.

    Attributes:
        verdict: the first line: whether vLLM 0.33.0 starts the engine and serves the prompt.
        serves: ``True`` when it does.
        deployment: the deployment every number is for (``vllm serve``, device, flags).
        serve_line: the line judged (the recipe's, or the one given).
        prompt_len: tokens in the prompt asked about.
        refusals: vLLM's refusals, in its order (its words).
        peak_parts: the pooling peak of one such request, by part (bytes).
        concurrent_requests: requests of ``prompt_len`` tokens the KV cache holds at once
            (``None``: an encoder-only model keeps no KV cache).
        recipe: what to run (``tp.recipe``).
    """

    verdict: str
    serves: bool
    deployment: str
    serve_line: str
    prompt_len: int
    refusals: tuple[str, ...]
    peak_parts: dict[str, int]
    concurrent_requests: int | None
    recipe: Recipe = field(repr=False)

    def lines(self) -> list[str]:
        """The report, verdict first (what ``tokpool plan`` prints)."""
        out = [self.verdict, f"deployment: {self.deployment}"]
        out += [f"  vLLM refuses: {r}" for r in self.refusals]
        total = sum(self.peak_parts.values())
        parts = ", ".join(f"{name} {n:,} B" for name, n in self.peak_parts.items())
        out.append(f"pooling peak of one {self.prompt_len:,}-token request: {total:,} B"
                   + (f" ({parts})" if parts else ""))
        out.append("KV cache: " + ("none (an encoder-only model keeps no KV cache)"
                                   if self.concurrent_requests is None else
                                   f"{self.concurrent_requests:,} concurrent requests of "
                                   f"{self.prompt_len:,} tokens"))
        out += [f"serve: {self.serve_line}", f"request: {self.recipe.endpoint} "
                f"{self.recipe.request_body}"]
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``tokpool plan --json``)."""
        r = self.recipe
        return {"verdict": self.verdict, "serves": self.serves, "deployment": self.deployment,
                "prompt_len": self.prompt_len, "refusals": list(self.refusals),
                "pooling_peak_bytes": sum(self.peak_parts.values()),
                "pooling_peak_parts": dict(self.peak_parts),
                "concurrent_requests": self.concurrent_requests,
                "serve_line": self.serve_line,
                "recipe": {"task": r.task, "kind": r.kind, "serve_line": r.serve_line,
                           "llm_call": r.llm_call, "endpoint": r.endpoint,
                           "request_body": r.request_body, "request_model": r.request_model}}

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _peak(cfg: SimConfig, n: int) -> dict[str, int]:
    parts = single_request_peak_parts(cfg, n)
    if parts is None:  # a selection or LAST pooling: run the steps (analytic: bytes only)
        parts = peak_parts(simulate([n], cfg, mode="analytic"))
    return parts


def plan(model: str | None = None, *, task: str | None = None, gpu: str = "H100",
         prompt_len: int = 32_768, serve_line: str | None = None) -> Plan:
    """Would vLLM 0.33.0 serve a ``prompt_len``-token prompt of ``model`` on ``gpu``?

    Args:
        model: a Hub id or folder (default: the ``serve_line``'s model).
        task: the pooling task (default: the one vLLM selects).
        gpu: a device of ``tp.HARDWARE_PRESETS`` (``"H100"``, ``"H200"``, ...).
        prompt_len: tokens in the prompt.
        serve_line: a ``vllm serve`` line to judge instead of the recipe's.

    Returns:
        The ``Plan``; ``str(plan)`` prints it, verdict first.

    Raises:
        ValueError: an unknown device, a prompt length that is not a whole number >= 1, a
            model vLLM would not serve for the task (vLLM's refusal), a Hub id that cannot be
            had.
    """
    if isinstance(prompt_len, bool) or not isinstance(prompt_len, int) or prompt_len < 1:
        raise ValueError(f"prompt_len must be a whole number of tokens >= 1, got "
                         f"{prompt_len!r}")
    device = resolve_hardware(gpu)
    if model is None and serve_line is None:
        raise ValueError("plan needs a model (a Hub id or folder) or a serve_line")
    if serve_line is not None and model is None:  # the line's model, as written
        model = parse_vllm_args(serve_line).get("model")
        if model is None:
            raise ValueError(f"the serve line {serve_line!r:.80} names no model; write it as "
                             "`vllm serve MODEL ...` or pass model=")
    the_recipe = recipe(model, task)
    line = serve_line if serve_line is not None else the_recipe.serve_line
    cfg = SimConfig.from_vllm_args(line, hardware=device)
    if serve_line is not None and cfg.task != the_recipe.task:  # the call and body it serves
        the_recipe = recipe(model, cfg.task)
    gpus = cfg.tensor_parallel_size * cfg.pipeline_parallel_size * cfg.data_parallel_size
    on = f"{gpus}x {device.name}"
    deployment = f"vllm serve (OpenAI API server defaults), {on}, vLLM 0.33.0: `{line}`"
    refusals: list[EngineRefusal] = list(startup_refusal(cfg, cfg.max_model_len))
    starts = not refusals
    if starts and prompt_len > cfg.max_model_len:
        refusals += [EngineRefusal(
            f"a {prompt_len:,}-token prompt is longer than max_model_len={cfg.max_model_len:,}"
            f" (InputProcessor._validate_prompt_len); serve it with --max-model-len "
            f"{prompt_len} where the model's context allows", follows="_validate_prompt_len")]
        refusals += startup_refusal(cfg, prompt_len)  # the engine that would take it
    serves = not refusals
    name = f"{prompt_len:,}-token prompt of {model} ({cfg.task})"
    if serves:
        verdict = f"YES: vLLM 0.33.0 starts this engine on {on} and serves a {name}"
    elif starts:
        verdict = (f"NO: vLLM 0.33.0 starts this engine on {on} but refuses a "
                   f"{name}")
    else:
        verdict = f"NO: vLLM 0.33.0 does not start this engine on {on} ({name})"
    sized = cfg.replace(max_model_len=max(prompt_len, cfg.max_model_len), as_if=True)
    blocks, block = sized.kv_cache_blocks, sized.block_size
    concurrent = None if not sized.kv_bytes_per_token or blocks is None or block is None else (
        blocks // -(-prompt_len // block))
    return Plan(verdict=verdict, serves=serves, deployment=deployment, serve_line=line,
                prompt_len=prompt_len,
                refusals=tuple(str(r) for r in refusals), peak_parts=_peak(sized, prompt_len),
                concurrent_requests=concurrent, recipe=the_recipe)
