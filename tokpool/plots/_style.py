"""Shared plotting helpers: one style applied through ``mpl.rc_context``, axes creation, PNG export.

Nothing here touches global rcParams or calls ``plt.show()``: every plot function draws inside
``styled()`` and returns its ``Axes``.
"""

from __future__ import annotations

import difflib
import functools
import io
from collections.abc import Callable
from typing import Any, TypeVar

import matplotlib as mpl
import numpy as np
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .._text import format_bytes as format_bytes_text
from .._text import format_range  # noqa: F401  (re-exported: plots use it from here)

F = TypeVar("F", bound=Callable[..., Any])

#: The project's look, applied only while a tokpool plot function runs.
RC: dict[str, Any] = {
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.labelsize": 10,
    "legend.fontsize": 8.5,
    "legend.frameon": False,
    "xtick.labelsize": 8.5,
    "ytick.labelsize": 8.5,
    "figure.dpi": 100,
    "savefig.dpi": 200,
    "savefig.bbox": "tight",
}

#: Colours for the categorical series used across the plots (colour-blind friendly, Okabe–Ito).
OKABE_ITO: tuple[str, ...] = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # green
    "#D55E00",  # vermillion
    "#CC79A7",  # purple
    "#56B4E9",  # sky blue
    "#F0E442",  # yellow
    "#000000",
)


_backend_ready = False


def _load_backend() -> None:
    """Load pyplot's backend once, *outside* any ``rc_context``.

    Jupyter's inline backend switches interactive mode on when it is first loaded; if that
    happened inside ``rc_context``, leaving the context would switch it off again and later
    figures would silently stop showing.
    """
    global _backend_ready
    if _backend_ready:
        return
    import matplotlib.pyplot as plt

    loader = getattr(plt, "_get_backend_mod", None)
    if loader is not None:
        loader()
    else:  # pragma: no cover - older/newer matplotlib without the private hook
        plt.close(plt.figure())
    _backend_ready = True


def styled(func: F) -> F:
    """Run a plot function inside the project's ``rc_context`` (never global rcParams)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _load_backend()
        with mpl.rc_context(RC):
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def new_axes(ax: Axes | None, figsize: tuple[float, float]) -> Axes:
    """Return ``ax``, or a fresh constrained-layout figure's axes of ``figsize`` inches.

    Raises:
        TypeError: ``ax`` is neither ``None`` nor a matplotlib ``Axes``.
    """
    if ax is not None:
        if not isinstance(ax, Axes):
            raise TypeError(f"ax must be a matplotlib Axes (or None for a new figure), got "
                            f"{type(ax).__name__}")
        return ax
    import matplotlib.pyplot as plt  # pyplot only when we must create a figure

    _, new = plt.subplots(figsize=figsize, layout="constrained")
    return new


def close(fig: Figure) -> None:
    """Release a figure made by a render function (no display, no leak in pyplot's registry)."""
    import matplotlib.pyplot as plt

    plt.close(fig)


def figure_png(fig: Figure, *, dpi: int = 200, close_figure: bool = True,
               tight: bool = True) -> bytes:
    """PNG bytes of ``fig`` at ``dpi`` (200: sharp on HiDPI screens, shown at half size);
    closes it by default so render functions do not leak figures.

    ``tight=False`` saves the figure as laid out, without the tight bounding box, which
    matplotlib finds by drawing the whole figure once more: half the time, for a figure whose
    margins are fixed (the token heatmap)."""
    buf = io.BytesIO()
    with mpl.rc_context({**RC, **({} if tight else {"savefig.bbox": "standard"})}):
        fig.savefig(buf, format="png", dpi=dpi)
    if close_figure:
        close(fig)
    return buf.getvalue()


def as_numpy(x: Any, *, name: str, ndim: int | None = None, finite: bool = False,
             empty: bool = True) -> np.ndarray:
    """A float64 numpy copy of a tensor / array / sequence, with a shape check.

    Raises:
        TypeError: ``x`` is not numbers (a string, ``None``, ...).
        ValueError: ``x`` does not have ``ndim`` dimensions; is empty (``empty=False``); holds
            NaN or infinities (``finite=True``).
    """
    if x is None or isinstance(x, str | bytes):
        raise TypeError(f"{name} must be numbers (a tensor, array or list), got "
                        f"{type(x).__name__} {x!r:.40}")
    if hasattr(x, "detach"):  # torch.Tensor without importing torch here
        x = x.detach().to("cpu").float().numpy()
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be numbers, got {x!r:.40} ({err})") from None
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    if not empty and arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape}); there is nothing to draw")
    if finite and not np.isfinite(arr).all():
        raise ValueError(f"{name} holds NaN or infinite values (first at index "
                         f"{np.argwhere(~np.isfinite(arr))[0].tolist()}); draw finite values")
    return arr


def check_cmap(cmap: Any) -> None:
    """A matplotlib colormap name or ``Colormap``, else ``ValueError`` naming ``cmap``."""
    if isinstance(cmap, mpl.colors.Colormap):
        return
    if not isinstance(cmap, str) or cmap not in mpl.colormaps:
        close = difflib.get_close_matches(str(cmap), list(mpl.colormaps), n=3)
        raise ValueError(f"cmap={cmap!r} is not a matplotlib colormap"
                         f"{f'; did you mean {close}' if close else ''} (e.g. 'viridis', "
                         "'RdBu_r'; matplotlib.colormaps lists them)")


#: Byte counts on axes and in captions: three significant digits (``tokpool._text``).
format_bytes = functools.partial(format_bytes_text, significant=3)


def format_tokens(n: float) -> str:
    """Compact token count: ``131072 -> '128K'``, ``1048576 -> '1M'``."""
    n = float(n)
    if n >= 1024**2 and n % 1024**2 == 0:
        return f"{n / 1024**2:.0f}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n / 1024:.0f}K"
    if n >= 1e6:
        return f"{n / 1e6:.3g}M"
    if n >= 1e3:
        return f"{n / 1e3:.3g}k"
    return f"{n:.0f}"


#: Fewest labelled ticks an axis shows, however narrow its range.
MIN_TICKS = 3


class AtLeastTicks(ticker.Locator):
    """Ticks from ``preferred`` while it puts at least ``minimum`` in view, else finer ones.

    A log axis over 1K–2K gets one tick from a base-4 locator; then a base-2 one is tried,
    then 1-2-5 steps, then round steps of one unit (``unit``: 1024 for bytes, so 20 KiB, 25 KiB,
    ...; 1000 for counts), and last evenly spaced values, so no axis is left with one or two
    labels.
    """

    def __init__(self, preferred: ticker.Locator, *, log: bool, minimum: int = MIN_TICKS,
                 unit: int = 1000) -> None:
        self.preferred, self.log, self.minimum, self.unit = preferred, log, minimum, unit

    def set_axis(self, axis: Any) -> None:
        super().set_axis(axis)
        self.preferred.set_axis(axis)

    def __call__(self) -> Any:
        vmin, vmax = sorted(self.axis.get_view_interval())
        return self.tick_values(vmin, vmax)

    def _in_view(self, locator: ticker.Locator, vmin: float, vmax: float) -> np.ndarray:
        if getattr(self, "axis", None) is not None:
            locator.set_axis(self.axis)
        values = np.asarray(locator.tick_values(vmin, vmax), dtype=float)
        span = (vmax - vmin) * 1e-9
        return values[(values >= vmin - span) & (values <= vmax + span)]

    def tick_values(self, vmin: float, vmax: float) -> Any:
        vmin, vmax = sorted((float(vmin), float(vmax)))
        if self.log and vmin <= 0:
            vmin = max(vmin, vmax * 1e-9, np.finfo(float).tiny)
        candidates: list[ticker.Locator] = [self.preferred]
        if self.log:
            candidates.append(ticker.LogLocator(base=2, numticks=30))
            if self.unit != 1024:  # decimal steps print as round numbers of a decimal unit only
                candidates += [ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=30)]
        else:
            candidates += [ticker.MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10],
                                              min_n_ticks=self.minimum)]
        for locator in candidates:
            values = self._in_view(locator, vmin, vmax)
            if len(values) >= self.minimum:
                return values
        top = max(abs(vmin), abs(vmax), 1.0)
        scale = float(self.unit) ** max(0, int(np.log(top) // np.log(self.unit)))
        steps = ticker.MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10], min_n_ticks=self.minimum)
        values = np.asarray(steps.tick_values(vmin / scale, vmax / scale)) * scale
        values = values[(values >= vmin) & (values <= vmax) & ((values > 0) | (not self.log))]
        if len(values) >= self.minimum:
            return values
        return np.linspace(vmin, vmax, self.minimum)


def at_least_ticks(axis: Any, preferred: ticker.Locator | None = None, *, log: bool,
                   minimum: int = MIN_TICKS, unit: int = 1000) -> None:
    """Give ``axis`` (``ax.xaxis`` / ``ax.yaxis``) at least ``minimum`` major ticks
    (``AtLeastTicks`` around ``preferred``, default the axis' current locator; ``unit``:
    1024 for a bytes axis)."""
    axis.set_major_locator(AtLeastTicks(preferred or axis.get_major_locator(), log=log,
                                        minimum=minimum, unit=unit))
