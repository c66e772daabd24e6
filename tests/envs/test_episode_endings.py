"""How episodes end and what they are scored on: an episode cut before it answered, the last turn's tool call,
the budget, and the text a turn's tokens decode to."""

from __future__ import annotations

import math

import pytest
import torch

from lit_grpo.envs import ChatFormat, EpisodeEngine, ToolEnvironment, episode_metrics, run_episodes
from lit_grpo.envs.calculator import calculator
from lit_grpo.rewards.last_number import LastNumber
from lit_grpo.types import SamplingParams
from tests.envs.scripted import PLAIN_TEMPLATE, TOOL_TEMPLATE, ScriptedEngine, chat_tokenizer
from tests.envs.test_episode_training import chat_model  # noqa: F401  (fixture)
from tests.envs.test_episodes import Echo

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "408"}}</tool_call>'


def _record(reference="408"):
    return {"prompt": "What is 24*17?", "reference": reference, "id": "0", "columns": {}}


def _always_calls(prompt, k):
    return CALL + "<eos>"


RUNS: list[str] = []


def counted(expression: str) -> str:
    """Evaluate an arithmetic expression (each run is recorded in RUNS).

    Args:
        expression: The expression.
    """
    RUNS.append(expression)
    return calculator(expression)


def _run(respond, env=None, template=TOOL_TEMPLATE, max_turns=2, **kwargs):
    tok = chat_tokenizer(template)
    env = env or ToolEnvironment(tools=[calculator])
    return tok, run_episodes(ScriptedEngine(tok, respond), tok, [_record()], env, n=1,
                             sampling=SamplingParams(max_new_tokens=kwargs.pop("max_new_tokens", 200)),
                             max_turns=max_turns, **kwargs)


def _scored(rollouts, reward=None):
    """The rewards as the training step takes them: the environment's, else the configured reward's."""
    reward = reward or LastNumber()
    configured = reward(rollouts.texts, [e.record["reference"] for e in rollouts.episodes]).scores.float()
    return [c.item() if e.reward is None else e.reward for e, c in zip(rollouts.episodes, configured, strict=True)]


def test_an_episode_cut_at_max_turns_on_a_tool_call_is_not_scored_on_that_call():
    _, r = _run(_always_calls)
    assert LastNumber()(r.texts, ["408"]).scores.tolist() == [1.0]  # the call itself would score 1
    assert _scored(r) == [0.0]  # the default: an episode that never answered gets 0
    ep = r.episodes[0]
    assert ep.truncated and not ep.done and not ep.answered and r.texts == [CALL]
    assert episode_metrics(r.episodes)["env/unanswered_frac"] == 1.0


def test_an_episode_cut_by_the_budget_after_a_tool_call_is_unanswered():
    tok = chat_tokenizer()
    turn = len(tok.encode(CALL + "<eos>", add_special_tokens=False))
    _, r = _run(_always_calls, max_turns=5, max_episode_tokens=turn + 3)  # no room for the result
    ep = r.episodes[0]
    assert _scored(r) == [0.0] and ep.truncated and ep.turns == 1 and not ep.answered


def test_truncated_reward_score_and_a_number():
    _, r = _run(_always_calls, truncated_reward="score")
    assert r.episodes[0].reward is None and _scored(r) == [1.0]
    _, r = _run(_always_calls, truncated_reward=-0.5)
    assert _scored(r) == [-0.5]


def test_truncated_reward_drop_makes_the_episode_unscorable():
    _, r = _run(_always_calls, truncated_reward="drop")
    assert math.isnan(r.episodes[0].reward)


def test_answered_episodes_are_scored_as_usual():
    def respond(prompt, k):
        return (CALL if prompt.count("<|assistant|>") == 1 else "It is 408.") + "<eos>"

    _, r = _run(respond)
    ep = r.episodes[0]
    assert ep.done and ep.answered and not ep.truncated and ep.reward is None and _scored(r) == [1.0]
    assert episode_metrics(r.episodes)["env/unanswered_frac"] == 0.0


def test_a_turn_cut_without_eos_is_unanswered_when_it_is_a_call():
    cut = len(CALL) - 5  # the call is cut before its closing tag: still a call, not an answer
    _, r = _run(_always_calls, max_new_tokens=cut)
    ep = r.episodes[0]
    assert _scored(r) == [0.0] and ep.truncated and not ep.answered
    # a cut turn that is not a call is a cut answer, scored as a cut completion is (as one-turn training does)
    _, r = _run(lambda p, k: "It is 408 and more words", max_new_tokens=12)
    assert r.episodes[0].truncated and r.episodes[0].answered and r.episodes[0].reward is None


def test_an_environment_that_owns_the_reward_gives_it_only_when_answered():
    _, r = _run(lambda p, k: "x<eos>", env=Echo(turns=10), max_turns=2)  # Echo never ends before 10 turns
    assert not r.episodes[0].answered and r.episodes[0].reward == 0.0
    _, r = _run(lambda p, k: "x<eos>", env=Echo(turns=10), max_turns=2, truncated_reward="score")
    assert r.episodes[0].reward == 2.0


@pytest.mark.parametrize("template", [TOOL_TEMPLATE, PLAIN_TEMPLATE])
def test_the_last_turn_runs_no_tool_and_the_messages_hold_what_the_tokens_hold(template):
    RUNS.clear()
    call = CALL.replace("calculator", "counted")
    env = ToolEnvironment(tools=[counted], isolation="none")  # the call counts in this process
    tok, r = _run(lambda p, k: call + "<eos>", env=env, template=template, max_turns=2)
    ep = r.episodes[0]
    assert RUNS == ["408"]  # the first turn's call ran; the last turn's call has no turn to read its result
    assert [m["role"] for m in ep.messages] == ["user", "assistant", "tool", "assistant"]
    assert ep.tool_calls == 1
    rendered = ChatFormat(tok).render(ep.messages, ep.tools, ep.tool_instructions, add_generation_prompt=False)
    ids = r.prompt_ids[0][r.prompt_mask[0]].tolist() + r.completion_ids[0][r.completion_mask[0]].tolist()
    assert rendered == tok.decode(ids, skip_special_tokens=False) + "\n"


def test_observations_that_do_not_fit_the_budget_are_not_in_the_messages():
    tok = chat_tokenizer()
    turn = len(tok.encode(CALL + "<eos>", add_special_tokens=False))
    _, r = _run(_always_calls, max_turns=5, max_episode_tokens=turn + 3)
    ep = r.episodes[0]
    assert [m["role"] for m in ep.messages] == ["user", "assistant"] and ep.tool_calls == 1


def test_a_sampled_special_token_stays_in_the_turn_text():
    def respond(prompt, k):
        return ("<bos>" + CALL if prompt.count("<|assistant|>") == 1 else "It is<unk> 408.") + "<eos>"

    _, r = _run(respond)
    assistant = [m["content"] for m in r.episodes[0].messages if m["role"] == "assistant"]
    assert assistant == ["<bos>" + CALL, "It is<unk> 408."]  # the EOS that ends a turn is the boundary, not text
    assert r.texts == ["It is<unk> 408."]


def test_episode_engine_passes_truncated_reward_and_checks_it():
    with pytest.raises(ValueError, match="truncated_reward"):
        EpisodeEngine(Echo(), truncated_reward="zero")
    with pytest.raises(ValueError, match="truncated_reward"):
        EpisodeEngine(Echo(), truncated_reward=math.inf)
    assert EpisodeEngine(Echo()).truncated_reward == 0.0
    assert EpisodeEngine(Echo(), truncated_reward="drop").truncated_reward == "drop"


def test_dropped_episodes_train_as_unscorable(chat_model, tmp_path):  # noqa: F811
    """With ``drop``, an unanswered episode's reward is NaN in the training step: no estimator reads it and its
    advantage is 0 (one turn of ``MoreQuestions`` always asks for another, so every episode is unanswered)."""
    import lightning as L

    from tests.envs.test_episode_training import HasDigitOne, Steps
    from tests.envs.test_episodes_hf import MoreQuestions
    from tests.helpers import tiny_data, tiny_module, tiny_trainer

    for truncated_reward, want in (("drop", math.nan), (0.0, 0.0)):
        L.seed_everything(0)
        steps = Steps()
        engine = EpisodeEngine(MoreQuestions(["5+5="]), max_turns=1, truncated_reward=truncated_reward)
        module = tiny_module(chat_model, engine=engine, reward=HasDigitOne(), max_new_tokens=6)
        trainer = tiny_trainer(tmp_path, max_steps=1, callbacks=[steps])
        trainer.fit(module, datamodule=tiny_data())
        stats = steps.outputs[0]
        unanswered = torch.tensor([not e.answered for e in stats.rollouts.episodes])
        assert unanswered.all(), "every episode ends asking for another turn"
        rewards = stats.rewards.reshape(-1)
        torch.testing.assert_close(rewards, torch.full_like(rewards, want), equal_nan=True, atol=0, rtol=0)
        assert torch.equal(stats.advantages, torch.zeros_like(stats.advantages))
        assert float(trainer.callback_metrics["env/unanswered_frac"]) == 1.0
        held_out = module.score(stats.batch, stats.rollouts)[0]  # an unanswered episode is a wrong answer there
        assert torch.equal(held_out, torch.zeros_like(held_out))


def test_observations_are_capped_in_tokens_and_the_cut_is_marked():
    def echo(text: str) -> str:
        """Repeat a text ten times.

        Args:
            text: The text.
        """
        return text * 10

    call = '<tool_call>{"name": "echo", "arguments": {"text": "abc"}}</tool_call>'

    def respond(prompt, k):
        return (call if prompt.count("<|assistant|>") == 1 else "done") + "<eos>"

    env = ToolEnvironment(tools=[echo], isolation="none")  # a tool defined in the test
    tok, r = _run(respond, env=env, max_observation_tokens=7)  # the character tokenizer: one token a character
    result = [m["content"] for m in r.episodes[0].messages if m["role"] == "tool"]
    assert result == ["abcabca\n[result cut at 7 tokens]"]
    ids = r.completion_ids[0][r.completion_mask[0]].tolist()
    assert "<|tool|>abcabca\n[result cut at 7 tokens]<eos>" in tok.decode(ids, skip_special_tokens=False)
    _, r = _run(respond, env=env, max_observation_tokens=30)  # a result within the cap is left as it is
    assert [m["content"] for m in r.episodes[0].messages if m["role"] == "tool"] == ["abc" * 10]
    with pytest.raises(ValueError, match="max_observation_tokens=0"):
        EpisodeEngine(Echo(), max_observation_tokens=0)
