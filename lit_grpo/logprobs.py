"""Log-prob maths: per-token log-probs and entropy, the chunked LM head, a policy's sequence log-probs.

The one home of these functions: the module's update, the rollout engines (sampling log-probs), the losses
and the diagnostics import them from here. Besides torch, only the LoRA and sharding helpers are used (and
transformers' cache classes, inside the shared-prefix forward), so importing this module never imports
Lightning. ``masked_mean``, the KL estimators between two policies' log-probs (the loss's KL penalty uses
them) and the rollout/trainer mismatch statistics live here too.

Shapes (see ``lit_grpo.types``): ``N`` completions, ``T`` completion tokens, ``H`` hidden size, ``V``
vocabulary.
"""

from __future__ import annotations

import logging
from typing import Literal, get_args

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from lit_grpo.checks import require
from lit_grpo.lora import base_model
from lit_grpo.parallel import is_sharded
from lit_grpo.perf import Fallback, attention_refusal
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
    attn, positions = _mask_and_positions(rollouts)  # [N, Tp + T]
    n, t = rollouts.completion_ids.shape
    model = base_model(policy)
    rows = None if is_sharded(policy) else _head_chunk_rows(model, n * t)
    if rows is not None:
        hidden = model.get_decoder()(input_ids=ids, attention_mask=attn, position_ids=positions,
                                     use_cache=False).last_hidden_state[:, -(t + 1) : -1]  # [N, T, H]
        return _head_logprobs(model, hidden, rollouts.completion_ids, temperature, rows, with_entropy,
                              entropy_grad)
    logits = policy(input_ids=ids, attention_mask=attn, position_ids=positions, logits_to_keep=t + 1,
                    use_cache=False).logits
    logits = logits[:, :-1]  # [N, T, V]: position j predicts completion token j
    return _logits_logprobs(logits, rollouts.completion_ids, temperature, with_entropy, entropy_grad)


def _mask_and_positions(rollouts: Rollouts) -> tuple[Tensor, Tensor]:
    """The attention mask ``[N, Tp + T]`` of ``[prompt; completion]`` and position ids that count only its
    real tokens (left-padded prompts start at position 0)."""
    attn = torch.cat([rollouts.prompt_mask, rollouts.completion_mask], dim=1).long()  # [N, Tp + T]
    return attn, (attn.cumsum(-1) - 1).clamp(min=0)


def _logits_logprobs(logits: Tensor, ids: Tensor, temperature: float, with_entropy: bool,
                     entropy_grad: bool) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``[N, T]`` of ``ids`` under ``logits [N, T, V]`` (and their entropy when asked)."""
    logp = token_logprobs(logits, ids, temperature)  # [N, T]
    entropy = token_entropy(logits if entropy_grad else logits.detach(), temperature, grad=entropy_grad) \
        if with_entropy else None
    return logp, entropy


def _head_logprobs(model: nn.Module, hidden: Tensor, ids: Tensor, temperature: float, rows: int | None,
                   with_entropy: bool, entropy_grad: bool) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``[N, T]`` of ``ids`` from the decoder's ``hidden [N, T, H]`` through ``model``'s LM head:
    ``rows`` positions at a time (:func:`chunked_head_logprobs`), or all at once when None."""
    head = model.get_output_embeddings()
    if rows is not None:
        return chunked_head_logprobs(head, hidden, ids, temperature, rows, with_entropy, entropy_grad)
    return _logits_logprobs(head(hidden), ids, temperature, with_entropy, entropy_grad)


def _head_chunk_rows(model: nn.Module, positions: int) -> int | None:
    """Positions per LM-head chunk when ``positions`` rows of logits would exceed :data:`MAX_LOGITS_ELEMENTS`
    and the logits are exactly ``lm_head(decoder(...))`` with the two callable apart; else None. The caller
    skips sharded policies (FSDP2 and FSDP1 root units gather the head's weights only inside the whole
    model's forward)."""
    if _split_head_refusal(model) is not None:
        return None
    out_features = model.get_output_embeddings().out_features
    if positions * out_features <= MAX_LOGITS_ELEMENTS:
        return None
    return max(1, int(MAX_LOGITS_ELEMENTS // out_features))


def _split_head_refusal(model: nn.Module) -> str | None:
    """Why ``model``'s logits are not exactly ``lm_head(decoder(...))`` with the two callable apart (None
    when they are)."""
    head = model.get_output_embeddings() if callable(getattr(model, "get_output_embeddings", None)) else None
    if not isinstance(head, nn.Linear):
        return "its output embeddings are not one linear layer"
    config = getattr(model, "config", None)
    transforms = [name for name in _LOGIT_TRANSFORMS if getattr(config, name, None) is not None]
    if transforms:
        return f"its logits are transformed after the LM head ({', '.join(transforms)})"
    if not callable(getattr(model, "get_decoder", None)):
        return "it has no get_decoder()"
    return None


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
        rows = slice(start, start + chunk_rows)
        args = (head, flat_hidden[rows], flat_ids[rows], temperature, with_entropy, entropy_grad)
        if recompute:
            logp, entropy = checkpoint(_head_chunk, *args, use_reentrant=False)
        else:
            logp, entropy = _head_chunk(*args)
        logps.append(logp)
        entropies.append(entropy)
    logp = torch.cat(logps).view(ids.shape)  # [N, T]
    return logp, torch.cat(entropies).view(ids.shape) if with_entropy else None


def _head_chunk(head: nn.Module, hidden: Tensor, ids: Tensor, temperature: float, with_entropy: bool,
                entropy_grad: bool = False):
    logits = head(hidden)  # [C, V]
    entropy = token_entropy(logits, temperature, grad=entropy_grad) if with_entropy else None
    return token_logprobs(logits, ids, temperature), entropy


def token_entropy(logits: Tensor, temperature: float = 1.0, chunk_size: int = 4096,
                  grad: bool = False) -> Tensor:
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
    require(estimator in get_args(KLEstimator),
            f"kl_estimator={estimator!r} is not known; choose one of {list(get_args(KLEstimator))}")
    log_ratio = logp - ref_logp
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    return torch.expm1(-log_ratio) + log_ratio


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


# ---- shared-prefix forward -----------------------------------------------------------------------------
FALLBACK = Fallback(logging.getLogger(__name__),
                    "shared_prefix: the prompts are encoded with each completion (the plain path): %s")


def shared_prefix_logprobs(
    policy: nn.Module, rollouts: Rollouts, temperature: float = 1.0, with_entropy: bool = False,
    entropy_grad: bool = False, packed: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """What :func:`sequence_logprobs` returns, each distinct prompt of ``rollouts`` encoded once.

    The rows of a group repeat one prompt. Here the distinct prompts (equal tokens and padding) run through
    the decoder once with a key/value cache; each completion then runs against its prompt's keys and values,
    picked out per row, with the attention mask and position ids of the plain path. The pick is an index into
    the prompt pass's tensors, so gradients flow back into it, summed over the rows that share the prompt:
    log-probs and gradients equal the plain path's up to float summation order. The first completion token's
    log-prob comes from the prompt's last position, the others from the completion pass over all but the last
    token.

    With ``packed`` the completion pass runs on the tokens that exist: the completions of a prompt are packed
    end to end into as few rows as the longest one fills (:func:`pack_rows`), each attending to its prompt and
    its own earlier tokens only (a block-diagonal mask, position ids continuing its prompt's), and the LM head
    runs on the tokens the loss reads only (:attr:`~lit_grpo.types.Rollouts.sampled_mask`: the completion,
    or an episode's sampled tokens), not on right padding or an episode's observations. Positions past a row's
    completion (its padding) and an episode's observation and template tokens then hold log-prob and entropy
    0 instead of the plain path's values there, which every reader masks out.
    Needs the ``sdpa`` or ``eager`` attention of transformers (whose masks can be given); other attention
    implementations run unpacked.

    Falls back to :func:`sequence_logprobs` (with one log message per reason) where this cannot be exact: a
    sharded policy, logits that are not ``lm_head(decoder(...))``, gradient checkpointing in training mode
    (it drops the cache), attention other than full on every layer, or a decoder that returns no plain
    dynamic cache; and silently where no prompt repeats.
    """
    model = base_model(policy)
    n, t = rollouts.completion_ids.shape
    reason = _shared_prefix_refusal(policy, model)
    if reason is None and t > 0 and rollouts.prompt_ids.shape[1] > 0:
        key = rollouts.prompt_ids.masked_fill(~rollouts.prompt_mask.bool(), -1)  # [N, Tp]
        unique, inverse = torch.unique(key, dim=0, return_inverse=True)  # [U, Tp], [N]
        if len(unique) < n:
            first = torch.full((len(unique),), n, device=inverse.device).scatter_reduce(
                0, inverse, torch.arange(n, device=inverse.device), "amin")  # [U] a row of each prompt
            # [N, T, H], or [M, H] when packed
            hidden, reason = _shared_prefix_hidden(model, rollouts, first, inverse, packed)
            if reason is not None:
                FALLBACK.remember(model, reason)
            if hidden is not None and hidden.dim() == 2:  # packed: the completion tokens only
                read = head_mask(rollouts)
                return _scattered_head_logprobs(model, hidden[read[rollouts.completion_mask]],
                                                rollouts.completion_ids, read, temperature, with_entropy,
                                                entropy_grad)
            if hidden is not None:
                rows = _head_chunk_rows(model, n * t)
                return _head_logprobs(model, hidden, rollouts.completion_ids, temperature, rows, with_entropy,
                                      entropy_grad)
    if reason is not None:
        FALLBACK.say(reason)
    return sequence_logprobs(policy, rollouts, temperature, with_entropy, entropy_grad)


def head_mask(rollouts: Rollouts) -> Tensor:
    """The tokens ``[N, T]`` whose log-probs the packed forward computes: those the loss reads (an episode's
    observations are context the decoder reads; no reader takes their log-probs)."""
    return rollouts.sampled_mask


def _shared_prefix_refusal(policy: nn.Module, model: nn.Module) -> str | None:
    """Why the shared-prefix forward cannot serve ``policy`` (None when it can)."""
    if (known := FALLBACK.remembered(model)) is not None:
        return known
    if is_sharded(policy):
        return ("the policy is sharded (FSDP), whose root unit gathers the embedding and LM head only "
                "inside the whole model's forward")
    split = _split_head_refusal(model)
    if split is not None:
        return f"{type(model).__name__}: {split}"
    if model.training and any(getattr(m, "gradient_checkpointing", False) for m in model.modules()):
        return "gradient checkpointing drops the key/value cache in training mode"
    return attention_refusal(model, "whose cache is not the prompt's whole keys and values")


def _shared_prefix_hidden(model: nn.Module, rollouts: Rollouts, first: Tensor, inverse: Tensor,
                          packed: bool = False) -> tuple[Tensor | None, str | None]:
    """The decoder's hidden states that predict the completion tokens: the prompts ``first [U]`` (one row of
    each) run once, the completions against row ``inverse [N]`` of their keys and values. ``[N, T, H]``, or
    with ``packed`` (where :func:`_packing_refusal` allows) ``[M, H]`` for the ``M`` completion tokens in
    row-major order. None and the reason when the decoder returns no plain dynamic cache."""
    from transformers.cache_utils import DynamicLayer

    decoder = model.get_decoder()
    attn, positions = _mask_and_positions(rollouts)  # [N, Tp + T]
    tp = rollouts.prompt_ids.shape[1]
    out = decoder(input_ids=rollouts.prompt_ids[first], attention_mask=attn[first, :tp],
                  position_ids=positions[first, :tp], use_cache=True)
    cache = out.past_key_values
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return None, (f"{type(model).__name__}'s decoder returns {type(cache).__name__}, not a cache of "
                      "full attention layers")
    if packed and _packing_refusal(model, rollouts) is None:
        return _packed_hidden(decoder, cache, out.last_hidden_state[:, -1], rollouts, inverse,
                              attn[first, :tp], positions[:, tp:]), None
    # index_select, not x[inverse]: the backward of advanced indexing with repeated rows accumulates with
    # atomic adds over threads on the CPU, in an order that changes from run to run; index_select's
    # (index_add_) does not
    last = out.last_hidden_state[:, -1:].index_select(0, inverse)  # [N, 1, H]: predicts completion token 0
    if rollouts.completion_ids.shape[1] == 1:
        return last, None
    for layer in layers:  # each row gets its prompt's keys and values; autograd sums their gradients
        layer.keys, layer.values = layer.keys.index_select(0, inverse), layer.values.index_select(0, inverse)
    rest = decoder(input_ids=rollouts.completion_ids[:, :-1], attention_mask=attn[:, :-1],
                   position_ids=positions[:, tp:-1], past_key_values=cache, use_cache=True).last_hidden_state
    return torch.cat([last, rest], dim=1), None  # [N, T, H]


# ---- packed completions --------------------------------------------------------------------------------
def _packing_refusal(model: nn.Module, rollouts: Rollouts) -> str | None:
    """Why the completions of ``rollouts`` cannot run packed through ``model`` (None when they can)."""
    implementation = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if implementation not in ("sdpa", "eager"):
        return f"attention implementation {implementation!r} takes no block-diagonal mask"
    mask = rollouts.completion_mask
    if not torch.equal(mask, torch.arange(mask.shape[1], device=mask.device) < mask.sum(-1, keepdim=True)):
        return "a completion mask with holes"
    return None


def pack_rows(owners: list[int], lengths: list[int],
              capacity: int) -> list[tuple[int, list[tuple[int, int]]]]:
    """Rows of ``lengths`` tokens packed end to end into bins of ``capacity`` tokens, a bin holding only rows
    of one owner (``owners``: each row's prompt): first fit, longest rows first. Returns each bin's owner and
    its ``(row, offset)`` pairs; rows of length 0 are left out."""
    bins: list[tuple[int, list[tuple[int, int]]]] = []
    room: list[int] = []
    for row in sorted(range(len(lengths)), key=lambda r: (owners[r], -lengths[r], r)):
        if lengths[row] == 0:
            continue
        fit = next((b for b in range(len(bins)) if bins[b][0] == owners[row] and room[b] >= lengths[row]),
                   None)
        if fit is None:
            bins.append((owners[row], []))
            room.append(capacity)
            fit = len(bins) - 1
        bins[fit][1].append((row, capacity - room[fit]))
        room[fit] -= lengths[row]
    return bins


def _packed_hidden(decoder: nn.Module, cache, last: Tensor, rollouts: Rollouts, inverse: Tensor,
                   prompt_mask: Tensor, positions: Tensor) -> Tensor:
    """Hidden states ``[M, H]`` that predict the ``M`` completion tokens of ``rollouts`` (row-major): token 0
    of row ``r`` from ``last [U, H]`` (its prompt's last position), the others from one decoder pass over the
    completions' inputs packed by :func:`pack_rows`, against the prompt keys and values in ``cache`` (``U``
    rows, ``prompt_mask [U, Tp]``). ``positions [N, T]``: each completion token's position id."""
    ids, mask = rollouts.completion_ids, rollouts.completion_mask  # [N, T]
    n, t = ids.shape
    device = ids.device
    inputs = (mask.sum(-1) - 1).clamp(min=0).tolist()  # tokens 0..L-2 of each row predict tokens 1..L-1
    c = max(t - 1, 1)  # a bin's room: the longest row's inputs
    bins = pack_rows(inverse.tolist(), inputs, c)
    source = torch.full((n, t), len(last), dtype=torch.long)  # [N, T] each token's row in cat([last, packed])
    source[:, 0] = inverse.cpu()
    if not bins:
        flat = last
    else:
        slot_row = torch.zeros(len(bins), c, dtype=torch.long)  # [B, C] the completion token in each slot
        slot_col = torch.zeros(len(bins), c, dtype=torch.long)
        segment = torch.full((len(bins), c), -1, dtype=torch.long)  # [B, C] which packed row, -1 for padding
        # integer planning on the CPU; the tokens move in one gather below
        for b, (_, rows) in enumerate(bins):
            for k, (row, offset) in enumerate(rows):
                length = inputs[row]
                slot_row[b, offset : offset + length] = row
                slot_col[b, offset : offset + length] = torch.arange(length)
                segment[b, offset : offset + length] = k
                source[row, 1 : length + 1] = len(last) + b * c + offset + torch.arange(length)
        slot_row, slot_col, real = slot_row.to(device), slot_col.to(device), (segment >= 0).to(device)
        bin_ids = ids[slot_row, slot_col].masked_fill(~real, 0)  # [B, C]
        bin_pos = positions[slot_row, slot_col].masked_fill(~real, 0)
        owner = torch.tensor([u for u, _ in bins], device=device)  # [B]
        # each bin gets its prompt's keys and values; autograd sums their gradients
        for layer in cache.layers:
            layer.keys, layer.values = layer.keys.index_select(0, owner), layer.values.index_select(0, owner)
        causal = torch.ones(c, c, dtype=torch.bool).tril()  # [C, C]
        own = (segment[:, :, None] == segment[:, None, :]) & (segment[:, None, :] >= 0) & causal  # [B, C, C]
        allowed = torch.cat([prompt_mask.bool().index_select(0, owner)[:, None, :].expand(-1, c, -1),
                             own.to(device)], dim=-1)[:, None]  # [B, 1, C, Tp + C]
        if decoder.config._attn_implementation == "eager":  # eager attention adds its mask to the scores
            allowed = torch.zeros(allowed.shape, device=device).masked_fill(~allowed,
                                                                            torch.finfo(torch.float32).min)
        packed = decoder(input_ids=bin_ids, attention_mask=allowed, position_ids=bin_pos,
                         past_key_values=cache, use_cache=True).last_hidden_state  # [B, C, H]
        flat = torch.cat([last, packed.reshape(-1, packed.shape[-1])])  # [U + B*C, H]
    return flat.index_select(0, source.to(device)[mask])  # [M, H]


def _scattered_head_logprobs(model: nn.Module, hidden: Tensor, ids: Tensor, mask: Tensor, temperature: float,
                             with_entropy: bool, entropy_grad: bool) -> tuple[Tensor, Tensor | None]:
    """Log-probs (and entropy) ``[N, T]`` of ``ids`` from the hidden states ``hidden [M, H]`` of its ``M``
    tokens under ``mask [N, T]``; 0 elsewhere."""
    rows = _head_chunk_rows(model, len(hidden))
    logp, entropy = _head_logprobs(model, hidden[None], ids[mask][None], temperature, rows, with_entropy,
                                   entropy_grad)  # [1, M]
    where = mask.reshape(-1).nonzero()[:, 0]  # [M]

    def scatter(values: Tensor) -> Tensor:
        return values.new_zeros(mask.numel()).index_copy(0, where, values[0]).view(mask.shape)

    return scatter(logp), None if entropy is None else scatter(entropy)
