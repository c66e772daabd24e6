"""DegeneracyMonitor on scripted rewards: observed rates, i.i.d. predictions, EMA, starved share."""

from types import SimpleNamespace

import pytest
import torch

from lit_grpo import GRPO, ExactMatch, WeightedSum
from lit_grpo.callbacks import DegeneracyMonitor
from lit_grpo.types import PromptBatch, RolloutStats

ONE_PROCESS = SimpleNamespace(trainer=SimpleNamespace(world_size=1))


def _metrics(monitor, rewards, ids=None, advantages=None):
    rewards = torch.tensor(rewards, dtype=torch.float32)
    ids = ids or [f"p{i}" for i in range(rewards.shape[0])]
    advantages = GRPO()(rewards) if advantages is None else torch.tensor(advantages)
    return monitor.step_metrics(ONE_PROCESS, ids, rewards, advantages)


def f(p, G):
    return p**G + (1 - p) ** G


def test_observed_rates_use_a_tolerance_and_split_correct_and_wrong():
    rewards = [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0], [1, 1, 1, 1 - 1e-7], [float("nan"), 1, 1, 1]]
    m = _metrics(DegeneracyMonitor(), rewards)
    assert m["rollout/degenerate_frac"] == pytest.approx(4 / 5)  # 1 - 1e-7 counts as equal (atol 1e-6)
    assert m["rollout/all_correct_frac"] == pytest.approx(3 / 5)
    assert m["rollout/all_wrong_frac"] == pytest.approx(1 / 5)
    p = (4 + 0 + 2 + 4 + 3) / 19
    assert m["rollout/pooled_success_rate"] == pytest.approx(p, abs=1e-6)
    assert m["rollout/degenerate_iid_pred"] == pytest.approx(f(p, 4), abs=1e-6)
    assert m["rollout/degenerate_excess"] == pytest.approx(4 / 5 - f(p, 4), abs=1e-6)


def test_heterogeneous_groups_exceed_the_pooled_prediction():
    # half the prompts always succeed, half never: pooled rate 0.5 predicts 2 * 0.5^4 = 1/8 degenerate
    m = _metrics(DegeneracyMonitor(), [[1, 1, 1, 1], [0, 0, 0, 0]] * 4)
    assert m["rollout/degenerate_frac"] == 1.0
    assert m["rollout/degenerate_iid_pred"] == pytest.approx(0.125)
    assert m["rollout/degenerate_excess"] == pytest.approx(0.875)


def test_homogeneous_groups_match_the_pooled_prediction_on_average():
    gen = torch.Generator().manual_seed(0)
    rewards = (torch.rand(20000, 4, generator=gen) < 0.3).float()
    m = _metrics(DegeneracyMonitor(), rewards.tolist())
    assert m["rollout/degenerate_excess"] == pytest.approx(0.0, abs=0.01)


def test_per_prompt_prediction_uses_only_earlier_visits():
    monitor = DegeneracyMonitor(ema_decay=0.5)
    first = _metrics(monitor, [[1, 1, 1, 0], [0, 0, 0, 0]], ids=["a", "b"])
    assert first["rollout/ema_coverage"] == 0.0
    assert "rollout/degenerate_ema_pred" not in first  # no estimate yet: not logged as a number
    second = _metrics(monitor, [[1, 1, 1, 1], [0, 1, 0, 0], [1, 0, 0, 0]], ids=["a", "b", "c"])
    assert second["rollout/ema_coverage"] == pytest.approx(2 / 3)
    pred = (f(0.75, 4) + f(0.0, 4)) / 2  # the first visit's rates, not this step's
    assert second["rollout/degenerate_ema_pred"] == pytest.approx(pred)
    assert second["rollout/degenerate_ema_excess"] == pytest.approx((1 + 0) / 2 - pred)
    assert monitor.tracker.get(["a", "b"]).tolist() == pytest.approx([0.875, 0.125])


def test_starved_fraction_counts_exact_zero_advantages_of_scorable_completions():
    adv = [[0.0, 0.0, 0.5, -0.5], [0.0, 0.0, 0.0, 0.0]]
    m = _metrics(DegeneracyMonitor(), [[1, 1, 1, 0], [0, 0, 0, float("nan")]], advantages=adv)
    assert m["rollout/starved_frac"] == pytest.approx(5 / 7)


def test_state_round_trips():
    monitor = DegeneracyMonitor()
    _metrics(monitor, [[1, 0, 1, 1]], ids=["x"])
    other = DegeneracyMonitor()
    other.load_state_dict(monitor.state_dict())
    assert other.tracker.get(["x"]).tolist() == [0.75]


def _outputs(rewards):
    rewards = torch.tensor(rewards)
    n = rewards.numel()
    batch = PromptBatch(
        prompts=["q"] * rewards.shape[0],
        references=["1"] * rewards.shape[0],
        ids=[str(i) for i in range(rewards.shape[0])],
    )
    stats = RolloutStats(
        batch, ["t"] * n, rewards, torch.zeros_like(rewards), torch.ones(n), torch.zeros(n, dtype=bool)
    )
    return {"loss": torch.tensor(0.0), "rollout": stats}


def test_non_binary_rewards_are_refused_with_the_fix():
    monitor = DegeneracyMonitor()
    with pytest.raises(ValueError, match="DegeneracyMonitor needs binary rewards.*0.5.*ExactMatch"):
        monitor.on_train_batch_end(None, ONE_PROCESS, _outputs([[0.5, 1.0, 0.0, 1.0]]), None, 0)


def test_setup_refuses_a_reward_known_not_to_be_binary():
    module = SimpleNamespace(estimator=GRPO(), group_size=4, reward=WeightedSum([ExactMatch(), ExactMatch()]))
    trainer = SimpleNamespace(loggers=[object()])
    with pytest.raises(ValueError, match="DegeneracyMonitor needs binary rewards.*WeightedSum"):
        DegeneracyMonitor().setup(trainer, module, "fit")
    module.reward = WeightedSum([ExactMatch()])  # one component with weight 1 is binary
    DegeneracyMonitor().setup(trainer, module, "fit")


def test_options_are_validated():
    with pytest.raises(ValueError, match="atol=-1"):
        DegeneracyMonitor(atol=-1)
    with pytest.raises(ValueError, match="decay"):
        DegeneracyMonitor(ema_decay=1.0)


def test_resampled_unbiased_prediction_against_the_observed_groups():
    monitor = DegeneracyMonitor(resample_every_n_steps=1, resample_samples=16)
    fresh = torch.zeros(2, 16, dtype=torch.float64)
    fresh[0, :4] = 1.0  # prompt a: 4 of 16 correct; prompt b: none
    monitor._resampled = (["a", "b"], fresh)
    rewards = torch.tensor([[1.0, 0, 1, 0], [0, 0, 0, 0]])  # a mixed, b all wrong: observed 1 of 2
    m = monitor.resample_metrics(["a", "b"], rewards, 4)
    pred = (0.272527 + 1.0) / 2  # METHODS.md golden value: n = 16, c = 4, G = 4 gives 0.272527
    assert m["rollout/degenerate_resample_pred"] == pytest.approx(pred, abs=1e-6)
    assert m["rollout/degenerate_resample_excess"] == pytest.approx(0.5 - pred, abs=1e-6)
    assert m["rollout/resample_success_rate"] == pytest.approx(4 / 32)
    assert m["rollout/degenerate_resample_pooled_pred"] == pytest.approx(f(4 / 32, 4))
    assert m["rollout/resample_prompts"] == 2.0
    # a prompt the step did not keep (filter_degenerate) is left out
    assert monitor.resample_metrics(["a"], rewards[:1], 4)["rollout/resample_prompts"] == 1.0


def test_resampled_prediction_is_unbiased_for_iid_groups():
    gen = torch.Generator().manual_seed(0)
    rates = torch.rand(4000, generator=gen)  # heterogeneous prompts
    fresh = (torch.rand(4000, 16, generator=gen) < rates[:, None]).double()
    groups = (torch.rand(4000, 4, generator=gen) < rates[:, None]).float()
    monitor = DegeneracyMonitor(resample_every_n_steps=1)
    monitor._resampled = ([str(i) for i in range(4000)], fresh)
    m = monitor.resample_metrics([str(i) for i in range(4000)], groups, 4)
    assert m["rollout/degenerate_resample_excess"] == pytest.approx(0.0, abs=0.02)
    # the pooled prediction misses the heterogeneity (Jensen): far below
    assert m["rollout/degenerate_resample_pooled_pred"] < m["rollout/degenerate_resample_pred"] - 0.1


def test_resample_options_are_checked():
    with pytest.raises(ValueError, match="resample_every_n_steps"):
        DegeneracyMonitor(resample_every_n_steps=-1)
    with pytest.raises(ValueError, match="resample_samples"):
        DegeneracyMonitor(resample_samples=1)


def test_resampling_in_a_fit_logs_and_leaves_training_unchanged(fit_run):
    plain = fit_run([DegeneracyMonitor()], max_steps=3, name="plain")
    resampled = fit_run([DegeneracyMonitor(resample_every_n_steps=2, resample_samples=8)], max_steps=3, name="re")
    for a, b in zip(plain.module.policy.parameters(), resampled.module.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    from tests.callbacks.events import read_events

    ev = read_events(resampled.log_dir)
    assert [e.step for e in ev.Scalars("rollout/degenerate_resample_pred")] == [0, 2]
    assert "rollout/degenerate_resample_pred" not in read_events(plain.log_dir).Tags()["scalars"]
