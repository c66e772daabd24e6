"""Importance corrections for engine/trainer mismatch: one component every loss applies the same way.

The rollout engine (vLLM, another precision) samples from ``pi_engine``; the trainer's log-probs of the same
tokens before the update, ``pi_old``, differ a little. A correction reweights each token's policy term by
``w = pi_old / pi_engine`` (token, product over the completion, or its geometric mean), truncated or masked.
A loss takes it as its ``correction`` option and applies it with :func:`apply_correction` to its policy term
(a KL penalty is not reweighted), so a new correction is one class here and works with every loss:
``--model.loss.correction=MaskedIS --model.loss.correction.level=geometric``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from torch import Tensor

from lit_grpo.checks import require
from lit_grpo.losses.base import LossInputs
from lit_grpo.losses.functional import ISLevel, masked_is_weights, truncated_is_weights

_LEVELS = ("token", "sequence", "geometric")


@dataclass
class Correction:
    """Detached weights ``[n, T]`` for the policy term, and statistics to log (``LossOutput.means`` form)."""

    weights: Tensor
    means: dict[str, Tensor] = field(default_factory=dict)


class ImportanceCorrection(ABC):
    """Weights ``[n, T]`` from the trainer's pre-update log-probs and the engine's, both of the sampled tokens."""

    @abstractmethod
    def __call__(self, train_logp: Tensor, engine_logp: Tensor, mask: Tensor) -> Correction:
        """``train_logp``, ``engine_logp`` ``[n, T]`` (0 on padding), ``mask [n, T]`` -> the correction."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class TruncatedIS(ImportanceCorrection):
    """Truncated importance sampling (TIS): each token's policy term times ``min(w, cap)``.

    Yao et al., "Your efficient RL framework secretly brings you off-policy RL training" (2025). Logs
    ``train/is_truncated_frac`` (share of tokens, or of completions at the sequence levels, whose weight was cut).

    Args:
        level: ``token`` (each token's ratio), ``sequence`` (the product over the completion) or ``geometric``
            (the product's geometric mean, so long completions are not cut more than short ones).
        cap: The truncation C.
    """

    def __init__(self, level: ISLevel = "token", cap: float = 2.0) -> None:
        require(level in _LEVELS, f"correction level={level!r} is not known; choose token, sequence or geometric")
        require(cap > 0, f"tis_cap={cap} must be > 0 (2 is the usual choice)")
        self.level, self.cap = level, cap

    def __call__(self, train_logp: Tensor, engine_logp: Tensor, mask: Tensor) -> Correction:
        weights = truncated_is_weights(train_logp, engine_logp, mask, self.level, self.cap)  # [n, T]
        cut = (weights >= self.cap) & mask  # [n, T]
        frac = cut.float() if self.level == "token" else cut.any(-1).float()  # [n, T] or [n]
        return Correction(weights, {"is_truncated_frac": frac})


class MaskedIS(ImportanceCorrection):
    """Masked importance sampling (MIS, IcePop): the policy term times ``w`` where ``low <= w <= high``, and 0
    (the token, or the whole completion, leaves the gradient) where the ratio leaves that two-sided band.

    IcePop (Ling team, "Every Step Evolves", arXiv 2510.18855) masks tokens; masking whole completions by
    their product or geometric-mean ratio is the sequence-level variant (TRL's ``sequence_mask``, verl's
    rejection sampling). Logs ``train/is_masked_frac`` (share of tokens, or of completions, masked).

    Args:
        level: ``token``, ``sequence`` (product of the completion's ratios) or ``geometric`` (its geometric mean).
        low: Lower end of the band (0 = no lower end).
        high: Upper end of the band.
    """

    def __init__(self, level: ISLevel = "token", low: float = 0.5, high: float = 2.0) -> None:
        require(level in _LEVELS, f"correction level={level!r} is not known; choose token, sequence or geometric")
        require(0 <= low < 1 < high, f"low={low}, high={high}: need 0 <= low < 1 < high (e.g. low: 0.5, high: 2)")
        self.level, self.low, self.high = level, low, high

    def __call__(self, train_logp: Tensor, engine_logp: Tensor, mask: Tensor) -> Correction:
        weights, rejected = masked_is_weights(train_logp, engine_logp, mask, self.level, self.low, self.high)
        return Correction(weights, {"is_masked_frac": rejected.float()})


def apply_correction(
    correction: ImportanceCorrection | None, policy_loss: Tensor, batch: LossInputs
) -> tuple[Tensor, dict[str, Tensor]]:
    """``policy_loss [n, T]`` reweighted by ``correction`` (unchanged when None), and its statistics.

    The weights compare the trainer's log-probs before the update (``batch.old_logp``) with the engine's.
    """
    if correction is None:
        return policy_loss, {}
    out = correction(batch.old_logp, batch.engine_logp, batch.mask)
    return policy_loss * out.weights, out.means
