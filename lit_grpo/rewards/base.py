"""The reward-function interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from lit_grpo.types import RewardOutput


class RewardFunction(ABC):
    """Scores ``N`` completions against their references.

    ``columns`` holds extra per-completion fields of the data (each a list of length ``N``).
    A completion that cannot be scored gets NaN and is counted in ``RewardOutput.counters``
    (``unscorable``, ``errors``, ``timeouts``), never a silent 0.
    """

    #: Whether every score is 0 or 1 (NaN aside): ``True``/``False`` when the reward knows, ``None`` when it
    #: does not say. Diagnostics that need binary rewards refuse a reward that declares ``False``.
    binary: bool | None = None

    @abstractmethod
    def __call__(self, completions: list[str], references: list[str], **columns: Any) -> RewardOutput:
        """``completions [N]``, ``references [N]`` -> ``RewardOutput`` with ``scores [N]``."""

    @property
    def name(self) -> str:
        """Name under which the reward's term is logged (``reward/<name>``)."""
        return type(self).__name__
