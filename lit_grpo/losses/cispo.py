"""CISPO: a clipped, stop-gradient importance weight times the log-prob, so no token leaves the gradient."""

from __future__ import annotations

from lit_grpo.checks import require
from lit_grpo.losses.base import LossInputs, LossOutput, PolicyLoss
from lit_grpo.losses.correction import ImportanceCorrection, apply_correction
from lit_grpo.losses.functional import cispo_loss


class CISPO(PolicyLoss):
    """Clipped IS-weight Policy Optimization (MiniMax-M1, arXiv 2506.13585), per token
    ``-sg(clip(w, 1 - eps_low, 1 + eps_high)) A log pi`` with ``w = pi / pi_old`` (METHODS.md section 2).

    The weight is clipped, not the update: every token keeps a gradient ``w' A grad(log pi)``, where PPO's
    clip zeroes the gradient of tokens outside its range. The paper sets no lower bound (``eps_low: null``)
    and tunes only the upper one; ScaleRL (arXiv 2510.13786) uses an upper bound of 4 to 8 (here 1 + 4 = 5).
    On policy (``w = 1``) the gradient is GRPO's; it differs only off policy. Logs ``train/clip_frac`` (share
    of tokens whose weight was clipped).

    Args:
        eps_low: The weight's lower bound is ``1 - eps_low`` (null = no lower bound, the paper's choice).
        eps_high: The weight's upper bound is ``1 + eps_high``.
        correction: Importance correction for engine/trainer mismatch (``TruncatedIS``, ``MaskedIS``;
            null: none).
    """

    def __init__(self, eps_low: float | None = None, eps_high: float = 4.0,
                 correction: ImportanceCorrection | None = None) -> None:
        require(eps_low is None or 0 <= eps_low <= 1, f"eps_low={eps_low} must be in [0, 1] or null (no "
                                                      "lower bound)")
        require(eps_high > 0, f"eps_high={eps_high} must be > 0 (the weight's upper bound is 1 + eps_high)")
        self.eps_low, self.eps_high, self.correction = eps_low, eps_high, correction

    @property
    def zero_advantage_inert(self) -> bool:
        """``-sg(w') 0 logp = 0`` and its gradient ``-sg(w') 0 grad(logp) = 0`` (a correction multiplies by a
        constant)."""
        return True

    def __call__(self, batch: LossInputs) -> LossOutput:
        loss, clipped = cispo_loss(batch.logp, batch.old_logp, batch.advantages, self.eps_low, self.eps_high)
        loss, stats = apply_correction(self.correction, loss, batch)
        return LossOutput(loss, means={"clip_frac": clipped.float(), **stats})
