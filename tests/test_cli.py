"""The `tokpool` command line, driven through its entry point."""

import json
import subprocess
import sys

import pytest

from tokpool.cli import CLIError, main, parse_size, parse_sizes


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_sizes_follow_vllm_suffixes():
    assert parse_size("512") == 512
    assert parse_size("32k") == 32_000 and parse_size("32K") == 32_768
    assert parse_size("1M") == 1_048_576 and parse_size("1m") == 1_000_000
    assert parse_size("1.5k") == 1_500
    assert parse_sizes("30000,512") == [30_000, 512]
    points = parse_sizes("1K..1M:11")
    assert points[0] == 1024 and points[-1] == 1_048_576 and len(points) == 11
    assert points == sorted(points)
    for bad in ("abc", "0", "1.5", "-3k"):
        with pytest.raises(CLIError):
            parse_size(bad)
    with pytest.raises(CLIError, match="backwards"):
        parse_sizes("1M..1k")


def test_gate_current_serves_decoder_token_embed(capsys):
    code, out, _ = run(capsys, "gate", "decoder_embedding", "--task", "token_embed")
    assert code == 0
    assert "selected task: token_embed" in out and "served: ['embed', 'token_embed']" in out


@pytest.mark.parametrize("policy", ["pre_50931", "legacy"])  # 'legacy': the old name
def test_gate_legacy_refuses_with_vllms_message_on_stderr(capsys, policy):
    code, _, err = run(capsys, "gate", "decoder_embedding", "--task", "token_embed",
                         "--policy", policy)
    assert code == 2
    assert "supports pooling tasks ['classify', 'embed'], but this model selects 'token_embed'" \
        in err


def test_gate_unknown_model_says_what_exists(capsys):
    code, _, err = run(capsys, "gate", "no-such-model-xyz")
    assert code == 2 and "error" in err and "smollm2-135m" in err


def test_simulate_prints_steps_summary_and_writes_a_trace(capsys, tmp_path):
    trace = tmp_path / "trace.json"
    # a 512-token budget: every step replays a CUDA graph, so legacy's kept views are rewritten
    code, out, _ = run(capsys, "simulate", "--prompt-lens", "6k,512", "--policy", "legacy",
                       "--async", "--hidden-size", "64", "--budget", "512",
                       "--trace", str(trace), "--mode", "tensor")
    assert code == 0
    assert "pool_peak_bytes" in out and "peak pooling bytes" in out
    assert "corrupted requests: [0" in out  # legacy corrupts the multi-chunk prompt
    events = json.loads(trace.read_text())
    assert events["traceEvents"]


def test_simulate_analytic_with_a_model_preset(capsys, tmp_path):
    csv = tmp_path / "steps.csv"
    code, out, _ = run(capsys, "simulate", "--prompt-lens", "30000,512", "--policy", "clone",
                       "--async", "--model-preset", "Qwen3-Embedding-8B", "--hardware", "H200",
                       "--csv", str(csv))
    assert code == 0
    assert "roofline ESTIMATE" in out and "corrupted requests (predicted): none" in out
    assert csv.read_text().startswith("step,")


def test_simulate_errors_go_to_stderr(capsys):
    code, _, err = run(capsys, "simulate", "--prompt-lens", "0,5")
    assert code == 2 and "positive" in err
    code, _, err = run(capsys, "simulate", "--prompt-lens", "100", "--policy", "fast")
    assert code == 2 and "unknown retention policy 'fast'" in err
    code, _, err = run(capsys, "simulate", "--prompt-lens", "5000", "--no-chunked-prefill",
                       "--budget", "2048")
    assert code == 2 and "5000" in err


def test_sweep_writes_csv_and_plot(capsys, tmp_path):
    out_csv, png = tmp_path / "sweep.csv", tmp_path / "sweep.png"
    code, out, _ = run(capsys, "sweep", "--prompt-lens", "1K..64K:7", "--policies",
                       "clone,prealloc,offload", "--model-preset", "Qwen3-Embedding-0.6B",
                       "--max-model-len", "64K",  # past the model's 32,768, on purpose
                       "--as-if", "--hardware", "L4", "--out", str(out_csv), "--plot", str(png),
                       "--no-progress")
    assert code == 0
    assert "AS IF (--as-if): vLLM would refuse this run: User-specified max_model_len" in out
    assert out_csv.read_text().count("\n") == 1 + 7 * 3 * 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "peak pooling bytes" in out


def test_sweep_rejects_unknown_policy(capsys):
    code, _, err = run(capsys, "sweep", "--prompt-lens", "1k", "--policies", "clone,zip")
    assert code == 2 and "unknown policy 'zip'" in err


def test_embed_writes_safetensors(capsys, tmp_path):
    from safetensors.torch import load_file

    path = tmp_path / "tokens.safetensors"
    code, out, _ = run(capsys, "embed", "tiny-decoder", "--text", "hello tokpool world",
                       "--chunk-size", "2", "--out", str(path))
    assert code == 0, out
    tensors = load_file(path)
    n = tensors["token_ids"].numel()
    assert tensors["embeddings"].shape[0] == n and n > 1


def test_embed_needs_text(capsys, tmp_path):
    code, _, err = run(capsys, "embed", "tiny-decoder", "--out", str(tmp_path / "x"))
    assert code == 2 and "--text" in err


def test_help_for_every_command():
    for cmd in ("gate", "simulate", "sweep", "embed", "report"):
        result = subprocess.run([sys.executable, "-m", "tokpool.cli", cmd, "--help"],
                                capture_output=True, text=True, check=False)
        assert result.returncode == 0 and "usage: tokpool" in result.stdout


def test_report_executes_notebooks_into_html(capsys, tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    source = "import os\nprint('quick =', os.environ['TOKPOOL_QUICK'])"
    nb.cells = [nbformat.v4.new_code_cell(source)]
    folder = tmp_path / "nbs"
    folder.mkdir()
    nbformat.write(nb, folder / "01_demo.ipynb")
    code, out, _ = run(capsys, "report", "--quick", "--notebooks", str(folder),
                       "--out", str(tmp_path / "reports"))
    assert code == 0, out
    html = (tmp_path / "reports" / "01_demo.html").read_text()
    assert "quick = 1" in html


def test_report_without_notebooks_fails_cleanly(capsys, tmp_path):
    code, _, err = run(capsys, "report", "--notebooks", str(tmp_path / "none"))
    assert code == 2 and "no notebooks found" in err


def test_max_steps_is_the_command_lines_own_bound_in_place_of_the_env_var(capsys, monkeypatch):
    # the README's TOKPOOL_MAX_STEPS bounds the Python API; --max-steps replaces it here
    from tokpool.cli import DEFAULT_MAX_STEPS
    from tokpool.sim.backends.limits import DEFAULT_MAX_RECORDS, MAX_STEPS_ENV

    assert DEFAULT_MAX_STEPS == 200_000 and DEFAULT_MAX_RECORDS == 1_000_000
    monkeypatch.setenv(MAX_STEPS_ENV, "3")  # far below the 13 steps below: not read
    code, out, _ = run(capsys, "simulate", "--prompt-lens", "100", "--budget", "8")
    assert code == 0 and "corrupted requests" in out
    _, out, _ = run(capsys, "simulate", "--help")
    text = " ".join(out.split())
    assert f"replaces the Python API's {MAX_STEPS_ENV} (default 1,000,000" in text


def test_sweep_keeps_its_progress_bar_off_the_table(capsys):
    """The CLI's stdout carries the table; the bar (stdout in a notebook) goes to stderr."""
    code, out, err = run(capsys, "sweep", "--prompt-lens", "1K..8K:3", "--policies", "clone",
                         "--hidden-size", "64", "--mode", "analytic")
    assert code == 0 and "peak pooling bytes" in out
    assert "tokpool sweep" in err and "tokpool sweep" not in out
