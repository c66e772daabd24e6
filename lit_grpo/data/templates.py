"""Prompt styles: how a task's question text becomes the prompt the policy sees.

- ``plain``: the question text followed by the task's answer instruction, as is (base models, the tiny
  character-level models of the tests);
- ``chat``: the same text as one user message rendered by the tokenizer's chat template with the
  generation prompt appended (instruction-tuned models). A tokenizer without a chat template falls
  back to ``plain``, with a warning;
- ``think``: the question inside :data:`THINK_TEMPLATE`, which asks for the reasoning inside
  ``<think> </think>`` and the final answer inside ``<answer> </answer>``; the
  :class:`~lit_grpo.rewards.Format` reward checks that shape and the task rewards read the answer
  from the ``<answer>`` tag.

A system prompt (``data.system_prompt``) is the chat's system message in ``chat``, and a paragraph before
the prompt in ``plain`` and ``think``. A record whose prompt is a list of chat messages (TRL's conversational
format) is rendered by the chat template in ``plain`` and ``chat`` alike, the instruction appended to its last
user turn; a system prompt is added only where the record has no system message of its own.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from lit_grpo.checks import require

logger = logging.getLogger(__name__)

PromptStyle = Literal["plain", "chat", "think"]
STYLES = ("plain", "chat", "think")

THINK_TEMPLATE = (
    "A conversation between a user and an assistant. The user asks a question and the assistant "
    "solves it. The assistant first reasons step by step inside <think> </think> tags, then gives "
    "only the final answer inside <answer> </answer> tags, for example "
    "<think> reasoning here </think> <answer> answer here </answer>.\n"
    "User: {question}\n"
    "Assistant:"
)


def check_style(owner: str, style: str) -> None:
    """Validates a source's ``style`` option."""
    require(style in STYLES, f"{owner}: style={style!r} is not a prompt style; use one of {STYLES}")


class PromptRenderer:
    """Turns question text into prompt text in one style; loads the chat tokenizer lazily, once.

    Args:
        style: The prompt style.
        tokenizer: Hub id or local directory of the tokenizer whose chat template renders ``chat``
            prompts (usually the policy's).
    """

    def __init__(self, style: PromptStyle, tokenizer: str | None = None) -> None:
        self.style = style
        self.tokenizer = tokenizer
        self._tok: Any = None

    def __call__(self, question: str | list[dict[str, str]], instruction: str = "", system: str = "") -> str:
        """The prompt for ``question`` (a text, or chat messages ending with the user's turn);
        ``instruction`` (how to give the answer) is appended for ``plain`` and ``chat``; ``think`` asks for
        the answer in its own way. ``system`` is the system prompt ("" for none)."""
        if isinstance(question, list):
            return self._messages(question, instruction, system)
        if self.style == "think":
            return _before(system, THINK_TEMPLATE.format(question=question))
        text = f"{question}\n{instruction}" if instruction else question
        if self.style == "chat":
            return self._chat(text, system)
        return _before(system, text)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tok": None}  # the tokenizer is reloaded where needed

    def _chat(self, text: str, system: str = "") -> str:
        tok = self._load()
        if tok is False:
            return _before(system, text)
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": text})
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _messages(self, messages: list[dict[str, str]], instruction: str, system: str) -> str:
        require(self.style != "think",
                "style='think' wraps one question in its template, and these records hold chat messages; use "
                "style: chat (or plain) for them")
        tok = self._load()
        require(tok is not False,
                f"the records hold chat messages, which only a chat template renders, and the tokenizer of "
                f"{self.tokenizer!r} has none; use a tokenizer with a chat template (the source's "
                "`tokenizer`)")
        messages = [dict(m) for m in messages]
        if instruction:
            last = messages[-1]
            last["content"] = f"{last['content']}\n{instruction}"
        if system and not any(m["role"] == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": system})
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _load(self) -> Any:
        if self._tok is None:
            require(self.tokenizer is not None,
                    "style='chat' needs a tokenizer to render the chat template: set the source's option "
                    "`tokenizer` to the model's hub id or directory (under a Trainer the DataModule uses "
                    "the policy's model when it is unset)")
            from lit_grpo.models.loading import load_tokenizer

            tok = load_tokenizer(self.tokenizer)
            if getattr(tok, "chat_template", None):
                self._tok = tok
            else:
                logger.warning(
                    "the tokenizer of %r has no chat template: style='chat' falls back to plain prompts "
                    "(use style: plain to silence this, or a tokenizer with a chat template)",
                    self.tokenizer,
                )
                self._tok = False
        return self._tok


def _before(system: str, text: str) -> str:
    """``text`` with the system prompt as a paragraph before it (the styles without a system message)."""
    return f"{system}\n\n{text}" if system else text


def format_options(options: list[str]) -> str:
    """``["21", "22"]`` -> ``"A) 21\\nB) 22"``: options labelled with letters, one per line."""
    return "\n".join(f"{chr(ord('A') + i)}) {text}" for i, text in enumerate(options))
