"""Module options around the loss: the entropy bonus, overlong filtering (drop_truncated), and the lengths the
training step hands the estimator."""

import lightning as L
import pytest
import torch

from lit_grpo import DrGRPO, RewardFunction
from lit_grpo.estimators import AdvantageEstimator
from lit_grpo.losses import LossOutput, PolicyLoss
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.types import RewardOutput
from tests.helpers import tiny_data, tiny_module, tiny_trainer
from tests.recording import Record, grads_of, policy_at


class ConstantReward(RewardFunction):
    def __call__(self, completions, references, **columns):
        return RewardOutput(torch.ones(len(completions)))


def _naive_entropy(policy, rollouts):
    ids = torch.cat([rollouts.prompt_ids, rollouts.completion_ids], 1)
    attn = torch.cat([rollouts.prompt_mask, rollouts.completion_mask], 1).long()
    logits = policy(input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(-1) - 1).clamp(min=0)).logits
    t = rollouts.completion_ids.shape[1]
    logp = torch.log_softmax(logits[:, -t - 1 : -1].float(), -1)
    return -(logp.exp() * logp).sum(-1)  # [N, T]


def test_entropy_bonus_gives_zero_advantage_completions_a_gradient(tmp_path, sft_model_path):
    """With every advantage 0 the policy term is flat: the gradient is the bonus's alone, -coef * grad(mean H)."""
    coef = 0.05
    L.seed_everything(0)
    module = tiny_module(sft_model_path, reward=ConstantReward(), entropy_coef=coef, max_grad_norm=None)
    record = Record()
    tiny_trainer(tmp_path, max_steps=1, callbacks=[record]).fit(module, datamodule=tiny_data())
    stats = record.outputs[0]
    assert torch.all(stats.advantages == 0)
    rollouts = stats.rollouts.to("cpu")
    policy = policy_at(sft_model_path, record.initial)
    mask = rollouts.completion_mask.float()
    entropy = (_naive_entropy(policy, rollouts) * mask).sum() / mask.sum()  # token-mean, like the loss
    naive = grads_of(-coef * entropy, policy)
    assert any(g.abs().sum() > 0 for g in naive.values())
    for k, g in naive.items():
        torch.testing.assert_close(record.steps[0][1][k], g, atol=1e-6, rtol=1e-4)

    L.seed_everything(0)
    plain = tiny_module(sft_model_path, reward=ConstantReward(), max_grad_norm=None)
    record = Record()
    tiny_trainer(tmp_path, max_steps=1, callbacks=[record]).fit(plain, datamodule=tiny_data())
    assert all(g.abs().sum() == 0 for g in record.steps[0][1].values())  # without it, nothing to learn


class Probe(PolicyLoss):
    """``-A logp`` per token; keeps the mask and weights it was given."""

    needs_old_logp = False

    def __init__(self):
        self.seen = []

    def __call__(self, batch):
        self.seen.append((batch.mask.clone(), batch.weights.clone(), batch.advantages.clone()))
        return LossOutput(-batch.advantages[:, None] * batch.logp)


class TruncatingEngine(HFGenerateEngine):
    """Samples like the HF engine but reports every third completion as cut at max_new_tokens."""

    def generate(self, prompts, n, sampling):
        r = super().generate(prompts, n, sampling)
        r.truncated = torch.arange(len(r), device=r.truncated.device) % 3 == 0
        return r


def test_drop_truncated_leaves_truncated_completions_out_of_the_loss(tmp_path, sft_model_path):
    L.seed_everything(0)
    probe, record = Probe(), Record()
    module = tiny_module(sft_model_path, loss=probe, engine=TruncatingEngine(), drop_truncated=True)
    trainer = tiny_trainer(tmp_path, max_steps=1, callbacks=[record])
    trainer.fit(module, datamodule=tiny_data())
    stats = record.outputs[0]
    truncated = stats.truncated  # [N]
    assert truncated.float().mean() == pytest.approx(6 / 16)
    (mask, weights, _), = probe.seen
    assert not mask[truncated].any() and torch.all(mask[~truncated].sum(-1) == stats.lengths[~truncated])
    # token-mean over the kept tokens only: the normaliser leaves the dropped tokens out
    assert weights.sum().item() == pytest.approx(1.0) and torch.all(weights[truncated] == 0)
    assert trainer.callback_metrics["rollout/truncated_frac"].item() == pytest.approx(truncated.float().mean().item())


class LengthProbe(AdvantageEstimator):
    def __init__(self):
        self.lengths = None

    def __call__(self, rewards, lengths=None):
        self.lengths = lengths
        return DrGRPO()(rewards)


def test_the_estimator_gets_the_completion_lengths(tmp_path, sft_model_path):
    L.seed_everything(0)
    probe, record = LengthProbe(), Record()
    tiny_trainer(tmp_path, max_steps=1, callbacks=[record]).fit(tiny_module(sft_model_path, estimator=probe),
                                                                datamodule=tiny_data())
    stats = record.outputs[0]
    assert torch.equal(probe.lengths.cpu(), stats.lengths.view(stats.rewards.shape))


def test_bad_entropy_coef_is_rejected(sft_model_path):
    with pytest.raises(ValueError, match="entropy_coef=-0.1 must be >= 0"):
        tiny_module(sft_model_path, entropy_coef=-0.1)

