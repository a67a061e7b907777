"""Your serve line and your config.json as vLLM 0.33.0 resolves them: each rule a test that
names the vLLM function it follows (``tests/test_parity_config.py`` runs the same folders and
generated serve lines through vLLM's own code).
"""

from __future__ import annotations

import json

import pytest

import tokpool as tp
from tokpool.cli import main as cli_main
from tokpool.sim.vllm_rules.args import parse_vllm_args
from tokpool.sim.vllm_rules.engine_checks import EngineRefusal

DECODER = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
           "vocab_size": 1000, "torch_dtype": "bfloat16"}
QWEN3 = {**DECODER, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
         "max_position_embeddings": 40960}
BERT = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 128,
        "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
        "vocab_size": 1000, "max_position_embeddings": 512, "type_vocab_size": 2,
        "torch_dtype": "float32"}


def _folder(tmp_path, config, **files):
    (tmp_path / "config.json").write_text(json.dumps(config))
    for name, content in files.items():
        path = tmp_path / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content))
    return tmp_path


# --- a real serve line loads ----------------------------------------------------------------


def test_a_copied_deployment_line_loads_and_says_what_it_ignored(capsys):
    """vllm/entrypoints/common/cli_args.py, make_arg_parser: FrontendArgs (host, port,
    api-key, ...) are the API server's; --served-model-name is ModelConfig's name only."""
    line = ("vllm serve Qwen/Qwen3-Embedding-8B --host 0.0.0.0 --port 8000 "
            "--served-model-name x --pooler-config.task token_embed --api-key k1 k2 "
            "--uvicorn-log-level warning --disable-log-stats")
    cfg = tp.SimConfig.from_vllm_args(line)
    assert cfg.task == "token_embed"
    assert cfg.ignored_flags == ("--host 0.0.0.0", "--port 8000", "--served-model-name x",
                                 "--api-key k1 k2", "--uvicorn-log-level warning",
                                 "--disable-log-stats")
    assert "ignored_flags=" in repr(cfg)
    assert cli_main(["simulate", "--prompt-lens", "1000", "--mode", "analytic",
                     "--vllm-args", line]) == 0
    out = capsys.readouterr().out
    assert "ignored (they change nothing tokpool simulates): --host 0.0.0.0 --port 8000" in out


def test_the_removed_task_flag_gets_vllms_own_hint():
    """vllm/utils/argparse_utils.py, FlexibleArgumentParser.error: --task is not a vllm serve
    option; vLLM points to --runner pooling / --convert (not a list of every flag)."""
    with pytest.raises(ValueError) as err:
        tp.SimConfig.from_vllm_args("vllm serve Qwen/Qwen3-Embedding-8B --task embed")
    message = str(err.value)
    assert "Hint: --task is not a vllm serve option" in message
    assert "use --runner pooling" in message and "--convert embed" in message
    assert len(message) < 400


def test_the_partial_prefill_flags_vllm_0_33_lacks_are_unknown():
    """vLLM 0.33.0's EngineArgs.add_cli_args has no --max-num-partial-prefills nor
    --max-long-partial-prefills (serve_flags, read from its parser)."""
    for flag in ("--max-num-partial-prefills", "--max-long-partial-prefills"):
        with pytest.raises(ValueError, match="unknown vLLM flag"):
            parse_vllm_args(f"m {flag} 2")


@pytest.mark.parametrize("tokens, level", [("-O0", 0), ("-O 1", 1), ("-O=3", 3),
                                           ("--optimization-level 2", 2)])
def test_optimization_levels_are_vllms(tokens, level):
    """vllm/utils/argparse_utils.py, FlexibleArgumentParser.parse_args rewrites -O<n>;
    vllm/config/vllm.py, OPTIMIZATION_LEVEL_00: O0 captures no CUDA graphs (cudagraph_mode
    NONE), O1-O3 piecewise graphs for a pooling model."""
    cfg = tp.SimConfig.from_vllm_args(f"vllm serve Qwen/Qwen3-Embedding-8B {tokens}")
    assert cfg.optimization_level == level
    assert (cfg.capture_sizes == ()) == (level == 0)
    with pytest.raises(ValueError, match="optimization levels 0, 1, 2, 3"):
        parse_vllm_args("m -O4")


def test_deprecated_flags_warn_as_vllm_warns_and_are_ignored():
    """vllm/engine/arg_utils.py, _DISABLE_CASCADE_ATTN_DEPRECATION_MESSAGE."""
    with pytest.warns(UserWarning, match="--disable-cascade-attn is deprecated and has no "
                                         "effect"):
        out = parse_vllm_args("m --disable-cascade-attn")
    assert out["ignored"] == ("--disable-cascade-attn",)


def test_vllms_negative_forms_of_the_modelled_flags():
    """vllm/utils/argparse_utils.py, EnableDisableAction: --enable-x pairs with --disable-x
    (and the hidden --no-enable-x)."""
    for form in ("--disable-chunked-prefill", "--no-enable-chunked-prefill"):
        assert parse_vllm_args(f"m {form}")["enable_chunked_prefill"] is False
    assert parse_vllm_args("m --no-enforce-eager")["enforce_eager"] is False


def test_a_config_file_is_refused_not_ignored():
    """--config reads more options from a YAML file (FlexibleArgumentParser
    ._pull_args_from_config): ignoring it would drop them."""
    with pytest.raises(ValueError, match="reads more options from a YAML file"):
        parse_vllm_args("m --config serve.yaml")


# --- the runner ------------------------------------------------------------------------------


def test_a_bare_causal_lm_is_a_generative_model_under_runner_auto(tmp_path):
    """vllm/config/model.py, ModelConfig._get_runner_type / _get_default_runner_type: a
    *ForCausalLM without a sentence-transformers pooling config is served by the generative
    runner; vLLM's pooling entry point then says "Try passing `--runner pooling`"
    (PoolingOfflineMixin._verify_pooling_task)."""
    folder = _folder(tmp_path, QWEN3)
    with pytest.raises(EngineRefusal, match="Try passing `--runner pooling`") as err:
        tp.SimConfig.from_vllm_args(f"vllm serve {folder} --pooler-config.task token_embed")
    assert err.value.follows == "ModelConfig._get_runner_type"
    with pytest.raises(EngineRefusal, match="generative model"):
        tp.SimConfig.from_hf_config(folder, runner="auto")
    # --runner pooling, or --convert embed, adapts it (convert embed: embed + token_embed)
    for flags in ("--runner pooling", "--convert embed"):
        cfg = tp.SimConfig.from_vllm_args(f"vllm serve {folder} {flags}")
        assert cfg.task == "embed" and cfg.model.declared_tasks == ("embed", "token_embed")
    # from_hf_config is a pooling runner unless told otherwise (LLM(..., runner="pooling"))
    assert tp.SimConfig.from_hf_config(folder).task == "token_embed"


def test_a_sentence_transformers_folder_is_a_pooling_model_under_runner_auto(tmp_path):
    """_get_default_runner_type: get_pooling_config (modules.json) first."""
    folder = _folder(tmp_path, QWEN3, **{
        "modules.json": [{"idx": 0, "name": "0", "path": "",
                          "type": "sentence_transformers.models.Transformer"},
                         {"idx": 1, "name": "1", "path": "1_Pooling",
                          "type": "sentence_transformers.models.Pooling"}],
        "1_Pooling__config.json": {"pooling_mode_lasttoken": True}})
    assert tp.SimConfig.from_vllm_args(f"vllm serve {folder}").task == "embed"


def test_runner_generate_on_an_embedding_model_is_refused_in_vllms_words(tmp_path):
    """ModelConfig.__post_init__: "Embedding models do not support `--runner generate`"."""
    folder = _folder(tmp_path, BERT)
    with pytest.raises(EngineRefusal, match="Embedding models do not support `--runner "
                                            "generate`"):
        tp.SimConfig.from_vllm_args(f"vllm serve {folder} --runner generate")


def test_an_undeclared_task_is_refused_at_start_up(tmp_path):
    """vllm/config/model.py, ModelConfig.get_pooling_task: "Unsupported task: ..."; the
    Qwen2 PRM declares token_classify only, an embedding adapter embed and token_embed."""
    prm = _folder(tmp_path, {**DECODER, "architectures": ["Qwen2ForProcessRewardModel"],
                             "model_type": "qwen2", "max_position_embeddings": 4096})
    with pytest.raises(EngineRefusal, match=r"Unsupported task: 'token_embed' Supported "
                                            r"tasks: \('token_classify',\)"):
        tp.SimConfig.from_vllm_args(f"vllm serve {prm} --pooler-config.task token_embed")


# --- the model's files -----------------------------------------------------------------------


def test_a_step_prm_asked_for_token_embed_is_never_chunked(tmp_path):
    """vllm/config/model.py, ModelConfig.is_chunked_prefill_supported reads the PoolerConfig's
    tok_pooling_type, which a Qwen2 PRM sets to STEP (@default_pooling_type) whatever task is
    served; Qwen2ForProcessRewardModelConfig sets its step tag to 151651."""
    prm = _folder(tmp_path, {**DECODER, "architectures": ["Qwen2ForProcessRewardModel"],
                             "model_type": "qwen2", "max_position_embeddings": 4096})
    cfg = tp.SimConfig.from_vllm_args(
        f"vllm serve {prm} --convert embed --pooler-config.task token_embed")
    assert (cfg.task, cfg.pooling_method, cfg.model.step_tag_id) == ("token_embed", "STEP",
                                                                    151651)
    assert cfg.enable_chunked_prefill is False
    cpu = tp.SimConfig.from_vllm_args(
        f"vllm serve {prm} --convert embed --pooler-config.task token_embed", hardware="CPU",
        gpu_memory_utilization=None)
    assert cpu.max_num_batched_tokens == 4096  # the CPU's 2048, raised to max_model_len
    # the preset too: its token pooling is STEP, so no chunking for its token_embed either
    assert tp.SimConfig.for_model("Qwen2.5-Math-PRM-7B",
                                  task="token_embed").enable_chunked_prefill is False


def test_the_tokenizer_config_caps_an_absolute_position_encoder(tmp_path):
    """vllm/config/model.py, ModelConfig.get_and_verify_max_len: for a pooling model with
    position_embedding_type "absolute", tokenizer_config.json's model_max_length caps the
    length (_get_and_verify_max_len), and a longer --max-model-len is refused."""
    bert = {**BERT, "position_embedding_type": "absolute"}
    folder = _folder(tmp_path, bert, **{"tokenizer_config.json": {"model_max_length": 128}})
    assert tp.SimConfig.from_hf_config(folder).max_model_len == 128
    with pytest.raises(EngineRefusal, match="is greater than the derived"):
        tp.SimConfig.from_hf_config(folder, max_model_len=256)
    # without position_embedding_type in config.json vLLM does not read the tokenizer's
    (tmp_path / "config.json").write_text(json.dumps(BERT))
    assert tp.SimConfig.from_hf_config(folder).max_model_len == 512


def test_xlm_r_keeps_its_514_positions_unless_its_tokenizer_says_512(tmp_path):
    """vLLM derives max_model_len from max_position_embeddings (514 for XLM-R), with no
    padding offset (RobertaEmbedding.forward adds padding_idx + 1 to the positions inside the
    model): the cap to 512 comes from tokenizer_config.json (get_and_verify_max_len)."""
    xlmr = {**BERT, "architectures": ["XLMRobertaModel"], "model_type": "xlm-roberta",
            "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1,
            "position_embedding_type": "absolute"}
    assert tp.SimConfig.from_hf_config(_folder(tmp_path, xlmr)).max_model_len == 514
    folder = _folder(tmp_path, xlmr, **{"tokenizer_config.json": {"model_max_length": 512}})
    assert tp.SimConfig.from_hf_config(folder).max_model_len == 512


def test_longrope_defaults_to_its_original_context(tmp_path):
    """vllm/config/model.py, _get_and_verify_max_len: for LongRoPE max_model_len defaults to
    original_max_position_embeddings "to avoid performance degradation for shorter
    sequences"; a --max-model-len up to max_position_embeddings is accepted."""
    phi3 = {**DECODER, "architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
            "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
            "rope_scaling": {"type": "longrope", "long_factor": [1.0] * 32,
                             "short_factor": [1.0] * 32}}
    folder = _folder(tmp_path, phi3)
    assert tp.SimConfig.from_hf_config(folder).max_model_len == 4096
    assert tp.SimConfig.from_hf_config(folder, max_model_len=32768).max_model_len == 32768
    with pytest.raises(EngineRefusal, match=r"\(200000\) is greater than the derived "
                                            r"max_model_len \(131072\)"):
        tp.SimConfig.from_hf_config(folder, max_model_len=200_000)


def test_embeddinggemma_is_encoder_only(tmp_path):
    """vllm/model_executor/models/config.py, Gemma3TextModelConfig: is_causal = not
    use_bidirectional_attention; ModelConfig.attn_type: encoder_only, so no KV cache
    (EncoderOnlyAttention) and no chunked prefill (is_chunked_prefill_supported)."""
    gemma = {**DECODER, "architectures": ["Gemma3TextModel"], "model_type": "gemma3_text",
             "max_position_embeddings": 2048, "use_bidirectional_attention": True,
             "torch_dtype": "float32"}
    cfg = tp.SimConfig.from_hf_config(_folder(tmp_path, gemma))
    assert cfg.model.attn_type == "encoder_only" and cfg.kv_bytes_per_token == 0
    assert cfg.enable_chunked_prefill is False
    causal = tp.SimConfig.from_hf_config({**gemma, "use_bidirectional_attention": False})
    assert causal.model.attn_type == "decoder" and causal.enable_chunked_prefill is True


def test_float32_gemma_is_served_in_bfloat16_and_float16_is_refused(tmp_path):
    """vllm/config/model.py, _resolve_auto_dtype: a float32 checkpoint of a pooling model
    runs in float16, except for the model types _FLOAT16_NOT_SUPPORTED_MODELS names, which
    run in bfloat16; _check_valid_dtype refuses --dtype float16 for them."""
    gemma2 = {**DECODER, "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
              "max_position_embeddings": 8192, "torch_dtype": "float32"}
    folder = _folder(tmp_path, gemma2)
    assert str(tp.SimConfig.from_hf_config(folder).dtype) == "torch.bfloat16"
    assert str(tp.SimConfig.from_hf_config(BERT).dtype) == "torch.float16"
    with pytest.raises(EngineRefusal, match=r"The model type 'gemma2' does not support "
                                            r"float16\. Reason: Numerical instability"):
        tp.SimConfig.from_vllm_args(f"vllm serve {folder} --runner pooling --dtype half")


def test_cpu_batch_defaults_scale_with_the_world_size():
    """vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults(world_size): on vLLM's CPU
    platform the defaults are 4096/256 (LLM) and 2048/128 (server) times tp x pp
    (_set_default_max_num_seqs_and_batched_tokens_args)."""
    for tp_size, pp_size in ((1, 1), (2, 1), (2, 2)):
        cfg = tp.SimConfig.for_model("Qwen3-Embedding-0.6B", hardware="CPU", usage="server",
                                     tensor_parallel_size=tp_size,
                                     pipeline_parallel_size=pp_size)
        world = tp_size * pp_size
        assert (cfg.max_num_batched_tokens, cfg.max_num_seqs) == (2048 * world, 128 * world)


def test_pipeline_parallel_needs_supports_pp(tmp_path):
    """vllm/config/model.py, ModelConfig.verify_with_parallel_config: "Pipeline parallelism
    is not supported for this model. Supported models implement the `SupportsPP`
    interface." (BertEmbeddingModel does not; LlamaForCausalLM does)."""
    with pytest.raises(EngineRefusal, match="Supported models implement the `SupportsPP` "
                                            "interface"):
        tp.SimConfig.from_vllm_args(f"vllm serve {_folder(tmp_path, BERT)} -pp 2")
    llama = {**DECODER, "architectures": ["LlamaForCausalLM"], "model_type": "llama",
             "max_position_embeddings": 4096}
    assert tp.SimConfig.from_hf_config(llama, pipeline_parallel_size=2).pipeline_parallel_size \
        == 2


def test_a_qwen2_reward_model_is_a_token_classifier_without_activation():
    """vllm/model_executor/models/qwen2_rm.py, Qwen2ForRewardModel (num_labels = 1, token
    classification pooler) and models/config.py, Qwen2ForRewardModelConfig (use_activation
    False unless set)."""
    cfg = tp.SimConfig.from_hf_config({**DECODER, "architectures": ["Qwen2ForRewardModel"],
                                       "model_type": "qwen2", "max_position_embeddings": 4096})
    assert (cfg.task, cfg.num_labels, cfg.use_activation) == ("token_classify", 1, False)


def test_the_llm_class_names_the_missing_api():
    """vllm/entrypoints/pooling/offline.py, PoolingOfflineMixin._verify_pooling_task."""
    with pytest.raises(tp.UnsupportedTaskError, match="Embedding API is not supported by this "
                       r"model. Try converting the model using `--convert embed`."):
        tp.pooler.tasks.check_request_task("token_embed", {"token_classify"},
                                    selected="token_classify")


# --- the table of vLLM's options ---------------------------------------------------------


@pytest.mark.parity
def test_the_serve_flags_table_is_vllms_parser():
    """serve_flags.py is generated from vLLM's own parser (scripts/vllm_serve_flags.py):
    regenerated here from the installed vLLM, it must be the committed one."""
    from tokpool.sim.vllm_run import vllm_scheduler_unavailable_reason

    reason = vllm_scheduler_unavailable_reason()
    if reason is not None:
        pytest.skip(f"vLLM not importable: {reason}")
    from scripts.vllm_serve_flags import serve_parser_options
    from tokpool.sim.vllm_rules import serve_flags

    options, frontend, canonical, negative = serve_parser_options()
    assert options == serve_flags.SERVE_OPTIONS
    assert frontend == serve_flags.FRONTEND_OPTIONS
    assert canonical == serve_flags.CANONICAL
    assert negative == serve_flags.NEGATIVE_OPTIONS
