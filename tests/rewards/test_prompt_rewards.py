"""Rewards that read the prompt and the conversation (``needs_prompts``), and rewards awaited concurrently
(``AsyncReward``): what they get, what the others never get, and how their failures are counted."""

from __future__ import annotations

import asyncio
import math

import lightning as L
import pytest
import torch

from lit_grpo.rewards import AsyncReward, ExactMatch, RewardFunction, RewardGuard, Unscorable, WeightedSum
from lit_grpo.types import RewardOutput
from tests.helpers import tiny_data, tiny_module, tiny_trainer


class Recorder(RewardFunction):
    """Scores 1 and remembers the keyword arguments of each call."""

    def __init__(self, needs_prompts: bool):
        self.needs_prompts = needs_prompts
        self.calls: list[dict] = []

    def __call__(self, completions, references, **columns):
        self.calls.append(columns)
        return RewardOutput(scores=torch.ones(len(completions)))


def test_only_a_reward_that_reads_prompts_gets_them_also_inside_a_weighted_sum():
    reader, other = Recorder(needs_prompts=True), Recorder(needs_prompts=False)
    both = WeightedSum([reader, other])
    assert both.needs_prompts
    columns = {"doc_id": [1, 2], "prompts": ["p1", "p2"], "conversations": [[], []]}
    RewardGuard()(both, ["a", "b"], ["a", "c"], **columns)
    assert reader.calls[-1] == columns
    assert other.calls[-1] == {"doc_id": [1, 2]}
    assert not WeightedSum([other]).needs_prompts


def test_a_training_step_gives_each_completion_its_prompt_and_conversation(tmp_path, sft_model_path):
    reader = Recorder(needs_prompts=True)
    L.seed_everything(0)
    module = tiny_module(sft_model_path, reward=reader, group_size=4)
    tiny_trainer(tmp_path, max_steps=1).fit(module, datamodule=tiny_data(prompts_per_step=2))
    (call,) = reader.calls
    prompts, conversations = call["prompts"], call["conversations"]
    assert len(prompts) == len(conversations) == 8 and prompts[0] == prompts[3] != prompts[4]
    for prompt, conversation in zip(prompts, conversations, strict=True):
        assert [m["role"] for m in conversation] == ["user", "assistant"] and conversation[0]["content"] == prompt


def test_a_data_column_named_like_a_prompt_argument_is_refused_with_the_fix(tmp_path, sft_model_path):
    from lit_grpo.policy import prompt_args
    from lit_grpo.types import PromptBatch

    batch = PromptBatch(prompts=["p"], references=["r"], ids=["0"], columns={"prompts": ["x"]})
    with pytest.raises(ValueError, match=r"columns named \['prompts'\].*rename them"):
        prompt_args(batch, rollouts=None)


class Slow(AsyncReward):
    """Waits, then scores: 1 for a match; raises for "boom", is unscorable for "?", hangs for "hang"."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.in_flight = self.most = 0

    async def score(self, completion, reference, **fields):
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(3600 if completion == "hang" else 0.05)
            if completion == "boom":
                raise RuntimeError("boom")
            if completion == "?":
                raise Unscorable()
            return float(completion == reference)
        finally:
            self.in_flight -= 1


def test_an_async_reward_runs_its_items_concurrently_up_to_its_limit():
    reward = Slow(max_concurrency=4)
    out = RewardGuard()(reward, ["a"] * 12, ["a"] * 6 + ["b"] * 6)
    assert reward.most == 4
    assert out.scores.tolist() == [1.0] * 6 + [0.0] * 6


def test_an_async_reward_counts_each_failing_item_and_scores_the_rest():
    out = RewardGuard()(Slow(item_timeout_s=0.5), ["a", "boom", "?", "hang"], ["a", "a", "a", "a"])
    assert out.scores[0] == 1.0 and all(math.isnan(x) for x in out.scores[1:].tolist())
    assert (out.counters["errors"], out.counters["unscorable"], out.counters["timeouts"]) == (1, 1, 1)


def test_the_call_limit_still_holds_over_an_async_reward_without_an_item_limit():
    out = RewardGuard(timeout_s=0.5)(Slow(item_timeout_s=None), ["hang", "hang"], ["a", "a"])
    assert out.counters["timeouts"] == 2 and torch.isnan(out.scores).all()


def test_an_async_reward_can_read_the_prompt():
    class PromptLength(AsyncReward):
        needs_prompts = True

        async def score(self, completion, reference, prompt, conversation, **fields):
            return float(len(prompt) + len(conversation))

    out = RewardGuard()(PromptLength(), ["x"], ["y"], prompts=["four"], conversations=[[{}, {}]])
    assert out.scores.tolist() == [6.0]


def test_exact_match_still_scores_as_before():
    out = RewardGuard()(ExactMatch(), ["1", "2"], ["1", "3"], prompts=["p", "q"], conversations=[[], []])
    assert out.scores.tolist() == [1.0, 0.0]
