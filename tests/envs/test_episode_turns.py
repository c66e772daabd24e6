"""Per-turn rewards (an environment's reward for each turn, reduced to the episode's as it declares) and the
turn-level diagnostics: the share of the advantage that lands on each turn."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch

from lit_grpo.envs import Environment, EnvironmentRouter, Episode, EpisodeEngine, StepResult, run_episodes
from lit_grpo.envs.base import user_messages
from lit_grpo.envs.rollout import turn_credit
from lit_grpo.types import SamplingParams
from tests.envs.scripted import ScriptedEngine, chat_tokenizer
from tests.envs.test_episode_training import HasDigitOne, Steps, chat_model  # noqa: F401
from tests.envs.test_episodes_hf import MoreQuestions
from tests.helpers import tiny_data, tiny_module, tiny_trainer


class Graded(Environment):
    """Rewards turn ``k`` (1-based) with ``k / 10``; done after ``turns`` turns."""

    def __init__(self, turn_reward="sum", turns: int = 3, owned: float | None = None, give=True) -> None:
        self.turn_reward, self.turns, self.owned, self.give = turn_reward, turns, owned, give

    def reset(self, record):
        return Episode(record=record, messages=user_messages(record), state={"k": 0})

    def step(self, episode, text):
        episode.state["k"] += 1
        k = episode.state["k"]
        reward = k / 10 if self.give else None
        if k >= self.turns:
            return StepResult([], done=True, reward=reward)
        return StepResult([{"role": "tool", "content": "ok"}], done=False, reward=reward)

    def reward(self, episode):
        return self.owned


def _run(env, max_turns=4, respond=lambda p, k: "x<eos>", n=1, **kwargs):
    tok = chat_tokenizer()
    return run_episodes(ScriptedEngine(tok, respond), tok, [{"prompt": "Q", "reference": "", "id": "0",
                                                              "columns": {}}], env, n=n,
                        sampling=SamplingParams(max_new_tokens=16), max_turns=max_turns, **kwargs)


@pytest.mark.parametrize("how, want", [("sum", 0.6), ("mean", 0.2), ("last", 0.3), ("min", 0.1), ("max", 0.3)])
def test_the_episode_reward_is_the_declared_reduction_of_the_turn_rewards(how, want):
    ep = _run(Graded(how)).episodes[0]
    assert ep.turn_rewards == [0.1, 0.2, 0.3] and math.isclose(ep.reward, want, rel_tol=1e-12)


def test_turns_without_a_reward_count_as_zero():
    ep = _run(Graded("mean", give=False)).episodes[0]
    assert ep.turn_rewards == [0.0, 0.0, 0.0] and ep.reward == 0.0
    # the last allowed turn of an unanswered episode is scored by truncated_reward; with "score" the reduction
    ep = _run(Graded("sum", turns=10), max_turns=2, truncated_reward="score").episodes[0]
    assert ep.turn_rewards == [0.1, 0.2] and math.isclose(ep.reward, 0.3)


def test_a_router_reduces_as_the_routed_environment_declares():
    router = EnvironmentRouter(column="task", environments={}, default=Graded("last"))
    assert _run(router).episodes[0].reward == 0.3


def test_turn_rewards_are_clear_errors_when_they_clash():
    with pytest.raises(ValueError, match="declares no turn_reward"):
        _run(Graded(None))
    with pytest.raises(ValueError, match="one reward source"):
        _run(Graded("sum", owned=1.0))
    with pytest.raises(ValueError, match="turn_reward='median' is not a reduction"):
        _run(Graded("median"))


def test_turn_credit_is_the_advantage_mass_per_turn():
    # two episodes: turns of 2 and 3 sampled tokens ("x" + EOS, "yy" + EOS); a third, one turn of 2
    def respond(prompt, k):
        return ("x" if prompt.count("<|assistant|>") == 1 else "yy") + "<eos>"

    r = _run(Graded("sum", turns=2), n=3, respond=respond)
    r.episodes[2].turn_tokens = [2]
    assert [e.turn_tokens for e in r.episodes] == [[2, 3], [2, 3], [2]]
    pairs = turn_credit(r.episodes, torch.tensor([1.0, -2.0, 0.5]))
    total = 1 * 5 + 2 * 5 + 0.5 * 2
    assert pairs == {"env/adv_share_turn1": (1 * 2 + 2 * 2 + 0.5 * 2, total),
                     "env/adv_share_turn2": (1 * 3 + 2 * 3, total), "env/adv_share_turn3": (0.0, total),
                     "env/adv_share_turn4": (0.0, total), "env/adv_share_final_turn": (1 * 3 + 2 * 3 + 0.5 * 2, total)}
    with pytest.raises(ValueError, match="2 advantages for 3 episodes"):
        turn_credit(r.episodes, torch.ones(2))


def test_training_logs_the_turn_shares(chat_model, tmp_path):  # noqa: F811
    L.seed_everything(0)
    engine = EpisodeEngine(MoreQuestions(["12+34=", "5+5="]), max_turns=3)
    module = tiny_module(chat_model, engine=engine, reward=HasDigitOne(), max_new_tokens=6)
    trainer = tiny_trainer(tmp_path, max_steps=1, callbacks=[Steps()])
    trainer.fit(module, datamodule=tiny_data())
    shares = [float(trainer.callback_metrics[f"env/adv_share_turn{k}"]) for k in (1, 2, 3)]
    assert math.isclose(sum(shares), 1.0, rel_tol=1e-6) and all(0 <= s <= 1 for s in shares)
    assert 0 <= float(trainer.callback_metrics["env/adv_share_final_turn"]) <= 1
