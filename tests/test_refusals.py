"""Every vLLM refusal tokpool models has ONE definition (``vllm_rules.engine_checks``) and every
entry path raises through it: swap the function there and each path runs into the swap.

Entry paths: a directly built ``SimConfig``, ``for_model``, ``from_hf_config``,
``from_vllm_args``, ``simulate`` (tensor, analytic and closed-form modes; tokpool's and vLLM's
schedulers), ``sweep`` (closed forms and the loop), the CLI and the explorers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tokpool as tp
import tokpool.sim.vllm_rules.engine_checks as checks
from tokpool.cli import main as cli_main
from tokpool.sim.vllm_rules.kv_spec import KVCacheSpec
from tokpool.sim.vllm_run import vllm_scheduler_unavailable_reason

PACKAGE = Path(tp.__file__).parent
MARK = "<the one definition>"


class _Asked(checks.EngineRefusal):
    """Raised by a swapped refusal: proves the path called the function in engine_checks."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{MARK} {name}", follows=name)


@pytest.fixture
def swap(monkeypatch):
    def swap_(name: str) -> None:
        def asked(*args, **kwargs):
            raise _Asked(name)

        monkeypatch.setattr(checks, name, asked)

    return swap_


#: SimConfig arguments every start-up check runs on (a model, so KV and context apply).
SMOL = {"max_num_batched_tokens": 64, "max_num_seqs": 4}
SMOL_HF = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
           "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
           "intermediate_size": 1536, "vocab_size": 49152, "max_position_embeddings": 8192,
           "torch_dtype": "bfloat16"}


def _config_paths():
    """Each way of building an engine config, as a callable (kwargs: extra fields)."""
    return {
        "SimConfig": lambda **kw: tp.SimConfig(model="SmolLM2-135M", **SMOL, **kw),
        "for_model": lambda **kw: tp.SimConfig.for_model("SmolLM2-135M", **SMOL, **kw),
        "from_hf_config": lambda **kw: tp.SimConfig.from_hf_config(SMOL_HF, **SMOL, **kw),
        "from_vllm_args": lambda **kw: tp.SimConfig.from_vllm_args(
            "vllm serve SmolLM2-135M --max-num-batched-tokens 64 --max-num-seqs 4", **kw),
    }


# Each start-up refusal, with the fields that make its path reach it.
STARTUP = {
    "check_tensor_parallel": {"tensor_parallel_size": 3},
    "check_pipeline_parallel": {"pipeline_parallel_size": 2},
    "check_model_dtype": {"dtype": "float16"},
    "check_user_max_model_len": {"max_model_len": 4096},
    "check_scheduler_limits": {},
    "check_kv_cache_holds_one_sequence": {"kv_cache_blocks": 1024},
}


@pytest.mark.parametrize("check", list(STARTUP))
@pytest.mark.parametrize("path", list(_config_paths()))
def test_every_config_path_applies_each_startup_refusal(swap, check, path):
    swap(check)
    with pytest.raises(_Asked, match=check):
        _config_paths()[path](**STARTUP[check])


@pytest.mark.parametrize("check", list(STARTUP))
def test_the_cli_applies_each_startup_refusal(swap, capsys, check):
    swap(check)
    line = "vllm serve SmolLM2-135M --max-num-batched-tokens 64" + {
        "check_tensor_parallel": " -tp 3", "check_user_max_model_len": " --max-model-len 4096",
        "check_pipeline_parallel": " -pp 2", "check_model_dtype": " --dtype float16",
    }.get(check, "")
    code = cli_main(["simulate", "--prompt-lens", "100", "--mode", "analytic",
                     "--vllm-args", line])
    assert code == 2 and MARK in capsys.readouterr().err


#: The refusals that need a config.json (the architecture, the tasks it declares), with what
#: reaches them: every way in that reads one applies them.
FROM_CONFIG_JSON = {
    "check_pooling_runner": ("auto", None),               # a bare LlamaForCausalLM
    "check_configured_task": ("pooling", "token_classify"),  # it declares embedding tasks
}


def _config_json_path(path, tmp_path, runner, task):
    (tmp_path / "config.json").write_text(__import__("json").dumps(SMOL_HF))
    line = (f"vllm serve {tmp_path} --max-num-batched-tokens 64 --max-num-seqs 4 "
            f"--runner {runner}" + (f" --pooler-config.task {task}" if task else ""))
    if path == "from_hf_config":
        return lambda: tp.SimConfig.from_hf_config(SMOL_HF, **SMOL, runner=runner,
                                                   **({"task": task} if task else {}))
    if path == "from_vllm_args":
        return lambda: tp.SimConfig.from_vllm_args(line)
    return lambda: cli_main(["simulate", "--prompt-lens", "100", "--mode", "analytic",
                             "--vllm-args", line])


@pytest.mark.parametrize("check", list(FROM_CONFIG_JSON))
@pytest.mark.parametrize("path", ["from_hf_config", "from_vllm_args", "cli"])
def test_every_config_json_path_applies_the_runner_and_task_refusals(swap, capsys, tmp_path,
                                                                     check, path):
    swap(check)
    call = _config_json_path(path, tmp_path, *FROM_CONFIG_JSON[check])
    if path == "cli":
        assert call() == 2 and MARK in capsys.readouterr().err
        return
    with pytest.raises(_Asked, match=check):
        call()


def _prompt_paths():
    cfg = tp.SimConfig(model="SmolLM2-135M", max_num_batched_tokens=64, max_num_seqs=4)
    paths = {
        "simulate tensor": lambda: tp.simulate([100], cfg, mode="tensor"),
        "simulate analytic": lambda: tp.simulate([100], cfg, mode="analytic"),
        "simulate closed_form": lambda: tp.simulate([100], cfg, mode="closed_form"),
        "sweep closed_form": lambda: tp.sweep([100, 200], cfg, progress=False),
        "sweep analytic": lambda: tp.sweep([100], cfg, mode="analytic", progress=False),
    }
    if vllm_scheduler_unavailable_reason() is None:
        paths["simulate scheduler=vllm"] = lambda: tp.simulate([100], cfg, mode="analytic",
                                                               scheduler="vllm")
    return paths


@pytest.mark.parametrize("path", list(_prompt_paths()))
def test_every_run_path_applies_the_prompt_length_refusal(swap, path):
    swap("check_prompts_fit")
    with pytest.raises(_Asked, match="check_prompts_fit"):
        _prompt_paths()[path]()


@pytest.mark.parametrize("command", [["simulate", "--prompt-lens", "100"],
                                     ["sweep", "--prompt-lens", "100,200", "--no-progress"]])
def test_the_cli_applies_the_prompt_length_refusal(swap, capsys, command):
    swap("check_prompts_fit")
    code = cli_main([*command, "--model-preset", "SmolLM2-135M", "--budget", "64"])
    assert code == 2 and MARK in capsys.readouterr().err


def test_the_explorers_apply_the_refusals(swap):
    swap("check_prompts_fit")
    memory = tp.memory_explorer(model="SmolLM2-135M")
    assert MARK in memory.error
    swap("check_scheduler_limits")
    ownership = tp.ownership_explorer([5, 12, 3])
    assert MARK in ownership.error


@pytest.mark.parametrize("scheduler", ["tokpool", "vllm"])
@pytest.mark.parametrize("mode", ["analytic", "closed_form"])
def test_unschedulable_prompts_are_refused_by_one_function(swap, scheduler, mode):
    if scheduler == "vllm" and (mode == "closed_form" or vllm_scheduler_unavailable_reason()):
        pytest.skip("vLLM's scheduler runs the step loop only (and needs `make vllm`)")
    swap("check_unchunked_prompts_schedulable")
    cfg = tp.SimConfig(hidden_size=4, max_num_batched_tokens=64, enable_chunked_prefill=False)
    with pytest.raises(_Asked):
        tp.simulate([100], cfg, mode=mode, scheduler=scheduler)


def test_a_cache_too_small_for_a_prompt_is_refused_by_one_function(swap):
    swap("check_prompts_fit_kv_cache")
    cfg = tp.SimConfig(hidden_size=4, max_num_batched_tokens=64, kv_cache_blocks=4)
    with pytest.raises(_Asked):
        tp.simulate([100], cfg, mode="analytic")
    with pytest.raises(_Asked):
        tp.sim.schedule([100], max_num_batched_tokens=64, max_num_seqs=4,
                        enable_chunked_prefill=True, kv_cache_blocks=4)


# --- one definition -------------------------------------------------------------------------

#: A phrase of each refusal's message that nothing but its definition may write.
MESSAGES = {
    "check_tensor_parallel": "must be divisible by tensor parallel size",
    "check_pipeline_parallel": "Supported models implement the `SupportsPP` interface",
    "check_model_dtype": "does not support float16. Reason:",
    "check_pooling_runner": "Try passing `--runner pooling` to use the model",
    "check_configured_task": "(ModelConfig.get_pooling_task). Serve one of",
    "check_user_max_model_len": "is greater than the derived",
    "check_scheduler_limits": "must be greater than or equal to max_num_seqs",
    "check_kv_cache_holds_one_sequence": "To serve at least one request",
    "check_prompts_fit": "prompt tokens, longer than",
    "check_unchunked_prompts_schedulable": "can never be scheduled",
    "check_prompts_fit_kv_cache": "never admits it",
    "check_step_pooling_sees_whole_prompts": "of the whole prompt in one chunk's rows",
    "check_sequence_pooling_sees_whole_prompts": "A model with CLS or MEAN pooling never chunks",
    "check_pooling_params": "cannot be combined with late-interaction scoring",
}


def _string_constants(path: Path) -> list[str]:
    """The strings of a file's code, docstrings left out (they may name a refusal)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and id(node) not in docstrings]


def test_each_refusal_is_written_once():
    assert set(MESSAGES) == {n for n in checks.__all__ if n.startswith("check_")}
    where: dict[str, list[str]] = {name: [] for name in MESSAGES}
    for path in PACKAGE.rglob("*.py"):
        text = "\n".join(_string_constants(path))
        for name, phrase in MESSAGES.items():
            if phrase in text:
                where[name].append(path.name)
    assert where == {name: ["engine_checks.py"] for name in MESSAGES}


def test_each_refusal_says_which_vllm_function_it_follows():
    cases = {
        "check_tensor_parallel": lambda: checks.check_tensor_parallel("m", 9, 3, 2),
        "check_pipeline_parallel": lambda: checks.check_pipeline_parallel(
            "m", 2, supported=False),
        "check_model_dtype": lambda: checks.check_model_dtype(
            "gemma3", "float16", reason="Numerical instability."),
        "check_pooling_runner": lambda: checks.check_pooling_runner(
            "m", "Qwen3ForCausalLM", runner="auto", runner_type="generate", convert_type="none",
            pooling_class=False, generative_class=True),
        "check_configured_task": lambda: checks.check_configured_task(
            "token_embed", ("token_classify",), name="m"),
        "check_user_max_model_len": lambda: checks.check_user_max_model_len(
            9000, 8192, allow_long=False),
        "check_scheduler_limits": lambda: checks.check_scheduler_limits(
            max_num_batched_tokens=8, max_num_seqs=16, max_model_len=100,
            enable_chunked_prefill=True, long_prefill_token_threshold=None),
        "check_kv_cache_holds_one_sequence": lambda: checks.check_kv_cache_holds_one_sequence(
            name="m", spec=KVCacheSpec.build([None], num_kv_heads=1, head_bytes=10,
                                             block_size=16),
            kv_cache_blocks=4, max_model_len=100, max_in_flight_tokens=0),
        "check_prompts_fit": lambda: checks.check_prompts_fit([200], 100),
        "check_unchunked_prompts_schedulable": lambda: (
            checks.check_unchunked_prompts_schedulable([200], 100, enable_chunked_prefill=False)),
        "check_prompts_fit_kv_cache": lambda: checks.check_prompts_fit_kv_cache([200], 4, 16),
        "check_step_pooling_sees_whole_prompts": lambda: (
            checks.check_step_pooling_sees_whole_prompts(
                [tp.sim.ScheduledStep(0, ((0, 0, 16),), ())], [24], step_tag_id=7,
                enable_chunked_prefill=False)),
        "check_sequence_pooling_sees_whole_prompts": lambda: (
            checks.check_sequence_pooling_sees_whole_prompts(
                [tp.sim.ScheduledStep(0, ((0, 0, 16),), ())], [24], seq_pooling_type="MEAN",
                token_level=False)),
        "check_pooling_params": lambda: checks.check_pooling_params(
            tp.PoolingParams(late_chunking_size=8), tp.SimConfig(task="token_classify")),
    }
    assert set(cases) == set(MESSAGES)
    for name, call in cases.items():
        with pytest.raises(checks.EngineRefusal) as err:
            call()
        assert err.value.follows in str(err.value), name


# --- looking past on purpose ----------------------------------------------------------------


def test_as_if_looks_past_a_refusal_and_every_result_says_so():
    with pytest.raises(checks.EngineRefusal, match="is greater than the derived"):
        tp.SimConfig.for_model("SmolLM2-135M", max_model_len=1 << 20)
    cfg = tp.SimConfig.for_model("SmolLM2-135M", max_model_len=1 << 20, as_if=True)
    assert len(cfg.looked_past) == 1 and "looked_past=1" in repr(cfg)
    result = tp.simulate([100_000], cfg, mode="analytic")
    assert result.looked_past == list(cfg.looked_past)
    assert "AS IF" in repr(result) and "AS IF" in result.explain()[0]
    assert tp.sweep([100_000], cfg, progress=False).attrs["looked_past"] == list(cfg.looked_past)
    # a prompt over max_model_len: looked past at run time, and said
    short = tp.SimConfig.for_model("SmolLM2-135M", max_model_len=1000, as_if=True)
    assert short.looked_past == ()
    run = tp.simulate([5000], short, mode="closed_form")
    assert len(run.looked_past) == 1 and "5000 prompt tokens" in run.looked_past[0]
    # what cannot be looked past (no meaning left) still raises
    with pytest.raises(checks.EngineRefusal, match="divisible by tensor parallel size"):
        tp.SimConfig.for_model("SmolLM2-135M", tensor_parallel_size=2, as_if=True)


def test_the_startup_refusals_vllm_applies_on_the_direct_path():
    """Refused by vLLM's config classes, so refused however the config is built."""
    with pytest.raises(checks.EngineRefusal, match=r"long_prefill_token_threshold \(9000\) "
                                                   r"cannot be greater than the max_model_len"):
        tp.SimConfig(model="SmolLM2-135M", long_prefill_token_threshold=9000)
    # 64 blocks of 16 tokens hold 1,008 tokens past the null block: not one 8,192-token request
    with pytest.raises(checks.EngineRefusal, match=r"estimated maximum model length is 1008"):
        tp.SimConfig(model="SmolLM2-135M", kv_cache_blocks=64)
    assert tp.SimConfig(model="SmolLM2-135M", kv_cache_blocks=64, max_model_len=1008)
    with pytest.raises(checks.EngineRefusal, match="1009"):  # the null block is not usable
        tp.SimConfig(model="SmolLM2-135M", kv_cache_blocks=64, max_model_len=1009)
