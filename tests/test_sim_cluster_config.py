"""Your model, your flags, your cluster: SimConfig from a config.json and a vllm serve line,
KV-cache capacity from memory, per-rank bytes — against numbers worked out by hand."""

from __future__ import annotations

import json
import math

import pytest

import tokpool as tp
from tokpool.cli import main
from tokpool.sim import pooling_takes_kv_from

QWEN3_8B = {  # Qwen3-Embedding-8B's config.json (the keys tokpool reads)
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
    "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151665,
    "max_position_embeddings": 32768, "torch_dtype": "bfloat16",
}
# the engine serves token_embed only when --pooler-config selects it (else it selects embed);
# a bare *ForCausalLM config.json needs --runner pooling (without the sentence-transformers
# files of the real folder, vLLM's --runner auto would serve it as a generative model)
LINE = ("vllm serve ./Qwen3-Embedding-8B --runner pooling --max-num-batched-tokens 8192 "
        "--tensor-parallel-size 4 --pooler-config.task token_embed")
GiB = 1 << 30


@pytest.fixture
def cfg(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_8B))
    return tp.SimConfig.from_vllm_args(LINE, model=path, hardware="H100 SXM")


def test_flags_and_config_land_in_the_simconfig(cfg):
    assert (cfg.task, cfg.hidden_size, cfg.max_model_len) == ("token_embed", 4096, 32768)
    assert (cfg.max_num_batched_tokens, cfg.tensor_parallel_size) == (8192, 4)
    assert cfg.gpu_memory_utilization == 0.92 and cfg.block_size == 16
    # KV per token per GPU: K and V x 36 layers x (8 KV heads / 4 GPUs) x 128 x 2 bytes
    assert cfg.kv_bytes_per_token == 2 * 36 * 2 * 128 * 2 == 36_864


def test_kv_capacity_by_hand(cfg):
    # vLLM's request_memory: total memory AS THE DRIVER REPORTS IT (torch.cuda.mem_get_info;
    # an 80 GB H100 reports 79 GiB in the device table) x gpu_memory_utilization
    requested = math.ceil(79 * GiB * 0.92)
    weights = math.ceil(cfg.model.num_parameters * 2 / 4)  # bf16 weights over 4 GPUs
    # the profile run's ESTIMATED peak (tokpool.sim.vllm_rules.profile): the larger of
    # the forward's MLP moment per rank, T x (2h + 3 x I/tp) x 2 bytes, and the dummy pooler
    # pass over the budget, T x (h x 2 + 2 x h x 4) (bf16 hidden, float32 cast + normalise)
    forward = 8192 * (2 * 4096 + 3 * 12288 // 4) * 2
    pooler = 8192 * (4096 * 2 + 2 * 4096 * 4)
    activation = max(forward, pooler)
    assert cfg.estimated_activation_peak_bytes == activation == pooler
    non_torch = 512 << 20                                   # ESTIMATE per rank
    graphs = 36 * 512 * 4096 * 2                            # one [512, h] output per layer
    blocks = (requested - weights - activation - non_torch - graphs) // (16 * 36_864)
    assert cfg.kv_cache_blocks == blocks


def test_per_gpu_pooling_and_kv_bytes_of_a_32k_request(cfg):
    r = tp.simulate([32_768], cfg, mode="analytic")
    T, W = 32_768, 4096
    # every TP rank of the last stage pools the whole width: vLLM's head (cast + activation)
    assert r.peak_pooling_bytes == T * W * (2 + 4 + 4) == 1_342_177_280
    assert int(r.steps["kv_bytes"].max()) == T * 36_864  # its KV, per GPU, at the finish
    assert r.requests["num_preemptions"].tolist() == [0]
    threshold = pooling_takes_kv_from(cfg)
    assert threshold == math.floor(cfg.estimated_activation_peak_bytes / (W * 10)) + 1


def test_a_small_kv_cache_preempts_and_the_prefill_restarts(cfg):
    small = cfg.replace(gpu_memory_utilization=None, kv_cache_blocks=3 * 1024 // 16,
                        max_num_batched_tokens=2048, long_prefill_token_threshold=512,
                        max_model_len=2048)  # what 191 usable blocks hold: vLLM starts
    r = tp.simulate([2048, 2048], small, mode="analytic")
    assert r.requests["num_preemptions"].sum() >= 1 and r.corrupted == []
    assert int(r.steps["kv_bytes"].max()) <= 3 * 1024 * 36_864


def test_unknown_and_unmodelled_flags_are_reported(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"unknown vLLM flag\(s\) \['--bogus'\]"):
        tp.SimConfig.from_vllm_args("--bogus 3", model="Qwen3-Embedding-8B")
    with pytest.raises(ValueError, match="kv-offloading-size"):  # modelled: see cpu_platform
        tp.SimConfig.from_vllm_args("--kv-offloading-size 8", model="Qwen3-Embedding-8B")
    code = main(["simulate", "--prompt-lens", "1k", "--vllm-args",
                 "vllm serve Qwen/Qwen3-Embedding-8B --bogus 1"])
    err = capsys.readouterr().err
    assert code == 2 and "--bogus" in err and "Traceback" not in err
    code = main(["simulate", "--prompt-lens", "32K", "--vllm-args",
                 "vllm serve Qwen/Qwen3-Embedding-8B -tp 4 --max-num-batched-tokens 8192 "
                 "--pooler-config.task token_embed"])
    assert code == 0 and "peak pooling bytes: 1.25 GiB" in capsys.readouterr().out
