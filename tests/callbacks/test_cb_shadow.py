"""ShadowEstimators: every estimator on the run's own rollouts, one gradient pass for all of them."""

import math
from types import SimpleNamespace

import pytest
import torch

from lit_grpo import GPG, GRPO, RLOO, DrGRPO, MaxRL, PassAtK, ReinforcePlusPlus, Sign
from lit_grpo.callbacks import GradientProbe, ShadowEstimators
from lit_grpo.diagnostics.gradients import gradient_row_blocks, select_linear_targets, take_rows
from lit_grpo.diagnostics.shadow import (
    budget_by_bin,
    cosine_matrix,
    estimator_label,
    sequence_weights,
    starved_groups,
    unique_labels,
)
from lit_grpo.lab.registry import MetricPattern
from lit_grpo.logprobs import sequence_logprobs
from lit_grpo.models.loading import load_policy, load_tokenizer
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.types import PromptBatch, RolloutStats, SamplingParams
from tests.callbacks.events import read_events

# --- pure pieces ----------------------------------------------------------------------------------------


def test_starved_groups_are_those_with_all_zero_advantages():
    adv = torch.tensor([[0.0, 0.0, 0.0], [0.5, -0.5, 0.0], [0.0, -0.0, 0.0], [1.0, 1.0, 1.0]])
    assert starved_groups(adv).tolist() == [True, False, True, False]


def test_cosine_matrix_of_known_vectors_and_zero_rows():
    d = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [-2.0, 0.0]])
    cos = cosine_matrix(d)
    assert cos[0, 1].item() == pytest.approx(1 / math.sqrt(2))
    assert cos[0, 3].item() == pytest.approx(-1.0)
    assert cos[1, 1].item() == pytest.approx(1.0)
    assert cos[2].isnan().all() and cos[:, 2].isnan().all()  # a zero direction has no angle
    torch.testing.assert_close(cos, cos.T, equal_nan=True)


def test_labels_are_class_names_with_the_arguments_that_differ():
    assert estimator_label(GRPO()) == "GRPO"
    assert estimator_label(GRPO(scale="batch")) == "GRPO:scale=batch"
    assert estimator_label(PassAtK(k=2, variant="normalized")) == "PassAtK:k=2,variant=normalized"
    assert unique_labels([GRPO(), Sign(), GRPO(), GRPO(std="population")]) == [
        "GRPO",
        "Sign",
        "GRPO#2",
        "GRPO:std=population",
    ]


def test_sequence_weights_follow_the_aggregation():
    lengths = torch.tensor([2, 4, 0])
    assert sequence_weights(lengths, "token-mean").tolist() == [1.0, 1.0, 1.0]
    assert sequence_weights(lengths, "seq-mean-token-mean").tolist() == [0.5, 0.25, 1.0]


def test_budget_by_bin_sums_abs_advantage_times_length_per_bin():
    adv = torch.tensor([[1.0, -1.0], [0.5, -0.5], [2.0, 0.0]])
    lengths = torch.tensor([[1, 3], [2, 2], [1, 1]])
    rate = torch.tensor([0.1, 0.6, float("nan")])  # the last prompt has no estimate
    assert budget_by_bin(adv, lengths, rate).tolist() == [4.0, 0.0, 2.0, 0.0, 0.0]


# --- directions from one pass equal one backward per estimator --------------------------------------------


@pytest.fixture(scope="module")
def policy_and_stats(sft_model_path):
    policy = load_policy(sft_model_path)
    engine = HFGenerateEngine()
    engine.bind(policy, load_tokenizer(sft_model_path))
    torch.manual_seed(0)
    prompts = ["12+7=", "3+45=", "9+9=", "40+40="]
    rollouts = engine.generate(prompts, 4, SamplingParams(max_new_tokens=5))
    rewards = torch.tensor([[1, 0, 0, 1], [1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.float32)
    batch = PromptBatch(prompts, ["19", "48", "18", "80"], [f"p{i}" for i in range(4)])
    stats = RolloutStats(
        batch,
        rollouts.texts,
        rewards,
        GRPO()(rewards),
        rollouts.lengths,
        rollouts.truncated,
        rollouts=rollouts,
    )
    return policy, stats


def _module(policy, aggregation):
    return SimpleNamespace(
        policy=policy,
        sampling=SamplingParams(max_new_tokens=5),
        aggregation=aggregation,
        device=torch.device("cpu"),
    )


def _direction_by_backward(policy, stats, adv, targets, aggregation):
    """``sum_i A_i w_i grad log pi(y_i)`` over the targets' weights, by one backward of that objective."""
    rollouts = stats.rollouts
    logp, _ = sequence_logprobs(policy, rollouts)
    w = sequence_weights(rollouts.lengths, aggregation).float()
    objective = ((logp * rollouts.completion_mask).sum(-1) * w * adv.reshape(-1)).sum()
    grads = torch.autograd.grad(objective, [t.module.weight for t in targets])
    return torch.cat([g.flatten() for g in grads]).double()


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
def test_directions_from_one_row_pass_equal_a_backward_per_estimator(policy_and_stats, aggregation):
    policy, stats = policy_and_stats
    cb = ShadowEstimators(
        [Sign(), MaxRL(), RLOO()], probe=GradientProbe(params=[r"layers\.2\.mlp\.down_proj"], micro_batch_size=5)
    )
    cb.targets, _ = select_linear_targets(policy, cb.probe.params)
    adv = torch.stack([stats.advantages, *[e(stats.rewards) for e in cb.estimators]])  # [4, P, G]
    d, rows = cb.directions(_module(policy, aggregation), stats, adv)
    assert rows == 16  # Sign weights every completion
    for e in range(adv.shape[0]):
        want = _direction_by_backward(policy, stats, adv[e], cb.targets, aggregation)
        torch.testing.assert_close(d[e], want, atol=1e-5 * want.abs().max().item(), rtol=1e-4)
    assert all(p.grad is None for p in policy.parameters())


def test_rows_of_completions_no_estimator_weights_are_not_computed(policy_and_stats):
    policy, stats = policy_and_stats
    cb = ShadowEstimators([DrGRPO(), MaxRL()], probe=GradientProbe(params=[r"layers\.2\.mlp\.down_proj"]))
    cb.targets, _ = select_linear_targets(policy, cb.probe.params)
    adv = torch.stack([stats.advantages, *[e(stats.rewards) for e in cb.estimators]])
    _, rows = cb.directions(_module(policy, "token-mean"), stats, adv)
    assert rows == 8  # the two mixed groups; the all-correct and all-wrong ones are starved for all three


def test_metrics_of_one_step_with_known_answers(policy_and_stats):
    policy, stats = policy_and_stats
    estimators = [DrGRPO(), GPG(), ReinforcePlusPlus(), GRPO(scale="batch"), Sign(), GRPO()]
    cb = ShadowEstimators(estimators, probe=GradientProbe(params=[r"layers\.2\.mlp\."]))
    cb.targets, _ = select_linear_targets(policy, cb.probe.params)
    metrics, cos, starved = cb.measure(_module(policy, "token-mean"), stats, directions=True)
    assert cb.labels == ["DrGRPO", "GPG", "ReinforcePlusPlus", "GRPO:scale=batch", "Sign", "GRPO"]
    assert starved == [0.5, 0.5, 0.5, 0.5, 0.5, 0.0, 0.5]  # train (GRPO) first; Sign starves nothing
    # GPG, REINFORCE++ and GRPO scale=batch are DrGRPO times one number of the batch: the same direction
    for name in ["GPG", "ReinforcePlusPlus", "GRPO:scale=batch"]:
        assert metrics[f"shadow/DrGRPO/cos_{name}"] == pytest.approx(1.0, abs=1e-9)
    # GPG's alpha = B / (B - M) = 16 / 8
    ratio = metrics["shadow/GPG/norm_ratio"] / metrics["shadow/DrGRPO/norm_ratio"]
    assert ratio == pytest.approx(2.0, rel=1e-9)
    assert metrics["shadow/GRPO/cos_train"] == pytest.approx(1.0, abs=1e-9)  # the run's own estimator
    assert metrics["shadow/GRPO/norm_ratio"] == pytest.approx(1.0, rel=1e-9)
    assert metrics["shadow/Sign/cos_train"] < 0.999  # all-correct and all-wrong groups pull elsewhere
    assert cos.shape == (7, 7) and metrics["shadow/rows"] == 16.0
    # budgets: the two mixed groups have success rates 0.5 and 0.25 (bins 0.5-0.7 and 0.2-0.5)
    assert metrics["shadow/DrGRPO/budget_0.0-0.2"] == 0.0 and metrics["shadow/DrGRPO/budget_0.9-1.0"] == 0.0
    assert metrics["shadow/Sign/budget_0.9-1.0"] > 0 and metrics["shadow/Sign/budget_0.0-0.2"] > 0
    shares = [
        metrics[f"shadow/Sign/budget_{b}"] for b in ["0.0-0.2", "0.2-0.5", "0.5-0.7", "0.7-0.9", "0.9-1.0"]
    ]
    assert sum(shares) == pytest.approx(1.0)


# --- configuration errors ---------------------------------------------------------------------------------


def test_bad_configurations_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="estimators is empty"):
        ShadowEstimators([])
    with pytest.raises(TypeError, match="class_path"):
        ShadowEstimators(["Sign"])
    with pytest.raises(ValueError, match="names has 1 entries for 2 estimators"):
        ShadowEstimators([Sign(), MaxRL()], names=["a"])
    with pytest.raises(ValueError, match="not 'train'"):
        ShadowEstimators([Sign()], names=["train"])


def test_an_estimator_needing_larger_groups_is_refused_at_setup(fit_run):
    with pytest.raises(ValueError, match="PassAtK:k=8 needs groups of at least 8.*group_size is 4"):
        fit_run([ShadowEstimators([PassAtK(k=8)])], max_steps=1)


# --- in a run -----------------------------------------------------------------------------------------------


def test_a_run_logs_every_estimator_and_the_figure(fit_run):
    cb = ShadowEstimators(
        [GRPO(), Sign(), MaxRL(), ReinforcePlusPlus()],
        gradient_every_n_steps=2,
        probe=GradientProbe(params=[r"layers\.2\.mlp\."], projection_dim=64),
    )
    run = fit_run([cb], max_steps=3)
    events = read_events(run.log_dir)
    tags = set(events.Tags()["scalars"])
    for label in ["train", "GRPO", "Sign", "MaxRL", "ReinforcePlusPlus"]:
        assert [e.step for e in events.Scalars(f"shadow/{label}/starved_frac")] == [0, 1, 2]
    assert [e.step for e in events.Scalars("shadow/rows")] == [0, 2]  # every 2 steps
    # a step whose groups are all degenerate gives the run no direction: counted, no cosine logged
    starved = {e.step: e.value for e in events.Scalars("shadow/train/starved_frac")}
    assert [e.step for e in events.Scalars("shadow/Sign/cos_train")] == [s for s in (0, 2) if starved[s] < 1]
    assert events.Scalars("shadow/zero_train")[-1].value == sum(starved[s] == 1 for s in (0, 2))
    assert all(e.value == 0.0 for e in events.Scalars("shadow/Sign/starved_frac"))
    for e in events.Scalars("shadow/GRPO/cos_train"):  # the run trains with GRPO()
        assert e.value == pytest.approx(1.0, abs=1e-6)
    assert {"shadow/GRPO/cos_Sign", "shadow/MaxRL/cos_ReinforcePlusPlus", "shadow/rows"} <= tags
    assert "shadow/Sign/cos_GRPO" not in tags  # each pair once
    assert [e.step for e in events.Images("shadow/estimators")] == [0, 2]
    # the declared metrics are what it wrote
    declared = [MetricPattern(m, "ShadowEstimators") for m in ShadowEstimators.metrics]
    written = {t for t in tags if t.startswith("shadow/")}
    assert {t for t in written if not any(p.matches(t) for p in declared)} == set()
    assert {p.pattern for p in declared if not any(p.matches(t) for t in written)} == set()


def test_the_callback_does_not_change_training(fit_run):
    base = fit_run([], max_steps=2, name="base")
    shadowed = fit_run(
        [ShadowEstimators([Sign(), MaxRL()], gradient_every_n_steps=1, probe=GradientProbe(params=[r"layers\.1\."]))],
        max_steps=2,
        name="shadowed",
    )
    for a, b in zip(base.module.policy.parameters(), shadowed.module.policy.parameters(), strict=True):
        assert torch.equal(a, b)


def test_scalars_only_without_gradients(fit_run):
    cb = ShadowEstimators([Sign()], gradient_every_n_steps=0)
    run = fit_run([cb], max_steps=1)
    tags = set(read_events(run.log_dir).Tags()["scalars"])
    assert "shadow/Sign/starved_frac" in tags and "shadow/Sign/cos_train" not in tags
    assert cb.targets == []


def test_take_rows_blocks_cover_every_completion(policy_and_stats):
    policy, stats = policy_and_stats
    targets, _ = select_linear_targets(policy, [r"layers\.0\.mlp\.up_proj"])
    some = take_rows(stats.rollouts, [0, 3, 5])
    blocks = list(gradient_row_blocks(policy, some, torch.ones(3), targets, micro_batch_size=2))
    assert [(s, b.shape[0]) for s, b in blocks] == [(0, 2), (2, 1)]


# --- data parallelism: two gloo ranks reproduce one process on the global batch ---------------------------


def _shadow() -> ShadowEstimators:
    estimators = [GRPO(scale="batch"), ReinforcePlusPlus(), GPG(), Sign(), MaxRL()]
    return ShadowEstimators(estimators, probe=GradientProbe(params=[r"layers\.2\.mlp\.down_proj"], micro_batch_size=3))


def _half(stats: RolloutStats, groups: list[int]) -> RolloutStats:
    from lit_grpo.rollout.functional import group_rows, select_groups

    rows = group_rows(groups, stats.group_size)
    return RolloutStats(
        stats.batch.select(groups),
        [stats.texts[i] for i in rows],
        stats.rewards[groups],
        stats.advantages[groups],
        stats.lengths[rows],
        stats.truncated[rows],
        rollouts=select_groups(stats.rollouts, groups),
    )


def _rank(rank: int, init_file: str, out: str, model: str) -> None:
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        stats = torch.load(f"{out}/stats.pt", weights_only=False)
        policy = load_policy(model)
        cb = _shadow()
        cb.targets, _ = select_linear_targets(policy, cb.probe.params)
        shard = _half(stats, [0, 1, 2] if rank == 0 else [3])  # unequal shards
        metrics, cos, starved = cb.measure(_module(policy, "token-mean"), shard, directions=True)
        torch.save((metrics, cos, starved), f"{out}/rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_reproduce_one_process_on_the_global_batch(policy_and_stats, sft_model_path, tmp_path):
    policy, stats = policy_and_stats
    torch.save(stats, tmp_path / "stats.pt")
    torch.multiprocessing.spawn(_rank, args=(str(tmp_path / "init"), str(tmp_path), sft_model_path), nprocs=2)
    cb = _shadow()
    cb.targets, _ = select_linear_targets(policy, cb.probe.params)
    want, want_cos, want_starved = cb.measure(_module(policy, "token-mean"), stats, directions=True)
    for rank in range(2):
        metrics, cos, starved = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        assert metrics.keys() == want.keys()
        for key, value in want.items():
            assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-6, nan_ok=True), key
        torch.testing.assert_close(cos, want_cos, rtol=1e-5, atol=1e-6, equal_nan=True)
        assert starved == want_starved
