"""``tokpool simulate --abort REQ:STEP`` (repeatable): ``tp.simulate``'s ``aborts=`` on the
command line, what each abort did printed after the summary, bad values refused in one line."""

from __future__ import annotations

import pytest

import tokpool as tp
from tokpool.cli import main

BASE = ["simulate", "--prompt-lens", "400,160", "--hidden-size", "576", "--budget", "64"]


def test_the_flags_are_tp_simulate_s_aborts(capsys):
    assert main([*BASE, "--abort", "0:3", "--abort", "1:9"]) == 0
    out = capsys.readouterr().out
    run = tp.simulate([400, 160], tp.SimConfig(hidden_size=576, max_num_batched_tokens=64),
                      mode="analytic", aborts={0: 3, 1: 9})
    freed = int(run.aborts.set_index("request").loc[0, "freed_pool_bytes"])
    assert freed > 0
    assert f"abort: request 0 before step 3: aborted; freed 216.00 KiB ({freed:,} B)" in out
    assert "abort: request 1 before step 9: no-op; already finished in step 5" in out
    assert f"steps={len(run.steps)}" in out


def test_without_the_flag_nothing_is_printed_about_aborts(capsys):
    assert main(BASE) == 0
    assert "abort" not in capsys.readouterr().out


@pytest.mark.parametrize(("value", "says"), [
    ("0", "give REQ:STEP"), ("a:b", "give REQ:STEP"), ("-1:3", "give REQ:STEP"),
    ("0:1.5", "give REQ:STEP"), ("7:3", "only 2 requests"),
])
def test_bad_values_are_one_line_exit_2(capsys, value, says):
    assert main([*BASE, f"--abort={value}"]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def test_one_request_twice_is_refused(capsys):
    assert main([*BASE, "--abort", "0:3", "--abort", "0:4"]) == 2
    assert "names request 0 twice" in capsys.readouterr().err
