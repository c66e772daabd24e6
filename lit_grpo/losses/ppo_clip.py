"""PPOClip: PPO's and GRPO's clipped surrogate, with dual clip, a KL penalty and an importance correction."""

from __future__ import annotations

from typing import Any, get_args

from lit_grpo.checks import require
from lit_grpo.logprobs import KLEstimator
from lit_grpo.losses.base import LossInputs, LossOutput, PolicyLoss
from lit_grpo.losses.correction import ImportanceCorrection, apply_correction
from lit_grpo.losses.functional import clipped_policy_loss, kl_penalty


class PPOClip(PolicyLoss):
    """Per token ``-min(w A, clip(w, 1 - eps_low, 1 + eps_high) A)`` with ``w = exp(logp - old_logp)``
    (METHODS.md section 2); ``w = 1`` with one optimizer step per rollout batch.

    Optionally bounded by ``-c A`` for ``A < 0`` (dual clip), reweighted by an importance ``correction``
    towards the trainer's policy when the engine's numerics differ, and plus ``beta`` times a per-token KL
    estimate to a reference policy. Logs ``train/clip_frac`` (share of the trained tokens whose clipped term
    is the active one: zero-advantage rows elided by ``batching`` are not counted) and, with ``beta > 0``,
    ``train/kl``.

    Args:
        eps_low: Lower clip range of the ratio.
        eps_high: Upper clip range of the ratio (0.28 = "clip-higher").
        dual_clip: Dual-clip bound c for negative advantages (null = off).
        beta: KL coefficient to the initial policy (0 = no reference model is loaded; with LoRA the
            reference is the base model with the adapters disabled, never a second copy).
        kl_estimator: KL estimator used when ``beta > 0``.
        correction: An importance correction for engine/trainer mismatch (``TruncatedIS``, ``MaskedIS``).
        tis, tis_cap: Removed (they duplicated ``correction: TruncatedIS``); setting either is an error that
            names the replacement.
    """

    def __init__(
        self,
        eps_low: float = 0.2,
        eps_high: float = 0.2,
        dual_clip: float | None = None,
        beta: float = 0.0,
        kl_estimator: KLEstimator = "k3",
        correction: ImportanceCorrection | None = None,
        tis: Any = None,
        tis_cap: Any = None,
    ) -> None:
        require(tis is None and tis_cap is None, _removed_tis(tis, tis_cap))
        require(0 <= eps_low < 1 and eps_high >= 0,
                f"eps_low={eps_low}, eps_high={eps_high}: need 0 <= eps_low < 1 and eps_high >= 0")
        require(dual_clip is None or dual_clip > 1, f"dual_clip={dual_clip} must be > 1 (typically 3) or "
                                                    "null")
        require(beta >= 0, f"beta={beta} must be >= 0")
        require(kl_estimator in get_args(KLEstimator),
                f"kl_estimator={kl_estimator!r} is not known; choose one of "
                f"{', '.join(get_args(KLEstimator))}")
        self.eps_low, self.eps_high, self.dual_clip = eps_low, eps_high, dual_clip
        self.beta, self.kl_estimator = beta, kl_estimator
        self.correction = correction

    @property
    def needs_ref_logp(self) -> bool:
        return self.beta > 0

    @property
    def zero_advantage_inert(self) -> bool:
        """Without the KL term: ``-min(w 0, clip(w) 0) = 0`` (the dual clip acts only for ``A < 0``, an
        importance correction multiplies by a constant): a row with ``A = 0`` has no loss and no gradient."""
        return self.beta == 0

    def __call__(self, batch: LossInputs) -> LossOutput:
        loss, clipped = clipped_policy_loss(batch.logp, batch.old_logp, batch.advantages, self.eps_low,
                                            self.eps_high, self.dual_clip)  # [n, T]
        loss, correction_stats = apply_correction(self.correction, loss, batch)  # the engine drew the tokens
        out = LossOutput(loss, means={"clip_frac": clipped.float(), **correction_stats})
        if self.beta > 0:
            penalty, out.terms["kl"] = kl_penalty(batch.logp, batch.ref_logp, self.beta, self.kl_estimator)
            out.loss = out.loss + penalty
        return out


def _removed_tis(tis: Any, tis_cap: Any) -> str:
    """The error for a config that still sets ``PPOClip``'s removed ``tis`` or ``tis_cap``: the fix."""
    level = tis if tis not in (None, "off") else "token"
    cap = tis_cap if tis_cap is not None else 2.0
    return (f"PPOClip: tis={tis!r}, tis_cap={tis_cap!r}: these options were removed; the same correction is "
            f"`correction: TruncatedIS` (YAML: `correction: {{class_path: lit_grpo.TruncatedIS, init_args: "
            f"{{level: {level}, cap: {cap}}}}}`; command line: --model.loss.correction=TruncatedIS "
            f"--model.loss.correction.level={level} --model.loss.correction.cap={cap})")
