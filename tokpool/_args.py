"""Argument checks shared by the public functions: whole numbers, finite numbers, choices,
texts, lists and paths, each refused with its name, what it must be and what it got.

One function per kind of value, so every entry point words a refusal the same way and none
guesses: ``3.0`` is not a token count, ``"no"`` is not ``False``, a ``set`` has no order, a
string is not a list of prompts. Each raises ``TypeError`` for the wrong kind of value and
``ValueError`` for a value of the right kind out of range, and returns the value normalised
(a NumPy or 0-d tensor integer becomes an ``int``, a sequence a ``list``).

Example:
    >>> from tokpool._args import whole
    >>> whole("max_num_seqs", 0, minimum=1)
    Traceback (most recent call last):
    ValueError: max_num_seqs must be a whole number >= 1, got 0
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

T = TypeVar("T")

#: The largest count of tokens, sequences or blocks vLLM's tensors can index (int32).
INT32_MAX = 2**31 - 1


class MissingFileError(FileNotFoundError, ValueError):
    """A file tokpool was pointed at (or ships) is not there; the message says how to get it.
    Both a ``FileNotFoundError`` (an ``OSError``) and a ``ValueError``: a wrong path is bad
    input."""


def _show(value: Any) -> str:
    text = repr(value)
    return (text if len(text) <= 60 else text[:57] + "...") + f" ({type(value).__name__})"


def as_whole(value: Any) -> int | None:
    """``value`` as an ``int`` when it is a whole number of an integer type (Python, NumPy, a
    0-d integer tensor), else ``None``; ``bool`` and floats (``3.0`` too) are not."""
    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, torch.Tensor) and value.ndim == 0 and not (
            value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool):
        return int(value.item())
    return None


def whole(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None,
          optional: bool = False, why: str = "") -> int | None:
    """A whole number (``int``, NumPy or 0-d tensor integer) in ``[minimum, maximum]``.

    Args:
        name: the parameter, flag or control, for the message.
        why: appended to the range (e.g. the engine rule that sets ``maximum``).

    Raises:
        TypeError: not an integer (a float, bool, str, ...), or ``None`` unless ``optional``.
        ValueError: out of range.
    """
    if value is None and optional:
        return None
    n = as_whole(value)
    span = _span(minimum, maximum)
    if n is None:
        raise TypeError(f"{name} must be a whole number{span}{' or None' if optional else ''}, "
                        f"got {_show(value)}{why}")
    if (minimum is not None and n < minimum) or (maximum is not None and n > maximum):
        shown = f"{n:,}" if abs(n) >= 10_000 else str(n)
        raise ValueError(f"{name} must be a whole number{span}, got {shown}{why}")
    return n


def _span(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f" from {minimum:,} to {maximum:,}"
    if minimum is not None:
        return f" >= {minimum:,}"
    return f" <= {maximum:,}" if maximum is not None else ""


def number(name: str, value: Any, *, low: float | None = None, high: float | None = None,
           optional: bool = False) -> float | None:
    """A finite real number (not a bool, not a str) in ``[low, high]``.

    Raises:
        TypeError: not a real number.
        ValueError: NaN, infinite, or out of range.
    """
    if value is None and optional:
        return None
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer |
                                                            np.floating):
        raise TypeError(f"{name} must be a number{_bounds(low, high)}, got {_show(value)}")
    x = float(value)
    if not math.isfinite(x) or (low is not None and x < low) or (high is not None and x > high):
        raise ValueError(f"{name} must be a finite number{_bounds(low, high)}, got {value!r}")
    return x


def _bounds(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f" from {low:g} to {high:g}"
    if low is not None:
        return f" >= {low:g}"
    return f" <= {high:g}" if high is not None else ""


def flag(name: str, value: Any) -> bool:
    """``True`` or ``False`` (or a NumPy bool); ``"no"``, ``0`` and ``None`` are refused.

    Raises:
        TypeError: anything else.
    """
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {_show(value)}; a string such as 'no' "
                    "is truthy and would silently mean True")


def choice(name: str, value: Any, options: Iterable[T]) -> T:
    """One of ``options`` (compared with ``==``; unhashable values are refused, not raised).

    Raises:
        ValueError: not among the options (they are listed).
    """
    allowed = list(options)
    try:
        ok = value in allowed
    except TypeError:
        ok = False
    if isinstance(value, bool) and not any(isinstance(o, bool) for o in allowed):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be one of {allowed}, got {_show(value)}")
    return value


def text(name: str, value: Any, *, empty: bool = False) -> str:
    """A ``str``; blank (empty or only whitespace) only with ``empty=True``.

    Raises:
        TypeError: not a ``str``.
        ValueError: blank.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {_show(value)}")
    if not empty and not value.strip():
        raise ValueError(f"{name} is empty; give some text")
    return value


def items(name: str, value: Any, *, empty: bool = False, what: str = "a list") -> list[Any]:
    """A list, tuple or other ordered sequence (a NumPy array or a tensor too) as a ``list``;
    a ``str``, ``bytes``, ``dict`` or ``set`` is refused (a string is not a list of its
    characters; a set has no order).

    Raises:
        TypeError: not an ordered sequence.
        ValueError: empty, unless ``empty=True``.
    """
    if isinstance(value, str | bytes | dict | set | frozenset) or value is None or not (
            isinstance(value, Sequence) or hasattr(value, "__array__")):
        raise TypeError(f"{name} must be {what}, got {_show(value)}")
    out = list(value)
    if not out and not empty:
        raise ValueError(f"{name} is empty; give at least one")
    return out


def each(name: str, values: Sequence[Any], check: Callable[[str, Any], T]) -> list[T]:
    """``check(f"{name}[i]", v)`` for every item (the first bad one names its index)."""
    return [check(f"{name}[{i}]", v) for i, v in enumerate(values)]


def path(name: str, value: Any) -> Path:
    """A ``str`` or ``os.PathLike`` as a ``Path`` (an empty string is refused).

    Raises:
        TypeError: another type.
        ValueError: an empty string.
    """
    if not isinstance(value, str | os.PathLike):
        raise TypeError(f"{name} must be a path (str or os.PathLike), got {_show(value)}")
    if not os.fspath(value).strip():
        raise ValueError(f"{name} is an empty path")
    return Path(value)


def writable_file(name: str, value: Any) -> Path:
    """A file path that can be written now: not a folder, its folder exists.

    Raises:
        TypeError: not a path.
        ValueError: a folder, a missing folder, or a folder that cannot be written.
    """
    file = path(name, value).expanduser()
    if file.is_dir():
        raise ValueError(f"{name} {str(file)!r} is a folder; give a file name in it")
    parent = file.parent if str(file.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"{name} {str(file)!r}: the folder {str(parent)!r} does not exist; "
                         "create it first")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"{name} {str(file)!r}: the folder {str(parent)!r} is not writable")
    return file
