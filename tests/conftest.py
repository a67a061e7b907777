"""Shared fixtures; tests run offline."""

import os

import pytest
import torch
from sweep_sizes import FULL_ENV, full_run

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKPOOL_QUICK", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true",
                     help="run the long parity sweeps at their full size (as CI does; same as "
                          "TOKPOOL_FULL=1); without it `make test` runs a sample of each "
                          "(tests/sweep_sizes.py)")


def pytest_configure(config):
    if config.getoption("--full", False):
        os.environ[FULL_ENV] = "1"  # read when the test modules are collected


def pytest_report_header(config):
    if full_run():
        return "sweeps: full (TOKPOOL_FULL=1)"
    return "sweeps: a sample of each (TOKPOOL_FULL=1 or --full: the full sizes, as CI runs them)"


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module: on a shared machine a descheduled second OpenMP thread
    stalls every op at its barrier (10x swings seen); restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- vLLM parity layer: how many tensors and cases were compared against vLLM itself ---------
_PARITY_COUNTS: dict[str, int] = {}


@pytest.fixture(scope="session")
def parity_count():
    """``parity_count(kind, n=1)``: record ``n`` comparisons against vLLM, printed in the
    terminal summary (with or without ``-s``)."""

    def add(kind: str, n: int = 1) -> None:
        _PARITY_COUNTS[kind] = _PARITY_COUNTS.get(kind, 0) + n

    return add


# --- engine layer (``-m engine``): what was compared with a running vLLM engine --------------
_ENGINE_STATS: dict[str, dict] = {}


@pytest.fixture(scope="session")
def engine_stats():
    """``{configuration: {prompts, tokens, steps, max_abs_diff, start_seconds, ...}}``, printed
    in the terminal summary."""
    return _ENGINE_STATS


# --- the hostile-input generator: its table of outcomes per area --------------------------
_HOSTILE: dict = {}


@pytest.fixture(scope="session")
def hostile_table():
    """The generator's report (``table``, ``extremes``, ``seconds``), printed in the summary."""
    return _HOSTILE


def pytest_collection_modifyitems(config, items):
    """Engine tests start vLLM engines (minutes), and the full hostile run takes several:
    each only when ``-m`` names its marker; the full hostile run also in a full run
    (``TOKPOOL_FULL=1``, CI), where the generator runs once, in full, for all its tests."""
    markexpr = config.getoption("markexpr", "") or ""
    for marker, reason in (
            ("engine", "starts vLLM engines: run `make engine-test` (pytest -m engine)"),
            ("hostile_full", "every hostile value: run `make hostile-test` (pytest -m "
                             "hostile_full) or TOKPOOL_FULL=1")):
        if marker in markexpr or (marker == "hostile_full" and full_run()):
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    if _HOSTILE.get("table"):
        terminalreporter.write_sep("-", f"hostile inputs: {_HOSTILE['cases']} cases, each in a "
                                        f"capped child ({_HOSTILE['seconds']:.0f} s)")
        outcomes = ("clear", "correct", "raw", "wrong", "hang", "memory", "crash")
        terminalreporter.write_line(f"{'area':24} cases " + " ".join(f"{o:>7}" for o in outcomes))
        for area, row in _HOSTILE["table"].items():
            terminalreporter.write_line(f"{area:24} {row['cases']:5} "
                                        + " ".join(f"{row[o]:7}" for o in outcomes))
        for line in _HOSTILE.get("extremes", []):
            terminalreporter.write_line(line)
    if _ENGINE_STATS:
        terminalreporter.write_sep("-", "engine layer: tokpool vs a running vLLM engine")
        for name, stats in _ENGINE_STATS.items():
            terminalreporter.write_line(f"{name}: {stats}")
    if not _PARITY_COUNTS:
        return
    terminalreporter.write_sep("-", "parity with vLLM (torch.equal / equal results)")
    for kind, n in sorted(_PARITY_COUNTS.items()):
        terminalreporter.write_line(f"{kind}: {n}")
    tensors = sum(n for kind, n in _PARITY_COUNTS.items() if "torch.equal" in kind)
    terminalreporter.write_line(f"compared tensors in total: {tensors}")
