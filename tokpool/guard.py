"""A memory guard: refuse an allocation that cannot fit, before making it.

A long prompt makes big tensors (a 1M-token ``token_embed`` output on an 8B model is tens of
GiB). Without a guard the allocator fails part-way, or the kernel's OOM killer ends the Jupyter
kernel. ``ensure_fits`` compares an estimate with a limit first and raises ``MemoryLimitError``
(a ``ValueError``) that states the bytes needed, the limit, how to raise it, and a cheaper way.

The limit, in order:

1. ``TOKPOOL_MEMORY_LIMIT`` when set: bytes with an optional suffix — ``K``/``M``/``G``/``T``
   (or ``KiB``… ) are powers of 1024, ``KB``/``MB``/``GB``/``TB`` powers of 1000, so ``32G`` is
   32 GiB — or a percentage of the available memory (``90%``), or ``off`` for no limit.
2. Otherwise ``DEFAULT_FRACTION`` (80 %) of the memory available now: for the host, the smaller
   of ``MemAvailable`` (``/proc/meminfo``, else ``psutil``) and the cgroup's headroom
   (containers); for a CUDA device, its free memory (``torch.cuda.mem_get_info``).

Example:
    >>> from tokpool.guard import ensure_fits
    >>> ensure_fits(2**40, what="the token_embed outputs", cheaper="task='embed'")
    Traceback (most recent call last):
    tokpool.guard.MemoryLimitError: the token_embed outputs would need about 1.00 TiB (...) ...
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import torch

from ._text import format_bytes

#: Environment variable that sets the limit (see the module docstring for the syntax).
MEMORY_LIMIT_ENV = "TOKPOOL_MEMORY_LIMIT"
#: Share of the available memory a single operation may use when no limit is set.
DEFAULT_FRACTION = 0.8

_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgtp", start=1):
    _UNITS[_p] = _UNITS[f"{_p}ib"] = 1024**_i
    _UNITS[f"{_p}b"] = 1000**_i
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
_OFF = ("off", "none", "unlimited", "inf")


class MemoryLimitError(ValueError):
    """An operation would need more memory than the limit; the message says how to proceed."""


def parse_bytes(text: str) -> int:
    """``"32G"`` → 34359738368, ``"32GB"`` → 32000000000, ``"512"`` → 512.

    Raises:
        ValueError: text that is not a non-negative finite size (the text is quoted).
    """
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"cannot read {text!r} as a memory size; write bytes with an optional suffix: "
            "K/M/G/T (powers of 1024, e.g. 32G), KB/MB/GB/TB (powers of 1000), or a "
            "percentage such as 90%"
        )
    value = float(match.group(1)) * _UNITS[unit]
    if not math.isfinite(value):
        raise ValueError(f"memory size {text!r} is not finite")
    return int(value)


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_headroom() -> int | None:
    root = Path("/sys/fs/cgroup")
    for limit_file, usage_file in (("memory.max", "memory.current"),  # cgroup v2
                                   ("memory/memory.limit_in_bytes",
                                    "memory/memory.usage_in_bytes")):  # cgroup v1
        try:
            limit = (root / limit_file).read_text().strip()
            usage = int((root / usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= 2**60:
            return None
        return max(0, int(limit) - usage)
    return None


def available_bytes(device: torch.device | str | None = None) -> int | None:
    """Memory available now on ``device`` (host RAM for ``None``/CPU), or ``None`` if unknown."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return None
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free)
    if dev.type != "cpu":
        return None
    host = _meminfo_available()
    if host is None:
        try:
            import psutil
        except ImportError:
            psutil = None
        if psutil is not None:
            host = int(psutil.virtual_memory().available)
    headroom = _cgroup_headroom()
    known = [b for b in (host, headroom) if b is not None]
    return min(known) if known else None


def memory_limit(device: torch.device | str | None = None) -> tuple[int | None, str]:
    """The limit ``ensure_fits`` applies on ``device`` and where it comes from.

    Returns:
        ``(bytes or None for no limit, a short description of its source)``.

    Raises:
        ValueError: ``TOKPOOL_MEMORY_LIMIT`` holds something that is not a size.
    """
    raw = os.environ.get(MEMORY_LIMIT_ENV, "").strip()
    where = "host memory" if device is None or torch.device(device).type == "cpu" else str(device)
    if raw.lower() in _OFF:
        return None, f"{MEMORY_LIMIT_ENV}={raw} (no limit)"
    if raw.endswith("%"):
        try:
            share = float(raw[:-1]) / 100
        except ValueError:
            share = -1.0
        if not 0 < share <= 1:
            raise ValueError(f"{MEMORY_LIMIT_ENV}={raw!r}: a percentage must be in (0%, 100%]")
        free = available_bytes(device)
        if free is None:
            return None, f"{MEMORY_LIMIT_ENV}={raw} of unknown available {where} (no limit)"
        return int(free * share), f"{MEMORY_LIMIT_ENV}={raw} of the {format_bytes(free)} " \
            f"available {where}"
    if raw:
        try:
            return parse_bytes(raw), f"{MEMORY_LIMIT_ENV}={raw}"
        except ValueError as err:
            raise ValueError(f"{MEMORY_LIMIT_ENV}: {err}") from None
    free = available_bytes(device)
    if free is None:
        return None, f"available {where} unknown (no limit)"
    return int(free * DEFAULT_FRACTION), (
        f"{DEFAULT_FRACTION:.0%} of the {format_bytes(free)} available {where}"
    )


def ensure_fits(
    nbytes: int,
    *,
    what: str,
    cheaper: str,
    device: torch.device | str | None = None,
) -> None:
    """Refuse, before allocating, an operation whose estimated peak exceeds the memory limit.

    Args:
        nbytes: the estimated peak bytes of the operation.
        what: what would be allocated, for the message (e.g. ``"tensor-mode simulation of 1
            prompt of 600,000 tokens"``).
        cheaper: a cheaper alternative, for the message (e.g. ``"mode='analytic'"``).
        device: where the bytes would live (``None``: host memory).

    Raises:
        MemoryLimitError: ``nbytes`` exceeds the limit; the message gives both numbers, the
            limit's source, how to raise it and the cheaper alternative.
        TypeError: ``nbytes`` is not an int.
        ValueError: a negative ``nbytes``, or an unreadable ``TOKPOOL_MEMORY_LIMIT``.
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(f"nbytes must be an int, got {nbytes!r}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    limit, source = memory_limit(device)
    if limit is None or nbytes <= limit:
        return
    raise MemoryLimitError(
        f"{what} would need about {format_bytes(nbytes)} ({nbytes:,} bytes) but the memory "
        f"limit is {format_bytes(limit)} ({source}). Cheaper: {cheaper}. Or raise the limit, "
        f"e.g. {MEMORY_LIMIT_ENV}={_suggest(nbytes)} (or {MEMORY_LIMIT_ENV}=off), if the "
        "memory is really there"
    )


def _suggest(nbytes: int) -> str:
    gib = max(1, math.ceil(nbytes * 1.1 / 2**30))
    return f"{gib}G"
