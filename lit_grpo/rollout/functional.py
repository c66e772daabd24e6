"""Free functions shared by rollout engines and the module: prompt encoding, EOS ids, masks, padding,
selecting groups."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lit_grpo.types import Rollouts


def encode_prompts(tokenizer, prompts: list[str]) -> tuple[Tensor, Tensor]:
    """Left-padded ``(ids [P, Tp], mask [P, Tp] bool)``, as every engine encodes prompts.

    Prompts that already start with the BOS token (rendered by a chat template) get no second one.
    """
    bos = tokenizer.bos_token
    templated = bool(bos) and all(p.startswith(bos) for p in prompts)
    enc = tokenizer(
        prompts, padding=True, padding_side="left", return_tensors="pt", add_special_tokens=not templated
    )
    return enc["input_ids"], enc["attention_mask"].bool()


def pad_prompts(prompt_ids: list[list[int]], pad_token_id: int) -> tuple[Tensor, Tensor]:
    """Token-id prompts ``[P]`` of any lengths -> left-padded ``(ids [P, Tp], mask [P, Tp] bool)``, the form
    :func:`encode_prompts` returns."""
    tp = max((len(p) for p in prompt_ids), default=0)
    ids = torch.full((len(prompt_ids), tp), pad_token_id, dtype=torch.long)  # [P, Tp]
    mask = torch.zeros(len(prompt_ids), tp, dtype=torch.bool)  # [P, Tp]
    for row, tokens in enumerate(prompt_ids):
        ids[row, tp - len(tokens):] = torch.as_tensor(tokens, dtype=torch.long)
        mask[row, tp - len(tokens):] = True
    return ids, mask


def unpad_prompts(ids: Tensor, mask: Tensor) -> list[list[int]]:
    """Left-padded ``ids, mask [P, Tp]`` -> each prompt's token ids (the inverse of :func:`pad_prompts`)."""
    return [row[m].tolist() for row, m in zip(ids, mask, strict=True)]


def eos_token_ids(policy, tokenizer) -> list[int]:
    """The ids that end a completion: the policy's ``generation_config.eos_token_id`` (an id or a list), else
    the tokenizer's ``eos_token_id``; ``[]`` when neither names one. Any id counts, 0 included."""
    eos = getattr(getattr(policy, "generation_config", None), "eos_token_id", None)
    eos = eos if eos is not None else tokenizer.eos_token_id
    if eos is None:
        return []
    if isinstance(eos, list | tuple):
        return [int(e) for e in eos]
    return [int(eos)]


def completion_mask(ids: Tensor, eos_token_id: int | list[int] | None) -> tuple[Tensor, Tensor]:
    """Mask of generated tokens up to and including the first EOS: ``(mask [N, T] bool, truncated [N] bool)``.

    ``truncated`` is True where no EOS was produced within ``T`` tokens (always, without EOS ids).
    """
    if eos_token_id is None or (isinstance(eos_token_id, list) and not eos_token_id):
        is_eos = torch.zeros_like(ids, dtype=torch.bool)
    else:
        eos = torch.as_tensor(eos_token_id, device=ids.device).reshape(-1)
        is_eos = torch.isin(ids, eos)  # [N, T]
    seen_before = torch.cumsum(is_eos.int(), dim=-1) - is_eos.int()  # EOS tokens strictly before t
    mask = seen_before == 0
    return mask, ~is_eos.any(-1)


def _pad(x: Tensor, length: int, value: int | float | bool, left: bool) -> Tensor:
    extra = length - x.shape[1]
    if extra == 0:
        return x
    return F.pad(x, (extra, 0) if left else (0, extra), value=value)


def concat_rollouts(parts: list[Rollouts], pad_token_id: int) -> Rollouts:
    """Concatenate rollouts along ``N``, re-padding prompts on the left and completions on the right."""
    if len(parts) == 1:
        return parts[0]
    tp = max(p.prompt_ids.shape[1] for p in parts)
    t = max(p.completion_ids.shape[1] for p in parts)
    return Rollouts(
        prompt_ids=torch.cat([_pad(p.prompt_ids, tp, pad_token_id, left=True) for p in parts]),
        prompt_mask=torch.cat([_pad(p.prompt_mask, tp, False, left=True) for p in parts]),
        completion_ids=torch.cat([_pad(p.completion_ids, t, pad_token_id, left=False) for p in parts]),
        completion_mask=torch.cat([_pad(p.completion_mask, t, False, left=False) for p in parts]),
        logprobs=torch.cat([_pad(p.logprobs, t, 0.0, left=False) for p in parts]),
        texts=[s for p in parts for s in p.texts],
        truncated=torch.cat([p.truncated for p in parts]),
        group_size=parts[0].group_size,
        policy_mask=None if any(p.policy_mask is None for p in parts)
        else torch.cat([_pad(p.policy_mask, t, False, left=False) for p in parts]),
        episodes=None if any(p.episodes is None for p in parts) else [e for p in parts for e in p.episodes],
    )


def group_rows(groups: Tensor | list[int], group_size: int) -> Tensor:
    """Row indices ``[P' * G]`` of the completions of prompt groups ``groups [P']``, group by group."""
    groups = torch.as_tensor(groups, dtype=torch.long).reshape(-1)
    return (groups[:, None] * group_size + torch.arange(group_size)[None, :]).reshape(-1)


def select_rows(rollouts: Rollouts, rows: Tensor | list[int]) -> Rollouts:
    """The completions ``rows`` in that order; ``group_size`` is kept, so rows that split or reorder groups
    are for consumers that do not read groups (micro-batching, per-completion diagnostics)."""
    rows = torch.as_tensor(rows, dtype=torch.long).reshape(-1).cpu()  # a CPU index works on any device
    return Rollouts(
        prompt_ids=rollouts.prompt_ids[rows],
        prompt_mask=rollouts.prompt_mask[rows],
        completion_ids=rollouts.completion_ids[rows],
        completion_mask=rollouts.completion_mask[rows],
        logprobs=rollouts.logprobs[rows],
        texts=[rollouts.texts[i] for i in rows.tolist()],
        truncated=rollouts.truncated[rows],
        group_size=rollouts.group_size,
        policy_mask=None if rollouts.policy_mask is None else rollouts.policy_mask[rows],
        episodes=None if rollouts.episodes is None else [rollouts.episodes[i] for i in rows.tolist()],
    )


def select_groups(rollouts: Rollouts, groups: Tensor | list[int]) -> Rollouts:
    """The completions of the given prompt groups, in that order (``[P'] -> [P' * G]``)."""
    return select_rows(rollouts, group_rows(groups, rollouts.group_size))


def slice_rows(rollouts: Rollouts, start: int, stop: int) -> Rollouts:
    """Completions ``start:stop`` (a micro-batch), trimmed to their longest prompt and completion."""
    pm = rollouts.prompt_mask[start:stop]
    cm = rollouts.completion_mask[start:stop]
    tp = max(int(pm.sum(-1).max()), 1) if pm.numel() else pm.shape[1]
    t = max(int(cm.sum(-1).max()), 1) if cm.numel() else cm.shape[1]
    p0 = pm.shape[1] - tp
    return Rollouts(
        prompt_ids=rollouts.prompt_ids[start:stop, p0:],
        prompt_mask=pm[:, p0:],
        completion_ids=rollouts.completion_ids[start:stop, :t],
        completion_mask=cm[:, :t],
        logprobs=rollouts.logprobs[start:stop, :t],
        texts=rollouts.texts[start:stop],
        truncated=rollouts.truncated[start:stop],
        group_size=rollouts.group_size,
        policy_mask=None if rollouts.policy_mask is None else rollouts.policy_mask[start:stop, :t],
        episodes=None if rollouts.episodes is None else rollouts.episodes[start:stop],
    )
