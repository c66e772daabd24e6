"""Pure functions for the policy loss: clipped ratio, token aggregation, KL estimators, token log-probs.

Shapes: ``N`` completions, ``T`` completion tokens, ``V`` vocabulary (see ``lit_grpo.types``).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-sum-constant"]
KLEstimator = Literal["k1", "k2", "k3"]
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)


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


def kl_penalty(logp: Tensor, ref_logp: Tensor, estimator: KLEstimator = "k3") -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi: ``[N, T]``.

    k1 = logp - ref, k2 = (logp - ref)^2 / 2, k3 = exp(ref - logp) - (ref - logp) - 1 (Schulman 2020).
    """
    log_ratio = logp - ref_logp
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        return torch.expm1(-log_ratio) + log_ratio
    raise ValueError(f"kl_estimator={estimator!r} is not known; choose one of {list(get_args(KLEstimator))}")


def token_logprobs(logits: Tensor, ids: Tensor, temperature: float = 1.0, chunk_size: int = 4096) -> Tensor:
    """Log-probabilities of ``ids [N, T]`` under ``logits [N, T, V]`` divided by ``temperature``.

    Works in chunks of rows so that no float32 ``[N, T, V]`` log-softmax is materialised at once.
    """
    flat_logits = logits.reshape(-1, logits.shape[-1])  # [N*T, V]
    flat_ids = ids.reshape(-1)  # [N*T]
    out = torch.empty(flat_ids.shape, dtype=torch.float32, device=logits.device)
    for start in range(0, flat_ids.shape[0], chunk_size):
        rows = flat_logits[start : start + chunk_size].float() / temperature  # [C, V]
        picked = rows.gather(-1, flat_ids[start : start + chunk_size, None]).squeeze(-1)  # [C]
        out[start : start + chunk_size] = picked - torch.logsumexp(rows, dim=-1)
    return out.view(ids.shape)


def chunked_head_logprobs(
    head: nn.Module,
    hidden: Tensor,  # [N, T, H]
    ids: Tensor,  # [N, T]
    temperature: float = 1.0,
    chunk_rows: int = 1024,
    with_entropy: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``[N, T]`` of ``ids`` under ``head(hidden) / temperature`` (and the entropy ``[N, T]``,
    without gradient, when asked), ``chunk_rows`` positions at a time.

    No ``[N, T, V]`` tensor exists at any point: each chunk's logits ``[C, V]`` are dropped after use and,
    when a gradient is needed, recomputed in the backward pass (activation checkpointing per chunk), so
    peak memory grows with ``chunk_rows * V`` instead of ``N * T * V`` for one extra head matmul.
    """
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])  # [N*T, H]
    flat_ids = ids.reshape(-1)  # [N*T]
    recompute = torch.is_grad_enabled() and (flat_hidden.requires_grad or head.weight.requires_grad)
    logps, entropies = [], []
    for start in range(0, flat_ids.shape[0], chunk_rows):
        args = (head, flat_hidden[start : start + chunk_rows], flat_ids[start : start + chunk_rows], temperature,
                with_entropy)
        logp, entropy = checkpoint(_head_chunk, *args, use_reentrant=False) if recompute else _head_chunk(*args)
        logps.append(logp)
        entropies.append(entropy)
    logp = torch.cat(logps).view(ids.shape)  # [N, T]
    return logp, torch.cat(entropies).view(ids.shape) if with_entropy else None


def _head_chunk(head: nn.Module, hidden: Tensor, ids: Tensor, temperature: float, with_entropy: bool):
    logits = head(hidden)  # [C, V]
    return token_logprobs(logits, ids, temperature), token_entropy(logits, temperature) if with_entropy else None


@torch.no_grad()
def token_entropy(logits: Tensor, temperature: float = 1.0, chunk_size: int = 4096) -> Tensor:
    """Entropy of each position's sampling distribution, ``[N, T]`` (no gradient)."""
    flat = logits.reshape(-1, logits.shape[-1])
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=logits.device)
    for start in range(0, flat.shape[0], chunk_size):
        logp = torch.log_softmax(flat[start : start + chunk_size].float() / temperature, dim=-1)
        out[start : start + chunk_size] = -(logp.exp() * logp).sum(-1)
    return out.view(logits.shape[:-1])


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over ``mask`` (0 when the mask is empty)."""
    maskf = mask.float()
    return (values * maskf).sum() / maskf.sum().clamp(min=1.0)
