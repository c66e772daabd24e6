"""GRPOModule: rollout -> reward -> advantage -> policy loss, one optimizer step per pass."""

from __future__ import annotations

import logging
import math
from dataclasses import asdict
from itertools import product
from typing import Any, ClassVar

import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor

from lit_grpo import step_metrics
from lit_grpo.batching import Rows, forward_parts, micro_batches, mini_batches, trimmed
from lit_grpo.checkpoint import (
    check_fingerprint,
    gather_objects,
    model_identity,
    rng_states,
    set_rng_states,
)
from lit_grpo.checks import require
from lit_grpo.data.curriculum import PromptCurriculum
from lit_grpo.estimators import GRPO, AdvantageEstimator
from lit_grpo.estimators.functional import constant_groups
from lit_grpo.logprobs import logp_mismatch, sequence_logprobs, shared_prefix_logprobs
from lit_grpo.lora import LoraSettings, adapters_disabled
from lit_grpo.losses import LossInputs, PolicyLoss, PPOClip, token_weights
from lit_grpo.losses.correction import correct_staleness
from lit_grpo.losses.functional import ratio_statistics
from lit_grpo.models.loading import DType, load_policy
from lit_grpo.parallel import (
    check_layout,
    clip_grad_norm,
    extremes_over_ranks,
    max_over_ranks,
    min_over_ranks,
    reduce_ratios,
    seed_step,
)
from lit_grpo.perf import PhaseTimer
from lit_grpo.policy import PolicyModule
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.shaping import RewardShaping
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.functional import concat_rollouts, group_rows, select_groups, select_rows
from lit_grpo.settings import COLLAPSED_NLL_FRACTION, Algorithm, Batching, Guards, Optim, Sampling
from lit_grpo.step_metrics import StepStats, UpdateStats
from lit_grpo.types import PromptBatch, RewardOutput, Rollouts, RolloutStats

logger = logging.getLogger(__name__)


class GRPOModule(PolicyModule):
    """GRPO-family policy optimisation from verifiable rewards.

    Each training step draws ``P`` prompts from the DataModule (the rollout batch), samples ``group_size``
    completions per prompt, scores them, optionally shapes the rewards by length, turns them into advantages
    with the estimator and takes ``steps_per_generation * num_iterations`` optimizer steps on the policy loss:
    the batch is split into ``steps_per_generation`` mini-batches of whole groups, each an optimizer step
    (micro-batched, gradients accumulated), and the pass over them repeats ``num_iterations`` times. The
    trainer's log-probs of the batch are frozen before its first step, so from the second step on the
    importance ratios differ from 1 and the loss's clip acts. ``trainer.max_steps`` counts optimizer steps: a
    run draws ``max_steps / (steps_per_generation * num_iterations)`` rollout batches, and a batch cut short by
    ``max_steps`` stops there. With several processes (DDP, or FSDP2 through ``ModelParallelStrategy``) each
    rank draws its own ``P`` prompts and the loss divisors are summed over ranks, so the update is the
    one-process update of the global batch; metrics are global too. Randomness is reseeded from
    ``(seed, step, rank)`` before every step, so a resumed run is exact.

    Logs every training step (one rollout batch) the scalars in ``metrics`` (README, "TensorBoard"):
    ``train/loss`` and ``train/grad_norm`` of its last optimizer step, ``train/entropy`` of its first pass,
    the loss's statistics pooled over its optimizer steps; counts and throughput summed over ranks, times
    averaged. With elision, ``train/entropy``, the engine/trainer mismatch and the loss's statistics cover
    the completions trained on. When a rollout batch takes several optimizer steps, each step's loss,
    gradient norm and loss statistics also go to the loggers as ``optim/<name>`` at that optimizer step.

    Args:
        model: Hugging Face hub id or local directory of the initial policy.
        reward: Reward function.
        estimator: Advantage estimator (default ``GRPO()``); short names work: ``--model.estimator=Sign``.
        engine: Rollout engine (default ``HFGenerateEngine()``).
        loss: Policy loss (default ``PPOClip()``: clip ranges, dual clip, KL to a reference, truncated
            importance sampling); options on the command line: ``--model.loss.eps_high=0.28``.
        shaping: Reward shaping by completion length between scoring and the estimator (e.g.
            ``OverlongPenalty``, DAPO's soft overlong punishment); null = the rewards as scored.
        curriculum: Retire prompts whose running pass rate is about 1 (or 0): skipped when drawn, the batch
            topped up from the refill stream; null = every prompt stays.
        group_size: Completions per prompt (G).
        sampling: Rollout sampling and held-out samples (:class:`~lit_grpo.settings.Sampling`).
        optim: AdamW, warm-up and clipping (:class:`~lit_grpo.settings.Optim`).
        algorithm: The choices between the rewards and the optimizer (:class:`~lit_grpo.settings.Algorithm`).
        batching: How the update is computed, the same update up to float order (:class:`~lit_grpo.settings.Batching`).
        guards: What a failing step does (:class:`~lit_grpo.settings.Guards`).
        dtype: Parameter dtype of the policy.
        lora: Train LoRA adapters (peft: rank, alpha, dropout, target modules) instead of all weights.
    """

    metrics: ClassVar[tuple[str, ...]] = (
        "train/loss", "train/grad_norm", "train/entropy", "train/lr", "train/nonfinite_steps", "train/<name>",
        "rollout/reward_mean", "rollout/reward_std", "rollout/len_mean", "rollout/truncated_frac",
        "rollout/unscorable_frac", "rollout/prompts_drawn", "rollout/completions_generated",
        "rollout/tokens_generated", "rollout/sampled_nll", "rollout/logp_diff_mean", "rollout/logp_diff_max",
        "rollout/logp_kl_k3",
        "rollout/retired_prompts", "rollout/skipped_prompts", "reward/<term>", "data/skipped_rows",
        "perf/<phase>_s", "perf/tokens_per_s", "perf/elided_frac", "optim/<name>",
        "env/turns_mean", "env/tool_calls_mean", "env/truncated_frac", "env/unanswered_frac", "env/seconds",
        "env/tool_errors", "env/tool_timeouts", "env/adv_share_turn<k>", "env/adv_share_final_turn", "async/<name>",
    )

    def __init__(
        self,
        model: str,
        reward: RewardFunction,
        estimator: AdvantageEstimator | None = None,
        engine: RolloutEngine | None = None,
        loss: PolicyLoss | None = None,
        shaping: RewardShaping | None = None,
        curriculum: PromptCurriculum | None = None,
        group_size: int = 8,
        sampling: Sampling = Sampling(),
        optim: Optim = Optim(),
        algorithm: Algorithm = Algorithm(),
        batching: Batching = Batching(),
        guards: Guards = Guards(),
        dtype: DType = "float32",
        lora: LoraSettings | None = None,
    ) -> None:
        super().__init__(model, reward, engine=engine, dtype=dtype, sampling=sampling, optim=optim, lora=lora,
                         gradient_checkpointing=batching.gradient_checkpointing,
                         reward_timeout_s=guards.reward_timeout_s)
        self.estimator = estimator if estimator is not None else GRPO()
        self.loss = loss if loss is not None else PPOClip()
        announce_staleness(self.loss, *self.engine.staleness())  # an asynchronous engine: the loss's correction
        require(group_size >= max(1, self.estimator.min_group_size),
                f"group_size={group_size} is too small for {type(self.estimator).__name__}, which needs at least "
                f"{self.estimator.min_group_size}; raise group_size")
        if shaping is not None:
            shaping.check(self.engine.max_sampled_tokens(sampling.max_new_tokens))
        self.shaping, self.curriculum, self.group_size = shaping, curriculum, group_size
        self.algorithm, self.batching, self.guards = algorithm, batching, guards
        self.consecutive_nonfinite = 0  # skipped optimizer steps in a row
        self.consecutive_collapsed = 0  # steps in a row with near-uniform sampling (guard_collapse)
        self.ref_policy = None
        self.nonfinite_steps = 0
        self.rollout_seed: int | None = None  # base of the per-step seeds; saved in checkpoints
        self._skipped_prompts = 0  # retired prompts drawn and skipped in the current step
        self.generated = {"completions": 0.0, "tokens": 0.0}  # since the run started, all ranks; saved in checkpoints
        self.automatic_optimization = False

    def setup(self, stage: str) -> None:
        data = getattr(self.trainer, "datamodule", None)
        if stage == "fit" and hasattr(data, "prompts_per_step"):
            train = getattr(data, "splits", {}).get("train")
            check_layout(self.trainer.world_size, data.prompts_per_step, None if train is None else len(train))
            require(data.prompts_per_step % self.algorithm.steps_per_generation == 0,
                   f"prompts_per_step={data.prompts_per_step} is not a multiple of steps_per_generation="
                   f"{self.algorithm.steps_per_generation}: each optimizer step trains on an equal share of the rollout "
                   f"batch's prompts; set data.prompts_per_step to a multiple of it")

    def configure_model(self) -> None:
        super().configure_model()
        if self.loss.needs_ref_logp and self.lora is None and self.ref_policy is None:
            self.ref_policy = load_policy(self.model_name, self.dtype_name).eval().requires_grad_(False)
        if self.ref_policy is not None:
            self.ref_policy = self._shard(self.ref_policy)

    def on_fit_end(self) -> None:
        self.engine.close()  # an asynchronous engine's producer stops; batches no step will train are dropped

    def on_train_batch_start(self, batch: PromptBatch, batch_idx: int) -> None:
        if self.rollout_seed is None:
            self.rollout_seed = torch.initial_seed()
        seed_step(self.rollout_seed, self.global_step, self.global_rank)

    # ---- the algorithm -----------------------------------------------------------------------------
    def training_step(self, batch: PromptBatch, batch_idx: int) -> dict:
        timer = PhaseTimer()
        collected = self.collect(batch, timer)
        if collected is None:  # an asynchronous engine's pipeline is still filling: nothing to train on yet
            return None
        batch, rollouts, rewards, reward_out, drawn, tokens = collected  # [P], [N, T], [P, G]
        lengths = rollouts.lengths.view(rewards.shape)  # [P, G] generated tokens
        shaped, shaping_terms = self.shape(rewards, lengths)  # [P, G]: the rewards the estimator sees
        advantages = self.estimator(shaped, lengths=lengths)  # [P, G]
        update = self.update(rollouts, advantages.reshape(-1), timer)  # steps_per_generation x num_iterations steps
        self.observe(batch, rewards)  # the curriculum's running pass rates
        with timer("weight_sync_s"):
            self.engine.sync_weights(self.policy)
        terms = {k: v.cpu() for k, v in {**reward_out.terms, **shaping_terms}.items()}  # name -> [N]
        stats = RolloutStats(batch, rollouts.texts, rewards.cpu(), advantages.cpu(), rollouts.lengths.cpu(),
                             rollouts.truncated.cpu(), terms, reward_out.counters, drawn, rollouts,
                             tokens)
        metrics = self.log_step(stats, update, timer)
        self.guard_collapse(metrics)  # finite divergence: near-uniform sampling for max_collapsed_steps steps
        return {"loss": torch.tensor(update.loss), "rollout": stats}

    def collect(self, batch: PromptBatch, timer: PhaseTimer):
        """Generate and score groups of prompts the curriculum has not retired; with ``filter_degenerate``, refill
        until ``P`` groups vary (on every rank: each keeps as many groups as the rank with the fewest, so the
        ranks stay in step). Also returns the prompts drawn and the completion tokens generated, dropped groups
        included."""
        want, parts, tokens = len(batch), [], 0
        self._skipped_prompts = 0
        batch, drawn = self._unretired(batch)
        if self.curriculum is not None and self.trainer.world_size > 1:  # the ranks keep as many prompts
            batch = batch.select(list(range(min_over_ranks(len(batch), self.trainer.strategy,
                                                           self.trainer.world_size))))
        while True:
            with timer("generate_s"):
                if parts:  # a refill, generated now
                    rollouts = self.engine.rollout(batch, self.group_size, self.sampling)
                elif (ahead := self.engine.rollout_ahead(batch, self.group_size, self.sampling)) is None:
                    return None
                else:  # this step's prompts, or an earlier step's with an asynchronous engine
                    batch, rollouts = ahead
            with timer("score_s"):
                rewards, out = self.score(batch, rollouts, training=True)
            drawn, tokens = drawn + len(batch), tokens + int(rollouts.lengths.sum())
            if self.algorithm.filter_degenerate:
                keep = (~constant_groups(rewards)).nonzero()[:, 0].tolist()  # groups the estimator can use
                batch, rollouts, rewards, out = _take_groups(batch, rollouts, rewards, out, keep)
            parts.append((batch, rollouts, rewards, out))
            have = sum(len(p[0]) for p in parts)
            if self.algorithm.filter_degenerate:
                have = min_over_ranks(have, self.trainer.strategy, self.trainer.world_size)
            if not self.algorithm.filter_degenerate or have >= want or len(parts) > self.algorithm.max_refill_batches:
                break
            batch, skipped = self._unretired(self.trainer.datamodule.refill(want - have))
            drawn += skipped
        batch, rollouts, rewards, out = _merge(parts, self.tokenizer.pad_token_id)
        if len(batch) > min(want, have):
            batch, rollouts, rewards, out = _take_groups(batch, rollouts, rewards, out, list(range(min(want, have))))
        return batch, rollouts.to(self.device), rewards, out, drawn, tokens

    def shape(self, rewards: Tensor, lengths: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """The rewards ``[P, G]`` after the ``shaping`` component, and its terms ``[N]`` (logged as reward/<term>)."""
        if self.shaping is None:
            return rewards, {}
        longest = self.engine.max_sampled_tokens(self.sampling.max_new_tokens)  # an episode's: all its turns
        shaped = self.shaping(rewards, lengths, longest)
        return shaped.rewards, {name: term.reshape(-1) for name, term in shaped.terms.items()}

    def update(self, rollouts: Rollouts, advantages: Tensor, timer: PhaseTimer) -> UpdateStats:
        """``steps_per_generation * num_iterations`` optimizer steps on the loss (fewer when ``max_steps`` comes
        first): the frozen log-probs the loss reads, then each optimizer step on its mini-batch."""
        adv = advantages.to(self.device)  # [N]
        minis = mini_batches(rollouts, self.algorithm.steps_per_generation, self.batching.micro_batch_size,
                             self.batching.shared_prefix)
        plans = [micro_batches(adv[rows.to(adv.device)], self.batching.micro_batch_size, self._elides(),
                               self._most_over_ranks) for rows in minis]  # positions in each
        trained = torch.zeros(len(rollouts), dtype=torch.bool)  # [N] the rows that go through the policy
        for rows, part in ((rows, part) for rows, micro in zip(minis, plans, strict=True) for part in micro):
            trained[rows[part]] = True
        reused = self.algorithm.optimizer_steps > 1
        old_logp = self._frozen_logprobs(self.policy, rollouts, timer, "old_logprob_s", trained.nonzero()[:, 0]) \
            if reused and self.loss.needs_old_logp else None  # [N, T], 0 on the rows never trained
        ref_logp = self._reference_logprobs(rollouts, timer) if self.loss.needs_ref_logp else None  # [N, T]
        loss_mask = rollouts.sampled_mask & ~rollouts.truncated[:, None] if self.algorithm.drop_truncated \
            else rollouts.sampled_mask  # [N, T] the tokens in the loss: the policy's own (not an episode's observations)
        whole = Rows(rollouts, loss_mask, adv, old_logp, ref_logp)
        before = old_logp if old_logp is not None else torch.zeros(rollouts.completion_ids.shape, device=self.device)
        stats = UpdateStats(elided=(float((~trained).sum()), float(len(rollouts))))
        for iteration, (rows, micro) in product(range(self.algorithm.num_iterations), zip(minis, plans, strict=True)):
            if 0 <= self.trainer.max_steps <= self.global_step:
                break
            stats.steps.append(self._step(whole.select(rows), rows, micro, timer, stats if iteration == 0 else None,
                                          before if old_logp is None else None))
        if len(rollouts):  # the engine's log-probs against the trainer's before the update, on the rows trained
            seen = rollouts.sampled_mask & trained.to(self.device)[:, None]  # [N, T]
            mismatch = logp_mismatch(before, rollouts.logprobs, seen)
            stats.mismatch = {k: v.item() for k, v in mismatch.items()}
        return stats

    def observe(self, batch: PromptBatch, rewards: Tensor) -> None:
        """Hand each prompt's mean reward over its group to the curriculum (every rank's, so all agree)."""
        if self.curriculum is None:
            return
        means = [float("nan") if row.isnan().all() else float(row.nanmean()) for row in rewards.float().cpu()]
        visits = list(zip(batch.ids, means, strict=True))
        if self.trainer.world_size > 1:
            visits = [v for rank in gather_objects(visits) for v in rank]
        self.curriculum.observe(visits)

    # ---- pieces ------------------------------------------------------------------------------------
    def _step(self, rows: Rows, index: Tensor, micro: list[Tensor], timer: PhaseTimer,
              first_pass: UpdateStats | None, before: Tensor | None) -> StepStats:
        """One optimizer step on ``rows`` (a mini-batch, rows ``index [n]`` of the batch): token weights over all
        its tokens, then per micro-batch (``micro``: positions in ``rows``) the log-prob forward, the loss and
        its backward. ``first_pass``: where the entropy goes on the first pass over the batch; ``before``: where
        the log-probs go when nothing was frozen (one optimizer step per batch)."""
        mask = rows.loss_mask
        longest = self.engine.max_sampled_tokens(self.sampling.max_new_tokens)  # an episode's: all its turns
        weights = token_weights(mask, self.algorithm.aggregation, longest, **self._global_counts(mask))  # [n, T], the elided rows counted too
        step = StepStats()
        for part in micro:
            mb = rows.select(part)
            with timer("forward_s"):
                logp, entropy = self._logprobs(self.policy, mb.rollouts,
                                               with_entropy=first_pass is not None or self.algorithm.entropy_coef > 0,
                                               entropy_grad=self.algorithm.entropy_coef > 0)  # [n, t]
                batch = self._loss_inputs(logp, mb, weights[part.to(weights.device)])
                out = self.loss(batch)
                loss = (out.loss * batch.weights).sum()
                if self.algorithm.entropy_coef > 0:  # a bonus: every token carries gradient, whatever its advantage
                    loss = loss - self.algorithm.entropy_coef * (entropy * batch.weights).sum()
            with timer("backward_s"):
                self.manual_backward(loss)
            if self.loss.needs_old_logp:
                ratios = ratio_statistics(batch.logp, batch.old_logp, batch.mask)
                out.means.update(ratio_mean=ratios["ratio"], policy_kl=ratios["policy_kl"])
                step.add_extremes({"ratio_min": ratios["ratio_min"].item()}, {"ratio_max": ratios["ratio_max"].item()})
            step.add(loss, out, batch)
            if first_pass is not None:
                first_pass.add_entropy(entropy, batch.mask)
            if before is not None:
                before[index[part], : logp.shape[1]] = logp.detach()
        with timer("optimizer_s"):
            step.grad_norm = self._optimizer_step(step.loss)
        return step

    def _most_over_ranks(self, count: int) -> int:
        """The largest ``count`` of any rank (``count`` itself on one process)."""
        if self.trainer.world_size == 1:
            return count
        return int(max_over_ranks(count, self.trainer.strategy, self.trainer.world_size))

    def _logprobs(self, policy, rollouts: Rollouts, **entropy) -> tuple[Tensor, Tensor | None]:
        """Log-probs ``[n, t]`` of ``rollouts`` under ``policy`` at the sampling temperature (and the entropy when
        asked: ``with_entropy``, ``entropy_grad``), each prompt encoded once with ``shared_prefix`` (its completions
        packed with ``packed``)."""
        if self.batching.shared_prefix:
            return shared_prefix_logprobs(policy, rollouts, self.sampling.temperature, packed=self.batching.packed,
                                          **entropy)
        return sequence_logprobs(policy, rollouts, self.sampling.temperature, **entropy)

    def _elides(self) -> bool:
        """Whether zero-advantage completions leave the forward and backward (``elide_zero_advantage``, when exact)."""
        return self.batching.elide_zero_advantage and self.algorithm.entropy_coef == 0 and self.loss.zero_advantage_inert

    def _loss_inputs(self, logp: Tensor, rows: Rows, weights: Tensor) -> LossInputs:
        """The micro-batch ``rows`` (``t`` tokens) as the loss reads it: its advantages, ``weights``, old and
        reference log-probs cut to it, and only the log-probs the loss declares. Without frozen old log-probs (one
        optimizer step per batch) they are ``logp``."""
        t = logp.shape[1]
        old = rows.old_logp[:, :t] if rows.old_logp is not None else logp.detach()
        return LossInputs(
            logp=logp,
            old_logp=old if self.loss.needs_old_logp else None,
            engine_logp=rows.rollouts.logprobs[:, :t] if self.loss.needs_engine_logp else None,
            ref_logp=rows.ref_logp[:, :t] if rows.ref_logp is not None else None,
            advantages=rows.advantages,
            mask=rows.loss_mask[:, :t],
            weights=weights[:, :t],
        )

    def _unretired(self, batch: PromptBatch) -> tuple[PromptBatch, int]:
        """``batch`` without the prompts the curriculum retired, topped up from the refill stream (at most
        ``max_refill_batches`` draws), and how many prompts were drawn and skipped. When every prompt drawn is
        retired the first batch is kept as drawn (a warning says so)."""
        if self.curriculum is None:
            return batch, 0
        want, first, parts, drawn = len(batch), batch, [], 0
        for attempt in range(self.algorithm.max_refill_batches + 1):
            drawn += len(batch)
            parts.append(batch.select(self.curriculum.active(batch.ids)))
            have = sum(len(p) for p in parts)
            if have >= want or attempt == self.algorithm.max_refill_batches:
                break
            batch = self.trainer.datamodule.refill(want - have)
        active = PromptBatch.concat(parts)
        if len(active) == 0 and want > 0:
            logger.warning("every prompt drawn this step is retired by the curriculum; training on the drawn "
                           "prompts. Raise curriculum.retire_above, lower retire_below or add prompts")
            active = first
        self._skipped_prompts += drawn - len(active)
        return active, drawn - len(active)

    @torch.no_grad()
    def _frozen_logprobs(self, policy, rollouts: Rollouts, timer: PhaseTimer, phase: str,
                         rows: Tensor | None = None) -> Tensor:
        """Log-probs ``[N, T]`` of ``rollouts`` (only of ``rows [k]``, 0 elsewhere) under ``policy``, without
        gradient, a micro-batch at a time; with several processes, as many micro-batches as the rank with the
        most (a sharded forward is a collective), the extra ones over another row."""
        out = torch.zeros(rollouts.completion_ids.shape, device=self.device)  # [N, T]
        rows = torch.arange(len(rollouts)) if rows is None else rows.cpu()
        balance = self._most_over_ranks if self._elides() else (lambda count: count)  # else ranks have as many
        parts = forward_parts(rows, self.batching.micro_batch_size, balance)
        with timer(phase):
            for part in parts:
                mb = trimmed(select_rows(rollouts, part))
                out[part.to(out.device), : mb.completion_ids.shape[1]] = self._logprobs(policy, mb)[0]
        return out

    def _reference_logprobs(self, rollouts: Rollouts, timer: PhaseTimer) -> Tensor:
        """Log-probs under the KL reference: the initial policy, or with LoRA the adapter-free base model."""
        if self.ref_policy is not None:
            return self._frozen_logprobs(self.ref_policy, rollouts, timer, "ref_logprob_s")
        with adapters_disabled(self.policy):
            return self._frozen_logprobs(self.policy, rollouts, timer, "ref_logprob_s")

    def _global_counts(self, mask: Tensor) -> dict[str, Tensor | float]:
        """Loss divisors summed over data-parallel ranks, divided by the world size (ranks average grads)."""
        world = self.trainer.world_size
        if world == 1:
            return {}
        tokens = self.trainer.strategy.reduce(mask.sum().float(), reduce_op="sum")
        seqs = self.trainer.strategy.reduce(torch.tensor(float(mask.shape[0]), device=mask.device), reduce_op="sum")
        return {"num_tokens": tokens / world, "num_sequences": seqs / world}

    def _optimizer_step(self, loss: float) -> float:
        """Clip, then step; a non-finite loss or gradient skips the update (parameters without grads)."""
        opt, sched = self.optimizers(), self.lr_schedulers()
        params = [p for p in self.policy.parameters() if p.grad is not None]
        max_norm = self.optim.max_grad_norm if self.optim.max_grad_norm is not None else math.inf
        norm = clip_grad_norm(self.policy, params, max_norm)
        grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # FSDP2: a DTensor
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            if self.guards.on_nonfinite == "raise":
                raise FloatingPointError(
                    f"non-finite loss ({loss}) or gradient norm ({grad_norm}) at step {self.global_step}; "
                    "lower lr, check rewards, or set on_nonfinite: skip")
            self.nonfinite_steps += 1
            self.consecutive_nonfinite += 1
            if self.guards.max_nonfinite_steps is not None and self.consecutive_nonfinite >= self.guards.max_nonfinite_steps:
                raise FloatingPointError(
                    f"the run diverged: {self.consecutive_nonfinite} optimizer steps in a row, up to step "
                    f"{self.global_step + 1}, had a non-finite loss ({loss}) or gradient norm ({grad_norm}). "
                    "Resume from an earlier checkpoint with a lower lr (or max_grad_norm), check the rewards and "
                    "the data; max_nonfinite_steps sets how many skipped steps in a row stop the run")
            opt.zero_grad(set_to_none=True)  # the step below then leaves parameters and optimizer state alone
        else:
            self.consecutive_nonfinite = 0
        opt.step()  # always called, so that trainer.global_step counts skipped steps too
        opt.zero_grad(set_to_none=True)
        sched.step()
        return grad_norm

    def log_step(self, stats: RolloutStats, update: UpdateStats, timer: PhaseTimer) -> dict[str, float]:
        """Log the step's metrics, reduced over ranks (one all-reduce) to the global batch's values; returns them."""
        world, tokens = self.trainer.world_size, float(stats.lengths.sum())
        pairs = {**step_metrics.rollout_pairs(stats, world), **step_metrics.train_pairs(update),
                 **step_metrics.mismatch_pairs(update, tokens),
                 **step_metrics.perf_pairs(timer, tokens, world, update.elided)}
        if stats.rollouts is not None and stats.rollouts.episodes is not None:
            pairs.update(step_metrics.episode_pairs(stats.rollouts.episodes, world, stats.advantages))
        pairs.update({name: (value, 1.0) for name, value in self.engine.metrics().items()})  # means over ranks
        if self.curriculum is not None:
            pairs["rollout/retired_prompts"] = (float(len(self.curriculum.retired)), 1.0)  # the same on every rank
            pairs["rollout/skipped_prompts"] = (float(self._skipped_prompts), 1.0 / world)
        rows = step_metrics.step_pairs(update) if len(update.steps) > 1 else []
        pairs.update({f"{name}@{k}": value for k, row in enumerate(rows) for name, value in row.items()})
        metrics = step_metrics.finish(reduce_ratios(pairs, self.trainer.strategy, world))
        for name in ("completions", "tokens"):  # this step's global counts -> totals since the start
            self.generated[name] += metrics.pop(f"rollout/_{name}_drawn")
            metrics[f"rollout/{name}_generated"] = self.generated[name]
        mins, maxs = step_metrics.extremes(update, per_step=bool(rows))
        if "logp_diff_max" in update.mismatch:
            maxs["rollout/logp_diff_max"] = update.mismatch["logp_diff_max"]
        mins, maxs = extremes_over_ranks(mins, maxs, self.trainer.strategy, world)
        metrics.update({**mins, **maxs})
        self._log_optimizer_steps(metrics, len(update.steps) if rows else 0)
        metrics["train/lr"] = self.optimizers().param_groups[0]["lr"]
        metrics["train/nonfinite_steps"] = float(self.nonfinite_steps)
        skipped = getattr(self.trainer.datamodule, "skipped_rows", None)  # PromptDataModule(skip_bad_rows=True)
        if skipped is not None:
            metrics["data/skipped_rows"] = float(sum(skipped.values()))
        self.log("rollout/reward_mean", metrics["rollout/reward_mean"], prog_bar=True, batch_size=len(stats.batch))
        self.log_dict({k: v for k, v in metrics.items() if k != "rollout/reward_mean"},
                      batch_size=max(len(stats.batch), 1))
        return metrics

    def guard_collapse(self, metrics: dict[str, float]) -> None:
        """Count the steps in a row whose sampled tokens are near-uniform (``rollout/sampled_nll``, the same on
        every rank) and stop the run at ``guards.max_collapsed_steps`` of them."""
        vocab = getattr(getattr(self.policy, "config", None), "vocab_size", None)
        nll = metrics.get("rollout/sampled_nll")
        if self.guards.max_collapsed_steps is None or not vocab or nll is None:
            return
        uniform = math.log(vocab)
        self.consecutive_collapsed = self.consecutive_collapsed + 1 if nll >= COLLAPSED_NLL_FRACTION * uniform else 0
        if self.consecutive_collapsed >= self.guards.max_collapsed_steps:
            raise RuntimeError(
                f"the run collapsed: for {self.consecutive_collapsed} steps in a row, up to step {self.global_step}, "
                f"the policy sampled near-uniform tokens ({nll:.2f} nats per token against {uniform:.2f} for a "
                f"uniform choice among {vocab}; reward mean {metrics.get('rollout/reward_mean', float('nan')):.3f}, "
                f"gradient norm {metrics.get('train/grad_norm', float('nan')):.3g}), so its weights have diverged "
                "while staying finite. Resume from an earlier checkpoint with a lower optim.lr or optim.max_grad_norm; "
                "guards.max_collapsed_steps sets how many such steps stop the run (null: never, for a model trained "
                "from scratch)")

    def _log_optimizer_steps(self, metrics: dict[str, float], steps: int) -> None:
        """Move the ``optim/<name>@<k>`` entries of ``metrics`` to the loggers, one row per optimizer step ``k`` of
        the rollout batch at that optimizer step's number (Lightning's own rows count training steps)."""
        rows: list[dict[str, float]] = [{} for _ in range(steps)]
        for key in [k for k in metrics if k.startswith("optim/")]:
            name, _, k = key.rpartition("@")
            rows[int(k)][name] = metrics.pop(key)
        for k, row in enumerate(rows):
            for log in self.loggers:
                log.log_metrics(row, step=self.global_step - steps + k + 1)

    # ---- checkpoints: Lightning saves weights, optimizer, scheduler, data position; this module the rest ----
    def fingerprint(self) -> dict[str, Any]:
        """The settings a checkpoint's state depends on: the model (a local directory by its resolved path, so
        ``./m``, ``m/`` and ``/abs/m`` are the same model), group size, estimator, aggregation, LoRA, and the
        parameters' dtype (resumed in another dtype, weights and optimizer moments would be silently rounded
        or widened). Logging, time limits and the loss settings are not in it (they may change on resume);
        the data position's meaning is the DataModule's to check."""
        return {"model": model_identity(self.model_name), "group_size": self.group_size,
                "estimator": repr(self.estimator), "aggregation": self.algorithm.aggregation,
                "lora": asdict(self.lora) if self.lora is not None else None, "dtype": self.dtype_name}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """The fingerprint, counters, rollout seed and every rank's random states (gathered on every rank); the
        curriculum's state (the same on every rank) beside them."""
        checkpoint["lit_grpo"] = {"fingerprint": self.fingerprint(), "nonfinite_steps": self.nonfinite_steps,
                                  "rollout_seed": self.rollout_seed, "generated": dict(self.generated),
                                  "rng": gather_objects(rng_states())}
        if self.curriculum is not None:
            checkpoint["lit_grpo_curriculum"] = self.curriculum.state_dict()
        if engine := self.engine.state_dict():
            checkpoint["lit_grpo_engine"] = gather_objects(engine)  # every rank's batches in flight

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Raise when the checkpoint was written with other settings, naming them all (the data position's too:
        Lightning restores the module before the DataModule); then restore what was saved."""
        state = checkpoint.get("lit_grpo", {})
        data = self.trainer.datamodule if self._trainer is not None else None
        saved_data = checkpoint.get(type(data).__qualname__)
        data_differ = data.position_differences(saved_data) if saved_data and hasattr(data, "position_differences") \
            else []
        if "fingerprint" in state:
            check_fingerprint(state["fingerprint"], self.fingerprint(), also=data_differ)
        self.nonfinite_steps = state.get("nonfinite_steps", 0)
        self.rollout_seed = state.get("rollout_seed", self.rollout_seed)
        self.generated = {**self.generated, **state.get("generated", {})}
        rng = state.get("rng") or []
        if rng:
            set_rng_states(rng[self.global_rank] if self.global_rank < len(rng) else rng[0])
        if self.curriculum is not None and "lit_grpo_curriculum" in checkpoint:
            self.curriculum.load_state_dict(checkpoint["lit_grpo_curriculum"])
        if engine := checkpoint.get("lit_grpo_engine"):
            self.engine.load_state_dict(engine[self.global_rank] if self.global_rank < len(engine) else engine[0])


def _take_groups(batch: PromptBatch, rollouts: Rollouts, rewards: Tensor, out: RewardOutput, groups: list[int]):
    rows = group_rows(groups, rollouts.group_size)
    out = RewardOutput(out.scores[rows], {k: v[rows] for k, v in out.terms.items()}, out.counters)
    return batch.select(groups), select_groups(rollouts, groups), rewards[groups], out


def _merge(parts, pad_token_id: int):
    batches, rollouts, rewards, outs = zip(*parts, strict=True)
    counters: dict[str, int] = {}
    for o in outs:
        for k, v in o.counters.items():
            counters[k] = counters.get(k, 0) + v
    terms = {k: torch.cat([o.terms[k] for o in outs]) for k in outs[0].terms}
    out = RewardOutput(torch.cat([o.scores for o in outs]), terms, counters)
    return PromptBatch.concat(list(batches)), concat_rollouts(list(rollouts), pad_token_id), torch.cat(rewards), out


def announce_staleness(loss: PolicyLoss, max_staleness: int, choice: str) -> None:
    """Gives ``loss`` the correction rollouts ``max_staleness`` versions old need (:func:`correct_staleness`) and
    says what the update does: a warning where stale rollouts go uncorrected."""
    line = correct_staleness(loss, max_staleness, choice)
    if line is not None:
        uncorrected = choice == "none" and getattr(loss, "correction", None) is None
        (rank_zero_warn if uncorrected else rank_zero_info)(line)
