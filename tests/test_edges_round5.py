"""Issue 40's edges, one named test each (the vLLM-side checks of the same items are in
``tests/test_parity_edges.py``; the hostile generator's area "round-5 edges" repeats them)."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest
import torch

import tokpool as tp
from tokpool.cli import main as cli_main
from tokpool.sim.vllm_rules import cudagraph, engine_checks, kv_cache
from tokpool.sim.vllm_rules.architectures import uses_mla
from tokpool.sim.vllm_rules.args import shell_line
from tokpool.sim.vllm_rules.hf_config import MAX_CONFIG_FILE_BYTES

#: Issue 40's workload: chunked prefill off, threshold 64, a cache that preempts.
ISSUE40 = {"max_num_seqs": 2, "max_num_batched_tokens": 161, "long_prefill_token_threshold": 64,
           "max_model_len": 161, "kv_cache_blocks": 12, "block_size": 16,
           "enable_chunked_prefill": False, "hidden_size": 16}
LENS = [99, 89, 6, 119, 91, 44]
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 512,
         "torch_dtype": "float32"}
BERT = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
        "vocab_size": 1000, "max_position_embeddings": 512, "torch_dtype": "float32"}
QWEN = "vllm serve Qwen/Qwen3-Embedding-8B"


# --- 1. a schedule vLLM makes: chunked prefill off, a threshold, preemption ---------------------


def test_an_unchunked_split_under_preemption_runs_in_every_mode():
    """The issue's workload raised ``KeyError: 1`` in the counting backend's ``_preempt``: a
    request split by the threshold had its (empty) pooling state dropped with its handed-over
    chunk. Now tensor, analytic and a given schedule agree byte for byte; the split requests
    come back short (their last chunk alone, as vLLM's AllPool hands it over) and say why."""
    cfg = tp.SimConfig(**ISSUE40)
    tensor = tp.simulate(LENS, cfg, mode="tensor")
    counted = tp.simulate(LENS, cfg, mode="analytic")
    given = tp.simulate(LENS, cfg, mode="tensor", schedule=counted.schedule)
    assert sum(len(s.preempted) for s in tensor.schedule) == 2
    for run in (counted, given):
        pd.testing.assert_frame_equal(tensor.steps, run.steps)
        pd.testing.assert_frame_equal(tensor.requests, run.requests)
        pd.testing.assert_frame_equal(tensor.chunks, run.chunks)
    for a, b in zip(tensor.outputs, given.outputs, strict=True):
        assert torch.equal(a, b)
    req = tensor.requests
    assert tensor.corrupted == [0, 1, 3, 4]
    assert req["delivered_rows"].tolist() == [35, 25, 6, 55, 27, 44]  # each one's last chunk
    assert req["num_preemptions"].tolist() == [0, 1, 0, 0, 1, 0]
    story = tensor.explain()
    assert "only its last chunk, tokens 64–88, is delivered → CORRUPTED" in story[1]
    assert "preempted 1 time" in story[1] and story[2].endswith("→ intact.")


def test_a_lone_unchunked_request_is_never_split_and_closed_form_agrees():
    """The threshold is lifted for a lone request (``Scheduler.schedule``), so the closed
    form (one request) and the loop agree on a config that splits several."""
    cfg = tp.SimConfig(**{**ISSUE40, "kv_cache_blocks": None, "max_model_len": None})
    closed = tp.simulate([150], cfg, mode="closed_form")
    counted = tp.simulate([150], cfg, mode="analytic")
    assert counted.schedule[0].chunks == ((0, 0, 150),) and counted.corrupted == []
    assert closed.peak_pooling_bytes == counted.peak_pooling_bytes


def test_a_sequence_task_split_without_chunking_reads_its_last_row():
    """LAST pools the last scheduled row, the prompt's own: a split request is intact."""
    cfg = tp.SimConfig(**ISSUE40, task="embed", enable_prefix_caching=False)
    run = tp.simulate(LENS, cfg, mode="tensor")
    assert run.corrupted == [] and all("CORRUPTED" not in s for s in run.explain())


def test_cls_pooling_on_a_partial_prefill_is_refused_as_vllm_fails():
    """vLLM's CLSPool (and MeanPool) raise on any step with a partial prefill; a BERT encoder
    never chunks, but the threshold still splits a prompt while others wait."""
    cfg = tp.SimConfig.from_hf_config(BERT, task="embed", max_num_batched_tokens=512,
                                      max_num_seqs=4, long_prefill_token_threshold=64)
    for mode in ("tensor", "analytic"):
        with pytest.raises(engine_checks.EngineRefusal, match=r"CLSPool\.forward") as err:
            tp.simulate([300, 200, 100], cfg, mode=mode)
        assert "long_prefill_token_threshold" in str(err.value)
    assert tp.simulate([300], cfg, mode="analytic").corrupted == []  # alone: not split


# --- 2. the start-up refusal on the bare path -------------------------------------------------


def test_a_model_less_kv_cache_below_one_request_is_refused_by_block_count():
    """``ceil(1024 / 16) = 64`` blocks are needed, 61 blocks leave 60 past the null block."""
    with pytest.raises(engine_checks.EngineRefusal, match=r"64 blocks of KV cache are needed.*"
                                                          r"\(60 blocks\).*960") as err:
        tp.SimConfig(max_model_len=1024, block_size=16, kv_cache_blocks=61, hidden_size=16)
    assert err.value.follows == "kv_cache_planning._check_enough_kv_cache_memory"
    tp.SimConfig(max_model_len=1024, block_size=16, kv_cache_blocks=65, hidden_size=16)
    with pytest.raises(engine_checks.EngineRefusal, match="1024"):  # one block short
        tp.SimConfig(max_model_len=1024, block_size=16, kv_cache_blocks=64, hidden_size=16)
    looked = tp.SimConfig(max_model_len=1024, block_size=16, kv_cache_blocks=61,
                          hidden_size=16, as_if=True)
    assert len(looked.looked_past) == 1
    assert tp.simulate([900], looked, mode="analytic").looked_past == list(looked.looked_past)


# --- 3. bad input that waited or misnamed -------------------------------------------------------


def test_a_2_gb_config_json_is_refused_before_it_is_read(tmp_path):
    with open(tmp_path / "config.json", "wb") as f:
        f.truncate(2 << 30)  # sparse: no disk used
    with pytest.raises(ValueError, match=r"2,147,483,648 bytes, larger than any config file"):
        tp.SimConfig.from_hf_config(tmp_path)
    ex = tp.memory_explorer(prompt_len=(1024, 1 << 15))
    ex.your_model.value = str(tmp_path)
    assert ex.view is None and "larger than any config file" in ex.error
    assert MAX_CONFIG_FILE_BYTES == 16 << 20


def test_engine_check_refuses_bad_input_before_looking_for_an_engine(tmp_path, monkeypatch):
    """A Python without vLLM is never asked: each input is named first."""
    from tokpool.engine import check as ec

    def no_engine(*args, **kwargs):
        raise AssertionError("an engine was looked for")

    monkeypatch.setattr(ec, "engine_unavailable_reason", no_engine)
    python = sys.executable
    with pytest.raises(ec.EngineCheckError, match=r"model: .* folder without a config.json"):
        ec.engine_check(str(tmp_path), python=python)
    with pytest.raises(ec.EngineCheckError, match=r"prompts\[1\] has token ids outside "
                                                  r"smollm2-135m's vocabulary \[0, 49152\)"):
        ec.engine_check(prompts=[[1, 2], [3, 49152]], python=python)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ec.EngineCheckError, match=r"model: .* not a model tokpool can load"):
        ec.engine_check(str(tmp_path), python=python)


def test_engine_check_cli_names_the_folder_first(tmp_path, capsys):
    assert cli_main(["engine-check", str(tmp_path), "--python", sys.executable]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "folder without a config.json" in err[0]


@pytest.mark.real_model
def test_engine_check_refuses_a_task_the_model_does_not_serve(monkeypatch):
    from tokpool.engine import check as ec

    monkeypatch.setattr(ec, "engine_unavailable_reason", lambda *a, **k: "looked for")
    with pytest.raises(ec.EngineCheckError, match=r"task: smollm2-135m does not serve task "
                                                  r"'token_classify'"):
        ec.engine_check(prompts=[[1, 2, 3]], task="token_classify", python=sys.executable)


def test_a_serve_line_is_read_as_bash_reads_it(capsys):
    """bash joins backslash-newline continuations, and a line that ends in a backslash
    continues into nothing (bash waits for the next line); an unclosed quote is named."""
    plain = tp.SimConfig.from_vllm_args(f"{QWEN} --max-num-seqs 4 --max-model-len 4096")
    assert tp.SimConfig.from_vllm_args(f"{QWEN} --max-num-seqs 4 \\") == \
        tp.SimConfig.from_vllm_args(f"{QWEN} --max-num-seqs 4")
    assert tp.SimConfig.from_vllm_args(
        f"{QWEN} \\\n  --max-num-seqs 4 \\\n  --max-model-len 4096 \\") == plain
    assert shell_line("a \\\\") == "a \\\\"  # an escaped backslash stays (bash: a literal \)
    with pytest.raises(ValueError, match=r"a quote \(\"\) is opened and never closed"):
        tp.SimConfig.from_vllm_args(f'{QWEN} --max-num-seqs "4')
    assert cli_main(["simulate", "--prompt-lens", "100", "--vllm-args",
                     f"{QWEN} --max-model-len '4k"]) == 2
    assert "a quote (') is opened and never closed" in capsys.readouterr().err


def test_kv_lora_rank_means_mla_only_for_the_model_types_vllm_builds_with_it():
    """vLLM's ``ModelConfig.use_mla``: the DeepSeek-style model types with ``kv_lora_rank``;
    ``LlamaForCausalLM`` never reads the key and caches K and V per head."""
    def kv(extra):
        return tp.SimConfig.from_hf_config({**LLAMA, **extra}, runner="pooling",
                                           max_num_batched_tokens=512).kv_bytes_per_token

    # K and V x 2 layers x 2 KV heads x 16 dims x 2 B (float32 is served as float16)
    assert kv({"kv_lora_rank": 512}) == kv({}) == 2 * 2 * 2 * 16 * 2
    assert not uses_mla({**LLAMA, "kv_lora_rank": 512})
    assert uses_mla({"model_type": "kimi_k2", "kv_lora_rank": 512})
    assert not uses_mla({"model_type": "deepseek_v3", "kv_lora_rank": None})
    assert not uses_mla({"model_type": "deepseek_v2", "kv_lora_rank": 512, "is_causal": False})
    with pytest.raises(ValueError, match="multi-head latent attention"):
        tp.SimConfig.from_hf_config({**LLAMA, "model_type": "deepseek_v3", "kv_lora_rank": 512})


@pytest.mark.parametrize(("call", "match"), [
    (lambda: kv_cache.data_parallel_split(10, dp=10**8), r"dp=100,000,000 ranks .*r % dp"),
    (lambda: kv_cache.data_parallel_split(10**9, dp=2), r"num_requests=1,000,000,000"),
    (lambda: kv_cache.pooler_ranks(tp=10**9), r"tp=1,000,000,000 ranks"),
    (lambda: kv_cache.pipeline_layers(10**9, 10**8), r"pp=100,000,000 ranks.*fullest_stage"),
    (lambda: cudagraph.cudagraph_capture_sizes(2**31 - 1), r"max_capture_size=2,147,483"),
    (lambda: engine_checks.check_tensor_parallel("m", 10**15 + 1, 1, 2),
     r"divisible by tensor parallel size"),
])
def test_rule_functions_answer_bad_sizes_at_once(call, match):
    with pytest.raises(ValueError, match=match):
        call()
    assert kv_cache.fullest_stage_layers(2**31, 2**30) == 2  # formulas take any size
    assert len(kv_cache.data_parallel_split(10, dp=4)) == 4


def test_the_tp_hint_lists_divisors_of_huge_head_counts():
    with pytest.raises(engine_checks.EngineRefusal, match=r"Use -tp in \[1, 3, 5, 15\]"):
        engine_checks.check_tensor_parallel("m", 15, 1, 2)
    with pytest.raises(engine_checks.EngineRefusal, match=r"Use -tp in \[1, 1000000000000001"
                                                          r"|Use -tp in \[1, "):
        engine_checks.check_tensor_parallel("m", 10**15 + 1, 1, 2)


def test_the_sparse_config_case_is_in_the_hostile_area():
    """The generator covers this round's surface (its area is one of test_hostile_surface's)."""
    from tests.test_hostile_surface import AREAS

    assert "round-5 edges" in AREAS
    assert json.dumps(ISSUE40)  # the workload the area runs is this file's
