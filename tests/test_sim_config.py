"""SimConfig, presets, sources and bad input: the simulator's edges."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import tokpool as tp
from tokpool.sim import HARDWARE_PRESETS, MODEL_PRESETS, Hardware, SimConfig, simulate
from tokpool.sim.backends.source import HiddenStateSource, SyntheticSource, check_source


def test_defaults_and_derived_values():
    cfg = SimConfig()
    # vLLM 0.33.0's defaults for a pooling model on an H100 under `vllm serve` (issue 48: the
    # default deployment is the server's; the offline LLM class is usage="llm")
    assert cfg.dtype == torch.bfloat16 and cfg.head_dtype == torch.float32
    assert cfg.use_activation and not cfg.async_scheduling and cfg.enable_chunked_prefill
    assert cfg.usage == "server"
    assert (cfg.max_num_batched_tokens, cfg.max_num_seqs) == (8192, 1024)
    assert cfg.replace(usage="llm").max_num_batched_tokens == 16384
    assert SimConfig(hardware="L4").max_num_batched_tokens == 2048
    assert SimConfig(hardware="L4", usage="llm").max_num_batched_tokens == 8192
    assert cfg.policy == "clone" and cfg.pooling_method == "ALL"
    assert cfg.width == cfg.hidden_size and cfg.dtype_size == 2
    # vLLM's graph output buffer: the largest capture size (512) rows
    assert cfg.output_memory == "vllm" and cfg.graph_buffer_rows == 512
    assert cfg.buffer_bytes == 512 * cfg.hidden_size * 2
    teaching = cfg.replace(output_memory="one_buffer")
    assert teaching.buffer_bytes == cfg.max_num_batched_tokens * cfg.hidden_size * 2
    assert cfg.head_casts and cfg.output_dtype == torch.float32
    assert not cfg.replace(head_dtype=None).head_casts
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.policy = "legacy"  # type: ignore[misc]


def test_classify_width_is_num_labels_and_sequence_tasks_pool_last():
    assert SimConfig(task="token_classify", num_labels=3).width == 3
    assert SimConfig(task="classify", num_labels=5).pooling_method == "LAST"
    assert SimConfig(task="embed", hidden_size=16).width == 16
    assert SimConfig(dtype="float32", head_dtype=torch.float32).head_casts is False
    assert SimConfig(head_dtype="fp32").output_dtype == torch.float32


@pytest.mark.parametrize(
    ("changes", "offender"),
    [
        ({"hidden_size": 0}, "0"),
        ({"hidden_size": -4}, "-4"),
        ({"hidden_size": 2.5}, "2.5"),
        ({"num_labels": 0}, "0"),
        ({"max_num_batched_tokens": 0}, "0"),
        ({"max_num_seqs": 0}, "0"),
        ({"policy": "copy-everything"}, "copy-everything"),
        ({"task": "generate"}, "generate"),
        ({"dtype": "int8"}, "int8"),
        ({"dtype": torch.int32}, "int32"),
        ({"head_dtype": "float8"}, "float8"),
        ({"pooling": "MEAN"}, "MEAN"),
        ({"pooling": "LAST"}, "LAST"),
        ({"task": "embed", "pooling": "ALL"}, "ALL"),
        ({"step_tag_every": 3}, "step_tag_every"),
        ({"task": "token_classify", "pooling": "STEP", "num_returned_columns": 9}, "[2"),
        ({"task": "token_classify", "pooling": "STEP", "step_tag_every": 0}, "0"),
        ({"hardware": "TPU v9"}, "TPU v9"),
        ({"model": "GPT-5"}, "GPT-5"),
    ],
)
def test_bad_values_raise_value_error_naming_them(changes, offender):
    with pytest.raises(ValueError, match=f".*{offender[:8].replace('[', '.')}"):
        SimConfig(**changes)


def test_bad_flag_types():
    with pytest.raises(TypeError, match="async_scheduling"):
        SimConfig(async_scheduling="yes")  # type: ignore[arg-type]


def test_replace_revalidates():
    cfg = SimConfig(hidden_size=8)
    assert cfg.replace(policy="offload").policy == "offload"
    with pytest.raises(ValueError, match="nope"):
        cfg.replace(policy="nope")


def test_presets_and_for_model():
    for name in ("H100 SXM", "H200", "A100 80GB", "L4"):
        hw = HARDWARE_PRESETS[name]
        assert hw.hbm_bandwidth > 0 and hw.bf16_flops > 0 and hw.pcie_bandwidth > 0
    for name in ("SmolLM2-135M", "Qwen3-Embedding-0.6B", "Qwen3-Embedding-8B",
                 "Qwen2.5-Math-PRM-7B"):
        m = MODEL_PRESETS[name]
        assert m.hidden_size > 0 and m.num_layers > 0 and m.vocab_size > 0
    cfg = SimConfig.for_model("Qwen3-Embedding-0.6B")
    assert cfg.hidden_size == 1024 and cfg.task == "token_embed"
    assert cfg.model is MODEL_PRESETS["Qwen3-Embedding-0.6B"]
    prm = SimConfig.for_model("Qwen/Qwen2.5-Math-PRM-7B", step_tag_every=30)
    assert (prm.task, prm.pooling_method, prm.width) == ("token_classify", "STEP", 2)
    shepherd = SimConfig.for_model("math-shepherd-mistral-7b-prm", step_tag_every=50)
    # no LM head in a pooling model (adapters._create_pooling_model_cls): hidden-wide rows
    assert shepherd.width == 4096 and shepherd.output_width == 2
    assert shepherd.rows_from == "backbone"
    assert SimConfig.for_model("SmolLM2-135M", task="embed").pooling_method == "LAST"
    custom = Hardware("mine", hbm_bytes=1 << 34, hbm_bandwidth=1e12, bf16_flops=1e14,
                      pcie_bandwidth=2e10)
    assert SimConfig(hardware=custom).hardware is custom
    with pytest.raises(ValueError, match="hbm_bandwidth"):
        Hardware("broken", hbm_bytes=1, hbm_bandwidth=0, bf16_flops=1, pcie_bandwidth=1)


def test_public_names_at_top_level():
    for name in ("SimConfig", "SimResult", "simulate", "sweep", "HARDWARE_PRESETS",
                 "MODEL_PRESETS"):
        assert hasattr(tp, name), name
        assert name in tp.__all__, name
    for name in ("Hardware", "ModelPreset", "SyntheticSource", "HiddenStateSource"):
        assert name in tp.sim.__all__, name  # extension points live in the namespace


@pytest.mark.parametrize("lens", [[], [0], [5, -1], [3, 0, 2]])
def test_bad_prompt_lengths(lens):
    with pytest.raises(ValueError, match=r"prompt|empty"):
        simulate(lens, SimConfig(hidden_size=4), mode="analytic")


def test_bad_prompt_types_and_modes():
    with pytest.raises(TypeError, match="int"):
        simulate([3.5], SimConfig(hidden_size=4))
    with pytest.raises(ValueError, match="warp"):
        simulate([3], SimConfig(hidden_size=4), mode="warp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="arrival_steps"):
        simulate([3, 4], SimConfig(hidden_size=4), arrival_steps=[0, -1])


def test_prompt_that_never_fits_without_chunked_prefill_is_rejected_up_front():
    cfg = SimConfig(hidden_size=4, max_num_batched_tokens=16, enable_chunked_prefill=False)
    with pytest.raises(ValueError, match=r"request 1 has 40 prompt tokens.*16"):
        simulate([10, 40, 50], cfg, mode="analytic")


def test_synthetic_source_is_exact_and_tells_tokens_apart():
    for dtype in ("bfloat16", "float16", "float32"):
        src = SyntheticSource(3, dtype)
        src.prepare([7, 5])
        out = torch.empty(6, 3, dtype=src.dtype)
        src.fill(out, [(1, 2, 5), (0, 0, 3)])
        assert torch.equal(out[:3], src.reference(1)[2:5])
        assert torch.equal(out[3:], src.reference(0)[:3])
        rows = torch.cat([src.reference(0), src.reference(1)])
        assert len({tuple(r.tolist()) for r in rows}) == 12
        assert torch.isfinite(rows.float()).all()
    assert isinstance(src, HiddenStateSource)


def test_synthetic_source_width_one_bf16_distinct_within_capacity():
    src = SyntheticSource(1, "bfloat16")
    src.prepare([src.capacity])
    assert src.reference(0).unique().numel() == src.capacity
    with pytest.warns(UserWarning, match="told apart"):
        src.prepare([src.capacity + 1])


def test_synthetic_step_tags():
    src = SyntheticSource(4, step_tag_every=3, step_tag_id=7)
    src.prepare([10])
    ids = src.token_ids(0)
    assert (ids == 7).nonzero().flatten().tolist() == [2, 5, 8]


def test_source_checks():
    src = SyntheticSource(4, "bfloat16")
    with pytest.raises(ValueError, match="width 4"):
        check_source(src, width=8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="float32"):
        check_source(src, width=4, dtype=torch.float32)
    with pytest.raises(TypeError, match="lacks"):
        check_source(object(), width=4, dtype=torch.float32)
    with pytest.raises(ValueError, match="width 4"):
        simulate([5], SimConfig(hidden_size=8), source=src)


def test_time_estimates_are_labelled_and_sane():
    r = simulate([5000], SimConfig(hidden_size=64), mode="analytic")
    assert r.steps["est_forward_s"].isna().all()  # no model preset: unknown, not zero
    assert math.isnan(r.summary()["est_total_s"])
    cfg = SimConfig.for_model("Qwen3-Embedding-0.6B", head_dtype="float32")
    sync = simulate([20_000], cfg, mode="analytic")
    asyn = simulate([20_000], cfg.replace(async_scheduling=True), mode="analytic")
    assert (sync.steps["est_forward_s"] > 0).all()
    assert sync.summary()["est_total_s"] > 0
    # Overlapping the host copy can only help; same bytes either way.
    assert asyn.summary()["est_total_s"] <= sync.summary()["est_total_s"]
    assert asyn.summary()["d2h_bytes"] == sync.summary()["d2h_bytes"]
    h200 = simulate([20_000], cfg.replace(hardware="H200"), mode="analytic")
    assert h200.summary()["est_total_s"] < sync.summary()["est_total_s"]


def test_a_model_preset_sets_the_width():
    cfg = SimConfig(model="Qwen3-Embedding-8B")
    assert cfg.hidden_size == cfg.model.hidden_size == 4096
    assert SimConfig().hidden_size == 1024
    with pytest.raises(ValueError, match="hidden_size=1024 but model 'Qwen3-Embedding-8B' has "
                                         "hidden size 4096"):
        SimConfig(model="Qwen3-Embedding-8B", hidden_size=1024)
    assert cfg.replace(model="SmolLM2-135M").hidden_size == 576
    assert cfg.replace(model=None, hidden_size=64).hidden_size == 64


def test_a_source_written_with_the_old_width_name_still_runs():
    src = SyntheticSource(4)
    with pytest.warns(DeprecationWarning, match="'width'"):
        assert src.hidden_size == 4
    with pytest.warns(DeprecationWarning, match="'width'"):
        assert SyntheticSource(hidden_size=4).width == 4


def test_one_device_table_serves_every_reader():
    """tp.HARDWARE_PRESETS is vLLM's device table too: a B200 (vLLM's >= 160 GiB tier) gets
    the large budget, and the KV cache is sized from the driver-reported memory."""
    b200 = SimConfig(hardware="B200")
    assert b200.max_num_batched_tokens == 16384 and b200.hardware.is_data_center_blackwell
    assert b200.capture_sizes[-1] == 1024  # vLLM's Blackwell capture ceiling
    h200 = tp.HARDWARE_PRESETS["H200"]
    assert h200.total_memory_bytes < h200.hbm_bytes  # 139 GiB reported of 141 GiB nominal
    assert tp.sim.vllm_rules.resolve_device("h200") is h200
