"""Step memory as the loop tracks it: which kept views a later write destroys (``views``) and
the per-step byte ledger (``ledger``). WHERE a step writes is vLLM's rule:
``tokpool.sim.vllm_rules.step_memory``."""
