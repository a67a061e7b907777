"""Bad input to the simulator: refused with a message, never a crash or a wrong answer."""

from __future__ import annotations

import pytest

import tokpool as tp
from tokpool.guard import MemoryLimitError


def test_tensor_mode_refuses_a_run_that_cannot_fit_before_allocating(monkeypatch):
    monkeypatch.setenv("TOKPOOL_MEMORY_LIMIT", "1M")
    cfg = tp.SimConfig(hidden_size=256)
    with pytest.raises(MemoryLimitError, match=r"tensor-mode simulation of 1 prompt "
                                               r"\(5,000 tokens, width 256\).*mode='analytic'"):
        tp.simulate([5_000], cfg, mode="tensor")
    assert tp.simulate([5_000], cfg, mode="analytic").peak_pooling_bytes > 0  # counting: fine
    monkeypatch.setenv("TOKPOOL_MEMORY_LIMIT", "off")
    assert tp.simulate([50], cfg, mode="tensor").corrupted == []


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"policies": "clone"}, TypeError, r"policies must be a list.*policies=\['clone'\]"),
    ({"async_scheduling": True}, TypeError, r"async_scheduling must be a list.*\[True\]"),
    ({"async_scheduling": ["yes"]}, TypeError, "must be True or False"),
    ({"mode": "fast"}, ValueError, "unknown mode 'fast'"),
    ({"policies": ["copy"]}, ValueError, "unknown retention policy 'copy'"),
])
def test_sweep_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        tp.sweep([100], tp.SimConfig(hidden_size=8), **kwargs)


def test_simulate_refuses_a_config_that_is_not_one():
    with pytest.raises(TypeError, match="config must be a SimConfig"):
        tp.simulate([10], {"hidden_size": 8})
    with pytest.raises(ValueError, match="unknown mode 'exact'"):
        tp.simulate([10], mode="exact")
