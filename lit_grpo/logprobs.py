"""Log-prob maths: per-token log-probs and entropy, the chunked LM head, a policy's sequence log-probs.

The one home of these functions: the module's update, the rollout engines (sampling log-probs), the losses
and the diagnostics import them from here. Besides torch, only the LoRA and sharding helpers are used, so
importing this module never imports Lightning. ``masked_mean``, the KL estimators between two policies'
log-probs (the loss's KL penalty uses them) and the rollout/trainer mismatch statistics live here too.

Shapes: ``N`` completions, ``T`` completion tokens, ``H`` hidden size, ``V`` vocabulary (see ``lit_grpo.types``).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from lit_grpo.lora import base_model
from lit_grpo.parallel import is_sharded
from lit_grpo.types import Rollouts

KLEstimator = Literal["k1", "k2", "k3"]

#: Largest logits tensor (elements) :func:`sequence_logprobs` materialises at once. Above it the LM head
#: runs over chunks of completion positions, each recomputed in the backward pass, so memory does not grow
#: with ``N * T * V`` (2**24 elements: 64 MiB of float32; ``math.inf``: always the whole ``[N, T, V]``).
MAX_LOGITS_ELEMENTS: float = 2**24

#: Config attributes of models whose logits are more than ``lm_head(hidden)``; those keep the plain path.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                     "logits_scaling")


def sequence_logprobs(
    policy: nn.Module, rollouts: Rollouts, temperature: float = 1.0, with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``[N, T]`` of the completion tokens under ``policy`` (and their entropy when asked; with
    ``entropy_grad`` the entropy keeps its gradient, for an entropy bonus in the loss).

    Prompts are left padded and completions right padded, so position ids come from the attention mask.
    Only the ``T + 1`` last positions go through the LM head; when their logits would exceed
    :data:`MAX_LOGITS_ELEMENTS` the head runs over chunks of positions (:func:`chunked_head_logprobs`),
    with the same result.
    """
    ids = torch.cat([rollouts.prompt_ids, rollouts.completion_ids], dim=1)  # [N, Tp + T]
    attn = torch.cat([rollouts.prompt_mask, rollouts.completion_mask], dim=1).long()  # [N, Tp + T]
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    n, t = rollouts.completion_ids.shape
    model = base_model(policy)
    rows = None if is_sharded(policy) else _head_chunk_rows(model, n * t)
    if rows is not None:
        hidden = model.get_decoder()(input_ids=ids, attention_mask=attn, position_ids=positions,
                                     use_cache=False).last_hidden_state[:, -(t + 1) : -1]  # [N, T, H]
        head = model.get_output_embeddings()
        return chunked_head_logprobs(head, hidden, rollouts.completion_ids, temperature, rows, with_entropy,
                                     entropy_grad)
    logits = policy(input_ids=ids, attention_mask=attn, position_ids=positions, logits_to_keep=t + 1,
                    use_cache=False).logits
    logits = logits[:, :-1]  # [N, T, V]: position j predicts completion token j
    logp = token_logprobs(logits, rollouts.completion_ids, temperature)  # [N, T]
    entropy = token_entropy(logits if entropy_grad else logits.detach(), temperature, grad=entropy_grad) \
        if with_entropy else None
    return logp, entropy


def _head_chunk_rows(model: nn.Module, positions: int) -> int | None:
    """Positions per LM-head chunk when ``positions`` rows of logits would exceed :data:`MAX_LOGITS_ELEMENTS`
    and the logits are exactly ``lm_head(decoder(...))`` with the two callable apart; else None. The caller
    skips sharded policies (FSDP2 and FSDP1 root units gather the head's weights only inside the whole
    model's forward)."""
    head = model.get_output_embeddings() if callable(getattr(model, "get_output_embeddings", None)) else None
    if not isinstance(head, nn.Linear) or positions * head.out_features <= MAX_LOGITS_ELEMENTS:
        return None
    config = getattr(model, "config", None)
    if any(getattr(config, name, None) is not None for name in _LOGIT_TRANSFORMS):
        return None
    if not callable(getattr(model, "get_decoder", None)):
        return None
    return max(1, int(MAX_LOGITS_ELEMENTS // head.out_features))


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
    entropy_grad: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``[N, T]`` of ``ids`` under ``head(hidden) / temperature`` (and the entropy ``[N, T]``, with
    gradient only when ``entropy_grad``, when asked), ``chunk_rows`` positions at a time.

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
                with_entropy, entropy_grad)
        logp, entropy = checkpoint(_head_chunk, *args, use_reentrant=False) if recompute else _head_chunk(*args)
        logps.append(logp)
        entropies.append(entropy)
    logp = torch.cat(logps).view(ids.shape)  # [N, T]
    return logp, torch.cat(entropies).view(ids.shape) if with_entropy else None


def _head_chunk(head: nn.Module, hidden: Tensor, ids: Tensor, temperature: float, with_entropy: bool,
                entropy_grad: bool = False):
    logits = head(hidden)  # [C, V]
    entropy = token_entropy(logits, temperature, grad=entropy_grad) if with_entropy else None
    return token_logprobs(logits, ids, temperature), entropy


def token_entropy(logits: Tensor, temperature: float = 1.0, chunk_size: int = 4096, grad: bool = False) -> Tensor:
    """Entropy of each position's sampling distribution, ``[N, T]`` (with gradient only when ``grad``)."""
    with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
        flat = logits.reshape(-1, logits.shape[-1])
        parts = [flat.new_zeros(0, dtype=torch.float32)]
        for start in range(0, flat.shape[0], chunk_size):
            logp = torch.log_softmax(flat[start : start + chunk_size].float() / temperature, dim=-1)
            parts.append(-(logp.exp() * logp).sum(-1))
        return torch.cat(parts).view(logits.shape[:-1])


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over ``mask`` (0 when the mask is empty)."""
    maskf = mask.float()
    return (values * maskf).sum() / maskf.sum().clamp(min=1.0)


def kl_estimate(logp: Tensor, ref_logp: Tensor, estimator: KLEstimator = "k3") -> Tensor:
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


@torch.no_grad()
def logp_mismatch(logp_train: Tensor, logp_rollout: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Rollout/trainer mismatch: mean and max ``|logp_train - logp_rollout|`` and the k3 estimate of
    KL(engine || trainer), logged as ``rollout/logp_diff_mean``, ``rollout/logp_diff_max`` and
    ``rollout/logp_kl_k3`` (METHODS section 2).

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
