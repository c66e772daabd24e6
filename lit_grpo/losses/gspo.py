"""GSPO: the sequence-level, length-normalised importance ratio, clipped per completion."""

from __future__ import annotations

from lit_grpo.checks import require
from lit_grpo.losses.base import LossInputs, LossOutput, PolicyLoss
from lit_grpo.losses.correction import ImportanceCorrection, apply_correction
from lit_grpo.losses.functional import gspo_loss


class GSPO(PolicyLoss):
    """Group Sequence Policy Optimization (Zheng et al., arXiv 2507.18071), per completion
    ``-min(s A, clip(s, 1 - eps_low, 1 + eps_high) A)`` with ``s = (pi(y|x) / pi_old(y|x))^(1/|y|)``, the
    geometric mean of the token ratios over the completion's own generated tokens (METHODS.md section 2).

    The completion's loss is put on each of its tokens: ``aggregation: seq-mean-token-mean`` is the paper's
    mean over completions. On policy (one optimizer step per rollout batch, ``s = 1``) the gradient is GRPO's
    with ``seq-mean-token-mean``; it differs only off policy (``steps_per_generation`` or ``num_iterations``
    above 1). Logs ``train/clip_frac`` (share of completions whose clipped term is active) and
    ``train/seq_ratio`` (mean ``s``).

    Args:
        eps_low: Lower clip range of the sequence ratio (the paper: 3e-4).
        eps_high: Upper clip range of the sequence ratio (the paper: 4e-4).
        correction: Importance correction for engine/trainer mismatch (``TruncatedIS``, ``MaskedIS``;
            null: none).
    """

    def __init__(self, eps_low: float = 3e-4, eps_high: float = 4e-4,
                 correction: ImportanceCorrection | None = None) -> None:
        require(0 < eps_low < 1 and eps_high > 0,
               f"eps_low={eps_low}, eps_high={eps_high}: need 0 < eps_low < 1 and eps_high > 0 (the paper: "
               "3e-4, 4e-4)")
        self.eps_low, self.eps_high, self.correction = eps_low, eps_high, correction

    @property
    def zero_advantage_inert(self) -> bool:
        """``-min(s 0, clip(s) 0) = 0`` for the whole completion, and an importance correction multiplies by a
        constant: a row with ``A = 0`` has zero loss and gradient."""
        return True

    def __call__(self, batch: LossInputs) -> LossOutput:
        loss, clipped, ratio = gspo_loss(batch.logp, batch.old_logp, batch.advantages, batch.mask,
                                         self.eps_low, self.eps_high)  # [n, T], [n], [n]
        loss, stats = apply_correction(self.correction, loss, batch)
        return LossOutput(loss, means={"clip_frac": clipped.float(), "seq_ratio": ratio, **stats})
