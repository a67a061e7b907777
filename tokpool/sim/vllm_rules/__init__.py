"""What vLLM does — the rules tokpool's simulator follows, in one room, for one vLLM version.

A new vLLM version's rule is an edit here, seen by every backend through the seams:

- ``engine``: capture sizes and graph dispatch, batch defaults by device and usage, chunked
  prefill eligibility, prompt-length checks, the order of a step's rows, pooling defaults, tasks;
- ``step_memory``: where each step's hidden states live (the step-memory seam);
- ``resolve``: the one step that fills a ``SimConfig``'s defaults from these rules;
- ``devices``: the one device table; ``models``: model presets;
- ``args``: ``vllm serve`` flags; ``hf_config``: ``config.json`` reading; ``kv_cache``: KV-cache
  sizing and parallel layouts; ``kv_spec``: each layer's KV-cache spec (sliding windows,
  per-token-head scales), vLLM's groups and blocks; ``prefix_cache``: prefix caching on or off,
  and which tasks read it; ``engine_checks``: start-up refusals.

``tokpool.sim.vllm_run`` holds the other half: vLLM's own code, run, as the oracle.
"""

from .devices import GiB, Hardware, resolve_hardware
from .engine import *  # noqa: F403 - the rule functions (DEVICES, resolve_device, ...), engine.__all__
from .engine import __all__ as _engine_names

#: The vLLM release these rules were read in and checked against.
VLLM_VERSION = "0.33.0"

__all__ = [*_engine_names, "GiB", "Hardware", "VLLM_VERSION", "resolve_hardware"]
