"""Rollout/trainer mismatch: how far the engine's sampling log-probs are from the training forward's.

Pure functions over ``[N, T]`` log-probs of the sampled tokens (see METHODS section 2): the statistics
logged as ``rollout/logp_diff_mean``, ``rollout/logp_diff_max`` and ``rollout/logp_kl_k3``, and truncated
importance-sampling weights that correct the policy gradient for samples drawn by the engine.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from lit_grpo.logprobs import kl_estimate, masked_mean

TISLevel = Literal["token", "sequence"]


@torch.no_grad()
def logp_mismatch(logp_train: Tensor, logp_rollout: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Mean and max ``|logp_train - logp_rollout|`` and the k3 estimate of KL(engine || trainer).

    ``logp_* [N, T]`` are the log-probs of the sampled tokens, ``mask [N, T]`` marks generated tokens.
    The k3 estimator uses the engine's samples: ``exp(d) - d - 1`` with ``d = logp_train - logp_rollout``.
    """
    diff = (logp_train - logp_rollout).float()  # [N, T]
    maskb = mask.bool()
    absdiff = diff.abs().masked_fill(~maskb, 0.0)
    return {
        "logp_diff_mean": masked_mean(absdiff, maskb),
        "logp_diff_max": absdiff.max() if absdiff.numel() else absdiff.new_zeros(()),
        "logp_kl_k3": masked_mean(kl_estimate(logp_rollout.float(), logp_train.float(), "k3"), maskb),
    }


@torch.no_grad()
def truncated_is_weights(
    logp_train: Tensor, logp_rollout: Tensor, mask: Tensor, level: TISLevel = "token", cap: float = 2.0
) -> Tensor:
    """Truncated importance weights ``[N, T]``: ``min(exp(logp_train - logp_rollout), cap)``, 0 on padding.

    ``level="token"`` weighs each token by its own ratio; ``"sequence"`` weighs every token of a completion
    by the product of its token ratios. Multiply the per-token policy loss by these (detached) weights.
    """
    if not cap > 0:
        raise ValueError(f"tis_cap={cap} must be > 0 (2 is the usual choice)")
    maskf = mask.float()
    log_ratio = (logp_train - logp_rollout).float() * maskf  # [N, T]
    if level == "token":
        return torch.exp(log_ratio.clamp(max=math.log(cap))) * maskf
    if level == "sequence":
        seq = log_ratio.sum(-1, keepdim=True)  # [N, 1]
        return torch.exp(seq.clamp(max=math.log(cap))) * maskf
    raise ValueError(f"tis level={level!r} is not known; choose 'token' or 'sequence'")
