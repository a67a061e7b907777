"""A workload mixing tasks of one model inside the simulator (``tp.PoolingParams(task=...)``):
the dispatch pooler's groups, per-task bytes, and bad input refused in words."""

from __future__ import annotations

import pytest
import torch

import tokpool as tp
from tokpool.sim.backends.mixed import BY_TASK_COLUMNS

CFG = tp.SimConfig(hidden_size=8, max_num_batched_tokens=16, head_dtype=None,
                   use_activation=False)  # pooling alone: outputs are the hidden rows


@pytest.mark.parametrize("mode", ["tensor", "analytic"])
def test_a_sequence_request_beside_token_requests_gathers_one_row_and_keeps_nothing(mode):
    # request 0: 40 tokens of token_embed (3 chunks); request 1: 30 tokens of embed
    params = [None, tp.PoolingParams(task="embed")]
    run = tp.simulate([40, 30], CFG, mode=mode, pooling_params=params)
    by = run.by_task.set_index(["step", "task"])
    assert list(run.by_task.columns) == list(BY_TASK_COLUMNS)
    assert (by.xs("embed", level="task")["cache_bytes"] == 0).all()  # nothing kept
    # the token request keeps its first chunk (16 rows of 8 bfloat16: 256 bytes) as a clone
    assert by.loc[(0, "token_embed"), "cache_bytes"] == 16 * 8 * 2
    delivered = run.by_task.groupby("task")["delivered_bytes"].sum()
    assert delivered["embed"] == 8 * 2  # one row
    assert delivered["token_embed"] == 40 * 8 * 2  # every row
    assert run.corrupted == []
    if mode == "tensor":
        assert tuple(run.outputs[0].shape) == (40, 8) and tuple(run.outputs[1].shape) == (8,)


def test_the_tensor_outputs_are_the_references():
    src = tp.sim.SyntheticSource(width=8, dtype=torch.bfloat16)
    run = tp.simulate([20, 9, 13], CFG, source=src,
                      pooling_params=[tp.PoolingParams(task="embed"), None, None])
    assert torch.equal(run.outputs[0], src.reference(0)[-1])
    assert torch.equal(run.outputs[1], src.reference(1))


def test_an_unmixed_workload_has_no_by_task_frame():
    params = [tp.PoolingParams(task="token_embed")] * 2
    assert tp.simulate([20, 6], CFG, mode="analytic", pooling_params=params).by_task is None


@pytest.mark.parametrize("task, error, words", [
    ("nope", ValueError, "task must be one of"),
    (5, TypeError, "task must be a pooling task name"),
    (True, TypeError, "task must be a pooling task name"),
])
def test_a_bad_task_is_refused_when_built(task, error, words):
    with pytest.raises(error, match=words):
        tp.PoolingParams(task=task)


def test_a_task_the_model_does_not_serve_is_refused_in_the_workers_words():
    with pytest.raises(ValueError, match=r"Unsupported task: 'classify'. Supported tasks: "
                                         r"\['embed', 'token_embed'\]"):
        tp.simulate([20], CFG, pooling_params=tp.PoolingParams(task="classify"))
    step = tp.SimConfig(task="token_classify", pooling="STEP", hidden_size=8,
                        max_num_batched_tokens=64)
    with pytest.raises(ValueError, match=r"Supported tasks: \['token_classify'\]"):
        tp.simulate([20], step, pooling_params=[tp.PoolingParams(task="classify")])


def test_mixed_runs_tokpool_does_not_model_are_refused_in_words():
    twin = [tp.PoolingParams(task="embed"), None]
    with pytest.raises(ValueError, match="not 'offload'"):
        tp.simulate([20, 6], CFG.replace(policy="offload"), pooling_params=twin)
    with pytest.raises(ValueError, match="closed_form"):
        tp.simulate([20], CFG, mode="closed_form", pooling_params=twin[:1])
    with pytest.raises(ValueError, match="prefix"):
        tp.simulate([[1, 2, 3], [1, 2, 4]], CFG.replace(enable_prefix_caching=True),
                    pooling_params=twin)


def test_a_request_task_decides_its_valid_parameters():
    # late chunking is token_embed's alone (PoolingParams.verify), whatever the engine's task
    with pytest.raises(tp.sim.EngineRefusal, match="Late chunking requires token_embed"):
        tp.simulate([20], CFG, pooling_params=tp.PoolingParams(task="embed",
                                                               late_chunking_size=4))


def test_the_plugin_task_is_refused_before_its_parameters_are_checked():
    with pytest.raises(ValueError, match="Unsupported task: 'plugin'"):
        tp.simulate([20], CFG, pooling_params=tp.PoolingParams(task="plugin"))


def test_the_readme_mixed_example_numbers():
    cfg = tp.SimConfig(hidden_size=4096, max_num_batched_tokens=2048)
    params = [None] + [tp.PoolingParams(task="embed")] * 8
    mixed = tp.simulate([8_192] + [512] * 8, cfg, mode="analytic", pooling_params=params)
    by = mixed.by_task.groupby("task")
    assert by["cache_bytes"].max().to_dict() == {"embed": 0, "token_embed": 50_331_648}
    assert by["delivered_bytes"].sum().to_dict() == {"embed": 131_072,
                                                     "token_embed": 134_217_728}


def test_tensor_and_analytic_agree_on_mixed_workloads_with_aborts():
    import random

    import pandas as pd

    rng = random.Random(46)
    twins = {"token_embed": "embed", "embed": "token_embed", "token_classify": "classify",
             "classify": "token_classify"}
    aborted = 0
    for _ in range(40):
        task = rng.choice(list(twins))
        cfg = tp.SimConfig(task=task, hidden_size=4, num_labels=3,
                           max_num_batched_tokens=rng.randint(4, 16), max_num_seqs=4,
                           async_scheduling=rng.random() < 0.5,
                           policy=rng.choice(["legacy", "clone", "prealloc"]),
                           model_runner=rng.choice(["v1", "v2"]))
        lens = [rng.randint(1, 30) for _ in range(rng.randint(2, 5))]
        params = [tp.PoolingParams(task=twins[task]) if rng.random() < 0.5 else None
                  for _ in lens]
        aborts = {rng.randrange(len(lens)): rng.randint(0, 6)}
        runs = [tp.simulate(lens, cfg, mode=m, pooling_params=params, aborts=aborts)
                for m in ("tensor", "analytic")]
        for frame in ("steps", "requests", "aborts", "by_task"):
            a, b = getattr(runs[0], frame), getattr(runs[1], frame)
            assert (a is None) == (b is None)
            if a is not None:
                pd.testing.assert_frame_equal(a, b)
        assert runs[0].corrupted == runs[1].corrupted
        aborted += int((runs[1].aborts.outcome == "aborted").sum())
    assert aborted >= 10
