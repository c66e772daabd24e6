"""The base LightningModule: a causal-LM policy with a rollout engine and a reward, held-out scoring."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import torch
from lightning import LightningModule
from lightning.pytorch.strategies import FSDPStrategy
from torch import Tensor, nn
from torchmetrics import MeanMetric

from lit_grpo.checks import require
from lit_grpo.lora import LoraSettings, apply_lora, base_model, is_peft, meta_copy
from lit_grpo.models.loading import DType, load_policy, load_tokenizer
from lit_grpo.optim import build_optimizer, build_schedule
from lit_grpo.parallel import is_fsdp1, shard_policy, wrap_fsdp1
from lit_grpo.rewards.base import PROMPT_ARGS, RewardFunction
from lit_grpo.rewards.scoring import RewardGuard
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.hf import HFGenerateEngine
from lit_grpo.settings import Batching, Guards, Optim, Sampling
from lit_grpo.types import PromptBatch, Rollouts, SamplingParams


class PolicyModule(LightningModule):
    """A causal-LM policy with a rollout engine and a reward, scored on held-out prompts.

    Validation and test log ``val/accuracy`` (``test/accuracy``): the mean reward of greedy
    completions (the accuracy for binary rewards), and ``val/reward_mean``: the mean reward of
    ``val_samples`` sampled completions per prompt at the training temperature.

    Args:
        model: Hugging Face hub id or local directory of a causal LM and its tokenizer.
        reward: Reward function scoring completions against references.
        engine: Rollout engine (default: Hugging Face ``generate`` on the policy).
        dtype: Parameter dtype of the policy.
        from_scratch: Initialise the weights randomly from the model's config (for pre-training tiny models).
        seed: Seed for ``from_scratch`` initialisation.
        sampling: Rollout and held-out sampling (:class:`~lit_grpo.settings.Sampling`).
        optim: AdamW, warm-up and clipping (:class:`~lit_grpo.settings.Optim`).
        lora: Train LoRA adapters (peft) instead of all weights (null = full fine-tuning).
        batching: How the update is computed (:class:`~lit_grpo.settings.Batching`); read here:
            ``gradient_checkpointing``.
        guards: What a failing step does (:class:`~lit_grpo.settings.Guards`); read here: ``reward_timeout_s``
            (:class:`~lit_grpo.rewards.scoring.RewardGuard` enforces it).
    """

    metrics: ClassVar[tuple[str, ...]] = (
        "val/accuracy", "test/accuracy", "val/reward_mean", "reward/timeouts")

    def __init__(
        self,
        model: str,
        reward: RewardFunction,
        engine: RolloutEngine | None = None,
        *,
        dtype: DType = "float32",
        from_scratch: bool = False,
        seed: int = 0,
        sampling: Sampling = Sampling(),
        optim: Optim = Optim(),
        lora: LoraSettings | None = None,
        batching: Batching = Batching(),
        guards: Guards = Guards(),
    ) -> None:
        super().__init__()
        self.model_name = model
        self.reward = reward
        self.reward_guard = RewardGuard(guards.reward_timeout_s)  # every reward call: time limit, checks
        self.engine = engine if engine is not None else HFGenerateEngine()
        self.dtype_name, self.from_scratch, self.seed = dtype, from_scratch, seed
        self.sampling = sampling.params()  # what the engine reads
        self.val_samples = sampling.val_samples
        self.optim = optim
        self.lora, self.batching, self.guards = lora, batching, guards
        self.policy: nn.Module | None = None
        self.tokenizer = None
        self.eval_metrics = nn.ModuleDict({
            "accuracy": MeanMetric(nan_strategy="ignore"), "reward_mean": MeanMetric(nan_strategy="ignore"),
        })

    @property
    def gradient_checkpointing(self) -> bool:
        """Whether the policy recomputes block activations in the backward pass (``batching``)."""
        return self.batching.gradient_checkpointing

    def configure_optimizers(self):
        """The ``optim`` group's optimizer over the trained parameters (the adapters only, with LoRA) and its
        schedule, stepped once an optimizer step (:mod:`lit_grpo.optim`)."""
        opt = build_optimizer([p for p in self.policy.parameters() if p.requires_grad], self.optim)
        max_steps = self._trainer.max_steps if self._trainer is not None else None
        sched = build_schedule(opt, self.optim, max_steps)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ---- setup -----------------------------------------------------------------------------------
    def configure_model(self) -> None:
        """Load the policy (with LoRA adapters and gradient checkpointing when set); under
        ``ModelParallelStrategy`` shard it with FSDP2 over the device mesh Lightning provides, under
        ``FSDPStrategy`` wrap it as its own FSDP1 root (:func:`~lit_grpo.parallel.wrap_fsdp1`)."""
        if self.policy is not None:
            sharded = self._shard(self.policy)
            if sharded is not self.policy:  # an FSDP1 wrapper: the engine generates through it
                self.policy = sharded
                self.engine.bind(self.policy, self.tokenizer)
            return
        self.tokenizer = load_tokenizer(self.model_name)
        policy = load_policy(self.model_name, self.dtype_name, self.from_scratch, self.seed)
        if self.gradient_checkpointing:
            enable_gradient_checkpointing(policy)
        if self.lora is not None:
            policy = apply_lora(policy, self.lora)
        self.policy = self._shard(policy.train())
        self.engine.bind(self.policy, self.tokenizer)

    def _shard(self, module: nn.Module) -> nn.Module:
        """``module`` sharded as the strategy asks: FSDP2 over the device mesh, an FSDP1 root, or as it is."""
        if self.device_mesh is not None:
            return shard_policy(module, self.device_mesh)
        if self._trainer is not None and isinstance(self._trainer.strategy, FSDPStrategy):
            return wrap_fsdp1(module, self._trainer.strategy)
        return module

    # ---- scoring ---------------------------------------------------------------------------------
    def score(self, batch: PromptBatch, rollouts: Rollouts, training: bool = False):
        """Rewards ``[P, G]`` of group-major rollouts, with the reward's output for logging. Episodes whose
        environment owns the reward (``Episode.reward`` set) take it instead of the reward function's score.
        An episode dropped from training (``truncated_reward: drop``: unanswered, NaN) is unscorable in a
        training step (``training``) and scores 0 in held-out scoring, where it is a wrong answer."""
        g = rollouts.group_size
        expanded = batch.repeat(g)
        columns = expanded.columns
        if self.reward.needs_prompts:
            columns = {**columns, **prompt_args(expanded, rollouts)}
        out = self.reward_guard(self.reward, rollouts.texts, expanded.references, **columns)
        scores = out.scores.float()
        if rollouts.episodes is not None:  # an owned NaN (a dropped episode) stays NaN in training
            episodes = rollouts.episodes
            owns = torch.tensor([e.reward is not None for e in episodes], device=scores.device)
            owned = torch.tensor([float("nan") if e.reward is None else float(e.reward) for e in episodes])
            if not training:
                dropped = torch.tensor([not getattr(e, "answered", True) for e in episodes]) & owned.isnan()
                owned = owned.masked_fill(dropped, 0.0)
            scores = torch.where(owns, owned.to(scores.device), scores)
        return scores.view(len(batch), g), out

    @torch.no_grad()
    def evaluate_batch(self, batch: PromptBatch) -> dict[str, Tensor]:
        """Greedy reward ``[P]`` and, with ``val_samples > 0``, sampled reward ``[P, val_samples]``."""
        greedy = SamplingParams(0.0, max_new_tokens=self.sampling.max_new_tokens)
        result = {"accuracy": self.score(batch, self.engine.rollout(batch, 1, greedy))[0][:, 0]}
        if self.val_samples > 0:
            sampled = self.engine.rollout(batch, self.val_samples, self.sampling)
            result["reward_mean"] = self.score(batch, sampled)[0]
        return result

    def _eval_step(self, batch: PromptBatch, prefix: str) -> None:
        for name, values in self.evaluate_batch(batch).items():
            self.eval_metrics[name].update(values.to(self.device))
            self.log(f"{prefix}/{name}", self.eval_metrics[name], prog_bar=name == "accuracy",
                     batch_size=len(batch))

    def validation_step(self, batch: PromptBatch, batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: PromptBatch, batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def save_pretrained(self, path: str | Path, state_dict: dict[str, Tensor] | None = None) -> None:
        """Write the policy and tokenizer in Hugging Face format (loadable by ``model: <path>``); with LoRA
        the adapters in peft's format. ``state_dict``: the full weights, when the policy is sharded."""
        policy = self.policy
        if is_fsdp1(policy) and is_peft(policy):  # peft would not find the adapters by the wrapped names
            policy = meta_copy(policy)
        policy.save_pretrained(path, state_dict=state_dict)
        self.tokenizer.save_pretrained(path)


def prompt_args(expanded: PromptBatch, rollouts: Rollouts) -> dict[str, list]:
    """What a reward with ``needs_prompts`` reads beside the data's columns: each completion's prompt text and
    its conversation (the prompt as a user turn, then the completion; an episode's own messages)."""
    taken = sorted(set(PROMPT_ARGS) & set(expanded.columns))
    require(not taken, f"the data has columns named {taken}, which a reward with needs_prompts gets as the "
                       "prompts and conversations; rename them in the data (or its field mapping)")
    if rollouts.episodes is not None:
        conversations = [list(e.messages) for e in rollouts.episodes]
    else:
        conversations = [[{"role": "user", "content": p}, {"role": "assistant", "content": c}]
                         for p, c in zip(expanded.prompts, rollouts.texts, strict=True)]
    return {"prompts": list(expanded.prompts), "conversations": conversations}


def enable_gradient_checkpointing(policy: nn.Module) -> None:
    """Activation checkpointing in every block (non-reentrant, so frozen inputs need no grad hooks).

    The training forward then runs without a KV cache; generation asks for the cache explicitly.
    """
    model = base_model(policy)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
