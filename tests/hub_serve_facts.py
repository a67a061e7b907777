"""Run in a subprocess by ``test_parity_hub.py``: what vLLM 0.33.0's own ``vllm serve`` parser
and ``create_engine_config`` resolve for lines that name a Hub id, reading the Hub cache the
test built (``HF_HUB_CACHE``, ``HF_HUB_OFFLINE=1`` set before vLLM, transformers and
huggingface_hub are imported: they read both when imported).

stdin: a JSON list of token lists (the line after ``vllm serve``); stdout: a JSON list of
vLLM's facts (``vllm_run.config.vllm_serve_facts``) or ``{"refused": message}``.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    from tokpool.sim.vllm_rules.hf_config import as_served, preset_from_hf_config
    from tokpool.sim.vllm_run.config import vllm_serve_facts

    out = []
    for tokens in json.loads(sys.stdin.read()):
        # the tasks the model's pooler declares for the conversion vLLM resolved (its model
        # class would need weights): tokpool's reading of vLLM's poolers (ColBERT and
        # JinaForRanking: token_embed only), checked in test_listwise / the late-interaction
        # parity layer
        preset = preset_from_hf_config(tokens[0])

        def tasks(convert, preset=preset):
            return as_served(preset, runner="pooling", convert=convert).declared_tasks

        try:
            facts = vllm_serve_facts(list(tokens), declared_tasks=tasks)
        except ValueError as err:
            facts = {"refused": str(err)}
        out.append(facts)
    print("\n@@FACTS@@" + json.dumps(out))


if __name__ == "__main__":
    main()
