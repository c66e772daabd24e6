"""The multi-turn driver on a scripted policy: token layout, masks, turn boundaries, truncation."""

from __future__ import annotations

import re

import pytest
import torch

from lit_grpo.envs import ChatFormat, Environment, Episode, StepResult, episode_metrics, run_episodes
from lit_grpo.envs.base import user_messages
from lit_grpo.types import SamplingParams
from tests.envs.scripted import (
    PLAIN_TEMPLATE,
    TOOL_TEMPLATE,
    ScriptedEngine,
    chat_tokenizer,
    scripted_logprob,
)


class Echo(Environment):
    """Answers every turn with a tool message "ok<turn>", done after ``turns`` turns."""

    def __init__(self, turns: int = 2) -> None:
        self.turns = turns

    def reset(self, record):
        return Episode(record=record, messages=user_messages(record), state={"seen": []})

    def step(self, episode, text):
        episode.state["seen"].append(text)
        if len(episode.state["seen"]) >= self.turns:
            return StepResult([], done=True)
        return StepResult([{"role": "tool", "content": f"ok{len(episode.state['seen'])}"}], done=False)

    def reward(self, episode):
        return float(len(episode.state["seen"]))


def _record(prompt="Q", i="r0"):
    return {"prompt": prompt, "reference": "", "id": i, "columns": {}}


def _respond(prompt: str, k: int) -> str:
    turn = prompt.count("<|assistant|>")  # 1 on the first turn
    sample = re.search(r"<\|assistant\|>a(\d+)t1", prompt)  # later turns continue their episode's sample
    return f"a{sample.group(1) if sample else k}t{turn}<eos>"


def _decode(tok, ids):
    return tok.decode(ids, skip_special_tokens=False)


@pytest.mark.parametrize("template, bridge", [
    (TOOL_TEMPLATE, "\n<|tool|>ok1<eos>\n<|assistant|>"),
    (PLAIN_TEMPLATE, "\n<|user|><tool_response>\nok1\n</tool_response><eos>\n<|assistant|>"),
])
def test_layout_and_masks_are_exact(template, bridge):
    tok = chat_tokenizer(template)
    engine = ScriptedEngine(tok, _respond)
    r = run_episodes(engine, tok, [_record()], Echo(turns=2), n=2, sampling=SamplingParams(max_new_tokens=16),
                     max_turns=4)
    assert len(r) == 2 and r.group_size == 2 and r.policy_mask is not None
    for k in range(2):
        first, second = f"a{k}t1<eos>", f"a{k}t2<eos>"
        ids = r.completion_ids[k][r.completion_mask[k]].tolist()
        assert _decode(tok, ids) == first + bridge + second
        n1, nb, n2 = (len(tok.encode(s, add_special_tokens=False)) for s in (first, bridge, second))
        expected = [True] * n1 + [False] * nb + [True] * n2
        assert r.policy_mask[k, : len(ids)].tolist() == expected and not r.policy_mask[k, len(ids):].any()
        # engine log-probs kept on sampled tokens, 0 on the bridge and on padding
        want = [scripted_logprob(t) for t in range(n1)] + [0.0] * nb + [scripted_logprob(t) for t in range(n2)]
        assert r.logprobs[k, : len(ids)].tolist() == want and not r.logprobs[k, len(ids):].any()
        # the whole sequence is what the template renders for the conversation (up to its final newline)
        ep = r.episodes[k]
        rendered = ChatFormat(tok).render(ep.messages, [], "", add_generation_prompt=False)
        prompt = r.prompt_ids[k][r.prompt_mask[k]].tolist()
        assert rendered == _decode(tok, prompt + ids) + "\n"
        assert r.texts[k] == f"a{k}t2" and ep.turns == 2 and ep.done and not ep.truncated and ep.reward == 2.0
    assert not r.truncated.any()
    # first turn: one prompt, n samples (as generate does); then one request per live episode
    assert [c[:2] for c in engine.calls] == [(1, 2), (2, 1)]


def test_episode_state_is_per_episode():
    tok = chat_tokenizer()
    r = run_episodes(ScriptedEngine(tok, _respond), tok, [_record("A", "a"), _record("B", "b")], Echo(turns=3),
                     n=3, sampling=SamplingParams(max_new_tokens=16), max_turns=5)
    seen = [ep.state["seen"] for ep in r.episodes]
    assert seen == [[f"a{k}t1", f"a{k}t2", f"a{k}t3"] for _ in "ab" for k in range(3)]
    assert [ep.record["id"] for ep in r.episodes] == ["a"] * 3 + ["b"] * 3


def test_max_turns_ends_episodes_truncated():
    tok = chat_tokenizer()
    r = run_episodes(ScriptedEngine(tok, _respond), tok, [_record()], Echo(turns=10), n=2,
                     sampling=SamplingParams(max_new_tokens=16), max_turns=3)
    assert r.truncated.all() and [ep.turns for ep in r.episodes] == [3, 3]
    assert not any(ep.done for ep in r.episodes)
    ids = r.completion_ids[0][r.completion_mask[0]].tolist()
    assert _decode(tok, ids).endswith("a0t3<eos>")  # the last turn's observation is not appended as tokens
    assert episode_metrics(r.episodes)["env/truncated_frac"] == 1.0
    assert episode_metrics(r.episodes)["env/turns_mean"] == 3.0


def test_token_budget_ends_episodes_truncated():
    tok = chat_tokenizer()
    turn = len("a0t1") + 1  # tokens of a sampled turn, EOS included
    bridge = len("\n<|tool|>ok1") + 1 + len("\n<|assistant|>")
    # room for the first turn, its bridge and 3 tokens of the second: the second turn is cut, no EOS
    budget = turn + bridge + 3
    engine = ScriptedEngine(tok, _respond)
    r = run_episodes(engine, tok, [_record()], Echo(turns=10), n=1, sampling=SamplingParams(max_new_tokens=16),
                     max_turns=5, max_episode_tokens=budget)
    assert r.truncated.all() and int(r.completion_mask.sum()) == budget
    assert int(r.policy_mask.sum()) == turn + 3 and r.episodes[0].turns == 2
    assert engine.calls[-1][2] == 3  # the second turn samples at most the tokens left
    # a budget that leaves no room after the first turn's bridge ends the episode after that turn
    r = run_episodes(ScriptedEngine(tok, _respond), tok, [_record()], Echo(turns=10), n=1,
                     sampling=SamplingParams(max_new_tokens=16), max_turns=5, max_episode_tokens=turn + bridge)
    assert r.truncated.all() and r.episodes[0].turns == 1 and int(r.completion_mask.sum()) == turn


def test_turn_without_eos_is_truncated():
    tok = chat_tokenizer()
    r = run_episodes(ScriptedEngine(tok, lambda p, k: "abcdefgh<eos>"), tok, [_record()], Echo(), n=1,
                     sampling=SamplingParams(max_new_tokens=4), max_turns=3)
    assert r.truncated.all() and r.episodes[0].turns == 1 and r.texts == ["abcd"]
    assert r.policy_mask.all() and torch.equal(r.policy_mask, r.completion_mask)


def test_template_without_chat_template_is_a_clear_error():
    tok = chat_tokenizer()
    tok.chat_template = None
    with pytest.raises(ValueError, match="chat template"):
        run_episodes(ScriptedEngine(tok, _respond), tok, [_record()], Echo(), n=1, sampling=SamplingParams())


def test_bad_arguments_are_clear_errors():
    tok = chat_tokenizer()
    with pytest.raises(ValueError, match="max_turns=0"):
        run_episodes(ScriptedEngine(tok, _respond), tok, [_record()], Echo(), n=1, sampling=SamplingParams(),
                     max_turns=0)


def test_row_selection_keeps_the_policy_mask_and_episodes():
    from lit_grpo.rollout.functional import concat_rollouts, select_rows, slice_rows

    tok = chat_tokenizer()
    r = run_episodes(ScriptedEngine(tok, _respond), tok, [_record("A", "a"), _record("B", "b")], Echo(turns=2),
                     n=2, sampling=SamplingParams(max_new_tokens=16))
    picked = select_rows(r, [3, 0])
    assert torch.equal(picked.policy_mask, r.policy_mask[[3, 0]]) and picked.episodes == [r.episodes[3], r.episodes[0]]
    part = slice_rows(r, 1, 3)
    width = part.completion_ids.shape[1]
    assert torch.equal(part.policy_mask, r.policy_mask[1:3, :width]) and part.episodes == r.episodes[1:3]
    whole = concat_rollouts([slice_rows(r, 0, 2), slice_rows(r, 2, 4)], tok.pad_token_id)
    assert torch.equal(whole.policy_mask, r.policy_mask) and whole.episodes == r.episodes
    moved = r.to("cpu")
    assert torch.equal(moved.policy_mask, r.policy_mask) and moved.episodes is r.episodes


def test_the_engine_context_bounds_episodes():
    tok = chat_tokenizer()
    prompt = len(tok.encode("<|user|>Q<eos>\n<|assistant|>", add_special_tokens=False))
    turn = len("a0t1") + 1
    engine = ScriptedEngine(tok, _respond)
    engine.max_sequence_length = lambda: prompt + turn + 4  # room for one turn, not for its bridge and another
    r = run_episodes(engine, tok, [_record()], Echo(turns=10), n=1, sampling=SamplingParams(max_new_tokens=16),
                     max_turns=5)
    assert r.truncated.all() and r.episodes[0].turns == 1 and int(r.completion_mask.sum()) == turn
    assert engine.calls[0][2] == turn + 4  # the first turn may use the rest of the context
    engine.max_sequence_length = lambda: prompt
    with pytest.raises(ValueError, match=r"has \d+ tokens, which leaves no room"):
        run_episodes(engine, tok, [_record()], Echo(), n=1, sampling=SamplingParams())
