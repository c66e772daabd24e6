"""AdvantageStats on scripted steps: the sign shares skip steps without a non-zero advantage."""

from types import SimpleNamespace

import pytest

from lit_grpo import SignBalance
from lit_grpo.callbacks import AdvantageStats
from tests.callbacks.scripted import advance, scripted_trainer, step_outputs


def test_pos_share_is_written_only_at_steps_with_a_non_zero_advantage():
    trainer = scripted_trainer()
    module = SimpleNamespace(trainer=trainer, estimator=SignBalance(), group_size=4)
    cb = AdvantageStats(histogram_every_n_steps=0, figure_every_n_steps=0)
    est = SignBalance()
    steps = [
        [[1, 0, 0, 0], [1, 1, 0, 0]],  # mixed groups: SignBalance is zero-sum, positive share exactly 0.5
        [[0, 0, 0, 0], [0, 0, 0, 0]],  # all wrong: every advantage 0, no share to measure
        [[1, 1, 1, 0], [0, 0, 0, 0]],
    ]
    for rewards in steps:
        cb.on_train_batch_end(trainer, module, step_outputs(rewards, est(_t(rewards))), None, 0)
        advance(trainer)
    logged = trainer.loggers[0].metrics
    assert [s for s, _ in logged["adv/pos_share"]] == [0, 2]  # the all-zero step is left out
    assert [v for _, v in logged["adv/pos_share"]] == pytest.approx([0.5, 0.5])
    assert logged["adv/nonzero_steps"][-1] == (2, 2.0) and logged["adv/steps"][-1] == (2, 3.0)
    # the old behaviour, a 0 averaged in for the all-zero step, would have given 1/3 here
    mean = sum(v for _, v in logged["adv/pos_share"]) / len(logged["adv/pos_share"])
    assert mean == pytest.approx(0.5)
    state = cb.state_dict()
    fresh = AdvantageStats()
    fresh.load_state_dict(state)
    assert (fresh.steps, fresh.nonzero_steps) == (3, 2)


def _t(rewards):
    import torch

    return torch.tensor(rewards, dtype=torch.float32)
