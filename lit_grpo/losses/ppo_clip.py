"""PPOClip: the clipped surrogate of PPO and GRPO, with dual clip, a KL penalty and truncated importance sampling."""

from __future__ import annotations

from typing import Literal, get_args

from lit_grpo.checks import require
from lit_grpo.logprobs import KLEstimator
from lit_grpo.losses.base import LossInputs, LossOutput, PolicyLoss
from lit_grpo.losses.correction import ImportanceCorrection, TruncatedIS, apply_correction
from lit_grpo.losses.functional import TISLevel, clipped_policy_loss, kl_penalty


class PPOClip(PolicyLoss):
    """Per token ``-min(w A, clip(w, 1 - eps_low, 1 + eps_high) A)`` with ``w = exp(logp - old_logp)``
    (METHODS.md section 2); ``w = 1`` with one optimizer step per rollout batch.

    Optionally bounded by ``-c A`` for ``A < 0`` (dual clip), reweighted by truncated importance weights
    towards the trainer's policy when the engine's numerics differ (``tis``), and plus ``beta`` times a
    per-token KL estimate to a reference policy. Logs ``train/clip_frac`` (share of tokens whose clipped
    term is the active one) and, with ``beta > 0``, ``train/kl``.

    Args:
        eps_low: Lower clip range of the ratio.
        eps_high: Upper clip range of the ratio (0.28 = "clip-higher").
        dual_clip: Dual-clip bound c for negative advantages (null = off).
        beta: KL coefficient to the initial policy (0 = no reference model is loaded; with LoRA the
            reference is the base model with the adapters disabled, never a second copy).
        kl_estimator: KL estimator used when ``beta > 0``.
        tis: Truncated importance sampling against the engine's sampling log-probs: ``off``, ``token``
            (each token weighted by ``min(exp(logp_train - logp_engine), tis_cap)``) or ``sequence`` (every
            token by its completion's capped product). Corrects for an engine (vLLM) whose numerics differ
            from the trainer's.
        tis_cap: The truncation C of the importance weights.
        correction: An importance correction for engine/trainer mismatch (``TruncatedIS``, ``MaskedIS``); ``tis``
            is its shorthand ``TruncatedIS(level=tis, cap=tis_cap)``, so set one or the other.
    """

    def __init__(
        self,
        eps_low: float = 0.2,
        eps_high: float = 0.2,
        dual_clip: float | None = None,
        beta: float = 0.0,
        kl_estimator: KLEstimator = "k3",
        tis: Literal["off"] | TISLevel = "off",
        tis_cap: float = 2.0,
        correction: ImportanceCorrection | None = None,
    ) -> None:
        require(0 <= eps_low < 1 and eps_high >= 0,
               f"eps_low={eps_low}, eps_high={eps_high}: need 0 <= eps_low < 1 and eps_high >= 0")
        require(dual_clip is None or dual_clip > 1, f"dual_clip={dual_clip} must be > 1 (typically 3) or null")
        require(beta >= 0, f"beta={beta} must be >= 0")
        require(kl_estimator in get_args(KLEstimator),
               f"kl_estimator={kl_estimator!r} is not known; choose one of {', '.join(get_args(KLEstimator))}")
        require(tis in ("off", "token", "sequence"), f"tis={tis!r} is not known; choose off, token or sequence")
        require(tis_cap > 0, f"tis_cap={tis_cap} must be > 0 (2 is the usual choice)")
        self.eps_low, self.eps_high, self.dual_clip = eps_low, eps_high, dual_clip
        self.beta, self.kl_estimator = beta, kl_estimator
        require(tis == "off" or correction is None,
               f"tis={tis!r} and correction={correction!r} both correct the engine mismatch; set only one")
        self.tis, self.tis_cap = tis, tis_cap
        self.correction = TruncatedIS(tis, tis_cap) if tis != "off" else correction

    @property
    def needs_ref_logp(self) -> bool:
        return self.beta > 0

    @property
    def zero_advantage_inert(self) -> bool:
        """Without the KL term: ``-min(w 0, clip(w) 0) = 0`` (the dual clip acts only for ``A < 0``, an importance
        correction multiplies by a constant), so a row with ``A = 0`` has zero loss and gradient."""
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
