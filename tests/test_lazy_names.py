"""`tp.<plot or explorer>` names load lazily; the lazy map must match what those modules export."""

import tokpool as tp


def test_every_lazy_name_resolves_and_is_exported_by_its_module():
    import importlib

    for name, module in tp._LAZY_NAMES.items():
        assert name in importlib.import_module(module).__all__, (name, module)
        assert getattr(tp, name) is getattr(importlib.import_module(module), name)
        assert name in tp.__all__


def test_public_plot_and_explorer_functions_are_reachable_from_tp():
    import tokpool.plots as plots
    import tokpool.widgets as widgets

    for module in (plots, widgets):
        for name in module.__all__:
            if name.startswith(("plot_", "render_")) or name.endswith("_explorer"):
                assert name in tp._LAZY_NAMES, f"{module.__name__}.{name} is not tp.{name}"
