"""The one warning class of tokpool's deprecations (old names, old module paths, old values).

A ``DeprecationWarning`` subclass, so ``pytest.warns(DeprecationWarning)`` and users' filters
keep working; the test suite turns it into an error (``pyproject.toml``: a test that uses an old
name fails), except where ``tests/test_lazy_names.py`` checks the old names still warn.
"""

from __future__ import annotations

__all__ = ["TokpoolDeprecationWarning"]


class TokpoolDeprecationWarning(DeprecationWarning):
    """A tokpool name, module path or value that moved; the message names the new one."""
