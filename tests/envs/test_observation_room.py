"""Observations that do not fit the room an episode has left: cut to it and counted, or the episode ends
counted as out of context; long texts are cut in characters before they are tokenised."""

from __future__ import annotations

from lit_grpo.envs import Environment, Episode, StepResult, episode_metrics, run_episodes
from lit_grpo.envs.chat import ChatFormat
from lit_grpo.envs.rollout import _head
from lit_grpo.types import SamplingParams
from tests.envs.scripted import TOOL_TEMPLATE, ScriptedEngine, chat_tokenizer


class Results(Environment):
    """Answers the first turn with ``results`` (tool messages), done on the second."""

    def __init__(self, *results: str) -> None:
        self.results = results

    def reset(self, record):
        return Episode(record=record, messages=[{"role": "user", "content": record["prompt"]}])

    def step(self, episode, text):
        if episode.turns >= 2:
            return StepResult([], done=True)
        return StepResult([{"role": "tool", "content": r} for r in self.results], done=False)


def _respond(prompt, k):
    return ("call" if prompt.count("<|assistant|>") == 1 else "answer") + "<eos>"


def _run(env, tok=None, max_new_tokens=10, **kwargs):
    tok = tok or chat_tokenizer(TOOL_TEMPLATE)
    record = {"prompt": "Q", "reference": "", "id": "0", "columns": {}}
    return tok, run_episodes(ScriptedEngine(tok, _respond), tok, [record], env, n=1,
                             sampling=SamplingParams(max_new_tokens=max_new_tokens), max_turns=3, **kwargs)


def _tools(episode):
    return [m["content"] for m in episode.messages if m["role"] == "tool"]


def test_a_result_past_the_room_is_cut_to_leave_the_next_turn_its_tokens_and_counted():
    budget = 120  # tokens after the prompt; the character tokenizer: one token a character
    _, r = _run(Results("x" * 5000), max_episode_tokens=budget)
    ep = r.episodes[0]
    assert ep.done and ep.answered and not ep.truncated and not ep.context_exhausted
    assert ep.final_answer == "answer" and ep.observations_cut == 1
    (result,) = _tools(ep)
    cap = int(result.rsplit("cut at ", 1)[1].split()[0])
    assert result == "x" * cap + f"\n[result cut at {cap} tokens]" and cap > 0
    # the bridge left the second turn its max_new_tokens (10): the turn and the bridge fill the rest
    completion = int(r.completion_mask[0].sum())
    assert completion <= budget and budget - completion + len("answer<eos>") >= 10
    assert episode_metrics(r.episodes)["env/observations_cut"] == 1.0
    assert episode_metrics(r.episodes)["env/context_exhausted_frac"] == 0.0


def test_a_result_that_fits_is_left_whole_and_uncounted():
    _, r = _run(Results("x" * 50), max_episode_tokens=200)
    ep = r.episodes[0]
    assert _tools(ep) == ["x" * 50] and ep.observations_cut == 0 and ep.answered


def test_the_longest_results_are_cut_first_and_a_short_one_kept_whole():
    _, r = _run(Results("short", "y" * 3000, "z" * 2000), max_episode_tokens=200)
    ep = r.episodes[0]
    short, long_y, long_z = _tools(ep)
    assert short == "short" and ep.observations_cut == 2 and ep.answered
    assert long_y.startswith("y") and long_z.startswith("z")
    assert long_y.endswith(" tokens]") and long_z.endswith(" tokens]")
    # cut to one level: both keep the same number of tokens
    assert long_y.index("\n") == long_z.index("\n")


def test_an_episode_whose_observations_cannot_fit_even_empty_ends_counted():
    tok = chat_tokenizer(TOOL_TEMPLATE)
    turn = len("call<eos>")
    _, r = _run(Results("x" * 5000), tok=tok, max_episode_tokens=turn + 5)  # less than the bridge alone
    ep = r.episodes[0]
    assert ep.truncated and ep.context_exhausted and not ep.answered and ep.turns == 1
    assert _tools(ep) == [] and ep.reward == 0.0  # unanswered: truncated_reward, 0 by default
    assert episode_metrics(r.episodes)["env/context_exhausted_frac"] == 1.0


def test_a_ten_megabyte_result_is_never_tokenised_whole():
    tok = chat_tokenizer(TOOL_TEMPLATE)
    longest = []
    encode = tok.encode

    def recording(text, *args, **kwargs):
        longest.append(len(text))
        return encode(text, *args, **kwargs)

    tok.encode = recording
    _, r = _run(Results("x" * 10_000_000), tok=tok, max_episode_tokens=300, max_observation_tokens=50)
    ep = r.episodes[0]
    (result,) = _tools(ep)
    assert result == "x" * 50 + "\n[result cut at 50 tokens]" and ep.observations_cut == 1
    vocab = max(map(len, tok.get_vocab()))
    assert max(longest) <= 2 * (300 + 8) * vocab  # the room bounds every text tokenised


def test_without_a_budget_or_context_nothing_is_cut():
    _, r = _run(Results("x" * 5000))
    assert _tools(r.episodes[0]) == ["x" * 5000] and r.episodes[0].observations_cut == 0


def test_the_head_keeps_more_than_the_tokens_asked_for():
    tok = chat_tokenizer(TOOL_TEMPLATE)
    text = "ab<eos>c" * 10_000  # a special token's text counts as one token of several characters
    for tokens in (1, 7, 100):
        head = _head({"content": text}, tok, tokens)["content"]
        assert len(head) < len(text)
        ids = tok.encode(head, add_special_tokens=False)
        assert len(ids) > tokens and ids[:tokens] == tok.encode(text, add_special_tokens=False)[:tokens]
    assert _head({"content": "short"}, tok, 10) == {"content": "short"}


def test_the_bridge_of_cut_observations_is_what_the_chat_format_renders():
    tok, r = _run(Results("x" * 5000), max_episode_tokens=120)
    ep = r.episodes[0]
    chat = ChatFormat(tok)
    history = ep.messages[:1]
    bridge = chat.bridge_ids(history, [m for m in ep.messages if m["role"] == "tool"], [], "",
                             tok.eos_token_id)
    completion = r.completion_ids[0][r.completion_mask[0]].tolist()
    first = tok.encode("call<eos>", add_special_tokens=False)
    assert completion[: len(first) + len(bridge)] == first + bridge
