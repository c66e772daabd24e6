"""Every reward call goes through one guarded path: checked output, counted failures, a time limit."""

import logging
import math
import operator
import signal
import threading
import time

import pytest
import torch

from lit_grpo.rewards import RewardFunction, ScoringPool, score_items
from lit_grpo.rewards.scoring import RewardGuard, RewardTimeout, call_reward, time_limit
from lit_grpo.types import RewardOutput


class Plain(RewardFunction):
    """Returns whatever ``make(completions)`` gives: a reward written without score_items."""

    def __init__(self, make, name: str = "Plain") -> None:
        self.make, self._name = make, name

    @property
    def name(self) -> str:
        return self._name

    def __call__(self, completions, references, **columns):
        return self.make(completions)


def test_a_wrong_number_of_scores_names_the_reward_class_and_what_it_returned():
    reward = Plain(lambda c: RewardOutput(torch.zeros(len(c) - 1)), name="short-one")
    with pytest.raises(ValueError, match=r"'short-one' returned scores of shape \(3,\) for 4 completions; Plain"):
        call_reward(reward, ["a"] * 4, ["r"] * 4)


@pytest.mark.parametrize("returned", [[1.0, 0.0], torch.ones(2), None])
def test_a_return_that_is_not_a_reward_output_is_a_type_error_naming_the_contract(returned):
    with pytest.raises(TypeError, match="Plain.__call__ must return RewardOutput"):
        call_reward(Plain(lambda c: returned), ["a", "b"], ["r", "r"])


def test_scores_that_are_not_a_tensor_are_a_type_error():
    with pytest.raises(TypeError, match="scores of type list"):
        call_reward(Plain(lambda c: RewardOutput([1.0, 0.0])), ["a", "b"], ["r", "r"])


def test_inf_becomes_nan_counted_in_errors_and_logged(caplog):
    reward = Plain(lambda c: RewardOutput(torch.tensor([1.0, math.inf, -math.inf]),
                                          {"Plain": torch.tensor([1.0, math.inf, 0.0])}), name="inf-plain")
    with caplog.at_level(logging.WARNING):
        out = call_reward(reward, ["a"] * 3, ["r"] * 3)
    assert out.scores[0] == 1.0 and torch.isnan(out.scores[1:]).all()
    assert out.counters == {"errors": 2, "timeouts": 0, "unscorable": 0}
    assert torch.isnan(out.terms["Plain"][1]) and "inf-plain" in caplog.text and "non-finite" in caplog.text


def test_a_plain_reward_gets_the_standard_counters_and_its_nans_counted():
    reward = Plain(lambda c: RewardOutput(torch.tensor([1.0, math.nan, math.nan], dtype=torch.float64)))
    out = call_reward(reward, ["a"] * 3, ["r"] * 3)
    assert out.scores.dtype == torch.float32
    assert out.counters == {"errors": 0, "timeouts": 0, "unscorable": 2}


def test_nans_the_reward_counted_itself_are_not_counted_twice():
    out = score_items(lambda c, r: math.nan, ["a", "b"], ["r", "r"], name="counted-itself")
    checked = call_reward(Plain(lambda c: out), ["a", "b"], ["r", "r"])
    assert checked.counters == {"errors": 0, "timeouts": 0, "unscorable": 2}


def test_a_raising_call_is_nan_for_its_items_counted_and_logged_once_with_the_traceback(caplog):
    def boom(completions):
        raise KeyError("missing column")

    guard = RewardGuard(timeout_s=None, fail_after=0)
    with caplog.at_level(logging.WARNING):
        outs = [guard(Plain(boom, name="raising-call"), ["a", "b"], ["r", "r"]) for _ in range(2)]
    assert all(torch.isnan(o.scores).all() and o.counters["errors"] == 2 for o in outs)
    assert len([r for r in caplog.records if "raising-call" in r.getMessage()]) == 1
    assert "Traceback" in caplog.text and "in boom" in caplog.text


def test_a_reward_that_fails_on_every_call_stops_the_run_after_fail_after_calls():
    def boom(completions):
        raise RuntimeError("service down")

    guard = RewardGuard(timeout_s=None, fail_after=3)
    reward = Plain(boom, name="always-broken")
    guard(reward, ["a"], ["r"])
    guard(reward, ["a"], ["r"])
    with pytest.raises(RuntimeError, match="'always-broken' failed on every completion of each of its first 3 calls"):
        guard(reward, ["a"], ["r"])


def test_a_reward_that_returns_nan_for_everything_is_logged_and_stops_the_run_like_a_raising_one(caplog):
    guard = RewardGuard(timeout_s=None, fail_after=3)
    reward = Plain(lambda c: RewardOutput(torch.full((len(c),), math.nan)), name="all-nan")
    with caplog.at_level(logging.WARNING):
        out = guard(reward, ["a", "b"], ["r", "r"])
    assert out.counters == {"errors": 0, "timeouts": 0, "unscorable": 2}
    assert "reward 'all-nan' returned NaN for 2 of 2 completions" in caplog.text
    guard(reward, ["a"], ["r"])
    with pytest.raises(RuntimeError, match=r"'all-nan' failed on every completion .* unscorable 1 of 1"):
        guard(reward, ["a"], ["r"])


def test_a_reward_that_worked_once_never_stops_the_run():
    calls = []

    def flaky(completions):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("transient")
        return RewardOutput(torch.ones(len(completions)))

    guard = RewardGuard(timeout_s=None, fail_after=2)
    for _ in range(4):
        guard(Plain(flaky, name="flaky"), ["a"], ["r"])
    assert guard.calls == 4 and guard.failed_calls == 3


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate()}


@pytest.mark.parametrize("hang", ["sleep", "busy"])
def test_a_hanging_call_is_stopped_at_its_time_limit_counted_and_leaves_nothing_behind(hang, caplog):
    def slow(completions):
        if hang == "sleep":
            time.sleep(60)
        while True:  # pure Python: stopped between instructions
            pass

    before, handler = _threads(), signal.getsignal(signal.SIGALRM)
    guard = RewardGuard(timeout_s=0.3, fail_after=0)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        out = guard(Plain(slow, name=f"hanging-{hang}"), ["a", "b"], ["r", "r"])
    assert time.monotonic() - start < 5
    assert torch.isnan(out.scores).all() and out.counters == {"errors": 0, "timeouts": 2, "unscorable": 0}
    assert f"hanging-{hang}" in caplog.text and "0.3 s" in caplog.text
    assert _threads() == before and signal.getsignal(signal.SIGALRM) == handler


def test_a_reward_that_swallows_exceptions_is_still_stopped():
    def stubborn(completions):
        while True:
            try:
                time.sleep(60)
            except Exception:  # a reward's own error handling must not defeat the limit
                pass

    out = RewardGuard(timeout_s=0.2, fail_after=0)(Plain(stubborn), ["a"], ["r"])
    assert out.counters["timeouts"] == 1


def test_a_fast_call_is_untouched_and_no_late_signal_arrives():
    guard = RewardGuard(timeout_s=0.2)
    out = guard(Plain(lambda c: RewardOutput(torch.ones(len(c)))), ["a"], ["r"])
    assert out.scores.tolist() == [1.0]
    time.sleep(0.4)  # past the limit: the watchdog is gone, nothing is raised here


def test_the_limit_also_holds_while_a_math_verify_style_alarm_handler_is_installed():
    def own_alarm(signum, frame):  # what math-verify installs for its per-parse timeout
        raise TimeoutError("the reward's own per-item timeout")

    def scorer(completion, reference):
        previous = signal.signal(signal.SIGALRM, own_alarm)
        try:
            time.sleep(0.5)
            return 1.0
        finally:
            signal.signal(signal.SIGALRM, previous)

    reward = Plain(lambda c: score_items(scorer, c, ["r"] * len(c), name="alarmed"), name="alarmed")
    start = time.monotonic()
    out = RewardGuard(timeout_s=0.3, fail_after=0)(reward, ["a"] * 20, ["r"] * 20)
    assert time.monotonic() - start < 3  # not 20 x 0.5 s: the call was stopped
    assert torch.isnan(out.scores).all() and out.counters["timeouts"] == 20


def test_outside_the_main_thread_there_is_no_limit_and_a_warning(caplog):
    results = []

    def run():
        with caplog.at_level(logging.WARNING):
            results.append(RewardGuard(timeout_s=0.1)(Plain(lambda c: (time.sleep(0.3), RewardOutput(
                torch.ones(len(c))))[1], name="threaded"), ["a"], ["r"]))

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert results[0].scores.tolist() == [1.0]
    assert "threaded" in caplog.text and "cannot be enforced" in caplog.text


def test_time_limit_restores_the_previous_alarm_handler_after_an_error():
    handler = signal.getsignal(signal.SIGALRM)
    with pytest.raises(ValueError), time_limit(5.0):
        raise ValueError("inside")
    assert signal.getsignal(signal.SIGALRM) == handler


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan])
def test_a_bad_time_limit_names_the_option(bad):
    with pytest.raises(ValueError, match="reward_timeout_s="):
        RewardGuard(timeout_s=bad)


class Pooled(RewardFunction):
    """Scores in a worker pool whose per-item limit is longer than the call's time limit."""

    def __init__(self) -> None:
        self.pool = ScoringPool(workers=1, timeout_s=60.0, start_method="forkserver")

    def __call__(self, completions, references, **columns):
        # operator.call(completion, reference): the "completions" are functions, the "references" their argument
        return score_items(operator.call, completions, references, name="pooled", pool=self.pool)


def test_a_call_stopped_at_its_limit_kills_the_scoring_workers():
    reward = Pooled()
    try:
        assert reward([abs], [-2.0]).scores.tolist() == [2.0]  # the workers have started
        workers = list(reward.pool._executor._processes.values())
        out = RewardGuard(timeout_s=1.0, fail_after=0)(reward, [time.sleep], [30.0])
        assert out.counters["timeouts"] == 1
        assert reward.pool._executor is None and reward.pool.restarts == 1
        assert not any(w.is_alive() for w in workers)  # no worker still sleeping
    finally:
        reward.pool.close()


def test_timeouts_raised_inside_are_not_item_timeouts():
    def scorer(completion, reference):
        raise RewardTimeout("the call's limit")

    with pytest.raises(RewardTimeout):
        score_items(scorer, ["a"], ["r"], name="call-limit")
