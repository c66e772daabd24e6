"""The grouped settings of the policy modules: small frozen dataclasses, one per concern.

A module's constructor takes its components (reward, estimator, engine, loss, ...) and these groups, so YAML
nests the same way: ``model.init_args.sampling.temperature``, ``--model.optim.lr=3e-4``. Each group checks its
own values when built, with a message that names the option, the value and the fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from lit_grpo.checks import require
from lit_grpo.losses.functional import Aggregation
from lit_grpo.rewards.scoring import DEFAULT_REWARD_TIMEOUT_S
from lit_grpo.types import SamplingParams


@dataclass(frozen=True)
class Sampling:
    """How rollouts and held-out samples are drawn.

    Args:
        temperature: Sampling temperature of rollouts (and of the log-prob forward); > 0.
        top_p: Nucleus sampling threshold, in (0, 1].
        top_k: Top-k sampling (0 = off).
        max_new_tokens: Longest completion, in tokens.
        val_samples: Sampled completions per held-out prompt for ``val/reward_mean`` (0 = skip).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64
    val_samples: int = 1

    def __post_init__(self) -> None:
        require(self.temperature > 0, f"sampling.temperature={self.temperature} must be > 0 for training "
                                      "rollouts")
        require(0 < self.top_p <= 1, f"sampling.top_p={self.top_p} must be in (0, 1]")
        require(self.top_k >= 0, f"sampling.top_k={self.top_k} must be >= 0 (0 = off)")
        require(self.max_new_tokens >= 1, f"sampling.max_new_tokens={self.max_new_tokens} must be >= 1")
        require(self.val_samples >= 0, f"sampling.val_samples={self.val_samples} must be >= 0 (0 = skip)")

    def params(self) -> SamplingParams:
        """What a rollout engine reads."""
        return SamplingParams(self.temperature, self.top_p, self.top_k, self.max_new_tokens)


@dataclass(frozen=True)
class Optim:
    """The optimizer (AdamW unless named), its learning-rate schedule (a linear warm-up, then constant, a
    decay or a scheduler class) and gradient clipping (:mod:`lit_grpo.optim`).

    Args:
        lr: Learning rate; > 0.
        weight_decay: Weight decay.
        betas: Adam's betas (passed to an optimizer that takes them).
        warmup_steps: Linear learning-rate warm-up, in optimizer steps.
        max_grad_norm: Clip gradients to this global norm (null = off; the norm is logged either way).
        optimizer: A class of ``torch.optim`` (``AdamW``, ``SGD``, ...) or a class path to an ``Optimizer``.
        optimizer_args: Its other constructor arguments (``{momentum: 0.9}``); ``lr`` and ``weight_decay``
            come from the options above.
        decay: After the warm-up: ``none`` (constant), ``linear`` or ``cosine`` to ``min_lr_ratio`` x ``lr``.
        decay_steps: Optimizer steps the decay takes (null: ``trainer.max_steps`` minus the warm-up).
        min_lr_ratio: Where the decay ends, as a share of ``lr``, in [0, 1].
        scheduler: Instead of ``decay``, a class of ``torch.optim.lr_scheduler`` (or a class path) run after
            the warm-up, stepped once an optimizer step.
        scheduler_args: Its constructor arguments (``{T_max: 500}``).
    """

    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 0
    max_grad_norm: float | None = 1.0
    optimizer: str = "AdamW"
    optimizer_args: dict | None = None
    decay: Literal["none", "linear", "cosine"] = "none"
    decay_steps: int | None = None
    min_lr_ratio: float = 0.0
    scheduler: str | None = None
    scheduler_args: dict | None = None

    def __post_init__(self) -> None:
        require(self.lr > 0, f"optim.lr={self.lr} must be > 0")
        require(self.weight_decay >= 0, f"optim.weight_decay={self.weight_decay} must be >= 0")
        require(all(0 <= b < 1 for b in self.betas), f"optim.betas={self.betas} must each be in [0, 1)")
        require(self.warmup_steps >= 0, f"optim.warmup_steps={self.warmup_steps} must be >= 0")
        require(self.max_grad_norm is None or self.max_grad_norm > 0,
                f"optim.max_grad_norm={self.max_grad_norm} must be > 0, or null for no clipping")
        require(self.decay in ("none", "linear", "cosine"),
                f"optim.decay={self.decay!r} must be none, linear or cosine")
        require(self.decay_steps is None or self.decay_steps >= 1,
                f"optim.decay_steps={self.decay_steps} must be >= 1, or null for the rest of the run")
        require(0 <= self.min_lr_ratio <= 1, f"optim.min_lr_ratio={self.min_lr_ratio} must be in [0, 1]")
        require(self.scheduler is None or self.decay == "none",
                f"optim.scheduler={self.scheduler!r} and optim.decay={self.decay!r}: choose one schedule "
                "after the warm-up (set decay: none to use the scheduler)")
        for name in ("optimizer_args", "scheduler_args"):
            given = getattr(self, name)
            require(given is None or isinstance(given, dict), f"optim.{name}={given!r} must be a mapping")
            object.__setattr__(self, name, dict(given or {}))
        taken = sorted({"lr", "weight_decay", "params"} & set(self.optimizer_args))
        require(not taken, f"optim.optimizer_args sets {taken}: use optim.lr and optim.weight_decay instead")
        require(self.scheduler is not None or not self.scheduler_args,
                f"optim.scheduler_args={self.scheduler_args} is given without optim.scheduler")
        object.__setattr__(self, "betas", tuple(self.betas))  # YAML gives a list


@dataclass(frozen=True)
class Algorithm:
    """The algorithm's choices between the rewards and the optimizer: what an update trains on, how often.

    Args:
        aggregation: How token losses become the batch loss, whatever the loss (METHODS section 2). With
            several mini-batches each is normalised over its own tokens (or completions).
        drop_truncated: Leave completions that hit ``max_new_tokens`` without EOS out of the loss (DAPO's
            overlong filtering); they still count in the group statistics of the estimator.
        entropy_coef: Entropy bonus: ``- entropy_coef * entropy`` per token is added to the loss, aggregated
            like it (0 = off). Every completion then carries gradient, also those with zero advantage.
        steps_per_generation: Optimizer steps per pass over a rollout batch (its mini-batches of whole
            groups); ``prompts_per_step`` must be a multiple of it.
        num_iterations: Passes over each rollout batch (mu). Old log-probs are computed once per batch when
            ``steps_per_generation * num_iterations > 1`` and the loss reads them; with one optimizer step per
            batch the update is on-policy and the ratio is exactly 1.
        filter_degenerate: Dynamic sampling: drop groups whose rewards are all equal (within the tolerance of
            the estimators, so every kept group can get a non-zero advantage) and draw further prompts
            (``DataModule.refill``) until ``P`` groups are kept or ``max_refill_batches`` is reached.
        max_refill_batches: Most refill draws per step when ``filter_degenerate`` (and, apart, to replace
            prompts the curriculum retired).
    """

    aggregation: Aggregation = "token-mean"
    drop_truncated: bool = False
    entropy_coef: float = 0.0
    steps_per_generation: int = 1
    num_iterations: int = 1
    filter_degenerate: bool = False
    max_refill_batches: int = 4

    def __post_init__(self) -> None:
        require(self.entropy_coef >= 0, f"algorithm.entropy_coef={self.entropy_coef} must be >= 0 (a bonus; "
                                        "0 = off)")
        require(self.steps_per_generation >= 1, f"algorithm.steps_per_generation={self.steps_per_generation} "
                                                "must be >= 1")
        require(self.num_iterations >= 1, f"algorithm.num_iterations={self.num_iterations} must be >= 1")
        require(self.max_refill_batches >= 0, f"algorithm.max_refill_batches={self.max_refill_batches} must "
                                              "be >= 0")

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps per rollout batch."""
        return self.steps_per_generation * self.num_iterations


@dataclass(frozen=True)
class Batching:
    """How the update is computed: none of these changes it beyond float summation order.

    Args:
        micro_batch_size: Completions per forward/backward (null = the whole mini-batch); gradients
            accumulate.
        elide_zero_advantage: Skip the forward and backward of completions whose advantage is exactly 0 when
            they cannot change the update: the loss says a zero-advantage row adds nothing
            (``loss.zero_advantage_inert``: PPOClip with ``beta: 0``, GSPO, CISPO, SAPO, GMPO) and
            ``algorithm.entropy_coef`` is 0. The loss's divisors still count them, so the update is the same
            (up to float summation order); only the statistics change: they then cover the completions trained
            on. A rank (or a mini-batch) left with nothing to train still runs one zero-advantage completion,
            so every rank joins the same collectives and the optimizer sees the same (zero) gradients.
        shared_prefix: Encode each distinct prompt of a micro-batch once and run its completions against its
            keys and values (:func:`~lit_grpo.logprobs.shared_prefix_logprobs`), in the training forward and
            the frozen log-prob forwards: the same log-probs and gradients (up to float summation order) for
            less prompt compute. Where it cannot be exact (gradient checkpointing, FSDP, sliding-window
            attention, logits transformed after the LM head) the plain forward runs, and a log message says
            why once. Micro-batches then hold whole groups (sorted by their longest row) rather than rows
            sorted by length. Measured in docs/performance.md.
        packed: With ``shared_prefix``, run the completions of a prompt packed end to end into as few rows as
            the longest fills, each attending to its prompt and its own tokens only, and the LM head on the
            completion tokens only: the forward and backward run on the tokens that exist instead of padding
            every completion to the longest. The same log-probs and gradients up to float summation order.
            Needs transformers' ``sdpa`` or ``eager`` attention (other implementations run unpacked).
        gradient_checkpointing: Recompute block activations in the backward pass to save memory (about a third
            more compute); generation keeps its KV cache.
    """

    micro_batch_size: int | None = None
    elide_zero_advantage: bool = True
    shared_prefix: bool = True
    packed: bool = True
    gradient_checkpointing: bool = False

    def __post_init__(self) -> None:
        require(self.micro_batch_size is None or self.micro_batch_size >= 1,
                f"batching.micro_batch_size={self.micro_batch_size} must be >= 1, or null for the whole "
                "mini-batch")


#: ``rollout/sampled_nll`` at or above this fraction of ``log(vocabulary size)`` counts as a collapsed step
#: (:class:`Guards`): a uniform policy samples at exactly ``log V`` nats per token.
COLLAPSED_NLL_FRACTION = 0.95


@dataclass(frozen=True)
class Guards:
    """What a run does when a step goes wrong.

    Args:
        on_nonfinite: What a non-finite loss or gradient norm does: ``skip`` the step (counted in
            ``train/nonfinite_steps``) or ``raise``.
        max_nonfinite_steps: With ``skip``, this many consecutive skipped optimizer steps stop the run with an
            error (the run has diverged; the last checkpoint is kept); null: never stop.
        reward_timeout_s: Wall-clock limit of one reward call (all completions of a step), in seconds; a call
            past it scores NaN, counted in ``reward/timeouts``, and the run goes on (null: no limit).
        max_collapsed_steps: This many training steps in a row whose sampled tokens are near-uniform over the
            vocabulary (``rollout/sampled_nll`` at least ``COLLAPSED_NLL_FRACTION`` of ``log V``) stop the run
            with an error: the policy has diverged into noise with finite weights, which the non-finite guard
            cannot see. A trained language model never samples this way; a randomly initialised one does
            (null: never stop, to train one from scratch).
    """

    on_nonfinite: Literal["skip", "raise"] = "skip"
    max_nonfinite_steps: int | None = 10
    reward_timeout_s: float | None = DEFAULT_REWARD_TIMEOUT_S
    max_collapsed_steps: int | None = 50

    def __post_init__(self) -> None:
        require(self.max_nonfinite_steps is None or self.max_nonfinite_steps >= 1,
                f"guards.max_nonfinite_steps={self.max_nonfinite_steps} must be >= 1, or null to never stop")
        require(self.max_collapsed_steps is None or self.max_collapsed_steps >= 1,
                f"guards.max_collapsed_steps={self.max_collapsed_steps} must be >= 1, or null to never stop")
        # reward_timeout_s is checked by the RewardGuard that enforces it


class GuardCounts:
    """What the :class:`Guards` count across a run's steps, and their checks: call :meth:`finite` after each
    optimizer step's gradient norm and :meth:`collapse` after each training step's metrics."""

    def __init__(self, guards: Guards) -> None:
        self.guards = guards
        self.nonfinite_steps = 0  # optimizer steps skipped so far; saved in checkpoints
        self.nonfinite_in_a_row = 0
        self.collapsed_in_a_row = 0  # training steps in a row with near-uniform sampling

    def finite(self, loss: float, grad_norm: float, step: int) -> bool:
        """Whether optimizer step ``step`` may update (its loss and gradient norm are finite); with
        ``on_nonfinite: raise``, or ``max_nonfinite_steps`` skipped in a row, a non-finite one raises."""
        if math.isfinite(loss) and math.isfinite(grad_norm):
            self.nonfinite_in_a_row = 0
            return True
        if self.guards.on_nonfinite == "raise":
            raise FloatingPointError(
                f"non-finite loss ({loss}) or gradient norm ({grad_norm}) at step {step}; "
                "lower lr, check rewards, or set on_nonfinite: skip")
        self.nonfinite_steps += 1
        self.nonfinite_in_a_row += 1
        most = self.guards.max_nonfinite_steps
        if most is not None and self.nonfinite_in_a_row >= most:
            raise FloatingPointError(
                f"the run diverged: {self.nonfinite_in_a_row} optimizer steps in a row, up to step "
                f"{step + 1}, had a non-finite loss ({loss}) or gradient norm ({grad_norm}). Resume from an "
                "earlier checkpoint with a lower lr (or max_grad_norm), check the rewards and the data; "
                "max_nonfinite_steps sets how many skipped steps in a row stop the run")
        return False

    def collapse(self, metrics: dict[str, float], vocab: int | None, step: int) -> None:
        """Count the steps in a row whose sampled tokens are near-uniform over a vocabulary of ``vocab``
        (``rollout/sampled_nll``, the same on every rank); ``max_collapsed_steps`` of them stop the run."""
        nll = metrics.get("rollout/sampled_nll")
        if self.guards.max_collapsed_steps is None or not vocab or nll is None:
            return
        uniform = math.log(vocab)
        collapsed = nll >= COLLAPSED_NLL_FRACTION * uniform
        self.collapsed_in_a_row = self.collapsed_in_a_row + 1 if collapsed else 0
        if self.collapsed_in_a_row < self.guards.max_collapsed_steps:
            return
        reward, norm = metrics.get("rollout/reward_mean", math.nan), metrics.get("train/grad_norm", math.nan)
        raise RuntimeError(
            f"the run collapsed: for {self.collapsed_in_a_row} steps in a row, up to step {step}, the policy "
            f"sampled near-uniform tokens ({nll:.2f} nats per token against {uniform:.2f} for a uniform "
            f"choice among {vocab}; reward mean {reward:.3f}, gradient norm {norm:.3g}), so its weights have "
            "diverged while staying finite. Resume from an earlier checkpoint with a lower optim.lr or "
            "optim.max_grad_norm; guards.max_collapsed_steps sets how many such steps stop the run (null: "
            "never, for a model trained from scratch)")
