"""The public API: a short top level, namespaces for the rest, old names kept with a warning.

import tokpool must stay light (no transformers, matplotlib or ipywidgets); every name in
tp.__all__ resolves; every name of the 0.1.0 top level still works as tp.<name>, either
unchanged or with a DeprecationWarning that names its new namespace.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import tokpool as tp

#: The top level as released in 0.1.0 (102 names): each must keep working.
RELEASED_0_1_0 = (
    "AllPool", "BgeM3Pooler", "CLSPool", "CONVENTIONS", "DispatchPooler", "FormattedSteps",
    "HARDWARE_PRESETS", "Hardware", "HiddenStateSource", "LastPool", "MODEL_KINDS",
    "MODEL_PRESETS", "MeanPool", "ModelKind", "ModelNotFoundError", "ModelPreset",
    "ModelSource", "OwnershipReport", "POOLING_TASKS", "Pooler", "PoolingCursor",
    "PoolingMetadata", "PoolingModel", "PoolingStates", "ProcessBenchScores",
    "ProcessRewardModel", "RETENTION_POLICIES", "SUPPORTED_TASKS", "SimConfig", "SimResult",
    "SpladeSparsePooler", "StepPool", "StepScores", "StepTimes", "SyntheticSource",
    "TOKEN_TASKS", "TokenClassifierHead", "TokenEmbeddingHead", "UnsupportedTaskError",
    "__version__", "apply_classifier_activation", "build_metadata", "check_request_task",
    "compare_chunked", "corruption_table", "cosine_similarity_matrix", "dtype_size",
    "figure_png", "first_error_from_rewards", "format_steps", "gate", "generate_prm_dataset",
    "get_pooling_method", "list_models", "load_model", "load_prm", "load_prm_dataset",
    "memory_explorer", "model_cache_dir", "model_kind", "owned_bytes", "ownership_explorer",
    "ownership_report", "pca_2d", "plot_buffer_rows", "plot_chunked_error",
    "plot_memory_timeline", "plot_memory_vs_prompt_length", "plot_ownership_schedule",
    "plot_similarity", "plot_step_rewards", "plot_task_gate", "plot_time_vs_prompt_length",
    "plot_token_pca", "plot_token_values", "prm_memory_table", "processbench_f1",
    "processbench_scores", "render_memory", "render_ownership", "render_step_rewards",
    "render_tokens", "resolve_dtype", "runner_tasks", "schedule_frame", "select_task",
    "shares_storage", "simulate", "step_auroc", "step_logits", "step_reward_explorer",
    "step_rewards", "storage_nbytes", "stranded_bytes", "summarize_chunked", "sweep",
    "task_table", "tensor_nbytes", "token_explorer", "token_html", "token_strings",
    "visible_whitespace"
)


def test_import_tokpool_loads_no_model_or_plotting_library():
    code = (
        "import sys, tokpool as tp; tp.simulate([3], tp.SimConfig(hidden_size=4)); "
        "print(sorted(m for m in ('transformers', 'matplotlib', 'ipywidgets') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_top_level_is_short_and_every_name_resolves():
    # The top level is what a notebook user types in the first hour; everything else lives in
    # the namespace of its wing (tp.pooler, tp.sim, tp.late_interaction, ...). Round five let it
    # grow to 52 by raising this cap: a new name goes into its wing's namespace, and one joins
    # the top level only if another leaves. Do not raise the cap (issue 44).
    assert len(tp.__all__) <= 45, (
        f"{len(tp.__all__)} top-level names: put the new name in its wing's namespace "
        "(tp.sim, tp.late_interaction, ...), not at the top level")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no public name may warn
        for name in tp.__all__:
            assert getattr(tp, name) is not None, name


def test_namespaces_are_modules_and_lazy_names_come_from_them():
    for name in tp._NAMESPACES:
        module = getattr(tp, name)
        assert module is importlib.import_module(f"tokpool.{name}")
        assert name in dir(tp)
    for name, module in tp._LAZY.items():
        assert getattr(tp, name) is getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("name", sorted(tp._MOVED))
@pytest.mark.filterwarnings("default::tokpool._deprecation.TokpoolDeprecationWarning")
def test_moved_name_warns_and_names_its_new_place(name):
    assert name not in tp.__all__ and name not in dir(tp)
    module = importlib.import_module(tp._MOVED[name])
    assert name in getattr(module, "__all__", dir(module))
    short = tp._MOVED[name].removeprefix("tokpool.")
    with pytest.warns(DeprecationWarning, match=rf"tp\.{name} moved to tp\.{short}\.{name}"):
        value = getattr(tp, name)
    assert value is getattr(module, name)
    with pytest.warns(DeprecationWarning):  # every use warns, not just the first
        getattr(tp, name)


def test_every_released_name_still_works():
    lost = [n for n in RELEASED_0_1_0 if n not in tp.__all__ and n not in tp._MOVED]
    assert not lost, f"0.1.0 names with no top-level or deprecated path: {lost}"
    assert not set(tp.__all__) & set(tp._MOVED)


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="plot_nothing"):
        tp.plot_nothing  # noqa: B018


def test_viz_has_every_plot_and_explorer():
    import tokpool.plots as plots
    import tokpool.widgets as widgets

    assert set(tp.viz.__all__) == set(plots.__all__) | set(widgets.__all__)
    for name in tp.viz.__all__:
        assert getattr(tp.viz, name) is not None, name


def test_renamed_functions_still_work_and_warn():
    """Round 4's renames: each old name works, warns, and names the new one."""
    rules = tp.sim.vllm_rules
    with pytest.warns(DeprecationWarning, match="check_request_task is now check_selected_task"):
        rules.check_request_task("token_embed", selected_task="token_embed",
                                 supported_tasks=("token_embed",))
    cfg = tp.SimConfig(model="SmolLM2-135M")
    with pytest.warns(DeprecationWarning, match="check_prompt_lens is now .*check_prompts_fit"):
        cfg.check_prompt_lens([100])
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="max_model_len=8192"):
        cfg.check_prompt_lens([9000])
