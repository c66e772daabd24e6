"""Scoring completions without letting one item, or one reward call, stop the run.

Every reward that scores item by item goes through :func:`score_items`. An item whose scorer raises
gets NaN and is counted, never a silent 0, and the run goes on. Hangs are a different matter: a
Python function cannot be interrupted from the outside in a thread, so :func:`score_items` takes a
:class:`~lit_grpo.rewards.pool.ScoringPool` that runs the items in worker processes with a
wall-clock limit each.

Every reward call of a run, whatever the reward, goes through :class:`RewardGuard` and
:func:`call_reward`: a call that raises is NaN for its items and counted, a call past its time limit
likewise (:func:`time_limit`), ``inf`` becomes NaN, a wrong number of scores is an error naming the
reward, and the standard counters are filled in for rewards that do not count themselves.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from math_verify.errors import TimeoutException
from torch import Tensor

from lit_grpo.checks import require
from lit_grpo.rewards.base import PROMPT_ARGS, Unscorable
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


@dataclass(frozen=True)
class Counted:
    """An item score together with the counter it increments, e.g. ``Counted(0.0, "no_answer")``."""

    score: float
    counter: str


#: ``fn(completion, reference, **row) -> float | Counted``, where ``row`` holds the item's columns.
ItemScorer = Callable[..., float | Counted]


def _log_once(name: str, kind: str, message: str, exc: BaseException | None = None) -> None:
    """Logs ``message`` (with ``exc``'s traceback) the first time reward ``name`` fails this way."""
    if (name, kind) not in _logged:
        _logged.add((name, kind))
        logger.warning("%s (logged once for reward %r; see its counters)", message, name, exc_info=exc)


def check_lengths(completions: Sequence[str], references: Sequence[Any], columns: Mapping) -> int:
    """``N``, after checking that ``references`` and every column have one value per completion."""
    n = len(completions)
    require(
        len(references) == n,
        f"got {n} completions but {len(references)} references; pass one reference per completion",
    )
    for key, values in columns.items():
        require(len(values) == n,
                f"column {key!r} has {len(values)} values but there are {n} completions; "
                "pass one value per completion")
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
    n = check_lengths(completions, references, columns)
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
    """``reward(completions, references, **columns)`` through the checks every reward call gets.

    - A reward that raises an ``Exception`` as a whole gives NaN for every item of the call, counted in
      ``errors``; the first such failure of each reward is logged with its traceback, and the run goes on.
    - What it returns is checked (:func:`checked_output`): a wrong type or number of scores raises an
      error naming the reward's class and what it returned; ``inf`` scores become NaN, counted in
      ``errors``; the standard counters are filled in for rewards that do not count themselves.
    """
    return _call(reward, completions, references, columns)[0]


def _call(reward: RewardFunction, completions: list[str], references: list[str], columns: Mapping[str, Any]
          ) -> tuple[RewardOutput, Exception | None]:
    """:func:`call_reward`'s output and the exception the call raised, if it did. The prompts and
    conversations go only to a reward that reads them (``needs_prompts``)."""
    if not reward.needs_prompts:
        columns = {k: v for k, v in columns.items() if k not in PROMPT_ARGS}
    try:
        out = reward(completions, references, **columns)
    except Exception as exc:
        _log_once(reward.name, "call", f"reward {reward.name!r} raised: {type(exc).__name__}: {exc}", exc)
        return failed_output(reward.name, len(completions), "errors"), exc
    return checked_output(reward, out, len(completions)), None


def failed_output(name: str, n: int, counter: str) -> RewardOutput:
    """NaN for all ``n`` items of a call that failed as a whole, each counted in ``counter``."""
    scores = torch.full((n,), math.nan)  # [N]
    counters = dict.fromkeys(STANDARD_COUNTERS, 0) | {counter: n}
    return RewardOutput(scores=scores, terms={name: scores}, counters=counters)


def checked_output(reward: RewardFunction, out: Any, n: int) -> RewardOutput:
    """``out`` of ``reward`` for ``n`` completions, checked and made uniform.

    Raises ``TypeError``/``ValueError`` naming the reward's class when ``out`` is not a
    :class:`RewardOutput` with ``scores [n]``: that is a bug of the reward, not of an item. Returns float32
    scores with ``inf`` replaced by NaN (counted in ``errors`` and logged once; ``inf`` in a term becomes
    NaN too), counters holding :data:`STANDARD_COUNTERS`, and every NaN score that no standard counter
    accounts for counted in ``unscorable``.
    """
    cls, name = type(reward).__qualname__, reward.name
    contract = (
        f"{cls}.__call__ must return RewardOutput(scores=<float tensor of shape [{n}]>), "
        "one score per completion"
    )
    if not isinstance(out, RewardOutput):
        raise TypeError(f"reward {name!r} returned {type(out).__name__} for {n} completions; {contract}")
    scores = out.scores
    if not isinstance(scores, Tensor):
        raise TypeError(f"reward {name!r} returned scores of type {type(scores).__name__}; {contract}")
    require(tuple(scores.shape) == (n,),
            f"reward {name!r} returned scores of shape {tuple(scores.shape)} for {n} completions; {contract}")
    scores = scores.detach().float()  # [N]
    counters: Counter = Counter(dict.fromkeys(STANDARD_COUNTERS, 0))
    counters.update({k: int(v) for k, v in out.counters.items()})
    infinite = torch.isinf(scores)
    if infinite.any():
        counters["errors"] += int(infinite.sum())
        _log_once(
            name, "non-finite", f"reward {name!r} returned non-finite scores ({cls}); using NaN for them"
        )
        scores = scores.masked_fill(infinite, math.nan)
    terms = {
        k: v.masked_fill(torch.isinf(v), math.nan) if v.is_floating_point() else v
        for k, v in out.terms.items()
    }
    unaccounted = int(torch.isnan(scores).sum()) - sum(counters[k] for k in STANDARD_COUNTERS)
    if unaccounted > 0:
        counters["unscorable"] += unaccounted
        _log_once(
            name,
            "nan",
            f"reward {name!r} returned NaN for {unaccounted} of {n} completions ({cls}); they "
            "count as unscorable and train as nothing",
        )
    return RewardOutput(scores=scores, terms=terms, counters=dict(counters))


# ---- a time limit for every reward call ---------------------------------------------------------------
#: Default wall-clock limit of one reward call (every completion of a step), in seconds.
DEFAULT_REWARD_TIMEOUT_S = 300.0
#: A reward that fails on every item of each of its first this many calls (raises, runs past its time
#: limit, or scores NaN) stops the run: it is broken, and training on all-NaN rewards would only waste the
#: compute.
FAIL_FAST_CALLS = 3


class RewardTimeout(BaseException):
    """Raised in the main thread when a reward call runs past its time limit.

    A ``BaseException`` (like math-verify's ``TimeoutException``), so that a reward's own
    ``except Exception`` does not swallow it and :func:`score_items` does not count it as one item's.
    """


@contextmanager
def time_limit(seconds: float | None, what: str | None = None) -> Iterator[bool]:
    """Raises :class:`RewardTimeout` in the block when it runs longer than ``seconds`` (wall clock).

    A watchdog thread waits ``seconds``, then sends ``SIGALRM`` to the main thread, whose handler (installed
    for the block) raises; a blocking call (``sleep``, a socket read) is interrupted, Python code stops at
    the next instruction. While another handler holds ``SIGALRM`` (math-verify's own per-parse timeout) the
    signal is sent again every 0.1 s until ours takes it. The thread ends and the previous handler is back
    when the block ends, whatever happens. Only the main thread can take signals: elsewhere (and with
    ``seconds=None``) there is no limit and the block runs as is; yields whether the limit is enforced, and
    says so once per ``what`` (``"reward 'x'"``, ``"tool calls"``) when a limit was asked for.
    Code that never returns to Python (a C loop holding the GIL) cannot be stopped this way; a
    :class:`~lit_grpo.rewards.pool.ScoringPool` kills its worker instead.
    """
    if seconds is None or threading.current_thread() is not threading.main_thread():
        if seconds is not None and what is not None and (what, "no-limit") not in _logged:
            _logged.add((what, "no-limit"))
            logger.warning(
                "%s runs outside the main thread, where its time limit of %g s cannot "
                "be enforced (logged once)",
                what,
                seconds,
            )
        yield False
        return
    done, fired = threading.Event(), threading.Event()

    def handler(signum: int, frame: Any) -> None:
        if not (done.is_set() or fired.is_set()):  # one shot: a late signal never raises after the block
            fired.set()
            raise RewardTimeout(f"ran past its time limit of {seconds:g} s")

    def watch(main: int) -> None:
        if done.wait(seconds):
            return
        while not (done.is_set() or fired.is_set()):
            signal.pthread_kill(main, signal.SIGALRM)
            done.wait(0.1)

    previous = signal.signal(signal.SIGALRM, handler)
    watchdog = threading.Thread(target=watch, args=(threading.main_thread().ident,), name="reward-time-limit",
                                daemon=True)
    watchdog.start()
    try:
        yield True
    finally:
        done.set()
        watchdog.join()
        # None: set outside Python
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)


class RewardGuard:
    """The one path of a training run's reward calls: :func:`call_reward` under a wall-clock limit.

    A call past ``timeout_s`` gives NaN for each of its items, counted in ``timeouts`` (logged once per
    reward), and the run goes on; a :class:`~lit_grpo.rewards.pool.ScoringPool` the reward was using is
    killed with its workers. A reward that fails on every item of each of its first ``fail_after`` calls
    (raising, timing out, or scoring NaN) stops the run with an error naming it: it is broken, not unlucky.

    Args:
        timeout_s: Wall-clock limit of one call in seconds; None: no limit (see :func:`time_limit`).
        fail_after: Calls after which an always-failing reward stops the run (0: never stop).
    """

    def __init__(
        self, timeout_s: float | None = DEFAULT_REWARD_TIMEOUT_S, fail_after: int = FAIL_FAST_CALLS
    ) -> None:
        require(timeout_s is None or (isinstance(timeout_s, (int, float)) and 0 < timeout_s < math.inf),
                f"reward_timeout_s={timeout_s!r} must be a number of seconds > 0, or null for no limit")
        require(fail_after >= 0, f"fail_after={fail_after} must be >= 0 (0: never stop the run)")
        self.timeout_s, self.fail_after = timeout_s, fail_after
        self.calls = 0  # calls so far
        self.failed_calls = 0  # of those, calls where every item failed
        self.first_error: BaseException | None = None  # what the first failed call raised (when it raised)

    def __call__(
        self, reward: RewardFunction, completions: list[str], references: list[str], **columns: Any
    ) -> RewardOutput:
        n, name = len(completions), reward.name
        try:
            with time_limit(self.timeout_s, f"reward {name!r}"):
                out, error = _call(reward, completions, references, columns)
        except RewardTimeout as exc:
            _log_once(
                name,
                "call-timeout",
                f"reward {name!r} {exc} on a call of {n} completions; they count as "
                "timeouts (raise reward_timeout_s if the reward is only slow)",
            )
            out, error = failed_output(name, n, "timeouts"), TimeoutError(f"reward {name!r} {exc}")
        self._track(name, out, n, error)
        return out

    def _track(self, name: str, out: RewardOutput, n: int, error: BaseException | None) -> None:
        self.calls += 1
        failed = n > 0 and bool(torch.isnan(out.scores).all())  # raised, timed out or returned NaN: no signal
        self.failed_calls += failed
        if failed and self.first_error is None:
            self.first_error = error
        if self.fail_after and self.calls == self.failed_calls == self.fail_after:
            raise RuntimeError(
                f"reward {name!r} failed on every completion of each of its first {self.fail_after} calls "
                f"(errors {out.counters.get('errors', 0)}, timeouts {out.counters.get('timeouts', 0)}, "
                f"unscorable {out.counters.get('unscorable', 0)} of {n} in the last one): it is broken, and "
                "training on NaN rewards learns nothing. The first failure is logged above with its "
                "traceback (and chained below); fix the reward (call it on a few completions by hand), or "
                "raise reward_timeout_s if it is only slow."
            ) from self.first_error
