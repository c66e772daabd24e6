import glob
import math
from unittest import mock

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import lit_grpo.losses.ppo_clip as ppo_clip_mod
import lit_grpo.module as module_mod
from lit_grpo import GRPO, RLOO, MaxRL, RewardFunction, Sign, SoftmaxGRPO
from lit_grpo.losses import AGGREGATIONS, LossOutput, PolicyLoss, PPOClip, TruncatedIS
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.types import RewardOutput
from tests.helpers import tiny_data, tiny_module, tiny_trainer


def _params(module):
    return {k: v.detach().clone() for k, v in module.policy.named_parameters()}


def test_fit_updates_parameters_and_logs_documented_metrics(tmp_path, sft_model_path):
    L.seed_everything(0)
    module = tiny_module(sft_model_path)
    logger = TensorBoardLogger(tmp_path, name="run")
    trainer = tiny_trainer(tmp_path, max_steps=3, logger=logger, log_every_n_steps=1,
                           limit_val_batches=1, val_check_interval=3, check_val_every_n_epoch=None)
    data = tiny_data()
    module.configure_model()
    before = _params(module)
    trainer.fit(module, datamodule=data)
    after = _params(module)
    assert trainer.global_step == 3
    assert any(not torch.equal(before[k], after[k]) for k in before)
    events = EventAccumulator(glob.glob(f"{logger.log_dir}/events*")[0])
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected = {
        "train/loss", "train/clip_frac", "train/entropy", "train/grad_norm", "train/lr", "train/nonfinite_steps",
        "rollout/reward_mean", "rollout/reward_std", "rollout/len_mean", "rollout/truncated_frac",
        "rollout/unscorable_frac", "rollout/prompts_drawn", "reward/ExactMatch", "reward/errors",
        "perf/generate_s", "perf/score_s", "perf/forward_s", "perf/backward_s", "perf/optimizer_s",
        "perf/step_s", "perf/tokens_per_s", "val/accuracy", "val/reward_mean",
    }
    assert expected <= tags, expected - tags
    assert len(events.Scalars("train/loss")) == 3


def test_resume_continues_from_the_checkpoint(tmp_path, sft_model_path):
    L.seed_everything(0)
    ckpt_dir = tmp_path / "ckpt"
    first = tiny_trainer(tmp_path, max_steps=2, enable_checkpointing=True,
                         callbacks=[L.pytorch.callbacks.ModelCheckpoint(dirpath=ckpt_dir, save_last=True)])
    module = tiny_module(sft_model_path)
    first.fit(module, datamodule=tiny_data())
    saved = _params(module)
    resumed_module = tiny_module(sft_model_path)
    second = tiny_trainer(tmp_path, max_steps=4)
    with mock.patch.object(module_mod.GRPOModule, "update", wraps=resumed_module.update) as update:
        second.fit(resumed_module, datamodule=tiny_data(), ckpt_path=str(ckpt_dir / "last.ckpt"))
    assert second.global_step == 4
    assert update.call_count == 2  # only the two missing steps ran
    # the resumed run started from the saved weights, not from the initial ones
    assert any(not torch.equal(saved[k], v) for k, v in _params(resumed_module).items())


class GradCapture(L.Callback):
    def __init__(self):
        self.grads = None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.grads = {k: p.grad.detach().clone() for k, p in pl_module.policy.named_parameters()}


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_micro_batches_give_the_full_batch_gradient(tmp_path, sft_model_path, aggregation):
    grads = []
    for micro in (None, 3):
        L.seed_everything(0)
        # Sign's advantages are +-1, so the step has a gradient whatever the sampled groups score
        module = tiny_module(sft_model_path, aggregation=aggregation, micro_batch_size=micro, estimator=Sign())
        capture = GradCapture()
        tiny_trainer(tmp_path, max_steps=1, callbacks=[capture]).fit(module, datamodule=tiny_data())
        grads.append(capture.grads)
    assert any(g.abs().sum() > 0 for g in grads[0].values())
    for k in grads[0]:
        torch.testing.assert_close(grads[0][k], grads[1][k], atol=1e-6, rtol=1e-4)


class ShiftedEngine(HFGenerateEngine):
    """Samples like the HF engine but reports every token's log-prob ``shift`` lower, as a mismatched engine
    would: the trainer's log-probs are then exactly ``shift`` above the engine's on every sampled token."""

    def __init__(self, shift: float):
        super().__init__()
        self.shift = shift

    def generate(self, prompts, n, sampling):
        r = super().generate(prompts, n, sampling)
        r.logprobs = (r.logprobs - self.shift) * r.completion_mask
        return r


def _first_step(tmp_path, model_path, **kwargs):
    L.seed_everything(0)
    module = tiny_module(model_path, max_grad_norm=None, **kwargs)  # gradients as computed, not clipped
    capture = GradCapture()
    trainer = tiny_trainer(tmp_path, max_steps=1, callbacks=[capture])
    trainer.fit(module, datamodule=tiny_data())
    return capture.grads, trainer.callback_metrics


@pytest.mark.parametrize(("shift", "level", "cap", "scale"), [
    (math.log(1.5), "token", 2.0, 1.5),  # each token weighted by its ratio
    (math.log(3.0), "token", 2.0, 2.0),  # ... truncated at the cap
    (math.log(3.0), "sequence", 2.0, 2.0),  # the completion's product 3^L, truncated at the cap
])
def test_truncated_importance_sampling_reweights_the_gradient(tmp_path, sft_model_path, shift, level, cap, scale):
    # Sign's advantages are +-1, so the step has a gradient whatever the sampled groups score
    plain, metrics = _first_step(tmp_path, sft_model_path, engine=ShiftedEngine(shift), estimator=Sign())
    weighted, _ = _first_step(tmp_path, sft_model_path, engine=ShiftedEngine(shift), estimator=Sign(),
                              loss=PPOClip(correction=TruncatedIS(level, cap)))
    assert any(g.abs().sum() > 0 for g in plain.values())
    for k in plain:
        torch.testing.assert_close(weighted[k], scale * plain[k], atol=1e-6, rtol=1e-4)
    # the mismatch metrics see the shift on every token: |d| = shift, k3 = exp(d) - d - 1
    assert metrics["rollout/logp_diff_mean"].item() == pytest.approx(shift, abs=1e-5)
    assert metrics["rollout/logp_diff_max"].item() == pytest.approx(shift, abs=1e-5)
    assert metrics["rollout/logp_kl_k3"].item() == pytest.approx(math.exp(shift) - shift - 1, abs=1e-5)


def test_matching_engine_has_no_mismatch_and_tis_changes_nothing(tmp_path, sft_model_path):
    plain, metrics = _first_step(tmp_path, sft_model_path)
    weighted, _ = _first_step(tmp_path, sft_model_path, loss=PPOClip(correction=TruncatedIS("token")))
    for k in plain:
        torch.testing.assert_close(weighted[k], plain[k], atol=1e-5, rtol=1e-3)
    assert 0 <= metrics["rollout/logp_diff_mean"].item() < 1e-4
    assert 0 <= metrics["rollout/logp_diff_max"].item() < 1e-3


def _counting_logprob_forwards():
    """A spy on the module's log-prob forwards (plain or shared-prefix, with gradient or frozen)."""
    return mock.patch.object(module_mod.GRPOModule, "_logprobs", autospec=True,
                             side_effect=module_mod.GRPOModule._logprobs)


@pytest.mark.parametrize(("num_iterations", "expected_calls"), [(1, 1), (2, 3)])
def test_old_logprobs_only_when_reused(tmp_path, sft_model_path, num_iterations, expected_calls):
    L.seed_everything(0)
    module = tiny_module(sft_model_path, num_iterations=num_iterations)
    with _counting_logprob_forwards() as forward:
        tiny_trainer(tmp_path, max_steps=num_iterations).fit(module, datamodule=tiny_data())
    assert forward.call_count == expected_calls
    assert module.global_step == num_iterations  # one optimizer step per pass


class Reinforce(PolicyLoss):
    """``-A logp`` per token: reads no old, engine or reference log-probs; logs a per-completion mean and a term."""

    needs_old_logp = False

    def __init__(self):
        self.seen = []

    def __call__(self, batch):
        self.seen.append((batch.old_logp, batch.engine_logp, batch.ref_logp))
        return LossOutput(-batch.advantages[:, None] * batch.logp,
                          means={"positive_frac": (batch.advantages > 0).float()},  # [n]: over completions
                          terms={"logp": batch.logp.detach()})


def test_a_loss_gets_only_the_logprobs_it_declares_and_its_statistics_are_logged(tmp_path, sft_model_path):
    L.seed_everything(0)
    loss, outputs = Reinforce(), {}

    class Grab(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, out, batch, batch_idx):
            outputs["rollout"] = out["rollout"]

    module = tiny_module(sft_model_path, loss=loss, num_iterations=2)
    trainer = tiny_trainer(tmp_path, max_steps=2, callbacks=[Grab()])
    with _counting_logprob_forwards() as forward:
        trainer.fit(module, datamodule=tiny_data())
    assert forward.call_count == 2  # one forward per pass, no frozen old log-probs
    assert loss.seen and all(x is None for seen in loss.seen for x in seen)
    metrics, adv = trainer.callback_metrics, outputs["rollout"].advantages
    assert metrics["train/positive_frac"].item() == pytest.approx((adv > 0).float().mean().item())
    assert metrics["train/logp"].item() < 0 and "train/clip_frac" not in metrics


def test_kl_reference_is_loaded_only_with_beta(tmp_path, sft_model_path):
    plain = tiny_module(sft_model_path)
    plain.configure_model()
    assert plain.ref_policy is None
    L.seed_everything(0)
    with_kl = tiny_module(sft_model_path, loss=PPOClip(beta=0.1))
    tiny_trainer(tmp_path, max_steps=2).fit(with_kl, datamodule=tiny_data())
    assert with_kl.ref_policy is not None
    assert all(not p.requires_grad for p in with_kl.ref_policy.parameters())


@pytest.mark.parametrize("estimator", [GRPO(), Sign(), RLOO(), MaxRL(), SoftmaxGRPO(tau=0.3)])
def test_each_estimator_trains(tmp_path, sft_model_path, estimator):
    L.seed_everything(0)
    module = tiny_module(sft_model_path, estimator=estimator)
    module.configure_model()
    before = _params(module)
    tiny_trainer(tmp_path, max_steps=1).fit(module, datamodule=tiny_data(prompts_per_step=8))
    assert any(not torch.equal(before[k], v) for k, v in _params(module).items())


class ConstantReward(RewardFunction):
    def __call__(self, completions, references, **columns):
        return RewardOutput(torch.ones(len(completions)), {}, {})


def test_filter_degenerate_refills_then_skips_an_all_degenerate_batch(tmp_path, sft_model_path):
    L.seed_everything(0)
    module = tiny_module(sft_model_path, reward=ConstantReward(), filter_degenerate=True, max_refill_batches=2)
    module.configure_model()
    before = _params(module)
    data = tiny_data()
    with mock.patch.object(type(data), "refill", autospec=True, side_effect=type(data).refill) as refill:
        tiny_trainer(tmp_path, max_steps=1).fit(module, datamodule=data)
    assert refill.call_count == 2
    assert all(torch.equal(before[k], v) for k, v in _params(module).items())  # nothing to learn from


def test_filter_degenerate_keeps_informative_groups(tmp_path, sft_model_path):
    L.seed_everything(0)
    module = tiny_module(sft_model_path, filter_degenerate=True, max_refill_batches=3)
    trainer = tiny_trainer(tmp_path, max_steps=1)
    outputs = {}

    class Grab(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, out, batch, batch_idx):
            outputs["rollout"] = out["rollout"]

    trainer.callbacks.append(Grab())
    trainer.fit(module, datamodule=tiny_data(prompts_per_step=8))
    stats = outputs["rollout"]
    rewards = stats.rewards
    assert rewards.shape[0] <= 8 and stats.num_drawn >= 8
    spread = rewards.max(1).values - rewards.min(1).values
    assert torch.all(spread > 0)  # every kept group varies


class NearlyConstantAboveOne(RewardFunction):
    """Rewards around 5: even groups spread by 3e-6 (constant for the estimators' relative tolerance, though above
    an absolute 1e-6), odd groups by 1."""

    def __call__(self, completions, references, **columns):
        g = 4  # tiny_module's group_size
        spread = torch.tensor([3e-6 if (i // g) % 2 == 0 else 1.0 for i in range(len(completions))])
        first = torch.tensor([i % g == 0 for i in range(len(completions))])
        return RewardOutput((5.0 + spread * first).float(), {}, {})


def test_filter_degenerate_keeps_exactly_the_groups_the_estimator_can_use(tmp_path, sft_model_path):
    L.seed_everything(0)
    module = tiny_module(sft_model_path, reward=NearlyConstantAboveOne(), filter_degenerate=True,
                         max_refill_batches=0)
    outputs = {}

    class Grab(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, out, batch, batch_idx):
            outputs["rollout"] = out["rollout"]

    tiny_trainer(tmp_path, max_steps=1, callbacks=[Grab()]).fit(module, datamodule=tiny_data(prompts_per_step=4))
    stats = outputs["rollout"]
    assert stats.rewards.shape[0] == 2 and torch.all(stats.rewards.max(1).values - stats.rewards.min(1).values > 0.5)
    assert torch.all(stats.advantages.abs().sum(1) > 0)  # no kept group is wasted on zero advantages


def test_infinite_rewards_are_unscorable_and_counted_and_the_run_goes_on(tmp_path, sft_model_path):
    class InfReward(RewardFunction):
        def __call__(self, completions, references, **columns):
            return RewardOutput(torch.full((len(completions),), float("inf")), {}, {})

    module = tiny_module(sft_model_path, reward=InfReward())
    trainer = tiny_trainer(tmp_path, max_steps=1)
    trainer.fit(module, datamodule=tiny_data())
    assert trainer.global_step == 1
    assert trainer.callback_metrics["reward/errors"] == 16 and trainer.callback_metrics["rollout/unscorable_frac"] == 1


def _nan_loss(logp, *args, **kwargs):
    return logp * float("nan"), torch.zeros_like(logp, dtype=torch.bool)


def test_nonfinite_loss_skips_the_step_and_counts(tmp_path, sft_model_path):
    L.seed_everything(0)
    module = tiny_module(sft_model_path)
    module.configure_model()
    before = _params(module)
    with mock.patch.object(ppo_clip_mod, "clipped_policy_loss",
                           side_effect=_nan_loss):
        tiny_trainer(tmp_path, max_steps=2).fit(module, datamodule=tiny_data())
    assert module.counts.nonfinite_steps == 2
    assert all(torch.equal(before[k], v) for k, v in _params(module).items())
    raising = tiny_module(sft_model_path, on_nonfinite="raise")
    with mock.patch.object(ppo_clip_mod, "clipped_policy_loss",
                           side_effect=_nan_loss):
        with pytest.raises(FloatingPointError, match="on_nonfinite"):
            tiny_trainer(tmp_path, max_steps=1).fit(raising, datamodule=tiny_data())


def test_bad_options_are_rejected_with_the_option_named(sft_model_path):
    with pytest.raises(ValueError, match="group_size=1 is too small for GRPO"):
        tiny_module(sft_model_path, group_size=1)
    with pytest.raises(ValueError, match="num_iterations"):
        tiny_module(sft_model_path, num_iterations=0)
    with pytest.raises(ValueError, match="temperature"):
        tiny_module(sft_model_path, temperature=0)
    with pytest.raises(ValueError, match="tau"):
        SoftmaxGRPO(tau=0)
    with pytest.raises(ValueError, match="level='tokens' is not known"):
        tiny_module(sft_model_path, loss=PPOClip(correction=TruncatedIS("tokens")))
    with pytest.raises(ValueError, match="tis_cap=0"):
        tiny_module(sft_model_path, loss=PPOClip(correction=TruncatedIS("token", 0)))


def test_missing_model_path_is_a_clear_error(tmp_path):
    module = tiny_module(str(tmp_path / "no-such-model"))
    with pytest.raises(FileNotFoundError, match="no such directory"):
        module.configure_model()


def test_gradient_checkpointing_gives_the_same_gradients(tmp_path, sft_model_path):
    grads = []
    for checkpointing in (False, True):
        L.seed_everything(0)
        module = tiny_module(sft_model_path, gradient_checkpointing=checkpointing, loss=PPOClip(beta=0.1),
                             estimator=Sign())  # +-1 advantages: a gradient whatever the groups score
        capture = GradCapture()
        tiny_trainer(tmp_path, max_steps=1, callbacks=[capture]).fit(module, datamodule=tiny_data())
        assert module.policy.is_gradient_checkpointing == checkpointing
        grads.append(capture.grads)
    assert any(g.abs().sum() > 0 for g in grads[0].values())
    for k in grads[0]:
        torch.testing.assert_close(grads[0][k], grads[1][k], atol=1e-6, rtol=1e-4)


def test_impossible_parallel_layout_is_rejected_before_training(tmp_path, sft_model_path):
    module = tiny_module(sft_model_path)
    trainer = tiny_trainer(tmp_path, max_steps=1)
    data = tiny_data(prompts_per_step=20)  # 64 training prompts
    with mock.patch.object(L.Trainer, "world_size", new_callable=mock.PropertyMock, return_value=4), \
            mock.patch.object(module_mod, "load_policy") as load:
        with pytest.raises(ValueError, match="impossible parallel layout") as info:
            trainer.fit(module, datamodule=data)
    assert "4 ranks x prompts_per_step=20 need 80 distinct training prompts per step" in str(info.value)
    assert "the training split has 64 (16 per rank); lower prompts_per_step to 16" in str(info.value)
    assert module.policy is None and load.call_count == 0  # nothing was loaded
