"""Drawing a training step's groups: the prompts it trains on, generated and scored.

The DataModule serves ``P`` prompts per step. :class:`GroupDraw` skips the prompts the curriculum retired and
tops the batch up from the DataModule's refill stream; with dynamic sampling (``filter_degenerate``) it drops
the groups whose rewards are all equal and refills until ``P`` groups vary. The training module hands it the
engine, its scoring and the refill stream as arguments: nothing here reads the module.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from lit_grpo.data.curriculum import PromptCurriculum
from lit_grpo.estimators.functional import constant_groups
from lit_grpo.perf import PhaseTimer
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.functional import concat_rollouts, group_rows, select_groups
from lit_grpo.types import PromptBatch, RewardOutput, Rollouts, RolloutStats, SamplingParams

logger = logging.getLogger(__name__)

#: ``score(batch, rollouts)``: rewards ``[P, G]`` and the reward's output.
Score = Callable[[PromptBatch, Rollouts], tuple[Tensor, RewardOutput]]


@dataclass
class Groups:
    """A step's scored groups, and what drawing them cost."""

    batch: PromptBatch  # [P]
    rollouts: Rollouts  # [N = P G, T], group-major
    rewards: Tensor  # [P, G]
    reward_out: RewardOutput  # scores and terms [N]
    drawn: int = 0  # prompts drawn, retired and dropped ones included
    tokens: int = 0  # completion tokens generated, dropped groups included

    def take(self, groups: list[int]) -> Groups:
        """The groups ``groups`` of these, in that order."""
        rows = group_rows(groups, self.rollouts.group_size)
        out = self.reward_out
        out = RewardOutput(out.scores[rows], {k: v[rows] for k, v in out.terms.items()}, out.counters)
        return Groups(self.batch.select(groups), select_groups(self.rollouts, groups), self.rewards[groups],
                      out, self.drawn, self.tokens)

    @staticmethod
    def merge(parts: list[Groups], pad_token_id: int) -> Groups:
        """The groups of ``parts`` one after another; counters summed."""
        counters: dict[str, int] = {}
        for part in parts:
            for k, v in part.reward_out.counters.items():
                counters[k] = counters.get(k, 0) + v
        outs = [p.reward_out for p in parts]
        terms = {k: torch.cat([o.terms[k] for o in outs]) for k in outs[0].terms}
        out = RewardOutput(torch.cat([o.scores for o in outs]), terms, counters)
        return Groups(PromptBatch.concat([p.batch for p in parts]),
                      concat_rollouts([p.rollouts for p in parts], pad_token_id),
                      torch.cat([p.rewards for p in parts]), out,
                      sum(p.drawn for p in parts), sum(p.tokens for p in parts))

    def stats(self, advantages: Tensor, terms: dict[str, Tensor]) -> RolloutStats:
        """What the callbacks read: these groups with their ``advantages [P, G]`` and further reward
        ``terms [N]`` (shaping's), all on the CPU."""
        terms = {k: v.cpu() for k, v in {**self.reward_out.terms, **terms}.items()}  # name -> [N]
        r = self.rollouts
        return RolloutStats(self.batch, r.texts, self.rewards.cpu(), advantages.cpu(), r.lengths.cpu(),
                            r.truncated.cpu(), terms, self.reward_out.counters, self.drawn, r, self.tokens)


class GroupDraw:
    """Draws a step's groups: generation, scoring, the curriculum's skips and the refills.

    Args:
        curriculum: Retires prompts by their running pass rate (null: every prompt stays).
        group_size: Completions per prompt (G).
        sampling: What the engine samples with.
        filter_degenerate: Drop groups whose rewards are all equal and refill (dynamic sampling).
        max_refill_batches: Most refill draws per step, for each of the two reasons.
    """

    def __init__(self, curriculum: PromptCurriculum | None, group_size: int, sampling: SamplingParams,
                 filter_degenerate: bool, max_refill_batches: int) -> None:
        self.curriculum, self.group_size, self.sampling = curriculum, group_size, sampling
        self.filter_degenerate, self.max_refill_batches = filter_degenerate, max_refill_batches
        self.skipped = 0  # retired prompts drawn and skipped in the current step

    def __call__(self, batch: PromptBatch, engine: RolloutEngine, score: Score,
                 refill: Callable[[int], PromptBatch], fewest: Callable[[int], int], pad_token_id: int,
                 timer: PhaseTimer) -> Groups | None:
        """Generate and score groups of ``batch``'s prompts the curriculum has not retired (``refill(n)``
        draws ``n`` more); with ``filter_degenerate``, refill until ``P`` groups vary. On every rank:
        ``fewest(n)`` is the smallest ``n`` of any rank, and each keeps as many groups as the rank with the
        fewest, so the ranks stay in step. None while an asynchronous engine's pipeline is still filling."""
        want, parts = len(batch), []
        self.skipped = 0
        batch, drawn = self.unretired(batch, refill)
        if self.curriculum is not None:  # the ranks keep as many prompts
            batch = batch.select(list(range(fewest(len(batch)))))
        while True:
            with timer("generate_s"):
                if parts:  # a refill, generated now
                    rollouts = engine.rollout(batch, self.group_size, self.sampling)
                elif (ahead := engine.rollout_ahead(batch, self.group_size, self.sampling)) is None:
                    return None
                else:  # this step's prompts, or an earlier step's with an asynchronous engine
                    batch, rollouts = ahead
            with timer("score_s"):
                rewards, out = score(batch, rollouts)
            part = Groups(batch, rollouts, rewards, out, drawn + len(batch), int(rollouts.lengths.sum()))
            if self.filter_degenerate:
                part = part.take((~constant_groups(rewards)).nonzero()[:, 0].tolist())  # groups that vary
            parts.append(part)
            have = sum(len(p.batch) for p in parts)
            if not self.filter_degenerate:
                break
            have = fewest(have)
            if have >= want or len(parts) > self.max_refill_batches:
                break
            batch, drawn = self.unretired(refill(want - have), refill)
        groups = Groups.merge(parts, pad_token_id)
        if len(groups.batch) > min(want, have):
            groups = groups.take(list(range(min(want, have))))
        return groups

    def unretired(self, batch: PromptBatch, refill: Callable[[int], PromptBatch]) -> tuple[PromptBatch, int]:
        """``batch`` without the prompts the curriculum retired, topped up by ``refill`` (at most
        ``max_refill_batches`` draws), and how many prompts were drawn and skipped. When every
        prompt drawn is retired the first batch is kept as drawn (a warning says so)."""
        if self.curriculum is None:
            return batch, 0
        want, first, parts, drawn = len(batch), batch, [], 0
        for attempt in range(self.max_refill_batches + 1):
            drawn += len(batch)
            parts.append(batch.select(self.curriculum.active(batch.ids)))
            have = sum(len(p) for p in parts)
            if have >= want or attempt == self.max_refill_batches:
                break
            batch = refill(want - have)
        active = PromptBatch.concat(parts)
        if len(active) == 0 and want > 0:
            logger.warning("every prompt drawn this step is retired by the curriculum; training on the drawn "
                           "prompts. Raise curriculum.retire_above, lower retire_below or add prompts")
            active = first
        self.skipped += drawn - len(active)
        return active, drawn - len(active)

    def observe(self, batch: PromptBatch, rewards: Tensor, gather: Callable[[list], list[list]]) -> None:
        """Hand each prompt's mean reward over its group to the curriculum; ``gather`` collects every rank's
        visits (rank order), so all ranks agree."""
        if self.curriculum is None:
            return
        means = [float("nan") if row.isnan().all() else float(row.nanmean()) for row in rewards.float().cpu()]
        visits = gather(list(zip(batch.ids, means, strict=True)))  # every rank's
        self.curriculum.observe([v for rank in visits for v in rank])

    def pairs(self, world_size: int) -> dict[str, tuple[float, float]]:
        """The curriculum's ``rollout/*`` metric pairs (none without one): retired so far (the same on every
        rank), and skipped this step (summed over ranks)."""
        if self.curriculum is None:
            return {}
        return {"rollout/retired_prompts": (float(len(self.curriculum.retired)), 1.0),
                "rollout/skipped_prompts": (float(self.skipped), 1.0 / world_size)}
