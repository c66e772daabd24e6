"""A prompt curriculum: training prompts whose running pass rate is about 1 (or 0) are retired.

A group whose completions all succeed (or all fail) has zero advantage under every centred estimator: the
prompt costs a rollout and teaches nothing. The curriculum keeps a running pass rate per prompt id (an
exponential moving average of its groups' mean rewards) and retires a prompt once the rate crosses a
threshold; ``GRPOModule`` then skips retired prompts when it draws and tops the batch up from the refill
stream. The state (rates and retired ids) is saved in the module's checkpoint, apart from the data stream's
position, so a resumed run retires exactly the prompts the uninterrupted run would.
"""

from __future__ import annotations

import math
from typing import Any

from lit_grpo.checks import require


class PromptCurriculum:
    """Retires a prompt once its running pass rate is ``>= retire_above`` or ``<= retire_below``.

    After each visit (one group of completions) of a prompt, its rate becomes ``r`` on the first visit and
    ``(1 - smoothing) * rate + smoothing * r`` after, where ``r`` is the group's mean reward over its scorable
    completions (the pass rate for 0/1 rewards; a group with none scorable is not a visit). A prompt with at
    least ``min_visits`` visits is retired when its rate crosses a threshold, for the rest of the run. Logged
    as ``rollout/retired_prompts`` (retired so far) and ``rollout/skipped_prompts`` (retired prompts drawn and
    skipped this step).

    Args:
        retire_above: Retire a prompt once its running rate is at least this (null = never; 1 with 0/1 rewards
            and ``smoothing`` 1: the last visit solved every completion).
        retire_below: Retire a prompt once its running rate is at most this (null = never; 0: never solved).
        min_visits: Visits before a prompt can be retired.
        smoothing: Weight of the newest visit in the running rate, in (0, 1] (1 = the last visit alone).
    """

    def __init__(
        self,
        retire_above: float | None = 0.95,
        retire_below: float | None = None,
        min_visits: int = 2,
        smoothing: float = 0.5,
    ) -> None:
        require(retire_above is not None or retire_below is not None,
                "PromptCurriculum: set retire_above (e.g. 0.95) or retire_below (e.g. 0.0), or drop the "
                "curriculum")
        require(retire_above is None or retire_below is None or retire_below < retire_above,
                f"PromptCurriculum: retire_below={retire_below} must be < retire_above={retire_above}")
        require(min_visits >= 1, f"PromptCurriculum: min_visits={min_visits} must be >= 1")
        require(0 < smoothing <= 1, f"PromptCurriculum: smoothing={smoothing} must be in (0, 1]")
        self.retire_above, self.retire_below = retire_above, retire_below
        self.min_visits, self.smoothing = min_visits, smoothing
        self._rates: dict[str, list[float]] = {}  # id -> [rate, visits]
        self._retired: dict[str, str] = {}  # id -> "solved" or "unsolved"

    def active(self, ids: list[str]) -> list[int]:
        """Positions of the prompts of ``ids`` that are not retired."""
        return [i for i, name in enumerate(ids) if name not in self._retired]

    def observe(self, visits: list[tuple[str, float]]) -> None:
        """Fold in ``(id, mean reward of its group)`` visits (NaN = nothing scorable: skipped), in order."""
        for name, reward in visits:
            if math.isnan(reward) or name in self._retired:
                continue
            rate, count = self._rates.get(name, (reward, 0))
            rate = reward if count == 0 else (1 - self.smoothing) * rate + self.smoothing * reward
            self._rates[name] = [rate, count + 1]
            if count + 1 >= self.min_visits:
                if self.retire_above is not None and rate >= self.retire_above:
                    self._retired[name] = "solved"
                elif self.retire_below is not None and rate <= self.retire_below:
                    self._retired[name] = "unsolved"

    def rate(self, name: str) -> float | None:
        """The running rate of prompt ``name`` (None before its first visit)."""
        return self._rates[name][0] if name in self._rates else None

    @property
    def retired(self) -> dict[str, str]:
        """Retired prompt ids and why (``solved`` or ``unsolved``)."""
        return dict(self._retired)

    def state_dict(self) -> dict[str, Any]:
        return {"rates": {k: list(v) for k, v in self._rates.items()}, "retired": dict(self._retired)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rates = {k: [float(v[0]), int(v[1])] for k, v in state.get("rates", {}).items()}
        self._retired = dict(state.get("retired", {}))

    def __repr__(self) -> str:
        return (f"PromptCurriculum(retire_above={self.retire_above!r}, retire_below={self.retire_below!r}, "
                f"min_visits={self.min_visits!r}, smoothing={self.smoothing!r})")
