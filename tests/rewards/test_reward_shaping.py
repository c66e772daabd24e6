"""DAPO's soft overlong punishment: the formula by hand, lengths from generated tokens only, and its place in
the training step (the estimator sees the shaped rewards; diagnostics see the rewards as scored)."""

import math

import lightning as L
import pytest
import torch

from lit_grpo import DrGRPO, OverlongPenalty
from lit_grpo.rewards.shaping import overlong_penalty
from lit_grpo.rollout import HFGenerateEngine
from tests.helpers import tiny_data, tiny_module, tiny_trainer
from tests.recording import Record


def test_penalty_by_hand():
    # max 20 tokens, buffer 5: free up to 15, then -1/5 per token, -1 at 20
    lengths = torch.tensor([[10, 15, 16, 18, 20]])
    torch.testing.assert_close(overlong_penalty(lengths, 20, 5), torch.tensor([[0.0, 0.0, -0.2, -0.6, -1.0]]))
    torch.testing.assert_close(overlong_penalty(lengths, 20, 5, penalty=0.5), torch.tensor([[0, 0, -0.1, -0.3, -0.5]]))


def test_shaping_adds_the_penalty_and_keeps_unscorable_rewards_unscorable():
    rewards = torch.tensor([[1.0, 0.0, math.nan, 1.0]])
    lengths = torch.tensor([[4, 8, 8, 7]])
    shaped = OverlongPenalty(buffer=2)(rewards, lengths, max_new_tokens=8)
    torch.testing.assert_close(shaped.rewards, torch.tensor([[1.0, -1.0, math.nan, 0.5]]), equal_nan=True)
    assert shaped.terms["overlong_penalty"][0, 2].isnan()  # not counted in reward/overlong_penalty


class WidePadding(HFGenerateEngine):
    """Samples like the HF engine and right-pads every completion with two more padding positions."""

    def generate(self, prompts, n, sampling):
        r = super().generate(prompts, n, sampling)
        pad = lambda x, value: torch.nn.functional.pad(x, (0, 2), value=value)  # noqa: E731
        r.completion_ids = pad(r.completion_ids, self.tokenizer.pad_token_id)
        r.completion_mask, r.logprobs = pad(r.completion_mask, False), pad(r.logprobs, 0.0)
        return r


def test_lengths_are_the_generated_tokens_not_the_padded_width_or_the_prompt(tmp_path, sft_model_path):
    """OpenRLHF counted tool-response tokens in the length (issue 1243) and SkyRL measured the buffer from prompt
    plus response (pull request 755): here the length is the completion mask's count, whatever the padding."""
    L.seed_everything(0)
    record = Record()
    module = tiny_module(sft_model_path, shaping=OverlongPenalty(buffer=3), estimator=DrGRPO(), max_new_tokens=4,
                         engine=WidePadding())
    trainer = tiny_trainer(tmp_path, max_steps=1, callbacks=[record])
    trainer.fit(module, datamodule=tiny_data())
    stats = record.outputs[0]
    expected = overlong_penalty(stats.lengths, 4, 3)  # [N] from the generated tokens
    assert stats.lengths.max() + 2 <= stats.rollouts.completion_ids.shape[1]  # padded past every completion
    assert (expected < 0).all() and (expected > -1).all()  # 3 tokens of 4 with a buffer of 3: -2/3
    torch.testing.assert_close(stats.reward_terms["overlong_penalty"], expected)
    # the estimator saw the shaped rewards; the stats keep the rewards as scored (binary ExactMatch)
    shaped = stats.rewards + expected.view(stats.rewards.shape)
    torch.testing.assert_close(stats.advantages, DrGRPO()(shaped))
    assert set(stats.rewards.unique().tolist()) <= {0.0, 1.0}
    logged = trainer.callback_metrics["reward/overlong_penalty"].item()
    assert logged == pytest.approx(expected.mean().item(), abs=1e-6)


@pytest.mark.parametrize(("options", "message"), [
    ({"buffer": 0}, "buffer=0 must be >= 1"),
    ({"buffer": 2, "penalty": -1.0}, "penalty=-1.0 must be >= 0"),
])
def test_bad_options_name_themselves(options, message):
    with pytest.raises(ValueError, match=message):
        OverlongPenalty(**options)


def test_a_buffer_longer_than_the_completions_is_an_error():
    with pytest.raises(ValueError, match=r"buffer=9 must be in 1..max_new_tokens \(8\)"):
        OverlongPenalty(buffer=9)(torch.zeros(1, 2), torch.ones(1, 2), max_new_tokens=8)


def test_a_buffer_longer_than_the_completions_is_refused_when_the_module_is_built(sft_model_path):
    with pytest.raises(ValueError, match=r"buffer=9 is longer than the completions \(4 tokens: sampling.max_new_tokens"):
        tiny_module(sft_model_path, shaping=OverlongPenalty(buffer=9), max_new_tokens=4)
