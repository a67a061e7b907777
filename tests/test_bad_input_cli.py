"""Bad input never gives a traceback: every ``tokpool`` sub-command with bad arguments (issue 13).

Each case must end with exit status 2 and exactly ONE line on stderr that starts with the
command's name and quotes what was wrong — never a traceback, and never after doing the work.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tokpool as tp
from tokpool.cli import main
from tokpool.guard import MemoryLimitError

READ_ONLY = Path("/proc/tokpool-bad-input.csv")  # a folder no one may create files in


def _cases(tmp: Path) -> list[tuple[str, list[str], str]]:
    """(id, argv, text the one error line must contain); the files are made by ``cases``."""
    folder, missing = tmp / "a-folder", tmp / "missing-folder" / "out.csv"
    binary, notes = tmp / "binary.txt", tmp / "notes.txt"
    sim = ["simulate", "--prompt-lens"]
    return [
        # the top level
        ("no command", [], "required: COMMAND"),
        ("unknown command", ["bogus"], "invalid choice: 'bogus'"),
        # gate
        ("gate without a model", ["gate"], "required: MODEL_KIND|MODEL"),
        ("gate unknown model", ["gate", "no-such-model-xyz"], "'no-such-model-xyz'"),
        ("gate unknown task", ["gate", "decoder_embedding", "--task", "foo"], "['foo']"),
        ("gate unknown policy", ["gate", "decoder_embedding", "--policy", "weird"],
         "invalid choice: 'weird'"),
        ("gate refused by the legacy rule", ["gate", "decoder_embedding", "--task",
                                             "token_embed", "--policy", "legacy"],
         "selects 'token_embed'"),
        # simulate: sizes and ranges
        ("prompt length inf", [*sim, "inf"], "cannot read 'inf' as a size"),
        ("prompt length nan", [*sim, "nan"], "cannot read 'nan' as a size"),
        ("prompt length 1e30", [*sim, "1e30"], "'1e30' is 1,000,000,000,000,000,019,884,"),
        ("negative prompt length", [*sim, "-5"], "size '-5' must be a positive"),
        ("zero prompt length", [*sim, "0,5"], "size '0' must be a positive"),
        ("fractional prompt length", [*sim, "1.5"], "size '1.5' must be a positive"),
        ("no prompt lengths", [*sim, ","], "give at least one prompt length"),
        ("range with 1G points", [*sim, "1..1M:1G"], "asks for 1,073,741,824 points"),
        ("backwards range", [*sim, "1M..1k"], "runs backwards"),
        ("unreadable range", [*sim, "1k..lots"], "cannot read 'lots'"),
        ("too many steps", [*sim, "10M", "--budget", "16"], "at least 655,360 engine steps"),
        # simulate: options
        ("zero budget", [*sim, "100", "--budget", "0"], "--budget: size '0'"),
        ("zero max-num-seqs", [*sim, "100", "--max-num-seqs", "0"],
         "--max-num-seqs: 0 is below the minimum 1"),
        ("text max-num-seqs", [*sim, "100", "--max-num-seqs", "many"], "'many' is not a whole"),
        ("negative max-rows", [*sim, "100", "--max-rows", "-1"], "-1 is below the minimum 0"),
        ("zero max-steps", [*sim, "100", "--max-steps", "0"], "0 is below the minimum 1"),
        ("fractional hidden size", [*sim, "100", "--hidden-size", "1.5"], "size '1.5'"),
        ("unknown dtype", [*sim, "100", "--dtype", "int8"], "unknown dtype 'int8'"),
        ("unknown hardware", [*sim, "100", "--hardware", "H900"], "unknown hardware 'H900'"),
        ("unknown preset", [*sim, "100", "--model-preset", "nope"], "'nope'"),
        ("unknown task", [*sim, "100", "--task", "foo"], "unknown task 'foo'"),
        ("unknown policy", [*sim, "100", "--policy", "fast"], "'fast'"),
        ("unknown mode", [*sim, "100", "--mode", "quantum"], "invalid choice: 'quantum'"),
        ("prompt over the budget unchunked",
         [*sim, "5000", "--no-chunked-prefill", "--budget", "2048"], "5000"),
        # simulate: output paths
        ("csv is a folder", [*sim, "100", "--csv", str(folder)], "is a directory"),
        ("csv folder missing", [*sim, "100", "--csv", str(missing)], "does not exist"),
        ("csv read-only", [*sim, "100", "--csv", str(READ_ONLY)], "cannot be written"),
        ("trace is a folder", [*sim, "100", "--trace", str(folder)], "is a directory"),
        # sweep
        ("sweep without lengths", ["sweep"], "required: --prompt-lens"),
        ("sweep empty policies", ["sweep", "--prompt-lens", "1k", "--policies", ","],
         "--policies is empty"),
        ("sweep unknown policy", ["sweep", "--prompt-lens", "1k", "--policies", "clone,zip"],
         "unknown policy 'zip'"),
        ("sweep async maybe", ["sweep", "--prompt-lens", "1k", "--async", "maybe"],
         "invalid choice: 'maybe'"),
        ("sweep out is a folder", ["sweep", "--prompt-lens", "1k", "--out", str(folder)],
         "is a directory"),
        ("sweep plot folder missing", ["sweep", "--prompt-lens", "1k", "--plot",
                                       str(missing.with_suffix(".png"))], "does not exist"),
        ("sweep too many steps", ["sweep", "--prompt-lens", "1k..1G:5", "--budget", "16",
                                  "--mode", "analytic"],
         "engine steps, above --max-steps"),
        # embed
        ("embed without out", ["embed", "tiny-decoder", "--text", "hi"],
         "required: --out"),
        ("embed without text", ["embed", "tiny-decoder", "--out", str(tmp / "x.st")],
         "--text"),
        ("embed text twice", ["embed", "tiny-decoder", "--text", "a", "--text-file",
                              str(notes), "--out", str(tmp / "x.st")], "not both"),
        ("embed text file missing", ["embed", "tiny-decoder", "--text-file",
                                     str(tmp / "none.txt"), "--out", str(tmp / "x.st")],
         "none.txt does not exist"),
        ("embed text file is a folder", ["embed", "tiny-decoder", "--text-file", str(folder),
                                         "--out", str(tmp / "x.st")], "is a directory"),
        ("embed text file not utf-8", ["embed", "tiny-decoder", "--text-file", str(binary),
                                       "--out", str(tmp / "x.st")], "is not UTF-8 text"),
        ("embed out is a folder", ["embed", "tiny-decoder", "--text", "hi", "--out",
                                   str(folder)], "is a directory"),
        ("embed out folder missing", ["embed", "tiny-decoder", "--text", "hi", "--out",
                                      str(missing)], "does not exist"),
        ("embed out read-only", ["embed", "tiny-decoder", "--text", "hi", "--out",
                                 str(READ_ONLY)], "cannot be written"),
        ("embed empty text", ["embed", "tiny-decoder", "--text", "", "--out",
                              str(tmp / "x.st")], "empty string"),
        ("embed layer 99", ["embed", "tiny-decoder", "--text", "hi", "--out",
                            str(tmp / "x.st"), "--layer", "99"], "layer=99 is outside"),
        ("embed layer text", ["embed", "tiny-decoder", "--text", "hi", "--out",
                              str(tmp / "x.st"), "--layer", "last"], "'last' is not a whole"),
        ("embed dimensions 0", ["embed", "tiny-decoder", "--text", "hi", "--out",
                                str(tmp / "x.st"), "--dimensions", "0"],
         "0 is below the minimum 1"),
        ("embed dimensions too many", ["embed", "tiny-decoder", "--text", "hi", "--out",
                                       str(tmp / "x.st"), "--dimensions", "65"],
         "dimensions=65 is outside [1, 64]"),
        ("embed chunk-size inf", ["embed", "tiny-decoder", "--text", "hi", "--out",
                                  str(tmp / "x.st"), "--chunk-size", "inf"],
         "cannot read 'inf'"),
        ("embed chunk-size on an encoder", ["embed", "tiny-encoder", "--text", "hi", "--out",
                                            str(tmp / "x.st"), "--chunk-size", "2"],
         "chunk_size=2 given for tiny-encoder"),
        ("embed unknown task", ["embed", "tiny-decoder", "--text", "hi", "--out",
                                str(tmp / "x.st"), "--task", "foo"], "'foo'"),
        ("embed unknown policy", ["embed", "tiny-decoder", "--text", "hi", "--out",
                                  str(tmp / "x.st"), "--policy", "fast"], "'fast'"),
        ("embed unknown dtype", ["embed", "tiny-decoder", "--text", "hi", "--out",
                                 str(tmp / "x.st"), "--dtype", "int4"], "'int4'"),
        ("embed unknown model", ["embed", "no-such-model", "--text", "hi", "--out",
                                 str(tmp / "x.st")], "'no-such-model'"),
        # report
        ("report notebooks missing", ["report", "--notebooks", str(tmp / "none")],
         "no notebooks found at"),
        ("report notebooks not ipynb", ["report", "--notebooks", str(notes)],
         "is not a .ipynb file"),
        ("report timeout 0", ["report", "--timeout", "0"], "0 is below the minimum 1"),
        ("report out is a file", ["report", "--notebooks", "notebooks", "--out", str(notes)],
         "is a file; give a folder"),
        # site
        ("site out is a file", ["site", str(notes), "--sample"], "is a file; give a folder"),
        # plan (more in test_recipe.py)
        ("plan prompt length 32Q", ["plan", "org/x", "--prompt-len", "32Q"],
         "cannot read '32Q' as a size"),
        ("plan unknown GPU", ["plan", "org/x", "--gpu", "B999"], "unknown hardware 'B999'"),
        # engine-check (more in test_engine_check.py)
        ("engine-check python missing", ["engine-check", "--python", str(tmp / "no-python")],
         "no Python at"),
        ("engine-check chunk sizes", ["engine-check", "--chunk-sizes", "a,b"],
         "--chunk-sizes 'a,b'"),
    ]


_IDS = [c[0] for c in _cases(Path("ids"))]


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad-cli")
    (tmp / "a-folder").mkdir()
    (tmp / "binary.txt").write_bytes(b"\xff\xfe\x00bad")
    (tmp / "notes.txt").write_text("not a notebook")
    return {c[0]: c for c in _cases(tmp)}


@pytest.mark.parametrize("case_id", _IDS)
def test_every_subcommand_gives_one_line_and_status_2(case_id, cases, capsys):
    _, argv, needle = cases[case_id]
    if "read-only" in case_id and not READ_ONLY.parent.is_dir():
        pytest.skip("needs Linux's /proc")
    code = main(argv)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (argv, out, err)
    assert len(lines) == 1, err
    assert lines[0].startswith("tokpool"), err
    assert "Traceback" not in err and needle in lines[0], (needle, err)


def test_every_subcommand_is_in_the_catalogue(cases):
    from tokpool.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    covered = {argv[0] for _, argv, _ in cases.values() if argv}
    assert set(sub.choices) <= covered


def test_output_paths_are_checked_before_the_work(cases, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(tp, "simulate", lambda *a, **k: calls.append("simulate"))
    monkeypatch.setattr(tp, "sweep", lambda *a, **k: calls.append("sweep"))
    monkeypatch.setattr(tp, "load_model", lambda *a, **k: calls.append("load_model"))
    for case_id in ("csv is a folder", "trace is a folder", "sweep out is a folder",
                    "sweep plot folder missing", "embed out is a folder"):
        assert main(cases[case_id][1]) == 2
    assert calls == []
    capsys.readouterr()


@pytest.mark.parametrize("error", [
    MemoryLimitError("tensor mode would need about 41.00 GiB but the memory limit is 9 GiB"),
    ValueError("first line\nsecond line"),
    TypeError("policies must be a sequence of names, not 'clone'"),
    PermissionError(13, "Permission denied"),
    OverflowError("cannot convert float infinity to integer"),
])
def test_any_library_error_becomes_one_line(error, monkeypatch, capsys):
    """The simulator's memory guard (and any other refusal) reaches the user as one line."""

    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr(tp, "simulate", refuse)
    code = main(["simulate", "--prompt-lens", "600000", "--mode", "tensor"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert type(error).__name__ in err and str(error).splitlines()[0] in err


def test_a_bug_still_shows_its_traceback(monkeypatch):
    def bug(*args, **kwargs):
        raise KeyError("not a user error")

    monkeypatch.setattr(tp, "simulate", bug)
    with pytest.raises(KeyError):
        main(["simulate", "--prompt-lens", "100"])


@pytest.mark.parametrize("argv", [
    ["simulate", "--prompt-lens", "inf"],
    ["sweep", "--prompt-lens", "1..1M:1G"],
    ["embed", "tiny-decoder", "--text", "hi", "--out", "/"],
    ["report", "--timeout", "-1"],
    ["gate", "no-such-model-xyz"],
])
def test_console_process_prints_no_traceback(argv):
    """The real console entry point, in its own process: status 2, one stderr line."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "tokpool.cli", *argv], capture_output=True,
                            text=True, check=False, env=env, timeout=120)
    lines = [line for line in result.stderr.splitlines()
             if line.strip() and "Warning" not in line and "warn(" not in line]
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(lines) == 1 and lines[0].startswith("tokpool"), result.stderr
