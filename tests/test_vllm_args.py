"""``parse_vllm_args``: vLLM 0.33.0's flag names and values; nothing dropped; parity with vLLM."""

from __future__ import annotations

import pytest

from tokpool.sim.config import SimConfig
from tokpool.sim.vllm_rules.args import human_readable_int, parse_vllm_args

LINE = ("vllm serve Qwen/Qwen3-Embedding-8B --max-num-batched-tokens 8192 --async-scheduling "
        "--enforce-eager --max-model-len 32768 --tensor-parallel-size 4")


def test_a_serve_line():
    assert parse_vllm_args(LINE) == {
        "model": "Qwen/Qwen3-Embedding-8B", "max_num_batched_tokens": 8192,
        "async_scheduling": True, "enforce_eager": True, "max_model_len": 32768,
        "tensor_parallel_size": 4,
    }


@pytest.mark.parametrize("text, value", [
    ("32768", 32768), ("32k", 32_000), ("32K", 32_768), ("25.6k", 25_600), ("1M", 1 << 20),
    ("2m", 2_000_000),
])
def test_human_readable_ints_as_vllm(text, value):
    assert human_readable_int(text) == value
    assert parse_vllm_args(["m", "--max-model-len", text])["max_model_len"] == value


def test_auto_and_negations_and_aliases():
    out = parse_vllm_args(
        "m --max-model-len auto --no-async-scheduling --no-enable-chunked-prefill -tp 2 -pp 3 "
        "-dp 4 --device-memory-utilization 0.8 --block_size 32 --kv-cache-dtype fp8 "
        "--dtype half --long-prefill-token-threshold 0 --max-cudagraph-capture-size 256 "
        "--cudagraph-capture-sizes 1 2 4 8"
    )
    assert out == {
        "model": "m", "max_model_len": None, "async_scheduling": False,
        "enable_chunked_prefill": False, "tensor_parallel_size": 2, "pipeline_parallel_size": 3,
        "data_parallel_size": 4, "gpu_memory_utilization": 0.8, "block_size": 32,
        "kv_cache_dtype": "fp8", "dtype": "float16", "long_prefill_token_threshold": None,
        "max_cudagraph_capture_size": 256, "cudagraph_capture_sizes": (1, 2, 4, 8),
    }
    assert "dtype" not in parse_vllm_args("m --dtype auto")  # auto: the model's own dtype
    assert parse_vllm_args("--model=m --max-num-seqs=7") == {"model": "m", "max_num_seqs": 7}


def test_pooler_config_json():
    out = parse_vllm_args(["m", "--pooler-config",
                           '{"task": "token_classify", "use_activation": false, '
                           '"tok_pooling_type": "STEP", "step_tag_id": 151651}'])
    assert out == {"model": "m", "task": "token_classify", "use_activation": False,
                   "pooling": "STEP", "step_tag_id": 151651}
    with pytest.raises(ValueError, match=r"\['dimensions'\] are not modelled"):
        parse_vllm_args(["m", "--pooler-config", '{"dimensions": 64}'])
    with pytest.raises(ValueError, match="--pooler-config"):
        parse_vllm_args(["m", "--pooler-config", "{not json"])


def test_unknown_flags_are_reported_never_dropped():
    with pytest.raises(ValueError) as err:
        parse_vllm_args("m --cuda-graph-sizes 8 16 --foo --max-num-seqs 4")
    message = str(err.value)
    assert "--cuda-graph-sizes (did you mean --cudagraph-capture-sizes?)" in message
    assert "'--foo'" in message and "--max-num-batched-tokens" in message


def test_unmodelled_flags_raise_or_come_back():
    with pytest.raises(ValueError, match=r"\['--quantization'\] are not modelled"):
        parse_vllm_args("m --quantization fp8")
    # modelled since issue 28: the KV cache in bytes, the block count (CPU platform's rules)
    assert parse_vllm_args("m --kv-cache-memory-bytes 8G --num-gpu-blocks-override 7") == {
        "model": "m", "kv_cache_memory_bytes": 8 << 30, "kv_cache_blocks": 7}
    out = parse_vllm_args("m --kv-offloading-size 8 --quantization fp8 "
                          "--no-enable-expert-parallel --seed 3", unmodelled="return")
    assert out == {"model": "m", "unmodelled": {"--kv-offloading-size": "8",
                                                "--quantization": "fp8",
                                                "--no-enable-expert-parallel": True},
                   "ignored": ("--seed 3",)}


@pytest.mark.parametrize("line, match", [
    ("m --max-num-seqs", "needs a value"),
    ("m --max-num-seqs x", "not an integer"),
    ("m --max-model-len 1.5K", "decimals are not allowed"),
    ("m --enforce-eager=true", "takes no value"),
    ("m --enforce-eager true", "unexpected positional"),
    ("m -tp 0", ">= 1"),
    ("m --gpu-memory-utilization 1.5", r"\(0, 1\]"),
    ("m --kv-cache-dtype fp7", "not one of"),
    ("m --max-num-seqs.x 3", "dotted flags are supported for --pooler-config only"),
    ("m --runner encode", "not one of"),
    ("m --convert reward", "not one of"),
])
def test_bad_values_name_the_flag(line, match):
    with pytest.raises(ValueError, match=match):
        parse_vllm_args(line)
    with pytest.raises(TypeError):
        parse_vllm_args(3)


def test_fields_feed_simconfig():
    fields = parse_vllm_args("m --max-num-batched-tokens 16K --max-num-seqs 64 --enforce-eager "
                             "--max-model-len 16K --no-enable-chunked-prefill")
    fields.pop("model")
    cfg = SimConfig(**fields)
    assert (cfg.max_num_batched_tokens, cfg.max_num_seqs, cfg.enforce_eager,
            cfg.max_model_len, cfg.enable_chunked_prefill) == (16_384, 64, True, 16_384, False)
    # as vLLM: unchunked, a budget below the context is refused
    with pytest.raises(ValueError, match="smaller than max_model_len"):
        SimConfig(**{**fields, "max_num_batched_tokens": parse_vllm_args(
            "m --max-num-batched-tokens 8k")["max_num_batched_tokens"]})


# --- parity with vLLM's own parser --------------------------------------------------------


@pytest.mark.parity
def test_same_values_as_vllms_parser(monkeypatch):
    from tokpool.pooler.vllm_bridge import vllm_unavailable_reason

    reason = vllm_unavailable_reason()
    if reason is not None:
        pytest.skip(f"vLLM not importable: {reason}")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # DeviceConfig's default asks the platform for a device type; a CPU-only box has none
    monkeypatch.setattr(type(current_platform), "device_type", "cuda", raising=False)
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    lines = [
        LINE.removeprefix("vllm serve ").replace("Qwen/", "--model Qwen/"),
        "--model m --max-model-len 32k --max-num-batched-tokens 16K -tp 2 -pp 2 -dp 2 "
        "--no-enable-chunked-prefill --no-async-scheduling --gpu-memory-utilization 0.85 "
        "--block-size 32 --kv-cache-dtype fp8 --max-cudagraph-capture-size 128 "
        "--long-prefill-token-threshold 512 --max_num_seqs 9",
        "--model m --max-model-len 25.6k --cudagraph-capture-sizes 1 2 4 --enable-chunked-prefill",
    ]
    for line in lines:
        ours = parse_vllm_args(line)
        theirs = vars(parser.parse_args(line.split()))
        for key, value in ours.items():
            expected = theirs[key]
            if key == "cudagraph_capture_sizes":
                expected = tuple(expected)
            assert value == expected, (line, key)


def test_pooler_config_dotted_runner_and_convert_are_read():
    """vLLM accepts --pooler-config as JSON or as dotted keys (FlexibleArgumentParser), and
    --runner pooling / --convert embed|classify (vllm/engine/arg_utils.py)."""
    dotted = parse_vllm_args("m --pooler-config.task token_embed --pooler-config.use_activation "
                             "false --runner pooling --convert embed")
    assert dotted["task"] == "token_embed" and dotted["use_activation"] is False
    assert (dotted["runner"], dotted["convert"]) == ("pooling", "embed")
    as_json = parse_vllm_args('m --pooler-config \'{"task": "token_embed"}\'')
    assert as_json["task"] == dotted["task"]


def test_the_engine_serves_its_selected_task():
    """vllm/config/model.py, ModelConfig.get_pooling_task: without --pooler-config a decoder
    embedding model ({embed, token_embed}) serves embed; --pooler-config selects token_embed;
    --convert classify gives a classification model; a PRM serves token_classify."""
    line = "vllm serve Qwen/Qwen3-Embedding-8B"
    assert SimConfig.from_vllm_args(line).task == "embed"
    assert SimConfig.from_vllm_args(line + " --pooler-config.task token_embed").task == \
        "token_embed"
    assert SimConfig.from_vllm_args(line, task="token_embed").task == "token_embed"
    assert SimConfig.from_vllm_args(line + " --convert classify").task == "classify"
    assert SimConfig.from_vllm_args("vllm serve Qwen/Qwen2.5-Math-PRM-7B").task == \
        "token_classify"


def test_a_max_model_len_past_the_context_needs_vllms_env_var():
    """vllm/config/model.py, _get_and_verify_max_len: refused unless
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (read from the line's environment prefix)."""
    line = "vllm serve Qwen/Qwen2.5-Math-PRM-7B --max-model-len 8192"
    with pytest.raises(ValueError, match="VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"):
        SimConfig.from_vllm_args(line)
    assert SimConfig.from_vllm_args("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 " + line).max_model_len \
        == 8192
    # a SimConfig built directly is refused the same way; as_if=True looks past it, saying so
    with pytest.raises(ValueError, match="VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"):
        SimConfig.for_model("Qwen2.5-Math-PRM-7B", max_model_len=8192)
    as_if = SimConfig.for_model("Qwen2.5-Math-PRM-7B", max_model_len=8192, as_if=True)
    assert as_if.max_model_len == 8192
    assert as_if.looked_past[0].startswith("User-specified max_model_len (8192)")
