"""Lightning callbacks for lit-grpo runs. Each docstring lists the metric names it writes."""

from callbacks.export import SavePretrained
from callbacks.heldout import HeldOutReport

__all__ = ["SavePretrained", "HeldOutReport"]
