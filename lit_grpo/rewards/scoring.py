"""Scoring completions one at a time without letting one item stop the run.

Every reward that scores item by item goes through :func:`score_items`. An item whose scorer raises
gets NaN and is counted, never a silent 0, and the run goes on. Hangs are a different matter: a
Python function cannot be interrupted from the outside in a thread, so :func:`score_items` takes a
:class:`~lit_grpo.rewards.pool.ScoringPool` that runs the items in worker processes with a
wall-clock limit each. :func:`call_reward` guards a whole reward call the same way.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from math_verify.errors import TimeoutException

from lit_grpo.types import RewardOutput

if TYPE_CHECKING:
    from lit_grpo.rewards.base import RewardFunction
    from lit_grpo.rewards.pool import ScoringPool

logger = logging.getLogger(__name__)

#: Counter keys every reward reports, 0 when nothing happened.
STANDARD_COUNTERS = ("errors", "timeouts", "unscorable")

# (reward name, kind) pairs already logged: each kind of failure is logged once per reward and
# process; the counters carry the rate from then on.
_logged: set[tuple[str, str]] = set()


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


@dataclass(frozen=True)
class Counted:
    """An item score together with the counter it increments, e.g. ``Counted(0.0, "no_answer")``."""

    score: float
    counter: str


#: ``fn(completion, reference, **row) -> float | Counted``, where ``row`` holds the item's columns.
ItemScorer = Callable[..., float | Counted]


def _log_once(name: str, kind: str, message: str) -> None:
    if (name, kind) not in _logged:
        _logged.add((name, kind))
        logger.warning("%s (logged once for reward %r; see its counters)", message, name)


def _check_lengths(completions: Sequence[str], references: Sequence[Any], columns: Mapping) -> int:
    n = len(completions)
    if len(references) != n:
        raise ValueError(
            f"got {n} completions but {len(references)} references; pass one reference per completion"
        )
    for key, values in columns.items():
        if len(values) != n:
            raise ValueError(
                f"column {key!r} has {len(values)} values but there are {n} completions; "
                "pass one value per completion"
            )
    return n


def _score_one(call: Callable[[], Any], name: str, counters: Counter) -> float:
    """One item's score from ``call()``; failures become NaN and are counted."""
    try:
        value = call()
        if isinstance(value, Counted):
            counters[value.counter] += 1
            value = value.score
        score = float(value)
    except Unscorable as exc:
        counters[exc.counter] += 1
        return math.nan
    except (TimeoutError, TimeoutException) as exc:  # math-verify's derives from BaseException
        counters["timeouts"] += 1
        _log_once(name, "timeout", f"reward {name!r} timed out on an item: {exc!r}")
        return math.nan
    except Exception as exc:
        counters["errors"] += 1
        _log_once(name, "error", f"reward {name!r} raised on an item: {type(exc).__name__}: {exc}")
        return math.nan
    if math.isnan(score):
        counters["unscorable"] += 1
    elif math.isinf(score):
        counters["errors"] += 1
        _log_once(name, "non-finite", f"reward {name!r} returned a non-finite score {score}; using NaN")
        return math.nan
    return score


def score_items(
    fn: ItemScorer,
    completions: Sequence[str],
    references: Sequence[Any],
    *,
    name: str,
    columns: Mapping[str, Sequence[Any]] | None = None,
    counter_keys: Iterable[str] = (),
    pool: ScoringPool | None = None,
) -> RewardOutput:
    """Scores ``N`` items with ``fn(completion, reference, **row)``, one at a time (or in ``pool``).

    Per item, ``fn`` returns a float or a :class:`Counted`, or raises :class:`Unscorable`. Any other
    ``Exception`` gives NaN and ``counters["errors"] += 1``; ``TimeoutError`` and math-verify's
    ``TimeoutException`` give NaN and ``counters["timeouts"] += 1``; the first failure of each kind
    is logged once per reward with its message. A returned NaN counts as ``unscorable``; a returned
    ``inf`` is a bug of the scorer: NaN, counted in ``errors`` and logged. ``KeyboardInterrupt`` and
    other non-``Exception`` signals propagate.

    Without ``pool`` this bounds failures, not time: an ``fn`` that hangs hangs here. With a
    :class:`~lit_grpo.rewards.pool.ScoringPool` the items run in its worker processes (``fn`` must be
    picklable) and an item past the pool's wall-clock limit is a timeout; one whose worker died is an
    error.

    Returns ``scores [N]`` (float32), ``terms {name: scores}`` and counters holding
    :data:`STANDARD_COUNTERS` and ``counter_keys`` (0 when unused) plus anything ``fn`` counted.
    """
    columns = dict(columns or {})
    n = _check_lengths(completions, references, columns)
    counters: Counter = Counter(dict.fromkeys((*STANDARD_COUNTERS, *counter_keys), 0))
    items = [((completions[i], references[i]), {k: v[i] for k, v in columns.items()}) for i in range(n)]
    if pool is None:
        calls = [partial(fn, *args, **row) for args, row in items]
    else:
        calls = [partial(_unwrap, outcome) for outcome in pool.map(fn, items)]
    values = [_score_one(call, name, counters) for call in calls]
    scores = torch.tensor(values, dtype=torch.float32)  # [N]
    return RewardOutput(scores=scores, terms={name: scores}, counters=dict(counters))


def _unwrap(outcome: tuple[bool, Any]) -> Any:
    ok, value = outcome
    if not ok:
        raise value
    return value


def call_reward(
    reward: RewardFunction, completions: list[str], references: list[str], **columns: Any
) -> RewardOutput:
    """``reward(completions, references, **columns)``, where a reward that raises as a whole gives NaN
    for every item, counted in ``errors`` (and logged once), instead of stopping the run."""
    try:
        return reward(completions, references, **columns)
    except Exception as exc:
        name = reward.name
        _log_once(name, "call", f"reward {name!r} raised: {type(exc).__name__}: {exc}")
        scores = torch.full((len(completions),), math.nan)  # [N]
        counters = dict.fromkeys(STANDARD_COUNTERS, 0) | {"errors": len(completions)}
        return RewardOutput(scores=scores, terms={name: scores}, counters=counters)
