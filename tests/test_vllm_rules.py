"""vLLM 0.33.0's engine rules (tokpool.sim.vllm_rules) against numbers worked out by hand."""

import pytest

from tokpool.sim import vllm_rules as R

# --- CUDA graphs ---------------------------------------------------------------------------


def test_capture_size_pattern_512_and_1024():
    sizes = R.cudagraph_capture_sizes(512)
    # 1, 2, 4; 8..248 by 8 (31 sizes); 256..512 by 16 (17 sizes)
    assert len(sizes) == 3 + 31 + 17 == 51
    assert sizes[:6] == (1, 2, 4, 8, 16, 24)
    assert 248 in sizes and 252 not in sizes and 256 in sizes and 264 not in sizes
    assert sizes[-3:] == (480, 496, 512)
    assert len(R.cudagraph_capture_sizes(1024)) == 3 + 31 + 49
    assert R.cudagraph_capture_sizes(20) == (1, 2, 4, 8, 16)
    assert R.cudagraph_capture_sizes(3) == (1, 2)
    assert R.cudagraph_capture_sizes(0) == ()


def test_default_capture_ceiling_per_gpu_and_caps():
    assert R.default_max_cudagraph_capture_size("h200") == 512
    assert R.default_max_cudagraph_capture_size("H100 SXM") == 512  # tokpool hardware name
    assert R.default_max_cudagraph_capture_size("b200") == 1024  # sm_100
    assert R.default_max_cudagraph_capture_size("b300") == 1024  # sm_103
    assert R.default_max_cudagraph_capture_size("rtx-pro-6000") == 512  # sm_120: not DC
    # capped at 2 * max_num_seqs, then at the budget
    assert R.default_max_cudagraph_capture_size("h200", max_num_seqs=8) == 16
    assert R.default_max_cudagraph_capture_size("b200", max_num_seqs=1024) == 1024
    assert R.default_max_cudagraph_capture_size("h200", max_num_batched_tokens=100) == 100


def test_resolved_sizes_add_budget_and_decode_width():
    top, sizes = R.resolve_cudagraph_sizes("h200", max_num_seqs=1024, max_num_batched_tokens=16384)
    assert (top, sizes) == (512, R.cudagraph_capture_sizes(512))
    # max_num_seqs=100: ceiling min(200, 512) = 200; 100 (the decode width) is appended
    top, sizes = R.resolve_cudagraph_sizes("h200", max_num_seqs=100, max_num_batched_tokens=8192)
    assert top == 200 and 100 in sizes and 96 in sizes and 104 in sizes and len(sizes) == 29
    # a 300-token budget: sizes up to 288, plus 300 itself
    top, sizes = R.resolve_cudagraph_sizes("h200", max_num_seqs=1024, max_num_batched_tokens=300)
    assert top == 300 and sizes[-2:] == (288, 300)
    assert R.resolve_cudagraph_sizes(
        "h200", max_num_seqs=1024, max_num_batched_tokens=8192, enforce_eager=True
    ) == (0, ())
    # an explicit maximum is rounded down to the pattern
    top, _ = R.resolve_cudagraph_sizes(
        "h200", max_num_seqs=1024, max_num_batched_tokens=8192, max_cudagraph_capture_size=500
    )
    assert top == 496
    # explicit sizes: deduplicated, those over the budget dropped
    assert R.resolve_cudagraph_sizes(
        "h200", max_num_seqs=8, max_num_batched_tokens=1000,
        cudagraph_capture_sizes_override=[64, 8, 64, 4000],
    ) == (64, (8, 64))
    with pytest.raises(ValueError, match="disagrees"):
        R.resolve_cudagraph_sizes(
            "h200", max_num_seqs=8, max_num_batched_tokens=1000, max_cudagraph_capture_size=32,
            cudagraph_capture_sizes_override=[8, 64],
        )


def test_graph_size_for_pads_up_or_runs_eagerly():
    sizes = R.cudagraph_capture_sizes(512)
    assert R.graph_size_for(1, sizes) == 1
    assert R.graph_size_for(3, sizes) == 4
    assert R.graph_size_for(249, sizes) == 256
    assert R.graph_size_for(300, sizes) == 304
    assert R.graph_size_for(512, sizes) == 512
    assert R.graph_size_for(513, sizes) is None  # eager: fresh memory
    assert R.graph_size_for(8192, sizes) is None
    assert R.graph_size_for(256, sizes, enforce_eager=True) is None
    assert R.graph_size_for(5, ()) is None
    with pytest.raises(ValueError, match="num_tokens"):
        R.graph_size_for(0, sizes)


def test_pooling_models_never_run_full_graphs():
    assert R.pooling_cudagraph_mode() == "PIECEWISE"
    assert R.pooling_cudagraph_mode("FULL") == "PIECEWISE"
    assert R.pooling_cudagraph_mode("FULL_AND_PIECEWISE", enforce_eager=True) == "NONE"
    with pytest.raises(ValueError, match="cudagraph mode"):
        R.pooling_cudagraph_mode("full")


# --- scheduler defaults --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "usage", "expected"),
    [
        ("h200", "llm", (16384, 1024)),
        ("h200", "server", (8192, 1024)),
        ("h100", "server", (8192, 1024)),
        ("b200", "server", (16384, 1024)),
        ("a100-80gb", "llm", (8192, 256)),  # 80 GB but excluded by name (vLLM PR #17885)
        ("a100-80gb", "server", (2048, 256)),
        ("l4", "server", (2048, 256)),
        ("gb10", "llm", (8192, 256)),  # 128 GB unified memory, small tier by capability
        ("rtx-pro-6000", "server", (8192, 1024)),
        ("h200", "engine", (2048, 128)),  # SchedulerConfig defaults
    ],
)
def test_batch_defaults(gpu, usage, expected):
    assert R.batch_defaults(gpu, usage) == expected


def test_batch_defaults_cpu_scale_with_world_size_and_bad_names():
    assert R.batch_defaults("cpu", "llm", world_size=2) == (8192, 512)
    assert R.batch_defaults("cpu", "server") == (2048, 128)
    with pytest.raises(ValueError, match="unknown hardware 'h300'"):
        R.batch_defaults("h300")
    with pytest.raises(ValueError, match="usage"):
        R.batch_defaults("h200", "offline")
    custom = R.DeviceFacts("NVIDIA Some GPU", 100 * R.GiB, (9, 0))
    assert R.batch_defaults(custom, "server") == (8192, 1024)


def test_engine_limits_raise_budget_for_unchunked_models():
    # unchunked (e.g. a STEP PRM) with a 32k context on an H200 API server: budget 32768
    assert R.engine_batch_limits(
        "h200", "server", max_model_len=32768, enable_chunked_prefill=False
    ) == (32768, 1024)
    assert R.engine_batch_limits(
        "h200", "server", max_model_len=32768, enable_chunked_prefill=True
    ) == (8192, 1024)
    # capped at max_num_seqs * max_model_len: 1024 * 4 = 4096
    assert R.engine_batch_limits(
        "h200", "llm", max_model_len=4, enable_chunked_prefill=True
    ) == (4096, 1024)
    # a given small budget caps the default max_num_seqs (1024 -> 64)
    assert R.engine_batch_limits(
        "h200", "llm", max_model_len=100, enable_chunked_prefill=True, max_num_batched_tokens=64
    ) == (64, 64)
    msg = r"max_num_batched_tokens \(2048\).*max_model_len \(4096\)"
    with pytest.raises(ValueError, match=msg):
        R.engine_batch_limits(
            "h200", "llm", max_model_len=4096, enable_chunked_prefill=False,
            max_num_batched_tokens=2048,
        )


# --- pooling defaults ----------------------------------------------------------------------


def test_head_dtype_activation_async_defaults():
    assert R.default_head_dtype("bfloat16") == "float32"
    assert R.default_head_dtype("bfloat16", runner="generate") == "bfloat16"
    assert R.default_head_dtype("bfloat16", override="model") == "bfloat16"
    assert R.default_head_dtype("bfloat16", override="Float16") == "float16"
    assert R.default_head_dtype("bfloat16", platform_supports_float32=False) == "bfloat16"
    assert R.default_use_activation() is True
    assert R.default_use_activation(False) is False
    assert R.default_async_scheduling("pooling") is False
    assert R.default_async_scheduling("generate") is True
    assert R.default_async_scheduling("pooling", requested=True) is True


# --- which models chunk --------------------------------------------------------------------


def test_chunked_prefill_support_by_model_kind():
    assert R.chunked_prefill_supported("decoder") is True  # LAST/ALL: token_embed chunks
    assert R.chunked_prefill_supported("decoder", tok_pooling_type="STEP") is False  # PRM
    assert R.chunked_prefill_supported("decoder", seq_pooling_type="MEAN") is False
    assert R.chunked_prefill_supported("decoder", seq_pooling_type="CLS") is False
    assert R.chunked_prefill_supported("encoder_only") is False
    assert R.chunked_prefill_supported("encoder_decoder") is False
    assert R.chunked_prefill_supported("hybrid") is True
    assert R.chunked_prefill_supported("decoder", pooling=False) is True
    assert R.pooling_attn_type("CLS") == "encoder_only"
    assert R.pooling_attn_type("LAST", is_causal=False) == "encoder_only"
    assert R.pooling_attn_type("MEAN") == "decoder"


# --- prompt length -------------------------------------------------------------------------


def test_prompt_over_max_model_len_names_both_numbers():
    with pytest.raises(R.EngineRefusal, match=r"1000000 prompt tokens.*max_model_len=40960"):
        R.check_prompts_fit([1_000_000], 40960)
    with pytest.raises(R.EngineRefusal, match="empty"):
        R.check_prompts_fit([5, 0], 40960)
    R.check_prompts_fit([40960], 40960)  # pooling: exactly the context is fine (0.33.0 fixed
    # issue #55427, whose reserved sampled-token slot stalled such a chunked prompt)
    R.check_prompts_fit([1_000_000], 1_000_000)  # a larger --max-model-len lifts it
    R.check_prompts_fit([1_000_000], None)  # no model: no limit


# --- order and tasks -----------------------------------------------------------------------


def test_step_order_sorts_by_scheduled_tokens_stably():
    assert R.step_order([5, 1, 3, 1]) == [1, 3, 2, 0]
    assert R.step_order([8, 8, 2]) == [2, 0, 1]
    assert R.step_order([]) == []
    # a request with draft tokens leads (speculative decoding; not pooling)
    assert R.step_order([4, 1], num_draft_tokens=[3, 0]) == [0, 1]
    with pytest.raises(ValueError, match="num_draft_tokens"):
        R.step_order([4, 1], num_draft_tokens=[3])


def test_selected_task_rule_and_step_pool_tasks():
    assert frozenset({"token_embed", "token_classify"}) == R.TOKEN_POOL_METHOD_TASKS
    supported = ("token_classify", "token_embed")
    R.check_selected_task("token_embed", selected_task="token_embed", supported_tasks=supported)
    R.check_selected_task("plugin", selected_task="token_embed", supported_tasks=supported)
    with pytest.raises(ValueError, match=r'PoolerConfig\(task="token_classify"\)'):
        R.check_selected_task(
            "token_classify", selected_task="token_embed", supported_tasks=supported
        )
    with pytest.raises(ValueError, match=r"--pooler-config\.task token_classify"):
        R.check_selected_task(
            "token_classify", selected_task="token_embed", supported_tasks=supported,
            entrypoint="server",
        )
    with pytest.raises(ValueError, match=r"Embedding API is not supported by this model\. Try "
                       r"converting the model using `--convert embed`\."):
        R.check_selected_task("embed", selected_task="token_embed", supported_tasks=supported)
    with pytest.raises(ValueError, match="Unsupported task: 'embed'"):
        R.check_selected_task("embed", selected_task="token_embed", supported_tasks=supported,
                              entrypoint="server")
