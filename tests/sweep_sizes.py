"""How long the long sweeps run: a representative sample in `make test`, in full in CI.

The parity sweeps against vLLM's own code (random schedule workloads, configuration and serve-line
cases) are the same test code either way; only their size changes. `make test` (a user's check
that the install works, ≤ 20 minutes on 2 cores) runs the sample; ``.ci/run`` sets
``TOKPOOL_FULL=1`` (or pass ``pytest --full``) and every sweep runs at its full size. A sample is
the start of the full run's seeded stream (or a seeded draw from an exhaustive product), so a
difference the sample finds, the full run finds too.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

#: The environment variable that selects the full sizes (``pytest --full`` sets it).
FULL_ENV = "TOKPOOL_FULL"


def full_run() -> bool:
    """True where the sweeps run in full (``TOKPOOL_FULL=1``: CI, ``pytest --full``)."""
    return os.environ.get(FULL_ENV, "").strip().lower() not in ("", "0", "false", "no")


def sample_size(full: int, sample: int) -> int:
    """``full`` in a full run, else ``sample`` (the sweep's first ``sample`` cases).

    Example:
        >>> sample_size(full=1200, sample=300) == (1200 if full_run() else 300)
        True
    """
    if not 0 < sample <= full:
        raise ValueError(f"a sample of {sample} from {full} cases: want 0 < sample <= full")
    return full if full_run() else sample


def sample_cases(cases: Sequence[T], sample: int, seed: int = 0) -> list[T]:
    """Every case in a full run, else ``sample`` of them drawn once with ``seed`` and kept in
    their order (``pick``): an exhaustive product keeps cases from each of its corners, where
    every k-th case would fix its fastest-changing factors."""
    cases = list(cases)
    return pick(cases, sample_size(len(cases), min(sample, len(cases))), seed)


def pick(cases: Sequence[T], n: int, seed: int = 0) -> list[T]:
    """``n`` of ``cases``, a seeded draw in their order (all of them when ``n`` is their count).

    Example:
        >>> pick(list(range(10)), 4)
        [0, 2, 6, 9]
        >>> pick("abc", 3)
        ['a', 'b', 'c']
    """
    return [cases[i] for i in sorted(random.Random(seed).sample(range(len(cases)), n))]


def scaled(threshold: int, full: int, size: int) -> int:
    """A coverage floor stated for the full sweep, scaled to a sweep of ``size`` (rounded down,
    at least 1): a sample must exercise each rule in proportion, never vacuously.

    Example:
        >>> scaled(20, full=1200, size=300)
        5
    """
    return max(1, threshold * size // full)
