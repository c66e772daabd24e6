"""GMPO: the geometric mean of the token ratios, each clipped in log space."""

from __future__ import annotations

from lit_grpo.checks import require
from lit_grpo.losses.base import LossInputs, LossOutput, PolicyLoss
from lit_grpo.losses.correction import ImportanceCorrection, apply_correction
from lit_grpo.losses.functional import gmpo_loss


class GMPO(PolicyLoss):
    """Geometric-Mean Policy Optimization (Zhao et al., arXiv 2507.20673), per completion
    ``-A exp(mean_t c_t)`` where ``c_t`` is the token's log ratio ``log(pi / pi_old)`` clipped to
    ``[-eps_low, eps_high]`` on the side PPO clips for the sign of ``A`` (METHODS.md section 2).

    The geometric mean is less sensitive to outlier token ratios than GRPO's arithmetic mean, so the paper
    clips much wider: ratios in ``(e^-0.4, e^0.4)``. The completion's loss is put on each of its tokens
    (``aggregation: seq-mean-token-mean`` is the paper's mean over completions). On policy the gradient is
    GRPO's with ``seq-mean-token-mean``; it differs only off policy. Logs ``train/clip_frac`` (share of tokens
    whose log ratio was clipped) and ``train/seq_ratio`` (mean geometric ratio).

    Args:
        eps_low: Lower clip of the token log ratio (ratio ``e^-eps_low``).
        eps_high: Upper clip of the token log ratio (ratio ``e^eps_high``).
        correction: Importance correction for engine/trainer mismatch (``TruncatedIS``, ``MaskedIS``;
            null: none).
    """

    def __init__(self, eps_low: float = 0.4, eps_high: float = 0.4,
                 correction: ImportanceCorrection | None = None) -> None:
        require(eps_low > 0 and eps_high > 0, f"eps_low={eps_low}, eps_high={eps_high}: both must be > 0 "
                                              "(log-space "
                                             "clip range; the paper: 0.4)")
        self.eps_low, self.eps_high, self.correction = eps_low, eps_high, correction

    @property
    def zero_advantage_inert(self) -> bool:
        """``-0 exp(mean_t c_t) = 0``: the geometric mean only scales the advantage, so a row with ``A = 0``
        has zero loss and gradient (a correction multiplies by a constant)."""
        return True

    def __call__(self, batch: LossInputs) -> LossOutput:
        loss, clipped, ratio = gmpo_loss(batch.logp, batch.old_logp, batch.advantages, batch.mask,
                                         self.eps_low, self.eps_high)
        loss, stats = apply_correction(self.correction, loss, batch)
        return LossOutput(loss, means={"clip_frac": clipped.float(), "seq_ratio": ratio, **stats})
