"""A scripted policy for episode tests: a RolloutEngine whose completions are fixed texts, and chat templates."""

from __future__ import annotations

from collections.abc import Callable

import torch

from lit_grpo.models.tiny import char_tokenizer
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.functional import completion_mask, pad_prompts
from lit_grpo.types import Rollouts, SamplingParams

# A template with a tool format: tool schemas are rendered, tool results keep their role.
TOOL_TEMPLATE = (
    "{%- if tools %}<|system|>tools:{% for t in tools %}{{ t.function.name }};{% endfor %}<eos>\n{% endif %}"
    "{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}<eos>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{% endif %}"
)
# A template without one (as SmolLM2's): tools are not rendered, every role is written as is.
PLAIN_TEMPLATE = (
    "{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}<eos>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{% endif %}"
)


def chat_tokenizer(template: str = TOOL_TEMPLATE):
    tok = char_tokenizer()
    tok.chat_template = template
    return tok


def scripted_logprob(position: int) -> float:
    """The log-prob the scripted engine reports for the token at ``position`` of a turn."""
    return -0.125 * (position + 1)


class ScriptedEngine(RolloutEngine):
    """Completions ``respond(prompt_text, k)`` for sample ``k`` of each prompt ("<eos>" is the EOS token)."""

    def __init__(self, tokenizer, respond: Callable[[str, int], str]) -> None:
        self.tokenizer, self.respond, self.policy = tokenizer, respond, None
        self.calls: list[tuple[int, int, int]] = []  # (prompts, n, max_new_tokens) per call

    def bind(self, policy, tokenizer) -> None:
        self.tokenizer = tokenizer

    def generate(self, prompts, n, sampling):
        raise AssertionError("episodes must continue from token ids")

    def generate_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> Rollouts:
        self.calls.append((len(prompt_ids), n, sampling.max_new_tokens))
        tok = self.tokenizer
        rows = [tok.encode(self.respond(tok.decode(p), k), add_special_tokens=False)[: sampling.max_new_tokens]
                for p in prompt_ids for k in range(n)]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), tok.pad_token_id)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
        mask, truncated = completion_mask(ids, [tok.eos_token_id])
        mask &= torch.arange(width)[None] < torch.tensor([len(r) for r in rows])[:, None]
        logprobs = torch.tensor([scripted_logprob(t) for t in range(width)]).expand(len(rows), width) * mask
        prompt, prompt_mask = pad_prompts(prompt_ids, tok.pad_token_id)
        return Rollouts(prompt.repeat_interleave(n, 0), prompt_mask.repeat_interleave(n, 0),
                        ids.masked_fill(~mask, tok.pad_token_id), mask, logprobs,
                        tok.batch_decode(ids, skip_special_tokens=True), truncated, n)
