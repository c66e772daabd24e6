"""Scoring in worker processes: wall-clock timeouts, dead workers, math-verify in a pool."""

import math
import operator
import os
import pickle
import time

import pytest

from lit_grpo.rewards import MathVerify, ScoringPool, score_items

# The scorers below are builtins, which pickle by reference into the workers: a sleep stands for a
# hung scorer, os._exit for a worker that dies.


@pytest.fixture(scope="module")
def pool():
    pool = ScoringPool(workers=2, timeout_s=2.0)
    yield pool
    pool.close()


def test_values_and_exceptions_come_back_in_order(pool):
    outcomes = pool.map(math.sqrt, [((4.0,), {}), ((-1.0,), {}), ((9.0,), {})])
    assert outcomes[0] == (True, 2.0) and outcomes[2] == (True, 3.0)
    ok, error = outcomes[1]
    assert not ok and isinstance(error, RuntimeError) and "ValueError in a scoring worker" in str(error)


def test_a_hung_item_times_out_and_the_others_still_score(pool):
    restarts = pool.restarts
    start = time.monotonic()
    outcomes = pool.map(time.sleep, [((0.01,), {}), ((60,), {}), ((0.01,), {}), ((0.01,), {})])
    assert time.monotonic() - start < 30
    assert [ok for ok, _ in outcomes] == [True, False, True, True]
    assert isinstance(outcomes[1][1], TimeoutError) and "2 s (wall clock)" in str(outcomes[1][1])
    assert pool.restarts == restarts + 1  # the hung worker was killed and the pool recreated
    assert pool.map(abs, [((-3,), {})]) == [(True, 3)]


def test_a_dead_worker_is_an_error_for_its_item_only(pool):
    outcomes = pool.map(os._exit, [((1,), {})])
    assert not outcomes[0][0] and "worker died" in str(outcomes[0][1])
    mixed = pool.map(operator.call, [((abs, -1), {}), ((os._exit, 1), {}), ((abs, -2), {}), ((abs, -3), {})])
    assert [o[0] for o in mixed] == [True, False, True, True]
    assert [mixed[i][1] for i in (0, 2, 3)] == [1, 2, 3]


def test_score_items_counts_pool_timeouts_and_errors(pool):
    # operator.call(completion, reference): "completions" are the functions, "references" their argument
    out = score_items(
        operator.call, [abs, time.sleep, math.sqrt, os._exit], [-2, 60, -1, 3], name="pooled", pool=pool
    )
    assert out.scores[0] == 2.0 and all(math.isnan(v) for v in out.scores[1:].tolist())
    assert out.counters == {"errors": 2, "timeouts": 1, "unscorable": 0}


CASES = [
    ("#### 72", "72"),
    ("\\boxed{\\frac{1}{2}}", "0.5"),
    ("<answer>\\sqrt{18}</answer>", "3\\sqrt{2}"),
    ("#### 71", "72"),
    ("no answer here", "72"),
    ("#### 72", "???"),
    ("#### 72", ""),
]


def test_math_verify_in_a_pool_matches_in_process():
    in_process = MathVerify()([c for c, _ in CASES], [r for _, r in CASES])
    reward = MathVerify(workers=2)
    assert reward._pool is None  # created on first use
    try:
        pooled = reward([c for c, _ in CASES], [r for _, r in CASES])
        assert reward._pool is not None
        assert pickle.loads(pickle.dumps(reward))._pool is None  # never pickled with the reward
    finally:
        reward.close()
    pairs = zip(in_process.scores.tolist(), pooled.scores.tolist(), strict=True)
    assert all(math.isnan(a) == math.isnan(b) for a, b in pairs)
    assert [v for v in pooled.scores.tolist() if not math.isnan(v)] == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert (
        pooled.counters
        == in_process.counters
        == {"errors": 0, "timeouts": 0, "unscorable": 2, "no_answer": 1}
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"workers": -1}, "workers=-1"), ({"wall_timeout_s": 0}, "wall_timeout_s=0"),
     ({"start_method": "fork"}, "start_method='fork'")],
)  # fmt: skip
def test_pool_options_are_validated(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MathVerify(**kwargs)
    with pytest.raises(ValueError, match="workers=0 must be >= 1"):
        ScoringPool(workers=0, timeout_s=1.0)
