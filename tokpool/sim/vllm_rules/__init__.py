"""What vLLM does — the rules tokpool's simulator follows, in one room, for one vLLM version.

A new vLLM version's rule is an edit here, seen by every backend through the seams:

- ``cudagraph``: capture sizes, graph dispatch and the pooling CUDA-graph mode;
  ``batch_limits``: the token budget and ``max_num_seqs`` by device, usage and model;
  ``defaults``: pooling defaults (head dtype, activation, async scheduling) and chunked
  prefill eligibility; ``scheduling``: the long-prefill threshold and the order of a step's
  rows; the task rules are ``tokpool.pooler.task_names`` (re-exported here);
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
  V2) and V1's stale pooling cache after a preemption; ``response``: what the API process
  builds from an output (size and peak host memory per encoding format).

``tokpool.sim.vllm_run`` holds the other half: vLLM's own code, run, as the oracle.
"""

from ...pooler.task_names import (  # the task rules live with the pooler: the gate needs them
    POOLING_TASK_PRIORITY,
    RUNNER_TASKS,
    TOKEN_POOL_METHOD_TASKS,
    check_request_task,
    check_selected_task,
    select_pooling_task,
)
from .batch_limits import *  # noqa: F403 - batch_limits.__all__
from .batch_limits import __all__ as _batch_names
from .cudagraph import *  # noqa: F403 - cudagraph.__all__
from .cudagraph import __all__ as _cudagraph_names
from .defaults import *  # noqa: F403 - defaults.__all__
from .defaults import __all__ as _default_names
from .devices import DEVICES, DeviceFacts, GiB, Hardware, resolve_device, resolve_hardware
from .engine_checks import *  # noqa: F403 - every refusal, engine_checks.__all__
from .engine_checks import __all__ as _refusal_names
from .pooling_kind import POOLING_KINDS, PoolingKind, kind_of
from .scheduling import *  # noqa: F403 - scheduling.__all__
from .scheduling import __all__ as _scheduling_names

#: The vLLM release these rules were read in and checked against.
VLLM_VERSION = "0.33.0"

__all__ = [*_cudagraph_names, *_batch_names, *_default_names, *_scheduling_names,
           *_refusal_names, "DEVICES", "DeviceFacts", "GiB", "Hardware", "POOLING_KINDS",
           "POOLING_TASK_PRIORITY", "PoolingKind", "RUNNER_TASKS", "TOKEN_POOL_METHOD_TASKS",
           "VLLM_VERSION", "check_request_task", "check_selected_task", "kind_of",
           "resolve_device", "resolve_hardware", "select_pooling_task"]
