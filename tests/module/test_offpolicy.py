"""Several optimizer steps per rollout batch (steps_per_generation x num_iterations): the plain update with one,
the frozen old log-probs, mini-batches of whole groups normalised over their own tokens, the clip acting from
the second step on, per-step logging and max_steps counting optimizer steps."""

import lightning as L
import pytest
import torch

from lit_grpo import HFGenerateEngine, RewardFunction
from lit_grpo.rollout.functional import select_rows
from lit_grpo.rollout.hf import GENERATE_DRAWS
from lit_grpo.types import RewardOutput
from tests.helpers import tiny_data, tiny_module, tiny_trainer
from tests.recording import MemoryLogger, Record, grads_of, naive_logprobs, policy_at


class SpreadReward(RewardFunction):
    """A reward that varies inside almost every group: the completion's character codes, mod 7, over 6."""

    def __call__(self, completions, references, **columns):
        return RewardOutput(torch.tensor([sum(map(ord, c)) % 7 / 6 for c in completions]))


def _fit(tmp_path, model, steps, **options):
    L.seed_everything(0)
    module = tiny_module(model, reward=SpreadReward(), max_grad_norm=None, **options)
    record, log = Record(), MemoryLogger()
    trainer = tiny_trainer(tmp_path, max_steps=steps, callbacks=[record], logger=log, log_every_n_steps=1)
    trainer.fit(module, datamodule=tiny_data())
    return module, trainer, record, log


def _assert_same(ours, naive):
    assert any(g.abs().sum() > 0 for g in naive.values())
    for k, g in naive.items():
        torch.testing.assert_close(ours[k], g, atol=1e-6, rtol=1e-4)


def test_one_step_per_batch_is_the_plain_policy_gradient(tmp_path, sft_model_path):
    module, trainer, record, _ = _fit(tmp_path, sft_model_path, 1)
    stats = record.outputs[0]
    rollouts, adv = stats.rollouts.to("cpu"), stats.advantages.reshape(-1)
    policy = policy_at(sft_model_path, record.initial)
    mask = rollouts.completion_mask.float()
    logp = naive_logprobs(policy, rollouts)
    loss = -(adv[:, None] * logp * mask).sum() / mask.sum()  # on policy PPOClip is -A logp's gradient, token-mean
    _assert_same(record.steps[0][1], grads_of(loss, policy))
    assert trainer.global_step == 1


def test_the_second_mini_batch_is_clipped_against_the_frozen_old_logprobs(tmp_path, sft_model_path):
    # generate's draws: the scenario (which completions the clip acts on) was built on them
    module, trainer, record, log = _fit(tmp_path, sft_model_path, 2, steps_per_generation=2, lr=3e-3,
                                        engine=HFGenerateEngine(**GENERATE_DRAWS))
    assert trainer.global_step == 2 and len(record.outputs) == 1  # one rollout batch, two optimizer steps
    stats = record.outputs[0]
    rollouts, adv = stats.rollouts.to("cpu"), stats.advantages.reshape(-1)
    rows = torch.arange(8, 16)  # groups 2 and 3 of the 4 prompts: the second mini-batch
    sub = select_rows(rollouts, rows)
    old = naive_logprobs(policy_at(sft_model_path, record.initial), sub).detach()
    policy = policy_at(sft_model_path, record.steps[1][0])  # after the first optimizer step
    logp = naive_logprobs(policy, sub)
    ratio, a, mask = torch.exp(logp - old), adv[rows, None], sub.completion_mask.float()
    surrogate = -torch.minimum(ratio * a, ratio.clamp(0.8, 1.2) * a)
    loss = (surrogate * mask).sum() / mask.sum()  # token-mean over the mini-batch's own tokens
    _assert_same(record.steps[1][1], grads_of(loss, policy))
    clipped = ((ratio * a > ratio.clamp(0.8, 1.2) * a) & (mask > 0)).float().sum() / mask.sum()
    assert clipped > 0  # the clip acts on the second step
    optim = {step: row for step, row in log.rows if any(k.startswith("optim/") for k in row)}
    assert sorted(optim) == [1, 2]  # one row per optimizer step, at its number
    assert optim[1]["optim/ratio_max"] == pytest.approx(1.0, abs=1e-4)  # first step: on policy
    assert optim[1]["optim/clip_frac"] == 0
    assert abs(optim[2]["optim/ratio_max"] - 1) > 0.2 or abs(optim[2]["optim/ratio_min"] - 1) > 0.2
    assert optim[2]["optim/clip_frac"] == pytest.approx(clipped.item(), abs=1e-6)
    assert optim[2]["optim/policy_kl"] > 0
    train = next(row for _, row in log.rows if "train/ratio_mean" in row)
    assert train["train/ratio_max"] == max(optim[1]["optim/ratio_max"], optim[2]["optim/ratio_max"])
    assert train["train/clip_frac"] > 0 and train["train/loss"] == pytest.approx(optim[2]["optim/loss"])


def test_max_steps_counts_optimizer_steps_and_cuts_the_last_batch(tmp_path, sft_model_path):
    module, trainer, record, log = _fit(tmp_path, sft_model_path, 3, steps_per_generation=2, num_iterations=2)
    assert trainer.global_step == 3 and len(record.steps) == 3 and len(record.outputs) == 1
    assert sorted(step for step, row in log.rows if "optim/loss" in row) == [1, 2, 3]


def test_mini_batch_count_must_divide_the_prompts(tmp_path, sft_model_path):
    module = tiny_module(sft_model_path, steps_per_generation=3)
    with pytest.raises(ValueError, match="prompts_per_step=4 is not a multiple of steps_per_generation=3"):
        tiny_trainer(tmp_path, max_steps=1).fit(module, datamodule=tiny_data())
    with pytest.raises(ValueError, match="steps_per_generation=0 must be >= 1"):
        tiny_module(sft_model_path, steps_per_generation=0)
