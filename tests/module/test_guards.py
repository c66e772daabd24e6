"""The guards' counters (lit_grpo.settings.GuardCounts): what a non-finite or a collapsed step does."""

import math

import pytest

from lit_grpo.settings import COLLAPSED_NLL_FRACTION, GuardCounts, Guards


def test_a_finite_step_updates_and_resets_the_run_of_skipped_ones():
    counts = GuardCounts(Guards(max_nonfinite_steps=3))
    assert not counts.finite(math.nan, 1.0, step=0) and not counts.finite(1.0, math.inf, step=1)
    assert (counts.nonfinite_steps, counts.nonfinite_in_a_row) == (2, 2)
    assert counts.finite(1.0, 1.0, step=2)
    assert (counts.nonfinite_steps, counts.nonfinite_in_a_row) == (2, 0)


def test_max_nonfinite_steps_in_a_row_stop_the_run():
    counts = GuardCounts(Guards(max_nonfinite_steps=2))
    assert not counts.finite(math.nan, 1.0, step=4)
    with pytest.raises(FloatingPointError, match="the run diverged: 2 optimizer steps in a row, up to step 6"):
        counts.finite(math.nan, 1.0, step=5)


def test_on_nonfinite_raise_stops_at_the_first():
    with pytest.raises(FloatingPointError, match="set on_nonfinite: skip"):
        GuardCounts(Guards(on_nonfinite="raise")).finite(1.0, math.nan, step=0)


def test_collapsed_steps_in_a_row_stop_the_run():
    vocab = 100
    uniform = {"rollout/sampled_nll": math.log(vocab)}
    below = {"rollout/sampled_nll": 0.9 * COLLAPSED_NLL_FRACTION * math.log(vocab)}
    counts = GuardCounts(Guards(max_collapsed_steps=2))
    counts.collapse(uniform, vocab, step=0)
    counts.collapse(below, vocab, step=1)  # the run of collapsed steps starts again
    counts.collapse(uniform, vocab, step=2)
    with pytest.raises(RuntimeError, match="the run collapsed: for 2 steps in a row, up to step 3"):
        counts.collapse(uniform, vocab, step=3)


def test_no_collapse_check_without_a_limit_a_vocabulary_or_the_metric():
    for guards, vocab, metrics in [(Guards(max_collapsed_steps=None), 100, {"rollout/sampled_nll": 9.0}),
                                   (Guards(max_collapsed_steps=1), None, {"rollout/sampled_nll": 9.0}),
                                   (Guards(max_collapsed_steps=1), 100, {})]:
        counts = GuardCounts(guards)
        counts.collapse(metrics, vocab, step=0)
        assert counts.collapsed_in_a_row == 0
