"""Episodes on a real (tiny) policy with the HF engine: one turn is today's generate bit for bit, and the
engine's log-probs of every sampled token are those of the training forward over the whole episode."""

from __future__ import annotations

import pytest
import torch

from lit_grpo.envs import Environment, Episode, SingleTurn, StepResult, run_episodes
from lit_grpo.envs.base import user_messages
from lit_grpo.logprobs import sequence_logprobs
from lit_grpo.models.loading import load_policy, load_tokenizer
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.types import SamplingParams

PROMPTS = ["1+2=", "37+45=", "99+99="]
# The arithmetic policy's own format: the question text, its answer, EOS, the next question.
RAW_TEMPLATE = "{% for m in messages %}{{ m.content }}{% if m.role == 'assistant' %}<eos>{% endif %}{% endfor %}"


class MoreQuestions(Environment):
    """Answers each turn with the next question of the record (a user message) until they run out."""

    def __init__(self, questions: list[str]) -> None:
        self.questions = questions

    def reset(self, record):
        return Episode(record=record, messages=user_messages(record), state={"asked": 0})

    def step(self, episode, text):
        asked = episode.state["asked"]
        if asked == len(self.questions):
            return StepResult([], done=True)
        episode.state["asked"] = asked + 1
        return StepResult([{"role": "user", "content": self.questions[asked]}], done=False)


def _records(prompts):
    return [{"prompt": p, "reference": "", "id": str(i), "columns": {}} for i, p in enumerate(prompts)]


@pytest.fixture(scope="module")
def engine(sft_model_path):
    eng = HFGenerateEngine()
    tokenizer = load_tokenizer(sft_model_path)
    tokenizer.chat_template = RAW_TEMPLATE
    eng.bind(load_policy(sft_model_path), tokenizer)
    return eng


@pytest.mark.parametrize("sampling", [SamplingParams(max_new_tokens=5), SamplingParams(temperature=0.0,
                                                                                         max_new_tokens=6)])
def test_one_turn_episodes_are_single_turn_generate_bit_for_bit(engine, sampling):
    torch.manual_seed(0)
    plain = engine.generate(PROMPTS, 4, sampling)
    torch.manual_seed(0)
    episodes = run_episodes(engine, engine.tokenizer, _records(PROMPTS), SingleTurn(), n=4, sampling=sampling)
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "logprobs", "truncated"):
        assert torch.equal(getattr(episodes, name), getattr(plain, name)), name
    assert episodes.texts == plain.texts and episodes.group_size == plain.group_size == 4
    assert torch.equal(episodes.policy_mask, plain.completion_mask)


def test_multi_turn_logprobs_are_the_training_forward_on_sampled_tokens(engine):
    torch.manual_seed(3)
    r = run_episodes(engine, engine.tokenizer, _records(PROMPTS), MoreQuestions(["12+34=", "5+5="]), n=2,
                     sampling=SamplingParams(temperature=0.7, max_new_tokens=6), max_turns=3)
    finished = [i for i, ep in enumerate(r.episodes) if ep.turns == 3 and not ep.truncated]
    assert finished, "the arithmetic policy ends its answers with EOS, so some episodes run all three turns"
    tok = engine.tokenizer
    for i in finished:
        text = tok.decode(r.completion_ids[i][r.completion_mask[i]])
        assert "<eos>12+34=" in text and "<eos>5+5=" in text  # the observations sit between the turns
        assert int((~r.policy_mask[i] & r.completion_mask[i]).sum()) == len("12+34=") + len("5+5=")
    with torch.no_grad():
        logp, _ = sequence_logprobs(engine.policy, r, temperature=0.7)
    # The cached decode and the full forward sum in different orders: float32's unit roundoff (6e-8) over sums of a
    # few hundred terms of logits of size ~30 bounds the gap near 1e-3; a token off by one position or seen in
    # another context moves its log-prob by far more (the policy's log-probs span several nats).
    torch.testing.assert_close(logp * r.policy_mask, r.logprobs, atol=1e-3, rtol=0)
    assert not r.logprobs[~r.policy_mask].any()
