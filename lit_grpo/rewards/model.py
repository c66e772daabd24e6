"""RewardModel: a Hugging Face sequence-classification model scores (prompt, completion) pairs.

The pair is written as the conversation (the prompt as a user turn, the completion as the assistant's; a
multi-turn episode's own messages) through the reward model's own chat template, or as prompt + completion
when its tokenizer has none; the score is the model's single logit. It runs batched under ``torch.no_grad`` on
its own device and dtype, apart from the policy, and combines with other rewards through
:class:`~lit_grpo.rewards.weighted_sum.WeightedSum`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from lit_grpo.checks import require
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.types import RewardOutput


class RewardModel(RewardFunction):
    """A reward model's score of each completion (its one output logit, times ``scale``).

    Args:
        path: A directory holding a ``*ForSequenceClassification`` model with one label, and its tokenizer.
        device: Where it runs (``cpu``, ``cuda``, ``cuda:1``).
        dtype: ``float32``, ``bfloat16`` or ``float16``.
        batch_size: Pairs a forward pass.
        max_length: Longest pair in tokens (longer ones are cut from the left, keeping the completion).
        scale: Multiplies the logit.
    """

    binary = False
    needs_prompts = True

    def __init__(self, path: str, device: str = "cpu", dtype: str = "float32", batch_size: int = 16,
                 max_length: int = 1024, scale: float = 1.0) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        require(Path(path).is_dir(), f"RewardModel: path={path!r} is not a directory; give the folder of a "
                                     "saved sequence-classification model (save_pretrained)")
        dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        require(dtype in dtypes, f"RewardModel: dtype={dtype!r} must be one of {sorted(dtypes)}")
        require(batch_size >= 1 and max_length >= 2, "RewardModel: batch_size >= 1 and max_length >= 2")
        try:
            self.model = AutoModelForSequenceClassification.from_pretrained(path, dtype=dtypes[dtype])
        except ValueError as err:
            raise ValueError(f"RewardModel: {path} holds no sequence-classification model ({err})") from None
        labels = self.model.config.num_labels
        require(labels == 1, f"RewardModel: {path}'s head has {labels} outputs; a reward model has one (a "
                             "*ForSequenceClassification saved with num_labels=1)")
        self.model.to(device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.tokenizer.truncation_side, self.tokenizer.padding_side = "left", "right"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        require(self.tokenizer.pad_token is not None,
                f"RewardModel: {path}'s tokenizer has no pad or eos token")
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.device, self.batch_size, self.max_length, self.scale = device, batch_size, max_length, scale

    def text(self, prompt: str, completion: str, conversation: list[dict] | None) -> str:
        """The pair as the reward model reads it: the conversation through its chat template, else the
        prompt followed by the completion."""
        if self.tokenizer.chat_template:
            messages = conversation or [{"role": "user", "content": prompt},
                                        {"role": "assistant", "content": completion}]
            return self.tokenizer.apply_chat_template(messages, tokenize=False)
        return prompt + completion

    @torch.no_grad()
    def __call__(self, completions: list[str], references: list[str], **columns: Any) -> RewardOutput:
        prompts = columns.get("prompts") or [""] * len(completions)
        conversations = columns.get("conversations") or [None] * len(completions)
        texts = [self.text(p, c, m) for p, c, m in zip(prompts, completions, conversations, strict=True)]
        scores = []
        for i in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(texts[i : i + self.batch_size], return_tensors="pt", padding=True,
                                 truncation=True, max_length=self.max_length).to(self.device)
            scores.append(self.model(**enc).logits[:, 0].float().cpu())  # [b]
        out = torch.cat(scores) * self.scale if scores else torch.zeros(0)  # [N]
        return RewardOutput(scores=out, terms={self.name: out})
