"""The reward-function interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from lit_grpo.types import RewardOutput


class RewardFunction(ABC):
    """Scores ``N`` completions against their references.

    ``columns`` holds extra per-completion fields of the data (each a list of length ``N``). A reward that
    sets ``needs_prompts = True`` also gets ``prompts`` (each completion's prompt text, ``[N]``) and
    ``conversations`` (``[N]`` chat message lists: the prompt as a user turn and the completion as the
    assistant's; for a multi-turn episode every message of it); other rewards never see them.
    A completion that cannot be scored gets NaN and is counted in ``RewardOutput.counters``
    (``unscorable``, ``errors``, ``timeouts``), never a silent 0.
    """

    #: Whether every score is 0 or 1 (NaN aside): ``True``/``False`` when the reward knows, ``None`` when it
    #: does not say. Diagnostics that need binary rewards refuse a reward that declares ``False``.
    binary: bool | None = None
    #: Whether the reward reads ``prompts`` and ``conversations`` (see above).
    needs_prompts: bool = False

    @abstractmethod
    def __call__(self, completions: list[str], references: list[str], **columns: Any) -> RewardOutput:
        """``completions [N]``, ``references [N]`` -> ``RewardOutput`` with ``scores [N]``."""

    @property
    def name(self) -> str:
        """Name under which the reward's term is logged (``reward/<name>``)."""
        return type(self).__name__


#: The keyword arguments a reward with ``needs_prompts`` gets beside the data's columns.
PROMPT_ARGS = ("prompts", "conversations")


class Unscorable(Exception):
    """Raised by an item scorer when the item cannot be scored: NaN, counted under ``counter``.

    An expected outcome (a reference that does not parse, say), so it is counted but not logged.
    """

    def __init__(self, counter: str = "unscorable", reason: str = "") -> None:
        super().__init__(reason or counter)
        self.counter = counter
        self.reason = reason

    def __reduce__(self):  # pickles through worker processes with its counter
        return (type(self), (self.counter, self.reason))
