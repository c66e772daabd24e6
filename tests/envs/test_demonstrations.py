"""Demonstration episodes for a supervised start: laid out token for token as sampled episodes, only turns trained."""

from __future__ import annotations

import pytest
import torch

from lit_grpo.envs import EpisodeEngine, run_episodes
from lit_grpo.envs.calculator import calculator
from lit_grpo.envs.chat import ChatFormat
from lit_grpo.envs.demonstrations import IGNORE, demonstration_row, render_turns
from lit_grpo.envs.tools import ToolEnvironment
from lit_grpo.types import SamplingParams
from tests.envs.scripted import PLAIN_TEMPLATE, TOOL_TEMPLATE, ScriptedEngine, chat_tokenizer

TURNS = ['<tool_call>{{"name": "calculator", "arguments": {{"expression": "{a} {op} {b}"}}}}</tool_call>',
         "{a} {op} {b} = {reference}"]
RECORD = {"prompt": "What is 6 * 7?", "reference": "42", "id": "r0", "columns": {"a": 6, "op": "*", "b": 7}}


def test_render_turns_formats_record_fields_and_columns():
    assert render_turns(TURNS, RECORD) == [
        '<tool_call>{"name": "calculator", "arguments": {"expression": "6 * 7"}}</tool_call>', "6 * 7 = 42"]
    with pytest.raises(ValueError, match=r"does not format with record 'r0'.*'missing'.*\['a', 'b', 'id', 'op'"):
        render_turns(["{missing}"], RECORD)


@pytest.mark.parametrize("template", [TOOL_TEMPLATE, PLAIN_TEMPLATE])
def test_row_is_the_sampled_episode_with_labels_on_the_policy_tokens(template):
    """The same turns sampled by a scripted policy give the same token ids, and policy_mask == labelled."""
    tok = chat_tokenizer(template)
    env = ToolEnvironment(tools=[calculator])
    turns = render_turns(TURNS, RECORD)

    def respond(prompt, k):
        return turns[prompt.count("<|assistant|>") - 1] + "<eos>"

    r = run_episodes(ScriptedEngine(tok, respond), tok, [RECORD], env, n=1,
                     sampling=SamplingParams(max_new_tokens=200), max_turns=3)
    ids, labels = demonstration_row(env, ChatFormat(tok), RECORD, turns, tok.eos_token_id)
    prompt = r.prompt_ids[0][r.prompt_mask[0]].tolist()
    completion = r.completion_ids[0][r.completion_mask[0]].tolist()
    assert r.episodes[0].done and r.episodes[0].tool_calls == 1 and r.texts == ["6 * 7 = 42"]
    assert ids == prompt + completion
    trained = [label != IGNORE for label in labels]
    assert trained == [False] * len(prompt) + r.policy_mask[0][r.completion_mask[0]].tolist()
    assert all(label == i for i, label in zip(ids, labels, strict=True) if label != IGNORE)
    observation = "<|tool|>42<eos>" if template == TOOL_TEMPLATE else "<tool_response>\n42\n</tool_response>"
    assert observation in tok.decode(ids)  # the tool really ran


@pytest.mark.parametrize("turns, error", [
    (["6 * 7 = 42", "again"], r"ended the episode after turn 1 of 2"),
    ([TURNS[0]], r"did not end the episode after the last turn"),
    (['<tool_call>{{"name": "calculator", "arguments": {{"expression": "6 @ 7"}}}}</tool_call>', "42"],
     r"turn 1 .* got an error from the environment \(\"error: tool 'calculator' failed"),
    ([], r"at least one assistant turn"),
])
def test_a_demonstration_the_environment_would_not_play_is_an_error(turns, error):
    tok = chat_tokenizer(PLAIN_TEMPLATE)
    with pytest.raises(ValueError, match=error):
        demonstration_row(ToolEnvironment(tools=[calculator]), ChatFormat(tok), RECORD, render_turns(turns, RECORD),
                          tok.eos_token_id)


def test_sft_module_trains_only_the_demonstrated_turns(tmp_path):
    from lit_grpo.models.tiny import build_tiny_model
    from lit_grpo.sft import SFTModule
    from lit_grpo.types import PromptBatch

    path = build_tiny_model(tmp_path / "tiny")
    chat_tokenizer(PLAIN_TEMPLATE).save_pretrained(path)  # the tiny model's tokenizer, with a chat template
    module = SFTModule(str(path), reward=None, engine=EpisodeEngine(ToolEnvironment(tools=[calculator])),
                       turns=TURNS)
    module.configure_model()
    batch = PromptBatch(prompts=["What is 6 * 7?", "What is 12 * 3?"], references=["42", "36"], ids=["a", "b"],
                        columns={"a": [6, 12], "op": ["*", "*"], "b": [7, 3]})
    ids, labels, mask = module.encode(batch)
    tok = module.tokenizer
    for row, (a, b, product) in enumerate([(6, 7, 42), (12, 3, 36)]):
        trained = tok.decode(ids[row][labels[row] != IGNORE], skip_special_tokens=False)
        assert trained == (f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{a} * {b}"}}}}'
                           f"</tool_call><eos>{a} * {b} = {product}<eos>")
        assert (labels[row][mask[row] == 0] == IGNORE).all()
    loss = module.training_step(batch, 0)
    assert torch.isfinite(loss)
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.policy.parameters())


def test_sft_turns_need_an_episode_engine():
    from lit_grpo.sft import SFTModule

    with pytest.raises(ValueError, match="need a non-empty list and an engine of class lit_grpo.envs.EpisodeEngine"):
        SFTModule("unused", reward=None, turns=TURNS)
