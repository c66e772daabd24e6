"""Rollout/trainer mismatch: how far the engine's sampling log-probs are from the training forward's.

Pure functions over ``[N, T]`` log-probs of the sampled tokens (see METHODS section 2): the statistics
logged as ``rollout/logp_diff_mean``, ``rollout/logp_diff_max`` and ``rollout/logp_kl_k3``. The truncated
importance-sampling weights that correct the policy gradient for samples drawn by the engine belong to the
loss (:func:`lit_grpo.losses.functional.truncated_is_weights`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lit_grpo.logprobs import kl_estimate, masked_mean


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
