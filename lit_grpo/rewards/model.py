"""RewardModel: a Hugging Face sequence-classification model, or a causal LM with a value head, scores
(prompt, completion) pairs.

The pair is written as the conversation (the prompt as a user turn, the completion as the assistant's; a
multi-turn episode's own messages) through the reward model's own chat template, or as prompt + completion
when its tokenizer has none; the score is the classifier's single logit, or the value head's output at the
pair's last token (a causal LM saved with TRL's ``AutoModelForCausalLMWithValueHead``: its weights beside
``v_head.summary.weight`` and ``v_head.summary.bias``). It runs batched under ``torch.no_grad`` on
its own device and dtype, apart from the policy, and combines with other rewards through
:class:`~lit_grpo.rewards.weighted_sum.WeightedSum`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lit_grpo.checks import require
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.types import RewardOutput

#: The value head's parameters in a TRL value-head checkpoint (``AutoModelForCausalLMWithValueHead``)
VALUE_HEAD = ("v_head.summary.weight", "v_head.summary.bias")


def _checkpoint_files(path: Path) -> list[Path]:
    """The weight files of a saved model, sharded or not (safetensors first, as transformers reads them)."""
    from transformers.utils import (
        SAFE_WEIGHTS_INDEX_NAME,
        SAFE_WEIGHTS_NAME,
        WEIGHTS_INDEX_NAME,
        WEIGHTS_NAME,
    )

    for single, index in ((SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME), (WEIGHTS_NAME, WEIGHTS_INDEX_NAME)):
        if (path / index).is_file():
            shards = sorted(set(json.loads((path / index).read_text())["weight_map"].values()))
            return [path / shard for shard in shards]
        if (path / single).is_file():
            return [path / single]
    return []


def value_head(path: str | Path) -> nn.Linear | None:
    """The value head saved beside a causal LM (TRL's ``v_head.summary``), or None when there is none."""
    found: dict[str, torch.Tensor] = {}
    for file in _checkpoint_files(Path(path)):
        if file.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(file), framework="pt") as f:
                found.update({k: f.get_tensor(k) for k in VALUE_HEAD if k in f.keys()})
        else:
            state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)  # read two tensors
            found.update({k: state[k] for k in VALUE_HEAD if k in state})
    if VALUE_HEAD[0] not in found:
        return None
    weight = found[VALUE_HEAD[0]]
    require(weight.dim() == 2 and weight.shape[0] == 1,
            f"RewardModel: {path}'s value head {VALUE_HEAD[0]} has shape {tuple(weight.shape)}; a value head "
            "maps the hidden state to one number ([1, hidden_size])")
    head = nn.Linear(weight.shape[1], 1, bias=VALUE_HEAD[1] in found)
    with torch.no_grad():
        head.weight.copy_(weight)
        if head.bias is not None:
            head.bias.copy_(found[VALUE_HEAD[1]].reshape(1))
    return head


class RewardModel(RewardFunction):
    """A reward model's score of each completion (its one output logit, or its value head's output at the
    pair's last token, times ``scale``).

    Args:
        path: A directory holding a ``*ForSequenceClassification`` model with one label, or a causal LM saved
            with a value head (TRL's ``AutoModelForCausalLMWithValueHead``), and its tokenizer.
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
        self.head = value_head(path)  # [1, hidden] or None: a sequence classifier
        if self.head is not None:
            from transformers import AutoModel

            # the transformer alone: the head reads its last hidden state, the language-model head is not used
            self.model = AutoModel.from_pretrained(path, dtype=dtypes[dtype])
            hidden = self.model.config.get_text_config().hidden_size
            require(self.head.in_features == hidden,
                    f"RewardModel: {path}'s value head reads {self.head.in_features} features, its model's "
                    f"hidden size is {hidden}; save the head with the model it was trained on")
            self.head.to(device=device, dtype=torch.float32).eval()
        else:
            try:
                self.model = AutoModelForSequenceClassification.from_pretrained(path, dtype=dtypes[dtype])
            except ValueError as err:
                raise ValueError(f"RewardModel: {path} holds no sequence-classification model and no value "
                                 f"head ({VALUE_HEAD[0]}) ({err})") from None
            labels = self.model.config.num_labels
            require(labels == 1, f"RewardModel: {path}'s head has {labels} outputs; a reward model has one "
                                 "(a *ForSequenceClassification saved with num_labels=1)")
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

    def score_batch(self, enc: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[b]`` scores of a right-padded batch: the classifier's logit, or the value head at each pair's
        last token."""
        if self.head is None:
            return self.model(**enc).logits[:, 0]
        hidden = self.model(**enc).last_hidden_state  # [b, T, H]
        last = enc["attention_mask"].sum(-1) - 1  # [b]: right padding
        return self.head(hidden[torch.arange(hidden.shape[0]), last].float())[:, 0]

    @torch.no_grad()
    def __call__(self, completions: list[str], references: list[str], **columns: Any) -> RewardOutput:
        prompts = columns.get("prompts") or [""] * len(completions)
        conversations = columns.get("conversations") or [None] * len(completions)
        texts = [self.text(p, c, m) for p, c, m in zip(prompts, completions, conversations, strict=True)]
        scores = []
        for i in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(texts[i : i + self.batch_size], return_tensors="pt", padding=True,
                                 truncation=True, max_length=self.max_length).to(self.device)
            scores.append(self.score_batch(enc).float().cpu())  # [b]
        out = torch.cat(scores) * self.scale if scores else torch.zeros(0)  # [N]
        return RewardOutput(scores=out, terms={self.name: out})
