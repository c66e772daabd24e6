"""Text similarity to a reference: SQuAD-style token F1 and ROUGE-L F1 (torchmetrics' definitions)."""

from __future__ import annotations

import math
import re
from typing import Any

import torch
from torchmetrics.functional.text import rouge_score, squad

from lit_grpo.checks import require
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.scoring import Unscorable, score_items
from lit_grpo.types import RewardOutput

_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL)


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD token F1 in [0, 1]: lower-cased, punctuation and articles (a, an, the) removed, split on
    whitespace; the harmonic mean of token precision and recall (bag of tokens)."""
    preds = {"prediction_text": prediction, "id": "0"}
    target = {"answers": {"text": [reference], "answer_start": [0]}, "id": "0"}
    return squad(preds, target)["f1"].item() / 100.0


def rouge_l_f1(prediction: str, reference: str) -> float:
    """ROUGE-L F1 in [0, 1]: lower-cased alphanumeric tokens; the F-measure of the longest common
    subsequence's precision and recall."""
    return rouge_score(prediction, reference, rouge_keys="rougeL")["rougeL_fmeasure"].item()


class TextSimilarity(RewardFunction):
    """``f1_weight × token F1 + rouge_weight × ROUGE-L F1`` of the completion against the reference.

    For open-ended generation with a reference text (poems, summaries): a graded reward in [0, 1]
    with the defaults (0.6 and 0.4). When the completion holds an ``<answer>`` tag (the ``think``
    prompt style) the content of the last one is scored, else the whole completion. An empty reference
    is NaN (``unscorable``). Terms: the score, and ``token_f1`` and ``rouge_l`` per item.

    Args:
        f1_weight: Weight of the SQuAD-style token F1.
        rouge_weight: Weight of the ROUGE-L F1.
    """

    binary = False

    def __init__(self, f1_weight: float = 0.6, rouge_weight: float = 0.4) -> None:
        for name, value in [("f1_weight", f1_weight), ("rouge_weight", rouge_weight)]:
            require(math.isfinite(value) and value >= 0, f"{name}={value} must be a finite number >= 0")
        require(f1_weight + rouge_weight != 0,
                "f1_weight and rouge_weight are both 0; give at least one a positive weight")
        self.f1_weight = f1_weight
        self.rouge_weight = rouge_weight

    def parts(self, completion: str, reference: str | None) -> tuple[float, float]:
        """``(token F1, ROUGE-L F1)`` of one item; raises :class:`Unscorable` for an empty reference."""
        if reference is None or not str(reference).strip():
            raise Unscorable("unscorable", "empty reference")
        tags = _TAG.findall(completion)
        text = tags[-1] if tags else completion
        return token_f1(text, str(reference)), rouge_l_f1(text, str(reference))

    def __call__(self, completions: list[str], references: list[str], **columns: Any) -> RewardOutput:
        """``completions [N]``, ``references [N]`` -> scores ``[N]`` in [0, f1_weight + rouge_weight]."""
        parts: dict[int, tuple[float, float]] = {}

        def score(completion: str, reference: str | None, index: int) -> float:
            f1, rouge = parts[index] = self.parts(completion, reference)
            return self.f1_weight * f1 + self.rouge_weight * rouge

        index = {"index": list(range(len(completions)))}
        out = score_items(score, completions, references, name=self.name, columns=index)
        nan = (math.nan, math.nan)
        values = torch.tensor([parts.get(i, nan) for i in range(len(completions))], dtype=torch.float32)
        out.terms["token_f1"] = values[:, 0] if len(completions) else out.scores.clone()  # [N]
        out.terms["rouge_l"] = values[:, 1] if len(completions) else out.scores.clone()  # [N]
        return out
