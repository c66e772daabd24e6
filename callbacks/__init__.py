"""Lightning callbacks for lit-grpo runs. Each docstring lists the metric names it writes."""

from callbacks.advantage_stats import AdvantageStats
from callbacks.budget import GradientBudget
from callbacks.degeneracy import DegeneracyMonitor
from callbacks.export import SavePretrained
from callbacks.fidelity import GradientFidelity
from callbacks.gradient_rank import GradientRank
from callbacks.heldout import HeldOutReport
from callbacks.passk import PassAtK, PassAtKMetric
from callbacks.samples import CompletionSamples
from callbacks.shadow import ShadowEstimators
from callbacks.test_split import TestSplitReport
from callbacks.weight_curve import WeightCurve

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
]
