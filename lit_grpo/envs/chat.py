"""The chat template's side of an episode: the prompt's token ids and the "bridge" tokens between turns.

The policy's sampled tokens are kept as they are; everything else comes from the tokenizer's chat template:

- the prompt: the opening messages rendered with the generation prompt (and the tools, where the template
  has a tool format);
- the bridge after each assistant turn: what the template writes after the turn's end-of-turn token, the
  observation messages, and the next generation prompt. It is found by rendering the conversation with a
  placeholder assistant turn twice, without and with the observations (and the generation prompt), and taking
  the difference of the two texts, so no sampled text is ever rendered or tokenised again.

Observations in the ``tool`` role stay in that role where the template has a tool format (Qwen2.5/3, Llama
3.x: detected by rendering a probe tool schema); elsewhere (SmolLM2 and other templates without tools) they
become one user message that wraps each result in ``<tool_response>`` tags, and the tool descriptions
(``Episode.tool_instructions``) go into the system message.
"""

from __future__ import annotations

from typing import Literal

from lit_grpo.checks import require
from lit_grpo.envs.base import Message
from lit_grpo.rollout.functional import encode_prompts, unpad_prompts

PLACEHOLDER = "ASSISTANT_TURN_PLACEHOLDER_8d1f"
_PROBE = {"type": "function", "function": {"name": "probe_tool_4c7e", "description": "probe",
                                           "parameters": {"type": "object", "properties": {}}}}


def template_has_tools(tokenizer) -> bool:
    """Whether the chat template renders tool schemas (and so has a tool-call format and a tool role)."""
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tools=[_PROBE],
                                             tokenize=False)
    except Exception:
        return False
    return _PROBE["function"]["name"] in text


class ChatFormat:
    """Renders episodes with a tokenizer's chat template; see the module docstring.

    Args:
        tokenizer: The policy's tokenizer; it needs a chat template.
        tool_role: ``tool``: observations keep the ``tool`` role; ``user``: they become user messages wrapped
            in ``response_tags``; ``auto``: ``tool`` where the template has a tool format, else ``user``.
        response_tags: Opening and closing tag around each tool result in the ``user`` form.
    """

    def __init__(self, tokenizer, tool_role: Literal["auto", "tool", "user"] = "auto",
                 response_tags: tuple[str, str] = ("<tool_response>", "</tool_response>")) -> None:
        require(bool(getattr(tokenizer, "chat_template", None)),
                "multi-turn episodes render messages with the tokenizer's chat template, and this tokenizer "
                "has none; set tokenizer.chat_template (or use a model whose tokenizer has one)")
        require(tool_role in ("auto", "tool", "user"),
                f"tool_role={tool_role!r}; use 'auto', 'tool' or 'user'")
        self.tokenizer = tokenizer
        self.native_tools = template_has_tools(tokenizer)
        self.tool_role = tool_role == "tool" or (tool_role == "auto" and self.native_tools)
        self.response_tags = response_tags

    # ---- messages ----------------------------------------------------------------------------------
    def messages(self, messages: list[Message], tool_instructions: str = "") -> list[Message]:
        """``messages`` in the form the template renders: tool results as user messages where there is no tool
        role, the tool instructions in the system message where the template does not render tools."""
        out: list[Message] = []
        for m in messages:
            if m["role"] == "tool" and not self.tool_role:
                opening, closing = self.response_tags
                wrapped = f"{opening}\n{m['content']}\n{closing}"
                if out and out[-1].get("_tool_results"):
                    out[-1]["content"] += "\n" + wrapped
                else:
                    out.append({"role": "user", "content": wrapped, "_tool_results": True})
            else:
                out.append(dict(m))
        out = [{k: v for k, v in m.items() if k != "_tool_results"} for m in out]
        if tool_instructions and not self.native_tools:
            if out and out[0]["role"] == "system":
                out[0]["content"] = f"{out[0]['content']}\n\n{tool_instructions}"
            else:
                out.insert(0, {"role": "system", "content": tool_instructions})
        return out

    def render(self, messages: list[Message], tools: list[dict], tool_instructions: str,
               add_generation_prompt: bool) -> str:
        given = {"tools": tools} if tools and self.native_tools else {}
        return self.tokenizer.apply_chat_template(self.messages(messages, tool_instructions), tokenize=False,
                                                  add_generation_prompt=add_generation_prompt, **given)

    # ---- token ids ---------------------------------------------------------------------------------
    def prompt_ids(self, messages: list[Message], tools: list[dict],
                   tool_instructions: str = "") -> list[int]:
        """The episode's prompt: the opening messages and the generation prompt, encoded as the engines encode
        prompt text (:func:`~lit_grpo.rollout.functional.encode_prompts`)."""
        text = self.render(messages, tools, tool_instructions, add_generation_prompt=True)
        return unpad_prompts(*encode_prompts(self.tokenizer, [text]))[0]

    def bridge_ids(self, history: list[Message], observations: list[Message], tools: list[dict],
                   tool_instructions: str = "", ended_with: int | None = None) -> list[int]:
        """The tokens between an assistant turn that ended with token ``ended_with`` (its EOS) and the next
        sampled token: the rest of the turn's end, ``observations`` and the generation prompt.

        ``history`` is the conversation before that assistant turn.
        """
        turn = [*history, {"role": "assistant", "content": PLACEHOLDER}]
        before = self.render(turn, tools, tool_instructions, add_generation_prompt=False)
        after = self.render([*turn, *observations], tools, tool_instructions, add_generation_prompt=True)
        require(after.startswith(before),
                "the chat template renders a conversation differently once messages follow an assistant "
                "turn, so the tokens between turns cannot be derived from it; use a template whose rendering "
                f"of earlier messages does not change (rendered {before[-80:]!r} then "
                f"{after[:len(before)][-80:]!r})")
        tail = before[before.rindex(PLACEHOLDER) + len(PLACEHOLDER):]  # the template's end of the turn
        return self.tokenizer.encode(self._after_eos(tail, ended_with) + after[len(before):],
                                     add_special_tokens=False)

    def _after_eos(self, tail: str, ended_with: int | None) -> str:
        """``tail`` without the end-of-turn token the policy already sampled."""
        if ended_with is None:
            return tail
        sampled = self.tokenizer.convert_ids_to_tokens(ended_with)
        if sampled and tail.startswith(sampled):
            return tail[len(sampled):]
        # the template closes with another end-of-turn token
        for special in self.tokenizer.all_special_tokens:
            if special and tail.startswith(special) and special != self.tokenizer.pad_token:
                return tail[len(special):]
        return tail
