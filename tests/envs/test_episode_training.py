"""GRPOModule trains on whole episodes through EpisodeEngine: one turn is today's update bit for bit, the loss reads
only the tokens the policy sampled, and every estimator and loss runs on episodes."""

from __future__ import annotations

import shutil

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback

import lit_grpo.estimators  # noqa: F401  (registers the estimators for subclasses())
import lit_grpo.losses
from lit_grpo.components import subclasses
from lit_grpo.envs import EpisodeEngine, SingleTurn
from lit_grpo.estimators import AdvantageEstimator
from lit_grpo.losses import PolicyLoss
from lit_grpo.models.loading import load_policy, load_tokenizer
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.types import RewardOutput
from tests.envs.test_episodes_hf import RAW_TEMPLATE, MoreQuestions
from tests.helpers import tiny_data, tiny_module, tiny_trainer


def chat_policy(model: str, path) -> str:
    """A copy of the tiny arithmetic policy at ``path`` with a chat template that renders its own format
    (question, answer, EOS)."""
    shutil.copytree(model, path, dirs_exist_ok=True)
    tokenizer = load_tokenizer(model)
    tokenizer.chat_template = RAW_TEMPLATE
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def chat_model(sft_model_path, tmp_path_factory) -> str:
    return chat_policy(sft_model_path, tmp_path_factory.mktemp("chat-policy"))


class HasDigitOne(RewardFunction):
    """1 when the final answer holds the digit 1: varies within groups, so advantages are not all 0."""

    binary = True

    def __call__(self, completions, references, **columns) -> RewardOutput:
        return RewardOutput(torch.tensor([float("1" in c) for c in completions]))


class Steps(Callback):
    def __init__(self) -> None:
        self.outputs = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.outputs.append(outputs["rollout"])


def _params(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.policy.state_dict().items()}


def test_one_turn_episodes_train_exactly_as_single_turn(chat_model, tmp_path):
    trained = []
    for engine in (None, EpisodeEngine(SingleTurn())):
        L.seed_everything(0)
        module = tiny_module(chat_model, engine=engine, reward=HasDigitOne())
        tiny_trainer(tmp_path, max_steps=2).fit(module, datamodule=tiny_data())
        trained.append(_params(module))
    start = load_policy(chat_model).state_dict()
    assert any(not torch.equal(trained[0][k], start[k]) for k in start), "the runs must train to compare them"
    for k in trained[0]:
        assert torch.equal(trained[0][k], trained[1][k]), k


class RecordingLoss(lit_grpo.losses.PPOClip):
    """PPOClip that keeps the mask and token weights of every micro-batch it scores."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, inputs):
        self.seen.append((inputs.mask.detach().clone(), inputs.weights.detach().clone()))
        return super().__call__(inputs)


def test_the_loss_reads_only_the_tokens_the_policy_sampled(chat_model, tmp_path):
    L.seed_everything(0)
    loss, steps = RecordingLoss(), Steps()
    engine = EpisodeEngine(MoreQuestions(["12+34=", "5+5="]), max_turns=3)
    module = tiny_module(chat_model, engine=engine, loss=loss, reward=HasDigitOne(), elide_zero_advantage=False,
                         max_new_tokens=6, micro_batch_size=3)
    trainer = tiny_trainer(tmp_path, max_steps=1, callbacks=[steps])
    trainer.fit(module, datamodule=tiny_data())
    assert {"env/turns_mean", "env/tool_calls_mean", "env/truncated_frac", "env/seconds", "env/tool_errors",
            "env/tool_timeouts"} <= set(trainer.callback_metrics)
    assert 1.0 <= float(trainer.callback_metrics["env/turns_mean"]) <= 3.0
    rollouts = steps.outputs[0].rollouts
    sampled, exists = rollouts.policy_mask, rollouts.completion_mask
    assert (exists & ~sampled).any(), "some episodes must hold observation tokens"
    assert torch.equal(steps.outputs[0].lengths, sampled.sum(-1).cpu())  # lengths count the policy's tokens only
    in_loss = sum(int(mask.sum()) for mask, _ in loss.seen)
    assert in_loss == int(sampled.sum())  # every sampled token once, no observation or bridge token
    for mask, weights in loss.seen:  # a token outside the mask has weight 0: no gradient reaches it
        assert torch.equal(weights[~mask], torch.zeros_like(weights[~mask]))
    logged = steps.outputs[0]
    assert len(logged.texts) == len(rollouts) and rollouts.episodes is not None


ESTIMATORS = sorted(subclasses(AdvantageEstimator).items())
LOSSES = sorted(subclasses(PolicyLoss).items())


@pytest.mark.parametrize(("name", "cls"), ESTIMATORS + LOSSES, ids=[n for n, _ in ESTIMATORS + LOSSES])
def test_every_estimator_and_loss_trains_on_episodes(chat_model, tmp_path, name, cls):
    component = {"estimator": cls()} if issubclass(cls, AdvantageEstimator) else {"loss": cls()}
    L.seed_everything(0)
    steps = Steps()
    engine = EpisodeEngine(MoreQuestions(["5+5="]), max_turns=2)
    module = tiny_module(chat_model, engine=engine, reward=HasDigitOne(), max_new_tokens=6, **component)
    tiny_trainer(tmp_path, max_steps=2, callbacks=[steps]).fit(module, datamodule=tiny_data())
    assert len(steps.outputs) == 2 and all(s.rollouts.episodes is not None for s in steps.outputs)
    assert all(torch.isfinite(s.advantages).all() for s in steps.outputs)
    assert all(p.isfinite().all() for p in module.policy.parameters())


def test_completion_samples_show_whole_episodes_with_roles(chat_model, tmp_path):
    from lit_grpo.callbacks.samples import format_samples

    L.seed_everything(0)
    steps = Steps()
    engine = EpisodeEngine(MoreQuestions(["12+34="]), max_turns=2)
    module = tiny_module(chat_model, engine=engine, reward=HasDigitOne(), max_new_tokens=6)
    tiny_trainer(tmp_path, max_steps=1, callbacks=[steps]).fit(module, datamodule=tiny_data())
    stats = steps.outputs[0]
    text = format_samples(stats, num_prompts=1, num_completions=4, max_chars=500)
    shown, group = text.replace("⏎", "\n"), stats.rollouts.episodes[:4]  # the first prompt's episodes
    for episode in group:
        assert f"[assistant] {episode.messages[1]['content']}" in shown
    # the environment's question between two turns shows exactly when an episode got a second turn
    assert ("[user] 12+34=" in shown) == any(episode.turns == 2 for episode in group)
