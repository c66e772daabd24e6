"""The matplotlib figure on the Agg canvas that every figure of lit-grpo starts from (the diagnostics' and the
lab's), or ``None`` with one warning per extra where matplotlib is missing: the callers skip the figure."""

from __future__ import annotations

import warnings
from typing import Any

from lit_grpo.extras import install_hint

#: the optional extra that installs matplotlib (``lab`` installs it too); each caller names its own
EXTRA = "plots"

#: the extras whose missing matplotlib a figure has already reported (once per extra and process)
_FIGURES_WARNED: set[str] = set()


def agg_figure(figsize: tuple[float, float], extra: str, without: str) -> Any | None:
    """A matplotlib ``Figure`` drawn by the Agg canvas (no pyplot: no global backend or figure registry,
    nothing to close), or ``None`` without matplotlib, warning once per ``extra`` what ``without`` it still
    gives and the command that installs it."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        if extra not in _FIGURES_WARNED:
            _FIGURES_WARNED.add(extra)
            # stacklevel: the caller of the figure function that asked its module's new_figure
            warnings.warn(f"matplotlib is not installed, so {without}; install it with "
                          f"`{install_hint(extra)}`", stacklevel=4)
        return None
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig
