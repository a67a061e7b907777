"""Notebook 05's verdict says the limits themselves, computed, not the sweep's nearest points
(issue 48): the context, and the KV cache's limit equal to vLLM's own estimate."""

from __future__ import annotations

import re

import pytest

import tokpool as tp


@pytest.mark.parametrize("usage", ["server", "llm"])
def test_limits_are_the_boundaries_and_vllms_own_estimate(usage):
    cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H100 SXM", usage=usage,
                                 max_model_len=1 << 20, as_if=True)
    limits = tp.sim.startup_limits(cfg)
    assert limits.context == cfg.model.max_model_len == 40_960
    assert limits.starts_up_to == 40_960
    for n, expected in ((limits.kv_cache, True), (limits.kv_cache + 1, False)):
        hard = [r for r in tp.sim.startup_refusal(cfg, n)
                if r.follows != tp.sim.startup.CONTEXT_CHECK]
        assert (not hard) == expected, n
    estimate = int(re.search(r"estimated maximum model length is (\d+)",
                             limits.kv_refusal).group(1))
    assert limits.kv_cache == estimate  # the number vLLM's message gives
    lines = tp.sim.limit_summary(limits)
    assert lines[0] == "vLLM starts for every prompt up to 40,960 tokens."
    assert lines[1].startswith("Past 40,960 tokens the prompt is past the model's context")
    assert lines[2].startswith(f"Past {estimate:,} tokens vLLM refuses to start")


def test_every_length_starts_in_one_sentence():
    cfg = tp.SimConfig.for_model("SmolLM2-135M", hardware="H100 SXM")
    limits = tp.sim.startup_limits(cfg, 4096)
    assert tp.sim.limit_summary(limits) == ["vLLM starts for every prompt up to 4,096 tokens."]
    with pytest.raises(TypeError, match="startup_limits"):
        tp.sim.limit_summary(cfg)
    with pytest.raises(ValueError, match="upto"):
        tp.sim.startup_limits(cfg, 0)


def test_the_summary_names_no_private_vllm_function():
    """Notebook 05's first printout: vLLM's message in words, without the function it cites
    (the refusal itself keeps it, in ``follows``)."""
    cfg = tp.SimConfig.for_model("Qwen3-Embedding-8B", hardware="H100 SXM",
                                 max_model_len=1 << 20, as_if=True)
    limits = tp.sim.startup_limits(cfg)
    assert tp.sim.startup.KV_CHECK in limits.kv_refusal
    text = " ".join(tp.sim.limit_summary(limits))
    assert "estimated maximum model length is" in text and "blocks of 16 tokens" in text
    assert not re.search(r"\w\._\w|\b_[a-z]+_", text), text
