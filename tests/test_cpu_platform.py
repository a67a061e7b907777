"""vLLM 0.33.0's CPU platform as a device (``tokpool.sim.vllm_rules.cpu_platform``).

``hardware="CPU"`` sizes the KV cache from ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB, read with
``int()`` as ``CpuPlatform.check_and_update_config`` reads it), ``--kv-cache-memory-bytes`` or
``--num-gpu-blocks-override``; block size 128 (``CpuPlatform.update_block_size_for_backend``);
no CUDA graphs (every step eager); async scheduling forced off; the host copy copies nothing
(``.to("cpu")`` of a CPU tensor). The engine layer's serve line (``tokpool/engine/driver.py``'s
``ENGINE_ENV``, ``engine_check.EngineFlags``) needs no overrides. vLLM's own code:
``tests/test_parity_cpu_platform.py``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import tokpool as tp
from tokpool.engine.driver import ENGINE_ENV
from tokpool.engine.flags import EngineFlags
from tokpool.sim.vllm_rules import cpu_platform
from tokpool.sim.vllm_rules.devices import DEVICES, GiB, Hardware

#: SmolLM2-135M's config.json, as the engine layer's converted cache entry has it.
SMOLLM2 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
           "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
           "num_key_value_heads": 3, "vocab_size": 49152, "max_position_embeddings": 8192,
           "rope_theta": 100000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
           "torch_dtype": "float32"}
#: 30 layers x (K + V) x 3 KV heads x 64 x 4 bytes x 128 tokens
SMOLLM2_BLOCK_BYTES = 30 * 2 * 3 * 64 * 4 * 128


def smollm2_folder(tmp_path, **changes):
    (tmp_path / "config.json").write_text(json.dumps({**SMOLLM2, **changes}))
    return tmp_path


def engine_serve_line(folder, task: str = "token_embed", flags: EngineFlags | None = None,
                      *extra: str) -> str:
    """The engine layer's engine as a ``vllm serve`` line: its environment
    (``driver.ENGINE_ENV``) and ``LLM(...)`` keywords (``EngineFlags.llm_kwargs``)."""
    flags = flags or EngineFlags()
    env = " ".join(f"{k}={v}" for k, v in ENGINE_ENV.items())
    words = [f"--runner pooling --pooler-config.task {task}"]
    for key, value in flags.llm_kwargs().items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag if value else "--no-" + flag[2:])
        else:
            words.append(f"{flag} {value}")
    return f"{env} vllm serve {folder} {' '.join(words)} {' '.join(extra)}".strip()


def test_the_engine_layers_serve_line_needs_no_overrides(tmp_path):
    """The driver's VLLM_CPU_KVCACHE_SPACE=1 gives 1 GiB: 182 blocks of 128 tokens (what the
    engine reported), eager, async off, the batch limits given, the host copy free."""
    folder = smollm2_folder(tmp_path)
    cfg = tp.SimConfig.from_vllm_args(engine_serve_line(folder), hardware="CPU")
    assert cfg.cpu_kvcache_space == 1
    assert cfg.block_size == 128
    assert cfg.kv_cache_blocks == GiB // SMOLLM2_BLOCK_BYTES == 182
    assert cfg.capture_sizes == () and cfg.async_scheduling is False
    assert (cfg.max_num_batched_tokens, cfg.max_num_seqs, cfg.max_model_len) == (64, 64, 512)
    assert cfg.enable_prefix_caching is False and cfg.task == "token_embed"
    for mode in ("analytic", "tensor"):
        r = tp.simulate([300, 40], cfg, mode=mode)
        assert r.steps["d2h_bytes"].sum() == 0  # .to("cpu") of a CPU tensor: no copy
        assert r.requests["output_bytes"].tolist() == [300 * 576 * 4, 40 * 576 * 4]
        assert r.steps["num_scheduled_tokens"].max() == 64


def test_bfloat16_halves_the_block(tmp_path):
    folder = smollm2_folder(tmp_path)
    line = engine_serve_line(folder, "token_embed", EngineFlags(dtype="bfloat16"))
    cfg = tp.SimConfig.from_vllm_args(line, hardware="CPU")
    assert cfg.kv_cache_blocks == GiB // (SMOLLM2_BLOCK_BYTES // 2) == 364


def test_analytic_equals_tensor_on_the_cpu_platform(tmp_path):
    folder = smollm2_folder(tmp_path)
    cfg = tp.SimConfig.from_vllm_args(engine_serve_line(folder), hardware="CPU")
    lens = [130, 64, 7, 200]
    a = tp.simulate(lens, cfg, mode="analytic")
    t = tp.simulate(lens, cfg, mode="tensor")
    cols = list(tp.sim.STEP_COLUMNS)
    assert a.steps[cols].equals(t.steps[cols])
    assert not t.corrupted and a.steps["stranded_bytes"].max() >= 0
    closed = tp.sweep([130, 200], cfg, policies=["clone"], async_scheduling=(False,),
                      progress=False)
    one = {n: tp.simulate([n], cfg, mode="analytic") for n in (130, 200)}
    for n, r in one.items():
        row = closed[closed.prompt_len == n].iloc[0]
        assert row["peak_pooling_bytes"] == r.steps["pool_peak_bytes"].max()
        assert row["d2h_bytes"] == 0


def test_async_is_forced_off_and_no_graphs_are_captured():
    """CpuPlatform.check_and_update_config: async_scheduling = False even when asked for;
    cudagraph_capture_sizes = [] whatever --enforce-eager says."""
    cfg = tp.SimConfig.for_model("Qwen3-Embedding-0.6B", hardware="CPU", async_scheduling=True,
                                 enforce_eager=False)
    assert cfg.async_scheduling is False and cfg.capture_sizes == ()
    gpu = tp.SimConfig.for_model("Qwen3-Embedding-0.6B", hardware="H200", async_scheduling=True)
    assert gpu.async_scheduling is True and gpu.capture_sizes and gpu.block_size == 16


def test_the_kv_cache_space_is_read_as_vllm_reads_it():
    assert cpu_platform.read_kvcache_space("4") == 4
    assert cpu_platform.read_kvcache_space("") is None
    assert cpu_platform.read_kvcache_space(None) is None
    with pytest.raises(ValueError, match=r"int\(\), so it must be a whole number of GiB"):
        cpu_platform.read_kvcache_space("1.5")
    with pytest.raises(ValueError, match="VLLM_CPU_KVCACHE_SPACE"):
        tp.SimConfig.from_vllm_args("VLLM_CPU_KVCACHE_SPACE=1.5 vllm serve "
                                    "Qwen/Qwen3-Embedding-0.6B", hardware="CPU")
    with pytest.raises(ValueError, match="cpu_kvcache_space must be an int >= 0"):
        tp.SimConfig.for_model("Qwen3-Embedding-0.6B", hardware="CPU", cpu_kvcache_space=1.5)


def test_the_environment_wins_over_kv_cache_memory_bytes_and_blocks_win_over_both(tmp_path):
    """check_and_update_config runs after the flags: the environment's GiB replace
    --kv-cache-memory-bytes; --num-gpu-blocks-override replaces the count from memory."""
    folder = smollm2_folder(tmp_path)
    base = f"vllm serve {folder} --runner pooling --max-model-len 512 --dtype float32"
    by_bytes = tp.SimConfig.from_vllm_args(f"{base} --kv-cache-memory-bytes 100M",
                                           hardware="CPU")
    assert by_bytes.kv_cache_blocks == 100 * 2**20 // SMOLLM2_BLOCK_BYTES == 17  # M: binary
    env = tp.SimConfig.from_vllm_args(f"VLLM_CPU_KVCACHE_SPACE=2 {base} "
                                      "--kv-cache-memory-bytes 100M", hardware="CPU")
    assert env.kv_cache_blocks == 2 * GiB // SMOLLM2_BLOCK_BYTES
    blocks = tp.SimConfig.from_vllm_args(f"VLLM_CPU_KVCACHE_SPACE=2 {base} "
                                         "--num-gpu-blocks-override 9", hardware="CPU")
    assert blocks.kv_cache_blocks == 9
    # --kv-cache-memory-bytes sizes a GPU's cache too (Worker.determine_available_memory)
    gpu = tp.SimConfig.from_vllm_args(f"{base} --kv-cache-memory-bytes 100M", hardware="H200")
    assert gpu.kv_cache_blocks == 100 * 2**20 // (SMOLLM2_BLOCK_BYTES // 8) == 142


def test_no_kv_size_on_a_cpu_is_a_clear_error(tmp_path):
    folder = smollm2_folder(tmp_path)
    with pytest.raises(ValueError, match=r"VLLM_CPU_KVCACHE_SPACE.*only the running process"):
        tp.SimConfig.from_vllm_args(f"vllm serve {folder} --runner pooling", hardware="CPU")
    unlimited = tp.SimConfig.from_vllm_args(f"vllm serve {folder} --runner pooling",
                                            hardware="CPU", gpu_memory_utilization=None)
    assert unlimited.kv_cache_blocks is None and unlimited.block_size == 128


def test_a_too_small_cpu_cache_is_refused_as_vllm_refuses_it(tmp_path):
    folder = smollm2_folder(tmp_path)
    with pytest.raises(tp.sim.EngineRefusal, match="max seq len"):
        tp.SimConfig.from_vllm_args(f"vllm serve {folder} --runner pooling "
                                    "--kv-cache-memory-bytes 10M", hardware="CPU")


def test_the_cpu_has_no_device_memory_total():
    """No 1-byte figure: the CPU record has no memory total, so no share of it is computed
    (the memory explorer's line and table, the PRM table, pooling_takes_kv_from)."""
    cpu = DEVICES["CPU"]
    assert cpu.hbm_bytes is None and cpu.total_memory_bytes is None
    assert not cpu_platform.has_memory_total(cpu)
    with pytest.raises(ValueError, match="only a CPU has no device memory total"):
        Hardware("gpu", None, 1.0, 1.0, 1.0)
    from tokpool.plots.memory import _hardware_bytes

    assert _hardware_bytes("CPU") is None
    assert _hardware_bytes("H200")[0].startswith("H200 memory")
    cfg = tp.SimConfig.for_model("Qwen3-Embedding-0.6B", hardware="CPU")
    with pytest.raises(ValueError, match="CPU platform the KV cache has a fixed size"):
        tp.sim.pooling_takes_kv_from(cfg)


def test_the_memory_explorer_on_a_cpu_says_host_memory():
    from tokpool.widgets.memory import render_memory

    view = render_memory(model="Qwen3-Embedding-0.6B", hardware="CPU", prompt_len=(256, 1024),
                         points_per_doubling=1, policies=("clone",))
    assert "1 B" not in view.html and "host memory" in view.html
    assert "%" not in view.html


def test_cpu_timing_is_not_a_share_of_anything():
    cfg = tp.SimConfig.for_model("Qwen3-Embedding-0.6B", hardware="CPU")
    r = tp.simulate([100], cfg, mode="analytic")
    assert np.isfinite(r.steps["pool_bytes"]).all()
