"""Run the driver with aborts: a client hangs up, and vLLM cancels its request between two steps.

Like ``driver.py``, this file is run as a SCRIPT by the Python that has vLLM (``python
abort_run.py IN OUT``) and imports vLLM and the driver beside it, never tokpool.
``tokpool.engine.aborts`` writes the request and reads the answer.

Request (``IN``): one engine's driver request (``driver.py``; ``"memory": true`` for the
per-step pooling bytes) plus ``"aborts"``: per run, ``{prompt index: step}``. Right before the
``step``-th ``LLMEngine.step()`` call of that run's ``LLM.encode`` (counted from 0; each call is
one ``Scheduler.schedule()`` call: one engine core in this process, no async scheduling), the
prompt's request is cancelled with vLLM's own ``LLMEngine.abort_request([id], internal=True)``
— what the API process does when a client disconnects: the output processor forgets it, then
``EngineCore.abort_requests`` -> ``Scheduler.finish_requests(ids, FINISHED_ABORTED)``, and the
model runner drops its state with the next scheduler output's ``finished_req_ids``.

Answer (``OUT``): the driver's, with per run ``"aborts"``: ``[{"prompt", "step", "sent"}]``
(``sent``: the output processor still had the request, so the engine core was told; ``False``:
it had finished, and the abort was a no-op) and ``"finished_seen"``: per ``_update_states``
call of the model runner, the prompts in its ``finished_req_ids`` with the rows of cached
hidden states their popped ``CachedRequestState`` held; and ``"model_runner"``: the runner's
class, as ``module.name``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

if __package__:  # imported by tokpool (doctests, the architecture test): the module beside it
    from . import driver
else:  # run as a script: its folder is first on sys.path
    import driver  # type: ignore[no-redef]


class AbortPlan:
    """Which request to cancel before which ``LLMEngine.step()`` call, run by run."""

    def __init__(self, aborts: list[dict[str, int]]) -> None:
        self.aborts = [{int(p): int(s) for p, s in run.items()} for run in aborts]
        self.run = -1  # the LLM.encode call now running
        self.calls = 0  # LLMEngine.step() calls in this run
        self.ids: list[str] = []  # this run's internal request ids, in the order added
        self.sent: list[list[dict]] = []
        self.finished: list[list[dict]] = []
        self.runner = ""

    def install(self) -> None:
        from vllm import LLM
        from vllm.v1.engine.llm_engine import LLMEngine
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        plan = self
        encode, add, step = LLM.encode, LLMEngine.add_request, LLMEngine.step
        update = GPUModelRunner._update_states

        def encoding(self_, *args, **kwargs):
            plan.run += 1
            plan.calls, plan.ids = 0, []
            plan.sent.append([])
            plan.finished.append([])
            return encode(self_, *args, **kwargs)

        def adding(self_, *args, **kwargs):
            req_id = add(self_, *args, **kwargs)
            plan.ids.append(req_id)
            return req_id

        def stepping(self_):
            config = self_.vllm_config.scheduler_config
            if getattr(config, "async_scheduling", False):
                raise driver.VllmChanged("async scheduling is on: an abort between two "
                                         "LLMEngine.step() calls is not one schedule() apart")
            todo = plan.aborts[plan.run] if plan.run < len(plan.aborts) else {}
            for prompt, at in sorted(todo.items()):
                if at == plan.calls:
                    req_id = plan.ids[prompt]
                    known = req_id in self_.output_processor.request_states
                    self_.abort_request([req_id], internal=True)
                    plan.sent[plan.run].append({"prompt": prompt, "step": at, "sent": known})
            plan.calls += 1
            return step(self_)

        def updating(self_, scheduler_output):
            plan.runner = f"{type(self_).__module__}.{type(self_).__name__}"
            seen = []
            for req_id in sorted(scheduler_output.finished_req_ids):
                state = self_.requests.get(req_id)
                pooling = getattr(state, "pooling_states", None)
                cache = getattr(pooling, "hidden_states_cache", None) or []
                index = plan.ids.index(req_id) if req_id in plan.ids else -1
                seen.append({"prompt": index, "rows": sum(int(t.shape[0]) for t in cache),
                             "had_state": state is not None})
            if seen and plan.run >= 0:
                plan.finished[plan.run].append({"call": plan.calls - 1, "finished": seen})
            return update(self_, scheduler_output)

        LLM.encode, LLMEngine.add_request, LLMEngine.step = encoding, adding, stepping
        GPUModelRunner._update_states = updating


def main(argv: list[str]) -> int:
    request_file, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    request = json.loads(request_file.read_text())
    aborts = request.pop("aborts", [])
    if len(aborts) != len(request.get("runs", [])):
        return driver._fail(out, "bad_request", f"{len(aborts)} abort maps for "
                            f"{len(request.get('runs', []))} runs: give one per run")
    for key, value in driver.ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    plan = AbortPlan(aborts)
    try:
        plan.install()
    except (ImportError, AttributeError) as err:
        return driver._fail(out, "vllm_changed", f"cannot wrap vLLM's LLMEngine for aborts "
                            f"({driver._first_line(err)})")
    stripped = out / "request.json"
    stripped.write_text(json.dumps(request))
    status = driver.main([str(stripped), str(out)])
    if status != 0:
        return status
    result_file = out / "result.json"
    result = json.loads(result_file.read_text())
    for r, run in enumerate(result["runs"]):
        run["aborts"] = plan.sent[r] if r < len(plan.sent) else []
        run["finished_seen"] = plan.finished[r] if r < len(plan.finished) else []
    result["model_runner"] = plan.runner
    result_file.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
