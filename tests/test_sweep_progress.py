"""A sweep's progress bar is text on stdout, never stderr: a notebook cell shows it as ordinary
output that survives save-and-reopen, with no red stderr box (the project's convention, as
tp.prm's scoring bar)."""

from __future__ import annotations

import re

import tokpool as tp

#: From this many points a closed-form sweep shows its bar by itself (``progress=None``).
LONG_CLOSED_FORM = 2_000_000


def _bar_lines(out: str) -> list[str]:
    """The bar's redraws (tqdm rewrites its line with carriage returns)."""
    return [part for part in re.split(r"[\r\n]", out) if part.startswith("tokpool sweep")]


def test_a_long_sweep_shows_its_progress_on_stdout_and_nothing_on_stderr(capsys):
    combos = len(tp.RETENTION_POLICIES) * 2
    lens = [128, 4096] * (LONG_CLOSED_FORM // combos // 2)
    df = tp.sweep(lens, tp.SimConfig())  # progress=None: long enough to show the bar
    assert len(df) == LONG_CLOSED_FORM
    out, err = capsys.readouterr()
    assert err == ""
    bars = _bar_lines(out)
    assert bars, f"no progress bar on stdout: {out[-300:]!r}"
    assert "100%" in bars[-1] and f"{LONG_CLOSED_FORM}/{LONG_CLOSED_FORM}" in bars[-1]


def test_the_per_point_loop_counts_every_point_on_stdout(capsys):
    df = tp.sweep([64, 128, 256], tp.SimConfig(), policies=["clone"], mode="analytic",
                  progress=True)
    out, err = capsys.readouterr()
    assert err == "" and len(df) == 6
    assert "6/6" in _bar_lines(out)[-1]


def test_a_short_sweep_prints_nothing(capsys):
    tp.sweep([64, 128], tp.SimConfig())
    assert capsys.readouterr() == ("", "")
