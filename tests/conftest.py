"""Shared fixtures; tests run offline."""

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKPOOL_QUICK", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


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


def pytest_collection_modifyitems(config, items):
    """Engine tests start vLLM engines (minutes): only when ``-m`` names the marker."""
    if "engine" in (config.getoption("markexpr", "") or ""):
        return
    skip = pytest.mark.skip(reason="starts vLLM engines: run `make engine-test` (pytest -m engine)")
    for item in items:
        if "engine" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
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
