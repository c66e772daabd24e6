"""Lightning callbacks for lit-grpo runs. Each declares the scalar metrics it writes in its ``metrics``
attribute (names, or patterns with a ``<placeholder>``); docs/diagnostics.md describes them."""

from lit_grpo.callbacks._probe import GradientProbe
from lit_grpo.callbacks.advantage_stats import AdvantageStats
from lit_grpo.callbacks.budget import GradientBudget
from lit_grpo.callbacks.degeneracy import DegeneracyMonitor
from lit_grpo.callbacks.export import SavePretrained
from lit_grpo.callbacks.fidelity import GradientFidelity
from lit_grpo.callbacks.gradient_rank import GradientRank
from lit_grpo.callbacks.guesses import SearchGuesses
from lit_grpo.callbacks.heldout import HeldOutReport
from lit_grpo.callbacks.passk import PassAtK, PassAtKMetric
from lit_grpo.callbacks.samples import CompletionSamples
from lit_grpo.callbacks.shadow import ShadowEstimators
from lit_grpo.callbacks.split_report import TestSplitReport
from lit_grpo.callbacks.weight_curve import WeightCurve

__all__ = [
    "SavePretrained",
    "HeldOutReport",
    "DegeneracyMonitor",
    "PassAtK",
    "PassAtKMetric",
    "GradientRank",
    "GradientBudget",
    "AdvantageStats",
    "CompletionSamples",
    "TestSplitReport",
    "WeightCurve",
    "ShadowEstimators",
    "GradientFidelity",
    "GradientProbe",
    "SearchGuesses",
]
