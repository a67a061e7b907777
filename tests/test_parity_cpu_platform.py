"""CPU-platform parity: tokpool's ``hardware="CPU"`` against vLLM 0.33.0's own
``CpuPlatform.check_and_update_config`` (run by ``VllmConfig.__post_init__`` inside
``create_engine_config``), its block-size choice for ``CPU_ATTN`` and its KV-cache planning.

For serve lines over the engine layer's model (SmolLM2-135M's config.json) with the environment
words tokpool reads (``VLLM_CPU_KVCACHE_SPACE``) and the flags it models
(``--kv-cache-memory-bytes``, ``--num-gpu-blocks-override``, ``--block-size``,
``--async-scheduling``, ``--enforce-eager``, ``--dtype``), vLLM's ``kv_cache_memory_bytes``,
block size, async scheduling, capture sizes and blocks (``get_kv_cache_configs`` over vLLM's own
layers, ``vllm_run.kv_spec``) must equal tokpool's. Needs ``make vllm``; skips otherwise.
"""

from __future__ import annotations

import pytest
from test_cpu_platform import engine_serve_line, smollm2_folder

import tokpool as tp
from tokpool.sim.vllm_run import vllm_scheduler_unavailable_reason

pytestmark = pytest.mark.parity

_reason = vllm_scheduler_unavailable_reason()
if _reason is not None:
    pytest.skip(f"CPU-platform parity skipped: {_reason}", allow_module_level=True)

from tokpool.sim.vllm_run.config import vllm_cpu_platform_facts  # noqa: E402
from tokpool.sim.vllm_run.kv_spec import vllm_kv_cache_facts  # noqa: E402

#: (environment words, flags) — each a line vLLM's CPU platform starts
LINES = [
    ("VLLM_CPU_KVCACHE_SPACE=1", ""),
    ("VLLM_CPU_KVCACHE_SPACE=1", "--dtype bfloat16"),
    ("VLLM_CPU_KVCACHE_SPACE=3", "--async-scheduling --no-enforce-eager"),
    ("VLLM_CPU_KVCACHE_SPACE=2", "--kv-cache-memory-bytes 100M"),
    ("", "--kv-cache-memory-bytes 300M --block-size 64"),
    ("", "--kv-cache-memory-bytes 1G --dtype bfloat16 --block-size 32"),
    ("VLLM_CPU_KVCACHE_SPACE=1", "--num-gpu-blocks-override 40"),
    ("", "--num-gpu-blocks-override 12 --block-size 256"),
]


def _tokens(flags: str, folder) -> list[str]:
    return [str(folder), "--runner", "pooling", "--max-model-len", "512", "--dtype",
            "float32", *flags.split()]


@pytest.mark.parametrize(("env", "flags"), LINES)
def test_cpu_platform_matches_vllm(tmp_path, env, flags):
    folder = smollm2_folder(tmp_path)
    tokens = _tokens(flags, folder)
    environ = dict(w.split("=", 1) for w in env.split())
    vllm = vllm_cpu_platform_facts(tokens, env=environ)
    cfg = tp.SimConfig.from_vllm_args(f"{env} vllm serve {' '.join(tokens)}".strip(),
                                      hardware="CPU")
    assert vllm["device_type"] == "cpu"
    assert cfg.block_size == vllm["block_size"]
    assert cfg.async_scheduling is vllm["async_scheduling"] is False
    assert cfg.capture_sizes == tuple(vllm["cudagraph_capture_sizes"]) == ()
    assert cfg._resolved.kv_cache_memory_bytes == vllm["kv_cache_memory_bytes"]
    if vllm["num_gpu_blocks_override"] is not None:
        assert cfg.kv_cache_blocks == vllm["num_gpu_blocks_override"]
    else:
        (plan,) = vllm_kv_cache_facts(folder, [{
            "available_bytes": vllm["kv_cache_memory_bytes"], "max_model_len": 512,
            "max_num_batched_tokens": cfg.max_num_batched_tokens,
            "kv_cache_dtype": "auto"}], block_size=vllm["block_size"],
            dtype=str(cfg.dtype).removeprefix("torch."))
        assert plan["error"] is None
        assert cfg.kv_cache_blocks == plan["num_blocks"]


def test_the_engine_layers_line_matches_vllm(tmp_path):
    """The engine layer's own settings (ENGINE_ENV, EngineFlags) through vLLM's platform."""
    folder = smollm2_folder(tmp_path)
    line = engine_serve_line(folder)
    env_words = line.split(" vllm serve ")[0].split()
    environ = dict(w.split("=", 1) for w in env_words)
    tokens = line.split(" vllm serve ", 1)[1].split()
    vllm = vllm_cpu_platform_facts(tokens, env=environ)
    cfg = tp.SimConfig.from_vllm_args(line, hardware="CPU")
    assert (cfg.block_size, cfg._resolved.kv_cache_memory_bytes) == (
        vllm["block_size"], vllm["kv_cache_memory_bytes"]) == (128, 1 << 30)
    assert vllm["use_v2_model_runner"] is False  # no Triton CPU backend here: Model Runner V1
