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
    """Weights ``[n, T]`` from the trainer's pre-update log-probs and the engine's of the sampled tokens."""

    @abstractmethod
    def __call__(self, train_logp: Tensor, engine_logp: Tensor, mask: Tensor) -> Correction:
        """``train_logp``, ``engine_logp`` ``[n, T]`` (0 on padding), ``mask [n, T]`` -> the correction."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class TruncatedIS(ImportanceCorrection):
    """Truncated importance sampling (TIS): each token's policy term times ``min(w, cap)``.

    Yao et al., "Your efficient RL framework secretly brings you off-policy RL training" (2025). Logs
    ``train/is_truncated_frac`` (share of tokens, or of completions at the sequence levels, whose weight was
    cut).

    Args:
        level: ``token`` (each token's ratio), ``sequence`` (the product over the completion) or ``geometric``
            (the product's geometric mean, so long completions are not cut more than short ones).
        cap: The truncation C.
    """

    def __init__(self, level: ISLevel = "token", cap: float = 2.0) -> None:
        require(level in _LEVELS, f"correction level={level!r} is not known; choose token, sequence or "
                                  "geometric")
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
        level: ``token``, ``sequence`` (product of the completion's ratios) or ``geometric`` (their
            geometric mean).
        low: Lower end of the band (0 = no lower end).
        high: Upper end of the band.
    """

    def __init__(self, level: ISLevel = "token", low: float = 0.5, high: float = 2.0) -> None:
        require(level in _LEVELS, f"correction level={level!r} is not known; choose token, sequence or "
                                  "geometric")
        require(0 <= low < 1 < high, f"low={low}, high={high}: need 0 <= low < 1 < high (e.g. low: 0.5, "
                                     "high: 2)")
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


#: What corrects the staleness of asynchronous rollouts (``AsyncRollouts(correction=...)``): ``truncated_is``
# (the : decoupled objective of docs/methods.md with ``TruncatedIS()``, unless the loss has a correction of
# its own) or : ``none`` (the ratio against the stale samples is taken as 1).
STALENESS_CORRECTIONS = ("truncated_is", "none")


def correct_staleness(loss: object, max_staleness: int, choice: str) -> str | None:
    """Give ``loss`` the correction that makes its update the decoupled objective when the rollouts it trains
    on are ``max_staleness >= 1`` policy versions old: ``TruncatedIS()`` (token level, cap 2) when the loss
    has no correction of its own and ``choice`` is ``truncated_is``; nothing at ``max_staleness: 0`` or with
    ``none``. Returns the line that says what the update does (None at ``max_staleness: 0``)."""
    require(choice in STALENESS_CORRECTIONS,
            f"AsyncRollouts: correction={choice!r}; use one of {', '.join(STALENESS_CORRECTIONS)}")
    if max_staleness == 0:
        return None
    prefix = f"AsyncRollouts(max_staleness={max_staleness}): "
    own = getattr(loss, "correction", None)
    if own is not None:
        return (f"{prefix}the loss's {own!r} weights each token by pi_old / pi_behaviour, the generating "
                "policy's log-probs against the trainer's (the decoupled objective, docs/methods.md)")
    if choice == "none":
        return (f"{prefix}no importance correction (correction: none): the loss takes the ratio between the "
                "trainer's policy and the stale samples' as 1, so the update is biased by the drift between "
                "them")
    require(hasattr(loss, "correction"),
            f"{prefix}{type(loss).__name__} takes no importance correction, which stale rollouts need; use a "
            "loss with a correction option, or set the engine's correction: none to train on them "
            "uncorrected")
    loss.correction = TruncatedIS()
    return (f"{prefix}the stale rollouts are corrected with {loss.correction!r} (the decoupled objective, "
            "docs/methods.md: each token weighted by min(pi_old / pi_behaviour, 2)); set the engine's "
            "correction: none to train without it")
