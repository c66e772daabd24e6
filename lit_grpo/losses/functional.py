"""Pure functions behind the policy losses (METHODS.md section 2): the clipped ratio of PPO/GRPO, the sequence
ratio of GSPO, CISPO's clipped stop-gradient weight, SAPO's soft gate, GMPO's geometric mean, the importance
corrections for engine/trainer mismatch, the KL penalty, and the token weights that aggregate token losses
into the batch loss.

Shapes: ``N`` completions, ``T`` completion tokens (see ``lit_grpo.types``).
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor

from lit_grpo.checks import require
from lit_grpo.logprobs import KLEstimator, kl_estimate

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-sum-constant"]
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)
TISLevel = Literal["token", "sequence"]
#: Level of an importance correction: each token's ratio, the product over the completion, or its geometric
# mean.
ISLevel = Literal["token", "sequence", "geometric"]


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
    require(mode in AGGREGATIONS, f"aggregation={mode!r} is not known; choose one of {list(AGGREGATIONS)}")
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


def is_log_ratios(
    logp_train: Tensor, logp_rollout: Tensor, mask: Tensor, level: ISLevel = "token"
) -> Tensor:
    """Log importance ratios ``log(pi_train / pi_rollout)`` of the sampled tokens at ``level``, 0 on padding.

    ``token``: each token's own ``[N, T]``; ``sequence``: the completion's sum ``[N, 1]`` (log of the product
    of its token ratios); ``geometric``: the completion's mean ``[N, 1]`` (log of the geometric mean), over
    its own generated tokens only, never the padded width.
    """
    require(level in ("token", "sequence", "geometric"),
            f"level={level!r} is not known; choose 'token', 'sequence' or 'geometric'")
    maskf = mask.float()
    log_ratio = (logp_train - logp_rollout).float() * maskf  # [N, T]
    if level == "token":
        return log_ratio
    if level == "sequence":
        return log_ratio.sum(-1, keepdim=True)  # [N, 1]
    return log_ratio.sum(-1, keepdim=True) / maskf.sum(-1, keepdim=True).clamp(min=1.0)  # [N, 1] geometric


@torch.no_grad()
def truncated_is_weights(
    logp_train: Tensor, logp_rollout: Tensor, mask: Tensor, level: ISLevel = "token", cap: float = 2.0
) -> Tensor:
    """Truncated importance weights ``[N, T]``: ``min(exp(logp_train - logp_rollout), cap)``, 0 on padding.

    ``level="token"`` weighs each token by its own ratio; ``"sequence"`` weighs every token of a completion
    by the product of its token ratios; ``"geometric"`` by their geometric mean. Multiply the per-token policy
    loss by these (detached) weights.
    """
    require(cap > 0, f"tis_cap={cap} must be > 0 (2 is the usual choice)")
    log_ratio = is_log_ratios(logp_train, logp_rollout, mask, level)  # [N, T] or [N, 1]
    return torch.exp(log_ratio.clamp(max=math.log(cap))) * mask.float()


@torch.no_grad()
def masked_is_weights(
    logp_train: Tensor, logp_rollout: Tensor, mask: Tensor, level: ISLevel = "token", low: float = 0.5,
    high: float = 2.0,
) -> tuple[Tensor, Tensor]:
    """Masked importance weights (MIS, IcePop): the ratio where it lies in ``[low, high]``, else 0.

    Returns ``(weights [N, T], rejected)``: ``rejected`` is ``[N, T]`` (tokens) at the token level and ``[N]``
    (completions) at the sequence and geometric levels, True where the ratio left the band. Padding weighs 0.
    """
    require(0 <= low < 1 < high, f"low={low}, high={high}: need 0 <= low < 1 < high (e.g. 0.5 and 2)")
    log_ratio = is_log_ratios(logp_train, logp_rollout, mask, level)  # [N, T] or [N, 1]
    inside = (log_ratio >= math.log(low) if low > 0 else torch.ones_like(log_ratio, dtype=torch.bool)) & (
        log_ratio <= math.log(high))
    weights = torch.exp(log_ratio.clamp(max=math.log(high))) * inside * mask.float()  # [N, T]
    rejected = ~inside if level == "token" else ~inside.squeeze(-1)
    return weights, rejected


def kl_penalty(logp: Tensor, ref_logp: Tensor, beta: float,
               estimator: KLEstimator = "k3") -> tuple[Tensor, Tensor]:
    """``(beta * kl [N, T], kl [N, T] detached)``: the term to add to the per-token loss, and the estimate to
    log.

    ``kl`` estimates KL(pi || pi_ref) per token from samples of pi (:func:`lit_grpo.logprobs.kl_estimate`).
    """
    kl = kl_estimate(logp, ref_logp, estimator)  # [N, T]
    return beta * kl, kl.detach()


def gspo_loss(
    logp: Tensor,  # [N, T]
    old_logp: Tensor,  # [N, T]
    advantages: Tensor,  # [N]
    mask: Tensor,  # [N, T] bool
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
) -> tuple[Tensor, Tensor, Tensor]:
    """GSPO (Zheng et al. 2025): per completion ``-min(s A, clip(s, 1 - eps_low, 1 + eps_high) A)`` with the
    length-normalised sequence ratio ``s = exp(mean_t (logp - old_logp))`` over the completion's own tokens.

    The completion's loss is put on each of its tokens, so ``seq-mean-token-mean`` aggregation gives the
    paper's mean over completions. Returns ``(loss [N, T], clipped [N] bool, s [N] detached)``.
    """
    log_s = is_log_ratios(logp, old_logp, mask, "geometric").squeeze(-1)  # [N], with gradient
    s = torch.exp(log_s)
    unclipped = s * advantages
    clipped = torch.clamp(s, 1.0 - eps_low, 1.0 + eps_high) * advantages
    seq_loss = -torch.minimum(unclipped, clipped)  # [N]
    return seq_loss[:, None] * mask.float(), (clipped < unclipped).detach(), s.detach()


def cispo_loss(
    logp: Tensor,  # [N, T]
    old_logp: Tensor,  # [N, T]
    advantages: Tensor,  # [N]
    eps_low: float | None = None,
    eps_high: float = 4.0,
) -> tuple[Tensor, Tensor]:
    """CISPO (MiniMax-M1): per token ``-sg(clip(w, 1 - eps_low, 1 + eps_high)) A logp`` with ``w = exp(logp -
    old_logp)``; ``eps_low = None`` leaves the weight without a lower bound (the paper's choice).

    The clipped weight is a constant (stop-gradient), so every token keeps the gradient ``w' A grad(logp)``:
    none is dropped, as PPO's clip drops those outside its range. Returns ``(loss [N, T], clipped [N, T]
    bool)``.
    """
    ratio = torch.exp(logp - old_logp).detach()  # [N, T]
    low = 0.0 if eps_low is None else 1.0 - eps_low
    weight = torch.clamp(ratio, low, 1.0 + eps_high)
    return -weight * advantages[:, None] * logp, weight != ratio


def sapo_loss(
    logp: Tensor,  # [N, T]
    old_logp: Tensor,  # [N, T]
    advantages: Tensor,  # [N]
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> tuple[Tensor, Tensor]:
    """SAPO (Gao et al. 2025): per token ``-(4 / tau) sigmoid(tau (w - 1)) A``, ``tau = tau_pos`` where ``A >
    0`` else ``tau_neg``, with ``w = exp(logp - old_logp)``.

    Its gradient is ``-4 s (1 - s) w A grad(logp)`` with ``s = sigmoid(tau (w - 1))``: the GRPO gradient at
    ``w = 1``, smoothly fading as ``w`` leaves 1 (faster for larger tau). Returns ``(loss [N, T], gate [N,
    T])``, ``gate = 4 s (1 - s)`` detached: the factor on the token's unclipped GRPO gradient ``w A
    grad(logp)``.
    """
    ratio = torch.exp(logp - old_logp)  # [N, T]
    adv = advantages[:, None]  # [N, 1]
    tau = torch.where(adv > 0, tau_pos, tau_neg).to(ratio.dtype)  # [N, 1]
    sig = torch.sigmoid(tau * (ratio - 1.0))
    return -(4.0 / tau) * sig * adv, (4.0 * sig * (1.0 - sig)).detach()


def gmpo_loss(
    logp: Tensor,  # [N, T]
    old_logp: Tensor,  # [N, T]
    advantages: Tensor,  # [N]
    mask: Tensor,  # [N, T] bool
    eps_low: float = 0.4,
    eps_high: float = 0.4,
) -> tuple[Tensor, Tensor, Tensor]:
    """GMPO (Zhao et al. 2025): per completion ``-A exp(mean_t c_t)``, the geometric mean of its token ratios
    after clipping each log ratio ``d_t = logp - old_logp`` in log space, one-sided by the sign of ``A`` as
    PPO
    does: ``c_t = min(d_t, clip(d_t, -eps_low, eps_high))`` for ``A > 0``, ``max(...)`` for ``A < 0``.

    The completion's loss is put on each of its tokens (``seq-mean-token-mean`` gives the paper's mean over
    completions). Returns ``(loss [N, T], clipped [N, T] bool, geometric ratio [N] detached)``.
    """
    maskf = mask.float()
    log_ratio = logp - old_logp  # [N, T]
    bounded = torch.clamp(log_ratio, -eps_low, eps_high)
    adv = advantages[:, None]  # [N, 1]
    clipped_log = torch.where(adv > 0, torch.minimum(log_ratio, bounded), torch.maximum(log_ratio, bounded))
    geo = torch.exp((clipped_log * maskf).sum(-1) / maskf.sum(-1).clamp(min=1.0))  # [N]
    seq_loss = -advantages * geo  # [N]
    return seq_loss[:, None] * maskf, (clipped_log != log_ratio).detach(), geo.detach()


@torch.no_grad()
def ratio_statistics(logp: Tensor, old_logp: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """How far the policy moved since the rollout batch was drawn, over the generated tokens of ``mask``:
    the token ratios ``w = exp(logp - old_logp)`` (``ratio [N, T]`` for a mean, and their min and max) and the
    k3 estimate of KL(pi_old || pi), ``w - log w - 1`` per token (``policy_kl [N, T]``)."""
    log_ratio = (logp - old_logp).float()
    ratio = torch.exp(log_ratio)  # [N, T]
    maskb = mask.bool()
    return {
        "ratio": ratio,
        "policy_kl": torch.expm1(log_ratio) - log_ratio,
        "ratio_min": ratio[maskb].min() if maskb.any() else ratio.new_tensor(math.inf),
        "ratio_max": ratio[maskb].max() if maskb.any() else ratio.new_tensor(-math.inf),
    }
