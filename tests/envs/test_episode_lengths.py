"""Length shaping and length normalisation of episodes compare an episode's sampled tokens with the most an
episode can sample (``EpisodeEngine.max_sampled_tokens``), not with one turn's ``max_new_tokens``."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from lit_grpo.envs import EpisodeEngine, SingleTurn
from lit_grpo.rewards.shaping import OverlongPenalty
from lit_grpo.rollout import HFGenerateEngine
from tests.envs.test_episode_training import HasDigitOne, RecordingLoss, Steps, chat_model  # noqa: F401
from tests.envs.test_episodes_hf import MoreQuestions
from tests.helpers import tiny_data, tiny_module, tiny_trainer


def test_the_episode_budget_is_the_most_tokens_an_episode_samples():
    assert HFGenerateEngine().max_sampled_tokens(6) == 6
    assert EpisodeEngine(SingleTurn(), max_turns=3).max_sampled_tokens(6) == 18
    assert EpisodeEngine(SingleTurn(), max_turns=3, max_episode_tokens=10).max_sampled_tokens(6) == 10
    assert EpisodeEngine(SingleTurn(), max_turns=3, max_episode_tokens=100).max_sampled_tokens(6) == 18


def test_overlong_penalty_reads_the_episode_budget():
    # three turns of 4 tokens, each under a turn's limit of 6 less the buffer of 2: 12 tokens of an 18-token episode
    engine = EpisodeEngine(MoreQuestions(["1+1=", "2+2="]), max_turns=3)
    module = tiny_module("unused", engine=engine, shaping=OverlongPenalty(buffer=2), max_new_tokens=6)
    shaped, terms = module.shape(torch.tensor([[1.0, 1.0]]), torch.tensor([[12, 17]]))
    assert shaped.tolist() == [[1.0, 0.5]] and terms["overlong_penalty"].tolist() == [0.0, -0.5]
    # a buffer longer than one turn fits an episode
    tiny_module("unused", engine=engine, shaping=OverlongPenalty(buffer=10), max_new_tokens=6)
    with pytest.raises(ValueError, match="buffer=19"):
        tiny_module("unused", engine=engine, shaping=OverlongPenalty(buffer=19), max_new_tokens=6)


def test_seq_sum_constant_divides_by_the_episode_budget(chat_model, tmp_path):  # noqa: F811
    L.seed_everything(0)
    loss = RecordingLoss()
    engine = EpisodeEngine(MoreQuestions(["12+34=", "5+5="]), max_turns=3)
    module = tiny_module(chat_model, engine=engine, loss=loss, reward=HasDigitOne(), elide_zero_advantage=False,
                         max_new_tokens=6, aggregation="seq-sum-constant")
    tiny_trainer(tmp_path, max_steps=1, callbacks=[Steps()]).fit(module, datamodule=tiny_data())
    n = sum(int(mask.shape[0]) for mask, _ in loss.seen)
    for mask, weights in loss.seen:  # every sampled token weighs 1 / (episodes * 18), 18 = 3 turns x 6 tokens
        torch.testing.assert_close(weights[mask], torch.full_like(weights[mask], 1.0 / (n * 18)))
