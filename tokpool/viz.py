"""Every figure and explorer in one namespace: ``tp.viz`` = ``tokpool.plots`` + ``tokpool.widgets``.

``plot_*`` functions draw into matplotlib axes; ``render_*`` functions return a ``View`` (HTML,
PNG, table); ``*_explorer`` functions build the ipywidgets explorers. Importing this module
imports matplotlib and ipywidgets, which is why ``import tokpool`` does not import it.
"""

from . import plots as _plots
from . import widgets as _widgets
from .plots import *  # noqa: F403
from .widgets import *  # noqa: F403

__all__ = [*_plots.__all__, *_widgets.__all__]
