"""Bad input, third round (issue 29): one named test per kind the issue lists, asserting what
a user gets (the error type and a message naming the input, what it takes and, where one
applies, vLLM's rule; or the right answer). The hostile-input generator
(``test_hostile_surface.py``) tries the same kinds, and the rest of the surface, in capped
child processes."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
import torch

import tokpool as tp
from tokpool.cli import main
from tokpool.guard import MemoryLimitError
from tokpool.sim import ScheduledStep
from tokpool.sim.backends.closed_form import single_request
from tokpool.sim.schedule import given, scheduler
from tokpool.sim.vllm_rules import kv_cache
from tokpool.sim.vllm_rules.hf_config import estimate_num_parameters

QWEN = "vllm serve Qwen/Qwen3-Embedding-8B"
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
    "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 32768,
    "vocab_size": 151665, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def _cli(argv, capsys) -> str:
    """Run the CLI; it must fail as a user error: status 2, one line, no traceback."""
    code = main(argv)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, out, err)
    return lines[0]


def _safetensors(header: dict | bytes, data: bytes = b"", length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


@pytest.fixture(scope="module")
def tiny():
    return tp.load_model("tiny-decoder")


@pytest.fixture(scope="module")
def prm(tiny, tmp_path_factory):
    from tokpool.prm.probe import ProbeHead, save_probe

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        head = ProbeHead(64, num_labels=2)
    file = save_probe(tmp_path_factory.mktemp("probe") / "probe.safetensors", head, {
        "base_model": "tiny-decoder", "layer": 1, "convention": "two_class", "tag": "[MASK]",
        "separator": " ", "chat": False, "system": None, "threshold": 0.5})
    return tp.load_prm(file, model=tiny)


# --- round 2's leftovers --------------------------------------------------------------------


@pytest.mark.parametrize(("line", "match"), [
    (f"{QWEN} --max-model-len '32k", r"cannot split the vLLM command line .*--max-model-len "
                                     r"'32k.*No closing quotation: a quote .* never closed"),
])
def test_a_serve_line_that_a_shell_cannot_split_is_named(line, match, capsys):
    with pytest.raises(ValueError, match=match):
        tp.SimConfig.from_vllm_args(line)
    assert "cannot split the vLLM command line" in _cli(
        ["simulate", "--prompt-lens", "100", "--vllm-args", line], capsys)


def test_budget_flags_beyond_int32_name_the_flag_and_vllms_int32_tensors(capsys):
    line = f"{QWEN} --max-num-batched-tokens {10**30} --max-num-seqs {10**30}"
    with pytest.raises(ValueError, match=r"--max-num-batched-tokens must be at most "
                                         r"2,147,483,647, got 1.0e\+30: vLLM's Model Runner V2 "
                                         r"keeps .* in int32 tensors \(InputBuffers"):
        tp.SimConfig.from_vllm_args(line)
    with pytest.raises(ValueError, match=r"^max_num_seqs must be at most 2,147,483,647"):
        tp.SimConfig(hidden_size=8, max_num_seqs=10**30)
    assert "--max-num-batched-tokens must be at most" in _cli(
        ["simulate", "--prompt-lens", "100", "--vllm-args", line], capsys)


def test_a_context_of_10_12_positions_is_bisected_not_listed(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps({**QWEN3_8B,
                                                      "max_position_embeddings": 10**12}))
    cfg = tp.SimConfig.from_hf_config(tmp_path)
    assert cfg.max_model_len == 10**12
    monkeypatch.setenv("TOKPOOL_MEMORY_LIMIT", "64M")  # a 10^12-long arange would be 7 TiB
    found = tp.sim.pooling_takes_kv_from(cfg)
    reserve = cfg.estimated_activation_peak_bytes
    before, at = single_request(np.array([found - 1, found]), cfg)["peak_pooling_bytes"]
    assert before <= reserve < at  # the shortest prompt over the reserve, exactly
    # bisection gives what the old scan over every length gave
    small = cfg.replace(max_model_len=40_000)
    lens = np.arange(1, 40_001)
    over = np.flatnonzero(single_request(lens, small)["peak_pooling_bytes"] > reserve)
    assert tp.sim.pooling_takes_kv_from(small) == int(lens[over[0]])


def test_2_31_layers_are_refused_up_front_and_stages_counted_by_formula(tmp_path, monkeypatch):
    """The KV cache is specified layer by layer (sliding windows, groups, stages, as vLLM
    plans it): a 2**31-layer config is refused before any per-layer table is built, with the
    memory it would need; the parameter count and the stages stay formulas."""
    (tmp_path / "config.json").write_text(json.dumps({**QWEN3_8B, "num_hidden_layers": 2**31}))
    with pytest.raises(MemoryLimitError, match=r"per-layer KV-cache spec of a 2,147,483,648-"
                                               r"layer model would need about 512\.00 GiB"):
        tp.SimConfig.from_hf_config(tmp_path, pipeline_parallel_size=2**30, max_model_len=4096)
    assert estimate_num_parameters({**QWEN3_8B, "num_hidden_layers": 2**31}) > 2**31
    assert kv_cache.fullest_stage_layers(2**31, 2**30) == 2
    assert kv_cache.fullest_stage_layers(30, 4) == max(kv_cache.pipeline_layers(30, 4)) == 8
    # lists of ranks are bounded in words before the memory guard (issue 40: at once)
    with pytest.raises(ValueError, match=r"num_layers=2,147,483,648 is more layers"):
        kv_cache.pipeline_layers(2**31, 2**31 - 1)
    with pytest.raises(ValueError, match=r"pp=2,147,483,647 ranks would be listed.*"
                                         r"fullest_stage_layers"):
        kv_cache.pipeline_layers(2**31 - 1, 2**31 - 1)
    with pytest.raises(ValueError, match=r"dp=1,000,000,000,000 ranks would be listed.*r % dp"):
        kv_cache.data_parallel_split(3, 10**12)
    monkeypatch.setenv("TOKPOOL_MEMORY_LIMIT", "256M")
    with pytest.raises(MemoryLimitError, match=r"data_parallel_split\(num_requests=16,777,216, "
                                               r"dp=1,048,576\).*r % dp"):
        kv_cache.data_parallel_split(2**24, 2**20)


@pytest.mark.parametrize("damage", ["empty", "short length", "header too large", "bad JSON",
                                    "offsets past the data"])
def test_a_damaged_prm_file_is_named_with_its_size_and_the_fix(damage, tmp_path):
    file = tmp_path / "adapter.safetensors"
    file.write_bytes({
        "empty": b"", "short length": b"\x08\x00\x00",
        "header too large": _safetensors({}, length=2**40),
        "bad JSON": _safetensors(b"{not json"),
        "offsets past the data": _safetensors(
            {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 64]}}, b"\0" * 16),
    }[damage])
    with pytest.raises(ValueError, match=rf"the tokpool probe or PRM adapter {file} is damaged "
                                         r"\([\d,]+ bytes; SafetensorError.*git checkout -- "
                                         r"data/prm"):
        tp.load_prm(file)


def test_score_records_names_the_record_and_the_missing_key(prm):
    with pytest.raises(ValueError, match=r"record 1 has no 'completions' \(it has \['prompt'\]"
                                         r"\); each record needs 'prompt'"):
        prm.score_records([{"prompt": "2+2?", "completions": ["4"]}, {"prompt": "3+3?"}])
    with pytest.raises(TypeError, match=r"record 0 must be a dict"):
        prm.score_records(["2+2?"])
    with pytest.raises(TypeError, match=r"records must be a list of dataset records"):
        prm.score_records({"prompt": "2+2?", "completions": ["4"]})


@pytest.mark.parametrize(("args", "error", "match"), [
    ((None, ["4"]), TypeError, r"problem must be the question as a str, got None"),
    (("2+2?", None), TypeError, r"steps must be a list of strings, one per step, got None"),
    (("2+2?", "4. 5."), TypeError, r"steps must be a list of strings, one per step, not one "
                                   r"string"),
    (("2+2?", ["4", None]), ValueError, r"steps \[1\] are empty or not strings"),
])
def test_score_names_the_problem_and_the_steps(prm, args, error, match):
    with pytest.raises(error, match=match):
        prm.score(*args)
    with pytest.raises(ValueError, match=r"threshold must be a finite number, got nan"):
        prm.score("2+2?", ["4"], threshold=math.nan)


# --- given schedules ------------------------------------------------------------------------


def _run(plan, lens=(20, 20), **engine):
    cfg = tp.SimConfig(hidden_size=8, **({"max_num_batched_tokens": 64, "max_num_seqs": 8}
                                         | engine))
    return tp.simulate(list(lens), cfg, mode="analytic", schedule=plan)


def _whole(index, chunks, lens=(20, 20), **kw):
    return ScheduledStep(index, tuple(chunks),
                         tuple(r for r, _, stop in chunks if stop == lens[r]), **kw)


@pytest.mark.parametrize(("plan", "engine", "match"), [
    ([_whole(0, [(0, 0, 20), (1, 0, 20)])], {"kv_cache_blocks": 4},
     r"step 0: request \d starts, but its whole prompt \(20 tokens, 2 KV blocks\) does not fit "
     r"the free blocks \(kv_cache_blocks=4, 3 usable"),
    ([_whole(0, [(0, 0, 16)]), _whole(1, [(0, 16, 20), (1, 0, 16)]), _whole(2, [(1, 16, 20)])],
     {"kv_cache_blocks": 4, "max_num_batched_tokens": 20},
     r"step 1: request 1 starts, but its whole prompt"),
    ([_whole(0, [(0, 0, 20), (1, 0, 20)])], {"max_num_seqs": 1},
     r"step 0: request \d starts while 1 requests run .* max_num_seqs=1 allows"),
    ([_whole(0, [(0, 0, 10)]), _whole(1, [(0, 10, 20), (1, 0, 20)])], {"max_num_seqs": 1},
     r"step 1: request 1 starts while 1 requests run"),
    ([_whole(0, [(0, 0, 20), (1, 0, 20)])], {"long_prefill_token_threshold": 8},
     r"step 0: request 0 takes 20 tokens, more than long_prefill_token_threshold=8, while 1 "
     r"other request\(s\) run or wait"),
])
def test_a_given_schedule_is_checked_against_every_limit_of_the_engine(plan, engine, match):
    with pytest.raises(ValueError, match=match):
        _run(plan, **engine)


def test_a_lone_request_may_pass_the_threshold_as_vllm_lifts_it():
    result = _run([_whole(0, [(0, 0, 20)], lens=(20,))], lens=(20,),
                  long_prefill_token_threshold=8)
    assert result.schedule[0].chunks == ((0, 0, 20),) and result.schedule[0].kv_blocks == 2


@pytest.mark.parametrize(("step", "match"), [
    (ScheduledStep(0, ((0, 0.0, 20.0), (1, 0, 20)), (0, 1)),
     r"chunk \(0, 0.0, 20.0\) must be \(request, start, stop\): three whole numbers"),
    (ScheduledStep(0, ((0, False, 20), (1, 0, 20)), (0, 1)), r"chunk \(0, False, 20\)"),
    (ScheduledStep(0, ((0, 20), (1, 0, 20)), (0, 1)), r"chunk \(0, 20\) must be"),
    (ScheduledStep(0, None, ()), r"chunks must be a tuple of \(request, start, stop\)"),
    (ScheduledStep(0, ((0, 0, 20), (1, 0, 20)), None), r"finished must be a tuple"),
    (ScheduledStep(0, ((0, 0, 20), (1, 0, 20)), (0.0, 1.0)), r"finished must hold whole"),
    (ScheduledStep(0, ((0, 0, 20), (1, 0, 20)), (0, 1), None), r"preempted must be a tuple"),
    (ScheduledStep(0.5, ((0, 0, 20), (1, 0, 20)), (0, 1)), r"index must be a whole number"),
    (ScheduledStep(0, ((0, 0, 20), (1, 0, 20)), (0, 1), (), -3), r"kv_blocks must be a whole"),
])
def test_a_given_schedule_holds_whole_numbers_only(step, match):
    with pytest.raises(TypeError, match=match):
        _run([step])


def test_kv_blocks_given_must_be_the_ones_the_chunks_hold():
    with pytest.raises(ValueError, match=r"step 0: kv_blocks=999, but its requests hold 4 "
                                         r"blocks of 16 tokens"):
        _run([ScheduledStep(0, ((0, 0, 20), (1, 0, 20)), (0, 1), (), 999)])
    counted = _run([ScheduledStep(0, ((0, 0, 20), (1, 0, 20)), (0, 1))])  # 0: not given
    assert counted.schedule[0].kv_blocks == 4


def test_the_check_replays_the_schedulers_own_rules():
    for rule in ("kv_blocks_for", "long_prefill_cap", "may_admit", "holds_slot"):
        assert getattr(given, rule) is getattr(scheduler, rule)  # the same functions, not copies
    rng = np.random.default_rng(0)
    for _ in range(200):  # tokpool's own schedules come back as they were, blocks included
        lens = [int(n) for n in rng.integers(1, 60, size=int(rng.integers(1, 5)))]
        block = int(rng.choice([1, 4, 16]))
        engine = {"max_num_batched_tokens": int(rng.integers(8, 64)),
                  "max_num_seqs": int(rng.integers(1, 4)), "enable_chunked_prefill": True,
                  "long_prefill_token_threshold": int(rng.choice([0, 4, 16])) or None,
                  "kv_cache_blocks": max(-(-n // block) for n in lens) + int(rng.integers(1, 6)),
                  "block_size": block, "async_scheduling": bool(rng.integers(2))}
        own = scheduler.schedule(lens, **engine)
        assert given.check_schedule(own, lens, **engine) == own


# --- scheduler="vllm" ------------------------------------------------------------------------


def test_numpy_and_tensor_arrival_steps_are_taken_as_prompt_lengths_are():
    cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=16)
    plain = tp.simulate([20, 6, 9], cfg, mode="analytic", arrival_steps=[0, 1, 1])
    for steps in (np.array([0, 1, 1]), torch.tensor([0, 1, 1])):
        again = tp.simulate(np.array([20, 6, 9]), cfg, mode="analytic", arrival_steps=steps)
        assert again.schedule == plain.schedule
    with pytest.raises(ValueError, match=r"arrival_steps must be whole numbers >= 0 .*\(1, 1.5\)"):
        tp.simulate([20, 6, 9], cfg, mode="analytic", arrival_steps=[0, 1.5, 1])


def test_a_workload_vllms_scheduler_cannot_hold_is_refused_before_vllm_builds(monkeypatch):
    from tokpool.sim.vllm_run import scheduler as run

    monkeypatch.setattr(run, "_vllm", lambda: pytest.fail("vLLM was started"))
    cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=2**28)
    # tokpool's scheduler keeps vLLM's block tables too (prefix caching, sliding windows): a
    # 2**31-token prompt's 134M blocks are refused before one is made, a 2**24-token one runs
    with pytest.raises(MemoryLimitError, match=r"tokpool's scheduler on 1 prompt "
                                               r"\(2,147,483,647 tokens\): vLLM's block tables"):
        tp.simulate([2**31 - 1], cfg, mode="analytic")
    assert tp.simulate([2**24], cfg.replace(max_num_batched_tokens=2**21),
                       mode="analytic").summary()["num_steps"] == 8
    with pytest.raises(ValueError, match=r"makes 134,217,728 KV blocks of 16 tokens, each "
                                         r"hashed.*TOKPOOL_MAX_STEPS.*scheduler='tokpool'"):
        tp.simulate([2**31 - 1], cfg, mode="analytic", scheduler="vllm")
    monkeypatch.setenv("TOKPOOL_MAX_STEPS", "off")  # no work bound: the memory guard still
    monkeypatch.setenv("TOKPOOL_MEMORY_LIMIT", "1G")
    with pytest.raises(MemoryLimitError, match=r"scheduler='vllm' on 1 prompt \(2,147,483,647 "
                                               r"tokens: vLLM's Request and BlockPool.*"
                                               r"scheduler='tokpool'"):
        tp.simulate([2**31 - 1], cfg, mode="analytic", scheduler="vllm")


def test_a_vllm_target_device_vllm_cannot_run_on_is_named(monkeypatch):
    from tokpool.pooler import vllm_bridge

    with pytest.raises(ValueError, match=r"VLLM_TARGET_DEVICE='garbage' is not a platform vLLM "
                                         r"0.33.0 knows: its built-in platforms are \['cuda', "
                                         r"'rocm', 'tpu', 'xpu', 'cpu'\]"):
        vllm_bridge.check_target_device("garbage")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"VLLM_TARGET_DEVICE='cuda' but this torch .* sees "
                                             r"no GPU.*Device string must not be empty"):
            vllm_bridge.check_target_device("cuda")
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "garbage")
    with pytest.raises(ValueError, match="VLLM_TARGET_DEVICE='garbage'"):
        vllm_bridge.prepare_vllm_environment()
    vllm_bridge.check_target_device("CPU")  # vLLM lower-cases it


# --- engine_check ---------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"prompts": 5}, r"prompts must be a list of texts or token-id lists, got 5 \(int\)"),
    ({"prompts": "hello"}, r"prompts must be a list of texts"),
    ({"prompts": []}, r"prompts is empty"),
    ({"prompts": ["hi", ""]}, r"prompts\[1\] is empty"),
    ({"chunk_sizes": 16}, r"chunk_sizes must be a list of thresholds"),
    ({"max_num_batched_tokens": "64"}, r"max_num_batched_tokens must be a whole number from 1"),
    ({"max_num_batched_tokens": 0}, r"max_num_batched_tokens must be a whole number from 1 to "
                                    r"2,147,483,647, got 0"),
    ({"progress": "yes"}, r"progress must be a callable"),
])
def test_engine_check_arguments_are_checked_before_anything_starts(kwargs, match, monkeypatch):
    from tokpool.engine import check as engine_check

    monkeypatch.setattr(engine_check, "engine_python",
                        lambda *a: pytest.fail("looked for vLLM before checking the arguments"))
    with pytest.raises(engine_check.EngineCheckError, match=match):
        engine_check.engine_check(**kwargs)


# --- explorers ------------------------------------------------------------------------------


def test_explorer_arguments_are_refused_by_name(tiny, prm, tmp_path):
    cases = [
        (lambda: tp.token_explorer({"a": 1}, "hi"), TypeError,
         r"model must be a tp.PoolingModel \(tp.load_model\(...\)\), got dict"),
        (lambda: tp.token_explorer(str(tmp_path / "missing"), "hi"), TypeError,
         r"got str .*load it first with tp.load_model"),
        (lambda: tp.memory_explorer(prompt_len=(1024,)), ValueError,
         r"prompt_len must be a \(shortest, longest\) pair"),
        (lambda: tp.memory_explorer(prompt_len=1024), TypeError,
         r"prompt_len must be a \(shortest, longest\) pair, got 1024"),
        (lambda: tp.step_reward_explorer(prm, "2+2?", "4. 5."), TypeError,
         r"steps must be a list of strings, one per step, not one string"),
        (lambda: tp.token_explorer(tiny, "hi", layer=1.5), TypeError,
         r"layer must be a whole number from -3 to 2"),
        (lambda: tp.token_explorer(tiny, "hi", layer=10**9), ValueError,
         r"layer must be a whole number from -3 to 2, got 1,000,000,000 \(0 = embeddings"),
        (lambda: tp.token_explorer(tiny, "hi", layer=-100), ValueError,
         r"layer must be a whole number from -3 to 2, got -100"),
        (lambda: tp.ownership_explorer([20, None, 9]), TypeError,
         r"prompt_lens\[1\] must be a whole number >= 1, got None"),
        (lambda: tp.step_reward_explorer(prm, "2+2?", ["4", "5"], true_first_error=5),
         ValueError, r"true_first_error must be a whole number from -1 to 1, got 5"),
        (lambda: tp.step_reward_explorer(None, "2+2?", ["4"]), TypeError,
         r"prm must be a process reward model with score\(problem, steps\)"),
        (lambda: tp.step_reward_explorer("probe", "2+2?", ["4"]), TypeError,
         r"load it first: tp.step_reward_explorer\(tp.load_prm\('probe'\)"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()


def test_a_prm_whose_threshold_is_nan_is_refused(prm, monkeypatch):
    monkeypatch.setattr(prm, "threshold", math.nan)
    with pytest.raises(ValueError, match=r"prm.threshold \(the threshold slider's start\) must "
                                         r"be a finite number from 0 to 1, got nan"):
        tp.step_reward_explorer(prm, "2+2?", ["4"])


def test_menu_and_slider_values_set_from_code_are_refused_in_the_panel(tiny, prm):
    mem = tp.memory_explorer(policies=("clone",))
    mem.hardware.value = "TPU"  # ipywidgets: TraitError "Invalid selection: value not found"
    assert mem.hardware.value == "H100 SXM" and mem.view is None
    assert mem.error.startswith("hardware: 'TPU' is not one of its choices ['H100 SXM'")
    mem.hardware.value = "H200"  # a valid value brings the figure back
    assert mem.error is None and mem.view is not None
    tokens = tp.token_explorer(tiny, "hello world")
    tokens.layer.value = 10**9  # the slider would clamp it to the last layer without a word
    assert tokens.layer.value == 2 and tokens.view is None
    assert tokens.error.startswith("layer must be from 0 to 2; 1000000000 is out of range")
    rewards = tp.step_reward_explorer(prm, "2+2?", ["4", "5"])
    rewards.threshold.value = math.nan
    assert rewards.threshold.value == 0.5 and "threshold: nan is not a number" in rewards.error
    own = tp.ownership_explorer([20, 6, 9], budget=16, hidden_size=8)
    own.policy.value = "copy"
    assert own.policy.value == "clone"
    assert own.error == "policy: 'copy' is not one of its choices ['legacy', 'clone', " \
                        "'prealloc', 'offload']"
    own.async_scheduling.value = "yes"
    assert own.async_scheduling.value is False and "async scheduling: 'yes' is not True" \
        in own.error


# --- model folders --------------------------------------------------------------------------


def test_a_checkpoint_without_its_weights_is_refused_not_filled_at_random(tiny, tmp_path):
    from tokpool.models.integrity import DamagedModelError

    (tmp_path / "config.json").write_text(json.dumps(tiny.hf_model.config.to_dict()))
    (tmp_path / "model.safetensors").write_bytes(_safetensors({"__metadata__": {"a": "b"}}))
    with pytest.raises(DamagedModelError, match=r"21 of the model's weights are not in its "
                                                r"checkpoint \(model.safetensors in .*random"):
        tp.load_model(tmp_path)


def test_an_8_byte_gguf_stub_is_named(tmp_path):
    from tokpool.models.integrity import DamagedModelError

    stub = tmp_path / "stub.gguf"
    stub.write_bytes(b"GGUF\x03\x00\x00\x00")
    with pytest.raises(DamagedModelError, match=rf"cannot read the GGUF file {stub} \(8 bytes; "
                                                r"error: .*damaged or truncated"):
        tp.load_model(stub, cache_dir=tmp_path / "cache")


# --- configs, export, environment -----------------------------------------------------------


def test_kv_cache_dtype_float32_is_refused_on_every_path():
    words = r"kv_cache_dtype 'float32' is not one of vLLM 0.33.0's --kv-cache-dtype values"
    with pytest.raises(ValueError, match=words + r" \(vLLM has no float32 KV cache"):
        tp.SimConfig.for_model("Qwen3-Embedding-8B", kv_cache_dtype="float32")
    with pytest.raises(ValueError, match=words):
        tp.SimConfig(hidden_size=8, kv_cache_dtype="float32")  # no model: checked all the same
    with pytest.raises(ValueError, match=r"--kv-cache-dtype float32: 'float32' is not one of"):
        tp.SimConfig.from_vllm_args(f"{QWEN} --kv-cache-dtype float32")
    assert tp.SimConfig.for_model("Qwen3-Embedding-8B", kv_cache_dtype="fp8") \
        .kv_bytes_per_token == 2 * 36 * 8 * 128


def test_a_budget_of_10_30_is_refused_before_step_memory_overflows():
    with pytest.raises(ValueError, match=r"max_num_batched_tokens must be at most "
                                         r"2,147,483,647, got 1.0e\+30"):
        tp.SimConfig(hidden_size=8, max_num_batched_tokens=10**30)


def test_a_damaged_data_file_names_the_file_and_the_line(tmp_path, monkeypatch):
    (tmp_path / "prm").mkdir()
    (tmp_path / "prm" / "test.jsonl").write_text('{"prompt": "2+2?"}\n{broken\n')
    monkeypatch.setenv("TOKPOOL_DATA_DIR", str(tmp_path))
    with pytest.raises(ValueError, match=r"test.jsonl, line 2, is not JSON \(Expecting property "
                                         r"name .*git checkout -- data/prm"):
        tp.load_prm_dataset("test")
    monkeypatch.setenv("TOKPOOL_DATA_DIR", str(tmp_path / "prm" / "test.jsonl"))
    with pytest.raises(ValueError, match=r"TOKPOOL_DATA_DIR=.*test.jsonl' is a file, not a "
                                         r"folder"):
        tp.load_prm("probe")


def test_a_view_checks_its_table_and_save_checks_its_path(tmp_path):
    from tokpool.widgets.view import View

    with pytest.raises(TypeError, match=r"View table must be a pandas.DataFrame or None, got "
                                        r"list"):
        View(html="", table=[1, 2])
    with pytest.raises(ValueError, match=r"png is not PNG data"):
        View(html="", png=b"not a png")
    view = View(html="<b>hi</b>")
    with pytest.raises(ValueError, match=r"the folder .*missing' does not exist"):
        view.save(tmp_path / "missing" / "x.html")
    with pytest.raises(ValueError, match=r"is a folder; give a file name in it"):
        view.save(tmp_path)


def test_a_model_cache_that_is_a_file_is_named(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    stub = tmp_path / "stub.gguf"
    stub.write_bytes(b"GGUF\x03\x00\x00\x00")
    monkeypatch.setenv("TOKPOOL_CACHE", str(blocker))
    with pytest.raises(ValueError, match=r"cannot create the model cache folder .*"
                                         r"\(TOKPOOL_CACHE=.*file'.*set TOKPOOL_CACHE"):
        tp.load_model(stub)
