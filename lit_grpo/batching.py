"""How a rollout batch is cut for the update: mini-batches (one optimizer step each) of whole groups, and
micro-batches (one forward and backward each), with zero-advantage rows left out where that is exact.

Pure planning over row indices: nothing here runs the policy. Where the ranks of a data-parallel run must
agree (each joins the same number of collective forwards), the caller passes ``most_over_ranks``, which turns
this rank's count into the largest count of any rank (the identity on one process).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lit_grpo.losses import LossInputs, PolicyLoss
from lit_grpo.parallel import max_over_ranks, min_over_ranks
from lit_grpo.rollout.functional import group_rows, select_rows, slice_rows
from lit_grpo.types import Rollouts


@dataclass
class Rows:
    """Completions one optimizer step trains on, with the batch-wide tensors cut to them."""

    rollouts: Rollouts
    loss_mask: Tensor  # [n, T] bool, the generated tokens in the loss (drop_truncated leaves some out)
    advantages: Tensor  # [n]
    old_logp: Tensor | None  # [n, T]
    ref_logp: Tensor | None  # [n, T]

    def select(self, rows: Tensor) -> Rows:
        """The completions ``rows [n']`` of these, in that order, their rollouts trimmed to their longest
        prompt and completion (the other tensors keep their width: cut them to the log-probs')."""
        index = rows.to(self.advantages.device)
        return Rows(trimmed(select_rows(self.rollouts, rows)), self.loss_mask[index], self.advantages[index],
                    None if self.old_logp is None else self.old_logp[index],
                    None if self.ref_logp is None else self.ref_logp[index])

    def loss_inputs(self, logp: Tensor, weights: Tensor, loss: PolicyLoss) -> LossInputs:
        """These rows (a micro-batch of ``t`` tokens, log-probs ``logp [n, t]``) as ``loss`` reads them: their
        advantages, ``weights``, old and reference log-probs cut to ``t``, and only the log-probs the loss
        declares. Without frozen old log-probs (one optimizer step per batch) they are ``logp``."""
        t = logp.shape[1]
        old = self.old_logp[:, :t] if self.old_logp is not None else logp.detach()
        return LossInputs(
            logp=logp,
            old_logp=old if loss.needs_old_logp else None,
            engine_logp=self.rollouts.logprobs[:, :t] if loss.needs_engine_logp else None,
            ref_logp=self.ref_logp[:, :t] if self.ref_logp is not None else None,
            advantages=self.advantages,
            mask=self.loss_mask[:, :t],
            weights=weights[:, :t],
        )


@dataclass
class Ranks:
    """The data-parallel ranks as the update sees them: counts agreed over ranks, loss divisors summed."""

    strategy: Any  # Lightning's strategy: its reduce
    world_size: int

    def most(self, count: int) -> int:
        """The largest ``count`` of any rank (``count`` itself on one process)."""
        if self.world_size == 1:
            return count
        return int(max_over_ranks(count, self.strategy, self.world_size))

    def fewest(self, count: int) -> int:
        """The smallest ``count`` of any rank (``count`` itself on one process)."""
        return min_over_ranks(count, self.strategy, self.world_size)

    def global_counts(self, mask: Tensor) -> dict[str, Tensor | float]:
        """Loss divisors of the tokens ``mask [n, T]`` summed over ranks, divided by the world size (ranks
        average gradients); none on one process."""
        if self.world_size == 1:
            return {}
        tokens = self.strategy.reduce(mask.sum().float(), reduce_op="sum")
        seqs = self.strategy.reduce(torch.tensor(float(mask.shape[0]), device=mask.device), reduce_op="sum")
        return {"num_tokens": tokens / self.world_size, "num_sequences": seqs / self.world_size}


def chunks(rows: Tensor, size: int) -> list[Tensor]:
    """``rows`` cut into consecutive runs of ``size`` (none when ``rows`` is empty)."""
    return [part for part in rows.split(size) if len(part)]


def trimmed(rollouts: Rollouts) -> Rollouts:
    """``rollouts`` cut to their longest prompt and completion (padding a micro-batch need not compute)."""
    return slice_rows(rollouts, 0, len(rollouts))


def mini_batches(rollouts: Rollouts, steps: int, micro_batch_size: int | None,
                 shared_prefix: bool) -> list[Tensor]:
    """Row indices ``[n]`` of each of the ``steps`` mini-batches: whole groups, as even as the group count
    allows (the same on every rank, which holds as many groups), sorted by length when micro-batched
    (micro-batches of similar lengths pad less; the sums, so the update, stay the same). With
    ``shared_prefix`` whole groups are sorted by their longest row, so a micro-batch shares its prompts."""
    size = rollouts.group_size
    groups = torch.arange(len(rollouts) // size)
    out = []
    for chunk in groups.tensor_split(steps):
        rows = group_rows(chunk, size)  # [n]
        if micro_batch_size is not None and micro_batch_size < len(rows):
            lengths = (rollouts.prompt_mask.sum(-1) + rollouts.completion_mask.sum(-1)).cpu()[rows]
            if shared_prefix:
                rows = rows.view(-1, size)[lengths.view(-1, size).amax(-1).argsort(stable=True)].reshape(-1)
            else:
                rows = rows[lengths.argsort(stable=True)]
        out.append(rows)
    return out


def micro_batches(advantages: Tensor, micro_batch_size: int | None, elide: bool,
                  most_over_ranks: Callable[[int], int]) -> list[Tensor]:
    """Positions ``[m]`` in a mini-batch (with ``advantages [n]``) of each of its micro-batches. Without
    elision: consecutive runs of ``micro_batch_size``. With it, the same over the rows whose advantage is not
    0, as many micro-batches as the rank with the most needs and at least one, the missing ones filled with
    one zero-advantage row each (it adds nothing), so the ranks stay in step and the optimizer sees a gradient
    even when no row is left."""
    positions = torch.arange(len(advantages))
    size = micro_batch_size or max(len(advantages), 1)
    if not elide:
        return chunks(positions, size)
    zero = (advantages == 0).cpu()  # [n]
    micro = chunks(positions[~zero], size)
    want = max(most_over_ranks(len(micro)), 1)
    spare = positions[zero]
    return micro + [spare[k : k + 1] for k in range(min(want - len(micro), len(spare)))]


def forward_parts(rows: Tensor, micro_batch_size: int | None,
                  most_over_ranks: Callable[[int], int]) -> list[Tensor]:
    """The rows ``[k]`` of a gradient-free forward cut into micro-batches, as many as the rank with the most
    (a sharded forward is a collective), the extra ones over row 0."""
    parts = chunks(rows, micro_batch_size or max(len(rows), 1))
    want = most_over_ranks(len(parts))
    return parts + [torch.zeros(1, dtype=torch.long)] * (want - len(parts))
