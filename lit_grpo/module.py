"""GRPOModule, the recipe: draw -> generate -> score -> advantage -> update -> log, a rollout batch a step."""

from __future__ import annotations

import math
from dataclasses import asdict
from itertools import product
from typing import Any, ClassVar

import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor

from lit_grpo.batching import Ranks, Rows, forward_parts, micro_batches, mini_batches, trimmed
from lit_grpo.checkpoint import gather_objects, model_identity, of_rank, restore_run_state, run_state
from lit_grpo.checks import require
from lit_grpo.data.curriculum import PromptCurriculum
from lit_grpo.data.groups import GroupDraw, Groups
from lit_grpo.estimators import GRPO, AdvantageEstimator
from lit_grpo.logprobs import logp_mismatch, sequence_logprobs, shared_prefix_logprobs
from lit_grpo.lora import LoraSettings, adapters_disabled
from lit_grpo.losses import PolicyLoss, PPOClip, token_weights
from lit_grpo.losses.correction import correct_staleness
from lit_grpo.losses.functional import ratio_statistics
from lit_grpo.models.loading import DType, load_policy
from lit_grpo.parallel import check_layout, clip_grad_norm, seed_step
from lit_grpo.perf import PhaseTimer
from lit_grpo.policy import PolicyModule
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.shaping import RewardShaping
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.functional import select_rows
from lit_grpo.settings import Algorithm, Batching, GuardCounts, Guards, Optim, Sampling
from lit_grpo.step_metrics import GRPO_METRICS, StepStats, UpdateStats, step_values
from lit_grpo.types import PromptBatch, Rollouts


class GRPOModule(PolicyModule):
    """GRPO-family policy optimisation from verifiable rewards, a LightningModule: ``Trainer.fit`` it with a
    :class:`~lit_grpo.data.PromptDataModule`, or run ``lit-grpo fit --config <yaml>``.

    A training step draws ``P`` prompts, samples ``group_size`` completions of each, scores them, turns the
    rewards into advantages and takes ``steps_per_generation * num_iterations`` optimizer steps; it logs
    :attr:`metrics`. The step in order, and why: docs/design.md, "GRPOModule: one training step".

    Args:
        model: Hub id or local directory of the initial policy. reward: The reward function.
        estimator, engine, loss: Advantage estimator (default ``GRPO()``), rollout engine (Hugging Face
            ``generate``), policy loss (``PPOClip()``); short names work: ``--model.estimator=Sign``.
        shaping, curriculum: Reward shaping by length; retiring prompts by pass rate (null: off).
        group_size: Completions per prompt (G). dtype, lora: Parameter dtype; LoRA adapters (peft).
        sampling, optim, algorithm, batching, guards: The settings groups (:mod:`lit_grpo.settings`).
    """

    metrics: ClassVar[tuple[str, ...]] = GRPO_METRICS

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
                         batching=batching, guards=guards)
        self.estimator = estimator if estimator is not None else GRPO()
        self.loss = loss if loss is not None else PPOClip()
        announce_staleness(self.loss, *self.engine.staleness())  # asynchronous rollouts: a correction
        require(group_size >= max(1, self.estimator.min_group_size),
                f"group_size={group_size} is too small for {type(self.estimator).__name__}, which needs at "
                f"least {self.estimator.min_group_size}; raise group_size")
        if shaping is not None:
            shaping.check(self.engine.max_sampled_tokens(sampling.max_new_tokens))
        self.shaping, self.curriculum, self.group_size = shaping, curriculum, group_size
        self.algorithm = algorithm
        self.draw_groups = GroupDraw(curriculum, group_size, self.sampling, algorithm.filter_degenerate,
                                     algorithm.max_refill_batches)
        self.counts = GuardCounts(guards)  # non-finite and collapsed steps; saved in checkpoints
        self.ref_policy = None
        self.rollout_seed: int | None = None  # base of the per-step seeds; saved in checkpoints
        self.generated = {"completions": 0.0, "tokens": 0.0}  # since the run started, all ranks; checkpointed
        self.automatic_optimization = False

    def setup(self, stage: str) -> None:
        super().setup(stage)
        data = getattr(self.trainer, "datamodule", None)
        if stage == "fit" and hasattr(data, "prompts_per_step"):
            train, steps = getattr(data, "splits", {}).get("train"), self.algorithm.steps_per_generation
            size = None if train is None else len(train)
            check_layout(self.trainer.world_size, data.prompts_per_step, size)
            require(data.prompts_per_step % steps == 0,
                    f"prompts_per_step={data.prompts_per_step} is not a multiple of steps_per_generation="
                    f"{steps}: each optimizer step trains on an equal share of the rollout batch's prompts; "
                    "set data.prompts_per_step to a multiple of it")

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
    def training_step(self, batch: PromptBatch, batch_idx: int) -> dict | None:
        timer = PhaseTimer()
        groups = self.draw(batch, timer)  # P prompts, their completions [N, T] generated and scored [P, G]
        if groups is None:  # an asynchronous engine's pipeline is still filling: nothing to train on yet
            return None
        lengths = groups.rollouts.lengths.view(groups.rewards.shape)  # [P, G] generated tokens
        shaped, shaping_terms = self.shape(groups.rewards, lengths)  # [P, G]: the rewards the estimator sees
        advantages = self.estimator(shaped, lengths=lengths)  # [P, G]
        update = self.update(groups.rollouts, advantages.reshape(-1), timer)  # the optimizer steps
        self.draw_groups.observe(groups.batch, groups.rewards, gather_objects)  # the curriculum's pass rates
        with timer("weight_sync_s"):
            self.engine.sync_weights(self.policy)
        stats = groups.stats(advantages, shaping_terms)
        metrics = self.log_step(stats, update, timer)
        vocab = getattr(getattr(self.policy, "config", None), "vocab_size", None)
        self.counts.collapse(metrics, vocab, self.global_step)  # finite divergence: near-uniform sampling
        return {"loss": torch.tensor(update.loss), "rollout": stats}

    def draw(self, batch: PromptBatch, timer: PhaseTimer) -> Groups | None:
        """The step's groups (:class:`~lit_grpo.data.groups.GroupDraw`): ``batch`` less retired prompts,
        refilled from the DataModule, generated and scored; None while an asynchronous pipeline fills."""
        score, refill = (lambda b, r: self.score(b, r, training=True)), self.trainer.datamodule.refill
        groups = self.draw_groups(batch, self.engine, score, refill, self._ranks.fewest,
                                  self.tokenizer.pad_token_id, timer)
        if groups is not None:
            groups.rollouts = groups.rollouts.to(self.device)
        return groups

    def shape(self, rewards: Tensor, lengths: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """The rewards ``[P, G]`` after the ``shaping`` component, and its terms ``[N]`` (reward/<term>)."""
        if self.shaping is None:
            return rewards, {}
        longest = self.engine.max_sampled_tokens(self.sampling.max_new_tokens)  # an episode's: all its turns
        shaped = self.shaping(rewards, lengths, longest)
        return shaped.rewards, {name: term.reshape(-1) for name, term in shaped.terms.items()}

    def update(self, rollouts: Rollouts, advantages: Tensor, timer: PhaseTimer) -> UpdateStats:
        """``steps_per_generation * num_iterations`` optimizer steps on the loss (fewer when ``max_steps``
        comes first): the frozen log-probs the loss reads, then each optimizer step on its mini-batch."""
        adv, batching, algorithm = advantages.to(self.device), self.batching, self.algorithm  # adv: [N]
        minis = mini_batches(rollouts, algorithm.steps_per_generation, batching.micro_batch_size,
                             batching.shared_prefix)
        plans = [micro_batches(adv[rows.to(adv.device)], batching.micro_batch_size, self._elides(),
                               self._ranks.most) for rows in minis]  # positions in each
        trained = torch.zeros(len(rollouts), dtype=torch.bool)  # [N] the rows that go through the policy
        for rows, part in ((rows, part) for rows, micro in zip(minis, plans, strict=True) for part in micro):
            trained[rows[part]] = True
        old_logp = None  # [N, T], 0 on the rows never trained
        if algorithm.optimizer_steps > 1 and self.loss.needs_old_logp:
            rows = trained.nonzero()[:, 0]
            old_logp = self._frozen_logprobs(self.policy, rollouts, timer, "old_logprob_s", rows)
        ref_logp = self._reference_logprobs(rollouts, timer) if self.loss.needs_ref_logp else None  # [N, T]
        loss_mask = rollouts.sampled_mask  # [N, T] the policy's own tokens (not an episode's observations)
        if algorithm.drop_truncated:
            loss_mask = loss_mask & ~rollouts.truncated[:, None]
        whole = Rows(rollouts, loss_mask, adv, old_logp, ref_logp)
        before = old_logp  # [N, T] the log-probs before the update
        if before is None:
            before = torch.zeros(rollouts.completion_ids.shape, device=self.device)
        stats = UpdateStats(elided=(float((~trained).sum()), float(len(rollouts))))
        passes = product(range(algorithm.num_iterations), zip(minis, plans, strict=True))
        for iteration, (rows, micro) in passes:
            if 0 <= self.trainer.max_steps <= self.global_step:
                break
            first_pass = stats if iteration == 0 else None
            stats.steps.append(self._step(whole.select(rows), rows, micro, timer, first_pass,
                                          before if old_logp is None else None))
        if len(rollouts):  # the engine's log-probs against the trainer's before the update, on the rows run
            seen = rollouts.sampled_mask & trained.to(self.device)[:, None]  # [N, T]
            stats.mismatch = {k: v.item() for k, v in logp_mismatch(before, rollouts.logprobs, seen).items()}
        return stats

    def log_step(self, stats: Any, update: UpdateStats, timer: PhaseTimer) -> dict[str, float]:
        """Log the step's metrics (:func:`~lit_grpo.step_metrics.step_values`: global over ranks), each
        optimizer step's ``optim/<name>`` at that step's number; returns the metrics."""
        world = self.trainer.world_size
        extra = {**{name: (value, 1.0) for name, value in self.engine.metrics().items()},  # means over ranks
                 **self.draw_groups.pairs(world)}
        metrics, rows = step_values(stats, update, timer, extra, self.trainer.strategy, world, self.generated)
        for k, row in enumerate(rows):  # Lightning's own rows count training steps
            for log in self.loggers:
                log.log_metrics(row, step=self.global_step - len(rows) + k + 1)
        metrics["train/lr"] = self.optimizers().param_groups[0]["lr"]
        metrics["train/nonfinite_steps"] = float(self.counts.nonfinite_steps)
        skipped = getattr(self.trainer.datamodule, "skipped_rows", None)  # with skip_bad_rows
        if skipped is not None:
            metrics["data/skipped_rows"] = float(sum(skipped.values()))
        size = len(stats.batch)
        self.log("rollout/reward_mean", metrics["rollout/reward_mean"], prog_bar=True, batch_size=size)
        rest = {k: v for k, v in metrics.items() if k != "rollout/reward_mean"}
        self.log_dict(rest, batch_size=max(size, 1))
        return metrics

    # ---- one optimizer step, and the forwards it reads ------------------------------------------------
    def _step(self, rows: Rows, index: Tensor, micro: list[Tensor], timer: PhaseTimer,
              first_pass: UpdateStats | None, before: Tensor | None) -> StepStats:
        """One optimizer step on ``rows`` (a mini-batch, rows ``index [n]`` of the batch): token weights over
        all its tokens, then per micro-batch (``micro``: positions in ``rows``) the log-prob forward, the loss
        and its backward. ``first_pass``: where the entropy goes on the first pass over the batch; ``before``:
        where the log-probs go when nothing was frozen (one optimizer step per batch)."""
        mask, coef = rows.loss_mask, self.algorithm.entropy_coef
        longest = self.engine.max_sampled_tokens(self.sampling.max_new_tokens)  # an episode's: all its turns
        counts = self._ranks.global_counts(mask)  # the elided rows counted too
        weights = token_weights(mask, self.algorithm.aggregation, longest, **counts)  # [n, T]
        step = StepStats()
        for part in micro:
            mb = rows.select(part)
            with timer("forward_s"):
                logp, entropy = self._logprobs(self.policy, mb.rollouts, entropy_grad=coef > 0,
                                               with_entropy=first_pass is not None or coef > 0)  # [n, t]
                batch = mb.loss_inputs(logp, weights[part.to(weights.device)], self.loss)
                out = self.loss(batch)
                loss = (out.loss * batch.weights).sum()
                if coef > 0:  # a bonus: every token carries gradient, whatever its advantage
                    loss = loss - coef * (entropy * batch.weights).sum()
            with timer("backward_s"):
                self.manual_backward(loss)
            if self.loss.needs_old_logp:
                ratios = ratio_statistics(batch.logp, batch.old_logp, batch.mask)
                out.means.update(ratio_mean=ratios["ratio"], policy_kl=ratios["policy_kl"])
                step.add_extremes({"ratio_min": ratios["ratio_min"].item()},
                                  {"ratio_max": ratios["ratio_max"].item()})
            step.add(loss, out, batch)
            if first_pass is not None:
                first_pass.add_entropy(entropy, batch.mask)
            if before is not None:
                before[index[part], : logp.shape[1]] = logp.detach()
        with timer("optimizer_s"):
            step.grad_norm = self._optimizer_step(step.loss)
        return step

    def _optimizer_step(self, loss: float) -> float:
        """Clip, then step; a non-finite loss or gradient skips the update (``guards``)."""
        opt, sched = self.optimizers(), self.lr_schedulers()
        params = [p for p in self.policy.parameters() if p.grad is not None]
        max_norm = self.optim.max_grad_norm if self.optim.max_grad_norm is not None else math.inf
        norm = clip_grad_norm(self.policy, params, max_norm)
        grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # FSDP2: a DTensor
        if not self.counts.finite(loss, grad_norm, self.global_step):
            opt.zero_grad(set_to_none=True)  # the step below then leaves parameters and optimizer state alone
        opt.step()  # always called, so that trainer.global_step counts skipped steps too
        opt.zero_grad(set_to_none=True)
        sched.step()
        return grad_norm

    @property
    def _ranks(self) -> Ranks:
        return Ranks(self.trainer.strategy, self.trainer.world_size)

    def _elides(self) -> bool:
        """Whether zero-advantage completions leave the forward and backward (``elide_zero_advantage``)."""
        return (self.batching.elide_zero_advantage and self.algorithm.entropy_coef == 0
                and self.loss.zero_advantage_inert)

    def _logprobs(self, policy, rollouts: Rollouts, **entropy) -> tuple[Tensor, Tensor | None]:
        """Log-probs ``[n, t]`` of ``rollouts`` under ``policy`` at the sampling temperature (and the entropy
        when asked: ``with_entropy``, ``entropy_grad``), each prompt encoded once with ``shared_prefix``."""
        temperature, batching = self.sampling.temperature, self.batching
        if batching.shared_prefix:
            return shared_prefix_logprobs(policy, rollouts, temperature, packed=batching.packed, **entropy)
        return sequence_logprobs(policy, rollouts, temperature, **entropy)

    @torch.no_grad()
    def _frozen_logprobs(self, policy, rollouts: Rollouts, timer: PhaseTimer, phase: str,
                         rows: Tensor | None = None) -> Tensor:
        """Log-probs ``[N, T]`` of ``rollouts`` (only of ``rows [k]``, 0 elsewhere) under ``policy``, without
        gradient, a micro-batch at a time; with several processes, as many micro-batches as the rank with the
        most (a sharded forward is a collective), the extra ones over another row."""
        out = torch.zeros(rollouts.completion_ids.shape, device=self.device)  # [N, T]
        rows = torch.arange(len(rollouts)) if rows is None else rows.cpu()
        balance = self._ranks.most if self._elides() else (lambda count: count)  # else ranks have as many
        with timer(phase):
            for part in forward_parts(rows, self.batching.micro_batch_size, balance):
                mb = trimmed(select_rows(rollouts, part))
                out[part.to(out.device), : mb.completion_ids.shape[1]] = self._logprobs(policy, mb)[0]
        return out

    def _reference_logprobs(self, rollouts: Rollouts, timer: PhaseTimer) -> Tensor:
        """Log-probs under the KL reference: the initial policy, or with LoRA the adapter-free base model."""
        if self.ref_policy is not None:
            return self._frozen_logprobs(self.ref_policy, rollouts, timer, "ref_logprob_s")
        with adapters_disabled(self.policy):
            return self._frozen_logprobs(self.policy, rollouts, timer, "ref_logprob_s")

    # ---- checkpoints: Lightning saves weights, optimizer, scheduler, data position; the module the rest ----
    def fingerprint(self) -> dict[str, Any]:
        """The settings a checkpoint's state depends on (docs/design.md, "GRPOModule: one training step"), and
        what the training prompts are, where the DataModule says (``PromptDataModule.train_content``)."""
        data = getattr(self.trainer.datamodule, "train_content", None) if self._trainer is not None else None
        return {"model": model_identity(self.model_name), "group_size": self.group_size,
                "estimator": repr(self.estimator), "aggregation": self.algorithm.aggregation,
                "lora": asdict(self.lora) if self.lora is not None else None, "dtype": self.dtype_name,
                **({"train_data": data} if data is not None else {})}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """The fingerprint, counters, rollout seed and every rank's random states; the curriculum's state (the
        same on every rank) and every rank's batches in flight beside them."""
        checkpoint["lit_grpo"] = run_state(self.fingerprint(), {
            "nonfinite_steps": self.counts.nonfinite_steps, "rollout_seed": self.rollout_seed,
            "generated": dict(self.generated)})
        if self.curriculum is not None:
            checkpoint["lit_grpo_curriculum"] = self.curriculum.state_dict()
        if engine := self.engine.state_dict():
            checkpoint["lit_grpo_engine"] = gather_objects(engine)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Raise when the checkpoint was written with other settings, naming them all (the data position's
        too); then restore what was saved."""
        data = self.trainer.datamodule if self._trainer is not None else None
        counters = restore_run_state(checkpoint.get("lit_grpo", {}), self.fingerprint(), data,
                                     checkpoint.get(type(data).__qualname__), self.global_rank)
        self.counts.nonfinite_steps = counters.get("nonfinite_steps", 0)
        self.rollout_seed = counters.get("rollout_seed", self.rollout_seed)
        self.generated = {**self.generated, **counters.get("generated", {})}
        if self.curriculum is not None and "lit_grpo_curriculum" in checkpoint:
            self.curriculum.load_state_dict(checkpoint["lit_grpo_curriculum"])
        if engine := checkpoint.get("lit_grpo_engine"):
            self.engine.load_state_dict(of_rank(engine, self.global_rank))


def announce_staleness(loss: PolicyLoss, max_staleness: int, choice: str) -> None:
    """Gives ``loss`` the correction rollouts ``max_staleness`` versions old need (:func:`correct_staleness`)
    and says what the update does: a warning where stale rollouts go uncorrected."""
    line = correct_staleness(loss, max_staleness, choice)
    if line is not None:
        uncorrected = choice == "none" and getattr(loss, "correction", None) is None
        (rank_zero_warn if uncorrected else rank_zero_info)(line)
