"""Figures degrade to one clear warning when matplotlib is missing."""

import sys
import warnings

import pytest

from lit_grpo import figure
from lit_grpo.diagnostics import plots


def test_missing_matplotlib_warns_once_and_draws_nothing(monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it raises ImportError
    monkeypatch.setattr(figure, "_FIGURES_WARNED", set())
    with pytest.warns(UserWarning, match=r"matplotlib is not installed.*pip install 'lit-grpo\[plots\]'"):
        assert plots.pass_at_k_figure({"start": {1: 0.5, 2: 0.7}}) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second figure does not warn again
        assert plots.bar_figure(["a"], {"x": [1.0]}, "x", "y", "t") is None
        assert plots.weight_curve_figure([0.5], {"Sign": [2.0]}, 4) is None


def test_figures_are_drawn_when_matplotlib_is_there():
    pytest.importorskip("matplotlib")
    fig = plots.pass_at_k_figure({"start": {1: 0.3, 2: 0.5, 4: 0.6}, "step 9": {1: 0.5, 2: 0.6, 4: 0.6}})
    assert [line.get_label() for line in fig.axes[0].get_lines()] == ["start", "step 9"]
