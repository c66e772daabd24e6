"""Small off-policy micro-batches for the loss tests, and a naive reference to compare with."""

from __future__ import annotations

import torch

from lit_grpo.losses import LossInputs, token_weights

# three completions of lengths 2, 1 and 3 (T = 3); padded positions hold junk that must not matter
MASK = torch.tensor([[True, True, False], [True, False, False], [True, True, True]])
OLD = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0], [-1.5, -0.7, -2.0]])
DIFF = torch.tensor([[0.1, -0.3, 9.0], [0.5, -7.0, 3.0], [0.5, 0.5, 0.5]])  # logp - old on generated tokens
ADV = torch.tensor([1.0, 2.0, -1.0])


def inputs(diff: torch.Tensor = DIFF, adv: torch.Tensor = ADV, mode: str = "seq-mean-token-mean",
           **overrides) -> LossInputs:
    """A micro-batch whose current log-probs ``OLD + diff`` (a leaf with gradient) are off policy."""
    logp = (OLD + diff).clone().requires_grad_(True)
    fields = {"logp": logp, "old_logp": OLD, "engine_logp": None, "ref_logp": None, "advantages": adv,
              "mask": MASK, "weights": token_weights(MASK, mode, max_new_tokens=3)}
    return LossInputs(**{**fields, **overrides})


def grad_of(loss: torch.Tensor, batch: LossInputs) -> torch.Tensor:
    """The gradient of the aggregated loss ``sum(loss * weights)`` with respect to the current log-probs."""
    (grad,) = torch.autograd.grad((loss * batch.weights).sum(), batch.logp)
    return grad


def lengths() -> list[int]:
    return MASK.sum(-1).tolist()
