"""Pure functions behind the policy losses (METHODS.md section 2): the clipped ratio, truncated importance
weights, the KL penalty, and the token weights that aggregate token losses into the batch loss.

Shapes: ``N`` completions, ``T`` completion tokens (see ``lit_grpo.types``).
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor

from lit_grpo.logprobs import KLEstimator, kl_estimate

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-sum-constant"]
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)
TISLevel = Literal["token", "sequence"]


def clipped_policy_loss(
    logp: Tensor,  # [N, T]
    old_logp: Tensor,  # [N, T]
    advantages: Tensor,  # [N] or [N, T]
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
) -> tuple[Tensor, Tensor]:
    """PPO-style clipped surrogate per token: ``-min(w A, clip(w, 1 - eps_low, 1 + eps_high) A)``.

    With ``dual_clip = c`` the loss of tokens with ``A < 0`` is further bounded by ``-c A``.
    Returns ``(loss [N, T], clipped [N, T] bool)`` where ``clipped`` marks tokens whose clipped
    term was the active one.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)  # [N, 1]
    ratio = torch.exp(logp - old_logp)  # [N, T]
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    loss = -torch.minimum(unclipped, clipped)  # [N, T]
    if dual_clip is not None:
        bound = -dual_clip * advantages  # [N, 1]
        loss = torch.where(advantages < 0, torch.minimum(loss, bound), loss)
    return loss, clipped < unclipped


def token_weights(
    mask: Tensor,  # [N, T] bool
    mode: Aggregation,
    max_new_tokens: int,
    num_tokens: Tensor | float | None = None,
    num_sequences: Tensor | float | None = None,
) -> Tensor:
    """Per-token weights ``[N, T]`` such that the aggregated loss is ``(token_loss * weights).sum()``.

    Computing the weights once over the whole rollout batch makes the sum over any split into
    micro-batches equal to the full-batch loss, for every mode. ``num_tokens`` and ``num_sequences``
    override the batch's own counts: pass the counts summed over all data-parallel ranks so each rank's
    share matches the one-process loss on the global batch.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"aggregation={mode!r} is not known; choose one of {list(AGGREGATIONS)}")
    maskf = mask.float()
    n_seq = num_sequences if num_sequences is not None else float(mask.shape[0])
    if mode == "token-mean":
        n_tok = num_tokens if num_tokens is not None else maskf.sum()
        return maskf / torch.clamp(torch.as_tensor(n_tok, dtype=maskf.dtype), min=1.0)
    if mode == "seq-mean-token-mean":
        lengths = maskf.sum(-1, keepdim=True).clamp(min=1.0)  # [N, 1]
        return maskf / lengths / n_seq
    if mode == "seq-mean-token-sum":
        return maskf / n_seq
    return maskf / (n_seq * max_new_tokens)  # seq-sum-constant: independent of actual lengths


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


def kl_penalty(logp: Tensor, ref_logp: Tensor, beta: float, estimator: KLEstimator = "k3") -> tuple[Tensor, Tensor]:
    """``(beta * kl [N, T], kl [N, T] detached)``: the term to add to the per-token loss, and the estimate to log.

    ``kl`` estimates KL(pi || pi_ref) per token from samples of pi (:func:`lit_grpo.logprobs.kl_estimate`).
    """
    kl = kl_estimate(logp, ref_logp, estimator)  # [N, T]
    return beta * kl, kl.detach()
