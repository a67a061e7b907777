"""Old module paths keep importing, with a deprecation warning that names the new place.

``import tokpool.metadata`` (now ``tokpool.pooler.metadata``), ``from tokpool.engine_check import
...`` (now ``tokpool.engine.check`` and its neighbours) or ``import tokpool.sim.hardware`` (the
simulator before its rooms) still work: the old path becomes a module whose names are looked up,
in order, in the modules that hold them now. The root package installs the finder on import
(``tokpool/__init__.py``); the README's "Moved module paths" table lists the same entries.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

from ._deprecation import TokpoolDeprecationWarning

_SIM_MOVES: dict[str, tuple[str, ...]] = {  # round four: tokpool.sim split into rooms
    "analysis": ("results.analysis",),
    "closed_form": ("backends.closed_form",),
    "cluster": ("vllm_rules.kv_cache", "results.kv_share"),
    "counting": ("backends.counting",),
    "hardware": ("vllm_rules.devices", "vllm_rules.models", "backends.timing"),
    "ledger": ("memory.ledger",),
    "loop": ("backends.loop",),
    "model_config": ("vllm_rules.hf_config",),
    "result": ("results.result",),
    "scheduler": ("schedule.scheduler",),
    "source": ("backends.source",),
    "step_memory": ("memory.views", "vllm_rules.step_memory"),
    "tensor": ("backends.tensor",),
    "trace": ("results.trace",),
    "vllm_args": ("vllm_rules.args",),
}

#: old module (full path) -> the modules that now hold its names (first match wins)
MOVED_MODULES: dict[str, tuple[str, ...]] = {
    **{f"tokpool.sim.{old}": tuple(f"tokpool.sim.{h}" for h in homes)
       for old, homes in _SIM_MOVES.items()},
    # round six (issue 44): the three wings
    "tokpool.metadata": ("tokpool.pooler.metadata",),
    "tokpool.pooling": ("tokpool.pooler.pooling",),
    "tokpool.heads": ("tokpool.pooler.heads",),
    "tokpool.poolers": ("tokpool.pooler.poolers",),
    "tokpool.keep_rule": ("tokpool.pooler.keep_rule",),
    "tokpool.ownership": ("tokpool.pooler.ownership",),
    "tokpool.pooling_params": ("tokpool.pooler.pooling_params",),
    "tokpool.vllm_bridge": ("tokpool.pooler.vllm_bridge",),
    "tokpool.tasks": ("tokpool.pooler.tasks",),
    "tokpool.task_names": ("tokpool.pooler.task_names",),
    "tokpool.st_config": ("tokpool.sim.vllm_rules.st_config",),
    "tokpool.late_interaction.late_chunking": ("tokpool.pooler.late_chunking",),
    "tokpool.late_interaction.paths": ("tokpool.sim.vllm_rules.scoring_path",),
    "tokpool.engine_check": ("tokpool.engine.check", "tokpool.engine.vllm_venv",
                             "tokpool.engine.flags", "tokpool.engine.prepare",
                             "tokpool.engine.compare", "tokpool.engine.report"),
    "tokpool.engine_score": ("tokpool.engine.score",),
    "tokpool.widgets.explorers": ("tokpool.widgets.base", "tokpool.widgets.tokens",
                                  "tokpool.widgets.rewards", "tokpool.widgets.ownership",
                                  "tokpool.widgets.memory"),
    "tokpool.sim.vllm_rules.engine": (  # split by idea (issue 44)
        "tokpool.sim.vllm_rules.cudagraph", "tokpool.sim.vllm_rules.batch_limits",
        "tokpool.sim.vllm_rules.defaults", "tokpool.sim.vllm_rules.scheduling",
        "tokpool.pooler.task_names", "tokpool.sim.vllm_rules.devices"),
}


class _MovedModule(types.ModuleType):
    def __init__(self, name: str, homes: tuple[str, ...]) -> None:
        super().__init__(name)
        self.__homes = [importlib.import_module(home) for home in homes]

    def __getattr__(self, attr: str):
        for home in self.__homes:
            if hasattr(home, attr):
                return getattr(home, attr)
        raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        homes = MOVED_MODULES[spec.name]
        warnings.warn(
            f"{spec.name} moved to {', '.join(homes)}; import from there",
            TokpoolDeprecationWarning, stacklevel=3)
        return _MovedModule(spec.name, homes)

    def exec_module(self, module) -> None:
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED_MODULES:
            return importlib.machinery.ModuleSpec(fullname, _Loader())
        return None


def install() -> None:
    """Register the finder once (idempotent). It goes first on ``sys.meta_path``: an old path
    must never be found as a stale file (a ``.pyc`` or an old checkout's module)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
