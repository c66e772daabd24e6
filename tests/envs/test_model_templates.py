"""Episodes under chat templates in the form of Qwen2.5's and Llama 3.1's (condensed to their tool parts): calls in
the model's own format, results in the template's tool role, and the episode's tokens exactly the template's
rendering of the conversation."""

from __future__ import annotations

import json

from lit_grpo.envs import ChatFormat, ToolEnvironment, calculator, run_episodes
from lit_grpo.models.tiny import char_tokenizer
from lit_grpo.types import SamplingParams
from tests.envs.scripted import ScriptedEngine

QWEN25 = """{%- if tools %}
{{- '<|im_start|>system\\n' }}{%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- "\\n\\n# Tools\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
{%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
  {%- if message.role == "user" or (message.role == "system" and not loop.first) or message.role == "assistant" %}
    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
  {%- elif message.role == "tool" %}
    {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}{{- '<|im_start|>user' }}{%- endif %}
    {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
    {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}{{- '<|im_end|>\\n' }}{%- endif %}
  {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""

LLAMA31 = """{{- bos_token }}
{%- if messages[0].role == 'system' %}{%- set system_message = messages[0].content %}{%- set messages = messages[1:] %}{%- else %}{%- set system_message = "" %}{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools %}{{- "Environment: ipython\\n" }}{%- endif %}
{{- system_message }}{{- "<|eot_id|>" }}
{%- if tools %}
  {%- set first_user_message = messages[0].content %}{%- set messages = messages[1:] %}
  {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' }}
  {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\\n\\n' }}
  {%- for t in tools %}{{- t | tojson }}{{- "\\n\\n" }}{%- endfor %}
  {{- first_user_message + "<|eot_id|>" }}
{%- endif %}
{%- for message in messages %}
  {%- if message.role == "tool" or message.role == "ipython" %}
    {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" + message.content + "<|eot_id|>" }}
  {%- else %}
    {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
  {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"""


def _tokenizer(template: str, specials: list[str], eos: str):
    tok = char_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": specials})
    tok.eos_token = eos
    tok.chat_template = template
    return tok


def _run(tok, first_turn: str, eos: str):
    def respond(prompt: str, k: int) -> str:
        return (first_turn if "42" not in prompt else "It is 42.") + eos

    record = {"prompt": "What is 6*7?", "reference": "42", "id": "0", "columns": {}}
    return run_episodes(ScriptedEngine(tok, respond), tok, [record], ToolEnvironment(tools=[calculator]), n=1,
                        sampling=SamplingParams(max_new_tokens=200), max_turns=3)


def _check_sequence_is_the_rendering(tok, r, trailer: str):
    ep = r.episodes[0]
    rendered = ChatFormat(tok).render(ep.messages, ep.tools, "", add_generation_prompt=False)
    ids = r.prompt_ids[0][r.prompt_mask[0]].tolist() + r.completion_ids[0][r.completion_mask[0]].tolist()
    assert tok.decode(ids) + trailer == rendered
    assert ep.done and ep.tool_calls == 1 and ep.tool_errors == 0 and r.texts == ["It is 42."]


def test_qwen25_format():
    tok = _tokenizer(QWEN25, ["<|im_start|>", "<|im_end|>"], "<|im_end|>")
    chat = ChatFormat(tok)
    assert chat.native_tools and chat.tool_role
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>'
    r = _run(tok, call, "<|im_end|>")
    _check_sequence_is_the_rendering(tok, r, "\n")
    completion = tok.decode(r.completion_ids[0][r.completion_mask[0]])
    bridge = "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert completion == call + "<|im_end|>" + bridge + "It is 42.<|im_end|>"
    prompt = tok.decode(r.prompt_ids[0][r.prompt_mask[0]])
    assert json.dumps(r.episodes[0].tools[0])[:30] in prompt  # the template rendered the schema


def test_llama31_format():
    tok = _tokenizer(LLAMA31, ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], "<|eot_id|>")
    assert ChatFormat(tok).tool_role
    call = '{"name": "calculator", "parameters": {"expression": "6*7"}}'
    r = _run(tok, call, "<|eot_id|>")
    _check_sequence_is_the_rendering(tok, r, "")
    completion = tok.decode(r.completion_ids[0][r.completion_mask[0]])
    bridge = "<|start_header_id|>ipython<|end_header_id|>\n\n42<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    assert completion == call + "<|eot_id|>" + bridge + "It is 42.<|eot_id|>"
    n_policy = len(tok.encode(call, add_special_tokens=False)) + 1 + len(tok.encode("It is 42.")) + 1
    assert int(r.policy_mask.sum()) == n_policy
