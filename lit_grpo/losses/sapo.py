"""SAPO: a soft, temperature-controlled gate on the importance ratio instead of a hard clip."""

from __future__ import annotations

from lit_grpo.checks import require
from lit_grpo.losses.base import LossInputs, LossOutput, PolicyLoss
from lit_grpo.losses.correction import ImportanceCorrection, apply_correction
from lit_grpo.losses.functional import sapo_loss


class SAPO(PolicyLoss):
    """Soft Adaptive Policy Optimization (Gao et al., arXiv 2511.20347), per token
    ``-(4 / tau) sigmoid(tau (w - 1)) A`` with ``w = pi / pi_old`` and ``tau = tau_pos`` where ``A > 0``, else
    ``tau_neg`` (METHODS.md section 2).

    The gradient is GRPO's times ``4 s (1 - s)``, ``s = sigmoid(tau (w - 1))``: 1 on policy, fading smoothly
    as the ratio leaves 1, faster for larger ``tau``. The paper takes ``tau_neg > tau_pos`` (negative updates
    spread to many unsampled tokens) and averages tokens per completion (``aggregation:
    seq-mean-token-mean``). It differs from GRPO only off policy. Logs ``train/gate`` (mean ``4 s (1 - s)``).

    Args:
        tau_pos: Gate temperature for tokens with a positive advantage.
        tau_neg: Gate temperature for the others.
        correction: Importance correction for engine/trainer mismatch (``TruncatedIS``, ``MaskedIS``;
            null: none).
    """

    def __init__(self, tau_pos: float = 1.0, tau_neg: float = 1.05,
                 correction: ImportanceCorrection | None = None) -> None:
        require(tau_pos > 0 and tau_neg > 0, f"tau_pos={tau_pos}, tau_neg={tau_neg}: both must be > 0 (the "
                                             "paper: 1.0, "
                                            "1.05)")
        self.tau_pos, self.tau_neg, self.correction = tau_pos, tau_neg, correction

    @property
    def zero_advantage_inert(self) -> bool:
        """``-(4 / tau) sigmoid(tau (w - 1)) 0 = 0`` whatever the gate's temperature, with zero gradient (a
        correction multiplies by a constant)."""
        return True

    def __call__(self, batch: LossInputs) -> LossOutput:
        loss, gate = sapo_loss(batch.logp, batch.old_logp, batch.advantages, self.tau_pos, self.tau_neg)
        loss, stats = apply_correction(self.correction, loss, batch)
        return LossOutput(loss, means={"gate": gate, **stats})
