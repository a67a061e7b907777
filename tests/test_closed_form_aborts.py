"""``tp.simulate(..., mode="closed_form", aborts=...)``: where an abort leaves the lone
request's formula exact (after its last chunk: a no-op, or output dropped under async
scheduling) the result equals analytic mode's to the byte, aborts frame included; an abort
mid-prompt is refused in words (``schedule.aborts.closed_form_outcomes``)."""

from __future__ import annotations

import random

import pandas as pd
import pytest

import tokpool as tp

#: What closed form and analytic both report for the lone request.
SUMMARY = ("peak_pooling_bytes", "copy_bytes", "d2h_bytes", "host_bytes")


def _drawn(rng: random.Random) -> tuple[int, tp.SimConfig]:
    cfg = tp.SimConfig(
        hidden_size=rng.choice((4, 8, 64)), dtype=rng.choice(("float32", "bfloat16")),
        max_num_batched_tokens=rng.choice((16, 64, 256, 1024)),
        policy=rng.choice(("clone", "prealloc", "offload", "legacy")),
        async_scheduling=rng.random() < 0.5,
        head_dtype=rng.choice((None, "float32")), use_activation=rng.random() < 0.5)
    return rng.randint(1, 3000), cfg


def test_closed_form_with_aborts_equals_analytic_to_the_byte():
    rng = random.Random(463)
    compared = refused = 0
    for _ in range(150):
        n, cfg = _drawn(rng)
        steps = len(tp.simulate([n], cfg, mode="analytic").steps)  # incl. async's extra call
        step = rng.randint(0, steps + 2)
        try:
            closed = tp.simulate([n], cfg, mode="closed_form", aborts={0: step})
        except ValueError as err:
            assert "mid-prompt" in str(err) and "mode='analytic'" in str(err)
            ana = tp.simulate([n], cfg, mode="analytic", aborts={0: step})
            assert ana.aborts["outcome"].tolist() == ["aborted"]
            refused += 1
            continue
        ana = tp.simulate([n], cfg, mode="analytic", aborts={0: step})
        pd.testing.assert_frame_equal(closed.aborts, ana.aborts)
        for key in SUMMARY:
            want = (ana.peak_pooling_bytes if key == "peak_pooling_bytes"
                    else int(ana.steps[key].max()) if key == "host_bytes"  # a level
                    else int(ana.steps[key].sum()))
            assert closed.closed_form[key] == want, (key, n, cfg, step)
        assert closed.closed_form["output_bytes"] == int(ana.requests["output_bytes"][0])
        compared += 1
    assert compared >= 40 and refused >= 20, (compared, refused)


def test_the_outcomes_closed_form_reports():
    cfg = tp.SimConfig(hidden_size=8, max_num_batched_tokens=1024)
    r = tp.simulate([3000], cfg, mode="closed_form", aborts={0: 3})  # last chunk in step 2
    assert r.aborts.to_dict("records") == [{"request": 0, "step": 3, "outcome": "no-op",
                                            "finish_step": 2, "freed_pool_bytes": 0,
                                            "freed_host_bytes": 0}]
    dropped = tp.simulate([3000], cfg.replace(async_scheduling=True), mode="closed_form",
                          aborts={0: 3})
    assert dropped.aborts["outcome"].tolist() == ["output dropped"]
    assert tp.simulate([3000], cfg, mode="closed_form").aborts is None
    with pytest.raises(ValueError, match=r"aborts\[0\] = 2 cancels the request mid-prompt"):
        tp.simulate([3000], cfg, mode="closed_form", aborts={0: 2})
