"""GRPOModule: rollout -> reward -> advantage -> clipped policy loss, one optimizer step per pass."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from lit_grpo import step_metrics
from lit_grpo.checkpoint import load_module_state, save_module_state, seed_step
from lit_grpo.diagnostics.degeneracy import degenerate_groups
from lit_grpo.estimators import GRPO, AdvantageEstimator
from lit_grpo.lora import LoraSettings, adapters_disabled
from lit_grpo.loss import (
    Aggregation,
    KLEstimator,
    clipped_policy_loss,
    kl_penalty,
    masked_mean,
    token_weights,
)
from lit_grpo.parallel import (
    check_layout,
    clip_grad_norm,
    max_over_ranks,
    min_over_ranks,
    reduce_ratios,
)
from lit_grpo.perf import PhaseTimer
from lit_grpo.policy import DType, PolicyModule, load_policy, sequence_logprobs
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.scoring import DEFAULT_REWARD_TIMEOUT_S
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.functional import concat_rollouts, group_rows, select_groups, select_rows, slice_rows
from lit_grpo.rollout.mismatch import TISLevel, logp_mismatch, truncated_is_weights
from lit_grpo.types import PromptBatch, RewardOutput, Rollouts, RolloutStats


class GRPOModule(PolicyModule):
    """GRPO-family policy optimisation from verifiable rewards.

    Each training step draws ``P`` prompts from the DataModule, samples ``group_size`` completions per
    prompt, scores them, turns the rewards ``[P, G]`` into advantages with the estimator and takes
    ``num_iterations`` optimizer steps on the clipped policy loss (micro-batched, gradients accumulated).
    ``trainer.max_steps`` counts optimizer steps. With several processes (DDP, or FSDP2 through
    ``ModelParallelStrategy``) each rank draws its own ``P`` prompts and the loss divisors are summed over
    ranks, so the update is the one-process update of the global batch; metrics are global too.
    Randomness is reseeded from ``(seed, step, rank)`` before every step, so a resumed run is exact.

    Logged every step: ``train/loss``, ``train/clip_frac``, ``train/entropy``, ``train/grad_norm``,
    ``train/lr``, ``train/kl`` (when ``beta > 0``), ``train/nonfinite_steps``; ``rollout/reward_mean``,
    ``rollout/reward_std``, ``rollout/len_mean``, ``rollout/truncated_frac``, ``rollout/unscorable_frac``,
    ``rollout/prompts_drawn``; ``reward/<term>`` and ``reward/<counter>``; ``data/skipped_rows`` (bad rows the
    DataModule skipped so far under ``skip_bad_rows``, every split; this process's count); ``perf/<phase>_s``,
    ``perf/step_s`` and ``perf/tokens_per_s`` (counts and throughput summed over ranks, times averaged);
    ``rollout/logp_diff_mean``, ``rollout/logp_diff_max`` and ``rollout/logp_kl_k3``: how far the engine's
    sampling log-probs are from the trainer's on the sampled tokens, before the update (METHODS section 2).

    Args:
        model: Hugging Face hub id or local directory of the initial policy.
        reward: Reward function.
        estimator: Advantage estimator (default ``GRPO()``); short names work: ``--model.estimator=Sign``.
        engine: Rollout engine (default ``HFGenerateEngine()``).
        group_size: Completions per prompt (G).
        aggregation: How token losses become the batch loss (see METHODS: section 2).
        eps_low: Lower clip range of the ratio.
        eps_high: Upper clip range of the ratio (0.28 = "clip-higher").
        dual_clip: Dual-clip bound c for negative advantages (null = off).
        beta: KL coefficient to the initial policy (0 = no reference model is loaded; with LoRA the
            reference is the base model with the adapters disabled, never a second copy).
        kl_estimator: KL estimator used when ``beta > 0``.
        num_iterations: Optimizer steps per rollout batch (mu). Old log-probs are computed once per batch
            when ``> 1``; with 1 the update is on-policy and the ratio is exactly 1.
        micro_batch_size: Completions per forward/backward (null = the whole batch); gradients accumulate.
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        betas: AdamW betas.
        warmup_steps: Linear learning-rate warm-up in optimizer steps.
        max_grad_norm: Gradient clipping by global norm (null = off; the norm is logged either way).
        filter_degenerate: Dynamic sampling: drop groups whose rewards are all equal and draw further
            prompts (``DataModule.refill``) until ``P`` groups are kept or ``max_refill_batches`` is reached.
        max_refill_batches: Most refill draws per step when ``filter_degenerate``.
        on_nonfinite: What a non-finite loss or gradient norm does: ``skip`` the step (counted in
            ``train/nonfinite_steps``) or ``raise``.
        max_nonfinite_steps: With ``skip``, this many consecutive skipped optimizer steps stop the run with
            an error (the run has diverged; the last checkpoint is kept); null: never stop.
        lora: Train LoRA adapters (peft: rank, alpha, dropout, target modules) instead of all weights.
        gradient_checkpointing: Recompute block activations in the backward pass to save memory.
        tis: Truncated importance sampling against the engine's sampling log-probs: ``off``, ``token``
            (each token weighted by ``min(exp(logp_train - logp_engine), tis_cap)``) or ``sequence`` (every
            token by its completion's capped product). Corrects for an engine (vLLM) whose numerics differ
            from the trainer's.
        tis_cap: The truncation C of the importance weights.
        reward_timeout_s: Wall-clock limit of one reward call (all completions of a step), in seconds; a
            call past it scores NaN, counted in ``reward/timeouts``, and the run goes on (null: no limit).
    """

    def __init__(
        self,
        model: str,
        reward: RewardFunction,
        estimator: AdvantageEstimator | None = None,
        engine: RolloutEngine | None = None,
        group_size: int = 8,
        aggregation: Aggregation = "token-mean",
        eps_low: float = 0.2,
        eps_high: float = 0.2,
        dual_clip: float | None = None,
        beta: float = 0.0,
        kl_estimator: KLEstimator = "k3",
        num_iterations: int = 1,
        micro_batch_size: int | None = None,
        lr: float = 1e-5,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        warmup_steps: int = 0,
        max_grad_norm: float | None = 1.0,
        filter_degenerate: bool = False,
        max_refill_batches: int = 4,
        on_nonfinite: Literal["skip", "raise"] = "skip",
        max_nonfinite_steps: int | None = 10,
        dtype: DType = "float32",
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        max_new_tokens: int = 64,
        val_samples: int = 1,
        lora: LoraSettings | None = None,
        gradient_checkpointing: bool = False,
        tis: Literal["off"] | TISLevel = "off",
        tis_cap: float = 2.0,
        reward_timeout_s: float | None = DEFAULT_REWARD_TIMEOUT_S,
    ) -> None:
        super().__init__(model, reward, engine, dtype, False, temperature, top_p, top_k, max_new_tokens, val_samples,
                         lora=lora, gradient_checkpointing=gradient_checkpointing, reward_timeout_s=reward_timeout_s)
        self.estimator = estimator if estimator is not None else GRPO()
        _check(group_size >= max(1, self.estimator.min_group_size),
               f"group_size={group_size} is too small for {type(self.estimator).__name__}, which needs at least "
               f"{self.estimator.min_group_size}; raise group_size")
        _check(0 <= eps_low < 1 and eps_high >= 0, f"eps_low={eps_low}, eps_high={eps_high}: need 0 <= eps_low < 1 "
               "and eps_high >= 0")
        _check(dual_clip is None or dual_clip > 1, f"dual_clip={dual_clip} must be > 1 (typically 3) or null")
        _check(beta >= 0, f"beta={beta} must be >= 0")
        _check(num_iterations >= 1, f"num_iterations={num_iterations} must be >= 1")
        _check(micro_batch_size is None or micro_batch_size >= 1, f"micro_batch_size={micro_batch_size} must be >= 1")
        _check(lr > 0, f"lr={lr} must be > 0")
        _check(max_refill_batches >= 0, f"max_refill_batches={max_refill_batches} must be >= 0")
        _check(tis in ("off", "token", "sequence"), f"tis={tis!r} is not known; choose off, token or sequence")
        _check(max_nonfinite_steps is None or max_nonfinite_steps >= 1,
               f"max_nonfinite_steps={max_nonfinite_steps} must be >= 1, or null to never stop")
        _check(tis_cap > 0, f"tis_cap={tis_cap} must be > 0 (2 is the usual choice)")
        self.group_size, self.aggregation = group_size, aggregation
        self.eps_low, self.eps_high, self.dual_clip = eps_low, eps_high, dual_clip
        self.beta, self.kl_estimator = beta, kl_estimator
        self.num_iterations, self.micro_batch_size = num_iterations, micro_batch_size
        self.lr, self.weight_decay, self.betas, self.warmup_steps = lr, weight_decay, tuple(betas), warmup_steps
        self.max_grad_norm = max_grad_norm
        self.filter_degenerate, self.max_refill_batches = filter_degenerate, max_refill_batches
        self.on_nonfinite, self.max_nonfinite_steps = on_nonfinite, max_nonfinite_steps
        self.consecutive_nonfinite = 0  # skipped optimizer steps in a row
        self.tis, self.tis_cap = tis, tis_cap
        self.ref_policy = None
        self.nonfinite_steps = 0
        self.rollout_seed: int | None = None  # base of the per-step seeds; saved in checkpoints
        self.automatic_optimization = False

    def setup(self, stage: str) -> None:
        data = getattr(self.trainer, "datamodule", None)
        if stage == "fit" and hasattr(data, "prompts_per_step"):
            train = getattr(data, "splits", {}).get("train")
            check_layout(self.trainer.world_size, data.prompts_per_step, None if train is None else len(train))

    def configure_model(self) -> None:
        super().configure_model()
        if self.beta > 0 and self.lora is None and self.ref_policy is None:
            self.ref_policy = load_policy(self.model_name, self.dtype_name).eval().requires_grad_(False)
        if self.ref_policy is not None:
            self.ref_policy = self._shard(self.ref_policy)

    def configure_optimizers(self):
        params = [p for p in self.policy.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=self.lr, betas=self.betas, weight_decay=self.weight_decay,
                                fused=_fused_adamw_ok(params))
        warmup = max(self.warmup_steps, 1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_train_batch_start(self, batch: PromptBatch, batch_idx: int) -> None:
        if self.rollout_seed is None:
            self.rollout_seed = torch.initial_seed()
        seed_step(self.rollout_seed, self.global_step, self.global_rank)

    # ---- the algorithm -----------------------------------------------------------------------------
    def training_step(self, batch: PromptBatch, batch_idx: int) -> dict:
        timer = PhaseTimer()
        batch, rollouts, rewards, reward_out, drawn = self.collect(batch, timer)  # [P], [N, T], [P, G]
        advantages = self.estimator(rewards)  # [P, G]
        losses = self.update(rollouts, advantages.reshape(-1), timer)  # num_iterations optimizer steps
        with timer("weight_sync_s"):
            self.engine.sync_weights(self.policy)
        stats = RolloutStats(batch, rollouts.texts, rewards.cpu(), advantages.cpu(), rollouts.lengths.cpu(),
                             rollouts.truncated.cpu(), {k: v.cpu() for k, v in reward_out.terms.items()},
                             reward_out.counters, drawn, rollouts)
        self.log_step(stats, losses, timer)
        return {"loss": torch.tensor(losses["loss"]), "rollout": stats}

    def collect(self, batch: PromptBatch, timer: PhaseTimer):
        """Generate and score groups; with ``filter_degenerate``, refill until ``P`` groups vary (on every
        rank: each keeps as many groups as the rank with the fewest, so the ranks stay in step)."""
        want, drawn, parts = len(batch), 0, []
        while True:
            with timer("generate_s"):
                rollouts = self.engine.generate(batch.prompts, self.group_size, self.sampling)
            with timer("score_s"):
                rewards, out = self.score(batch, rollouts)
            drawn += len(batch)
            if self.filter_degenerate:
                keep = (~degenerate_groups(rewards)["degenerate"]).nonzero().flatten().tolist()
                batch, rollouts, rewards, out = _take_groups(batch, rollouts, rewards, out, keep)
            parts.append((batch, rollouts, rewards, out))
            have = sum(len(p[0]) for p in parts)
            if self.filter_degenerate:
                have = min_over_ranks(have, self.trainer.strategy, self.trainer.world_size)
            if not self.filter_degenerate or have >= want or len(parts) > self.max_refill_batches:
                break
            batch = self.trainer.datamodule.refill(want - have)
        batch, rollouts, rewards, out = _merge(parts, self.tokenizer.pad_token_id)
        if len(batch) > min(want, have):
            batch, rollouts, rewards, out = _take_groups(batch, rollouts, rewards, out, list(range(min(want, have))))
        return batch, rollouts.to(self.device), rewards, out, drawn

    def update(self, rollouts: Rollouts, advantages: Tensor, timer: PhaseTimer) -> dict[str, float]:
        """``num_iterations`` optimizer steps on the clipped loss over micro-batches of ``rollouts``."""
        n = len(rollouts)
        if n == 0:  # every group was filtered out: count the steps, change nothing
            for _ in range(self.num_iterations):
                stats = self._optimizer_step(0.0)
            return {"loss": 0.0, **stats}
        step = self.micro_batch_size or n
        if step < n:  # micro-batches of similar lengths pad less; the sums, so the update, stay the same
            rollouts, advantages = _by_length(rollouts, advantages)
        adv = advantages.to(self.device)  # [N]
        weights = token_weights(rollouts.completion_mask, self.aggregation, self.sampling.max_new_tokens,
                                **self._global_counts(rollouts.completion_mask))  # [N, T]
        old_logp = self._frozen_logprobs(self.policy, rollouts, timer, "old_logprob_s") \
            if self.num_iterations > 1 else None
        ref_logp = self._reference_logprobs(rollouts, timer) if self.beta > 0 else None
        train_logp = torch.zeros(rollouts.completion_ids.shape, device=self.device)  # [N, T], before the update
        totals: dict[str, float] = {}
        for iteration in range(self.num_iterations):
            acc = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "entropy": 0.0}
            for start in range(0, n, step):
                mb = slice_rows(rollouts, start, start + step)
                t = mb.completion_ids.shape[1]
                with timer("forward_s"):
                    logp, entropy = sequence_logprobs(self.policy, mb, self.sampling.temperature,
                                                      with_entropy=iteration == 0)
                    old = old_logp[start : start + step, :t] if old_logp is not None else logp.detach()
                    if iteration == 0:
                        train_logp[start : start + step, :t] = old
                    token_loss, clipped = clipped_policy_loss(logp, old, adv[start : start + step],
                                                              self.eps_low, self.eps_high, self.dual_clip)
                    if self.tis != "off":  # the engine drew the tokens: reweight towards the trainer's policy
                        token_loss = token_loss * truncated_is_weights(old, mb.logprobs, mb.completion_mask,
                                                                       self.tis, self.tis_cap)
                    if ref_logp is not None:
                        kl = kl_penalty(logp, ref_logp[start : start + step, :t], self.kl_estimator)
                        token_loss = token_loss + self.beta * kl
                        acc["kl"] += (kl.detach() * weights[start : start + step, :t]).sum().item()
                    loss = (token_loss * weights[start : start + step, :t]).sum()
                with timer("backward_s"):
                    self.manual_backward(loss)
                share = mb.completion_mask.sum().item() / max(rollouts.completion_mask.sum().item(), 1)
                acc["loss"] += loss.item()
                acc["clip_frac"] += masked_mean(clipped.float(), mb.completion_mask).item() * share
                if entropy is not None:
                    acc["entropy"] += masked_mean(entropy, mb.completion_mask).item() * share
            with timer("optimizer_s"):
                acc.update(self._optimizer_step(acc["loss"]))
            totals = acc if iteration == 0 else {**acc, "entropy": totals["entropy"]}
        mismatch = logp_mismatch(train_logp, rollouts.logprobs, rollouts.completion_mask)
        return {**totals, **{f"mismatch/{k}": v.item() for k, v in mismatch.items()}}

    # ---- pieces ------------------------------------------------------------------------------------
    @torch.no_grad()
    def _frozen_logprobs(self, policy, rollouts: Rollouts, timer: PhaseTimer, phase: str) -> Tensor:
        step = self.micro_batch_size or len(rollouts)
        out = torch.zeros(rollouts.completion_ids.shape, device=self.device)  # [N, T]
        with timer(phase):
            for start in range(0, len(rollouts), step):
                mb = slice_rows(rollouts, start, start + step)
                out[start : start + step, : mb.completion_ids.shape[1]] = sequence_logprobs(
                    policy, mb, self.sampling.temperature)[0]
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

    def _optimizer_step(self, loss: float) -> dict[str, float]:
        """Clip, then step; a non-finite loss or gradient skips the update (parameters without grads)."""
        opt, sched = self.optimizers(), self.lr_schedulers()
        params = [p for p in self.policy.parameters() if p.grad is not None]
        max_norm = self.max_grad_norm if self.max_grad_norm is not None else math.inf
        norm = clip_grad_norm(self.policy, params, max_norm)
        grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # FSDP2: a DTensor
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            if self.on_nonfinite == "raise":
                raise FloatingPointError(
                    f"non-finite loss ({loss}) or gradient norm ({grad_norm}) at step {self.global_step}; "
                    "lower lr, check rewards, or set on_nonfinite: skip")
            self.nonfinite_steps += 1
            self.consecutive_nonfinite += 1
            if self.max_nonfinite_steps is not None and self.consecutive_nonfinite >= self.max_nonfinite_steps:
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
        return {"grad_norm": grad_norm}

    def log_step(self, stats: RolloutStats, losses: dict[str, float], timer: PhaseTimer) -> None:
        """Log the step's metrics, reduced over ranks (one all-reduce) to the global batch's values."""
        world, tokens = self.trainer.world_size, float(stats.lengths.sum())
        pairs = {**step_metrics.rollout_pairs(stats, world), **step_metrics.train_pairs(losses, tokens, self.beta > 0),
                 **step_metrics.mismatch_pairs(losses, tokens), **step_metrics.perf_pairs(timer, tokens, world)}
        metrics = step_metrics.finish(reduce_ratios(pairs, self.trainer.strategy, world))
        if "mismatch/logp_diff_max" in losses:
            metrics["rollout/logp_diff_max"] = max_over_ranks(losses["mismatch/logp_diff_max"], self.trainer.strategy,
                                                              world)
        metrics["train/lr"] = self.optimizers().param_groups[0]["lr"]
        metrics["train/nonfinite_steps"] = float(self.nonfinite_steps)
        skipped = getattr(self.trainer.datamodule, "skipped_rows", None)  # PromptDataModule(skip_bad_rows=True)
        if skipped is not None:
            metrics["data/skipped_rows"] = float(sum(skipped.values()))
        self.log("rollout/reward_mean", metrics.pop("rollout/reward_mean"), prog_bar=True, batch_size=len(stats.batch))
        self.log_dict(metrics, batch_size=max(len(stats.batch), 1))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["lit_grpo"] = save_module_state(self)  # config fingerprint, counters, seed, random states

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        load_module_state(self, checkpoint.get("lit_grpo", {}), self.global_rank)  # raises on a config mismatch


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _fused_adamw_ok(params: list[Tensor]) -> bool:
    """The fused AdamW kernel (one pass over each tensor, several times faster on the CPU than the default
    loop) for plain CPU or CUDA tensors; FSDP2's sharded DTensors keep the default implementation."""
    from torch.distributed.tensor import DTensor

    return bool(params) and all(p.device.type in ("cpu", "cuda") and not isinstance(p, DTensor) for p in params)


def _by_length(rollouts: Rollouts, advantages: Tensor) -> tuple[Rollouts, Tensor]:
    """The completions and their advantages ``[N]`` sorted by prompt + completion tokens (groups are not kept
    together), so that consecutive micro-batches hold sequences of similar length."""
    order = (rollouts.prompt_mask.sum(-1) + rollouts.completion_mask.sum(-1)).argsort(stable=True)  # [N]
    return select_rows(rollouts, order), advantages[order.to(advantages.device)]


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
