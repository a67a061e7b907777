"""What vLLM does — the rules tokpool's simulator follows, in one room, for one vLLM version.

A new vLLM version's rule is an edit here, seen by every backend through the seams:

- ``engine``: capture sizes and graph dispatch, batch defaults by device and usage, chunked
  prefill eligibility, the order of a step's rows, pooling defaults, tasks;
- ``engine_checks``: every refusal of vLLM's that tokpool models, each once (start-up and
  per request), and ``as_if``'s way past them; ``sizes``: the sizes vLLM's int32 tensors can
  hold (tokpool's refusal, not vLLM's);
- ``pooling_kind``: ALL / STEP / LAST, decided once (the pooling-kind seam);
- ``step_memory``: where each step's hidden states live (the step-memory seam);
- ``resolve``: the one step that fills a ``SimConfig``'s defaults from these rules;
- ``devices``: the one device table; ``models``: model presets;
- ``args``: ``vllm serve`` flags (``serve_flags``: every option of vLLM's own serve parser,
  generated); ``serve_line``: a whole ``vllm serve`` line as a config; ``hf_config`` (and
  ``hf_families``): ``config.json`` reading; ``architectures``: what vLLM's registry says of
  an architecture (runner, conversion, pipeline support, refused dtypes); ``kv_cache``:
  KV-cache sizing and parallel layouts; ``kv_spec``: each layer's KV-cache spec (sliding
  windows, per-token-head scales), vLLM's groups and blocks; ``prefix_cache``: prefix caching
  on or off, and which tasks read it; ``profile``: what vLLM's profiling run reserves
  (ESTIMATES); ``cpu_platform``: vLLM's CPU platform as a device (KV cache from
  ``VLLM_CPU_KVCACHE_SPACE``, block size 128, eager, async off, no host copy);
  ``classifier``: where a classify model's score head runs (in the model, or in the pooler
  head of vLLM's adapter) and what the head allocates; ``runner``: which model runner (V1 or
  V2) and V1's stale pooling cache after a preemption.

``tokpool.sim.vllm_run`` holds the other half: vLLM's own code, run, as the oracle.
"""

from .devices import GiB, Hardware, resolve_hardware
from .engine import *  # noqa: F403 - the rule functions (DEVICES, resolve_device, ...), engine.__all__
from .engine import __all__ as _engine_names
from .engine_checks import *  # noqa: F403 - every refusal, engine_checks.__all__
from .engine_checks import __all__ as _refusal_names
from .pooling_kind import POOLING_KINDS, PoolingKind, kind_of

#: The vLLM release these rules were read in and checked against.
VLLM_VERSION = "0.33.0"

__all__ = [*_engine_names, *_refusal_names, "GiB", "Hardware", "POOLING_KINDS", "PoolingKind",
           "VLLM_VERSION", "kind_of", "resolve_hardware"]
