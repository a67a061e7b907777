"""The one warning class of tokpool's deprecations (old names, old module paths, old values).

A ``DeprecationWarning`` subclass, so ``pytest.warns(DeprecationWarning)`` and users' filters
keep working; the test suite turns it into an error (``pyproject.toml``: a test that uses an old
name fails), except where ``tests/test_lazy_names.py`` checks the old names still warn.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["TokpoolDeprecationWarning", "deprecated_alias"]


class TokpoolDeprecationWarning(DeprecationWarning):
    """A tokpool name, module path or value that moved; the message names the new one."""


def deprecated_alias(func: Callable[..., Any], old: str, new: str) -> Callable[..., Any]:
    """``func`` under its old name ``old``: it works and warns once per call site with the new
    name ``new``."""

    @functools.wraps(func)
    def alias(*args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"{old} is now {new}; use the new name", TokpoolDeprecationWarning,
                      stacklevel=2)
        return func(*args, **kwargs)

    alias.__name__ = old.rsplit(".", 1)[-1]
    alias.__qualname__ = alias.__name__
    alias.__doc__ = f"Deprecated: the old name of ``{new}``."
    return alias
