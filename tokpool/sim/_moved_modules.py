"""Old module paths of ``tokpool.sim`` (before it was split into rooms) keep importing.

``import tokpool.sim.hardware`` (or ``from tokpool.sim.cluster import ...``) still works and
warns once with the new place. Every public name lives on in ``tokpool.sim`` itself, or in one
of the rooms listed here.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

from .._deprecation import TokpoolDeprecationWarning

#: old module -> the modules that now hold its names (first match wins)
MOVED_MODULES: dict[str, tuple[str, ...]] = {
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
_PREFIX = __name__.rsplit(".", 1)[0] + "."  # "tokpool.sim."


class _MovedModule(types.ModuleType):
    def __init__(self, name: str, homes: tuple[str, ...]) -> None:
        super().__init__(name)
        self.__homes = [importlib.import_module(_PREFIX + home) for home in homes]

    def __getattr__(self, attr: str):
        for home in self.__homes:
            if hasattr(home, attr):
                return getattr(home, attr)
        raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        old = spec.name.removeprefix(_PREFIX)
        homes = MOVED_MODULES[old]
        warnings.warn(
            f"{spec.name} moved to {', '.join(_PREFIX + h for h in homes)}; import from there "
            "(or use the names on tokpool.sim)", TokpoolDeprecationWarning, stacklevel=3)
        return _MovedModule(spec.name, homes)

    def exec_module(self, module) -> None:
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(_PREFIX) and fullname.removeprefix(_PREFIX) in MOVED_MODULES:
            return importlib.machinery.ModuleSpec(fullname, _Loader())
        return None


def install() -> None:
    """Register the finder once (idempotent)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
