"""SFTModule: supervised fine-tuning on reference answers, the usual first stage before RL."""

from __future__ import annotations

import torch

from lit_grpo.lora import LoraSettings
from lit_grpo.policy import DType, PolicyModule
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.types import PromptBatch


class SFTModule(PolicyModule):
    """Next-token cross-entropy on ``target_template`` (default: the reference) followed by EOS.

    Only the answer tokens are trained; the prompt is context. Held-out scoring is the same as for
    ``GRPOModule`` (``val/accuracy``, ``val/reward_mean``), so an ``EarlyStopping`` on ``val/accuracy``
    with a ``stopping_threshold`` stops at a chosen starting accuracy for RL. Logs ``train/loss``.

    Args:
        model: Hub id or local directory (with ``from_scratch``, only its config and tokenizer are used).
        reward: Reward used to score held-out completions.
        engine: Rollout engine for held-out generation (default ``HFGenerateEngine()``).
        from_scratch: Initialise the weights randomly from the model's config.
        seed: Seed of the random initialisation.
        target_template: ``str.format`` template over ``reference`` giving the trained completion.
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        betas: AdamW betas.
        warmup_steps: Linear warm-up in optimizer steps.
        lora: Train LoRA adapters (peft) instead of all weights.
        gradient_checkpointing: Recompute block activations in the backward pass to save memory.
    """

    #: Scalars it logs besides PolicyModule's; ``lit-grpo compare`` checks the names an experiment reads.
    metrics: tuple[str, ...] = ("train/loss",)

    def __init__(
        self,
        model: str,
        reward: RewardFunction,
        engine: RolloutEngine | None = None,
        from_scratch: bool = False,
        seed: int = 0,
        target_template: str = "{reference}",
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.98),
        warmup_steps: int = 0,
        dtype: DType = "float32",
        temperature: float = 1.0,
        max_new_tokens: int = 64,
        val_samples: int = 1,
        lora: LoraSettings | None = None,
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__(model, reward, engine, dtype, from_scratch, temperature, 1.0, 0, max_new_tokens,
                         val_samples, seed, lora=lora, gradient_checkpointing=gradient_checkpointing)
        if lr <= 0:
            raise ValueError(f"lr={lr} must be > 0")
        self.target_template = target_template
        self.lr, self.weight_decay, self.betas, self.warmup_steps = lr, weight_decay, tuple(betas), warmup_steps

    def configure_optimizers(self):
        params = [p for p in self.policy.parameters() if p.requires_grad]  # the adapters only, with LoRA
        opt = torch.optim.AdamW(params, lr=self.lr, betas=self.betas, weight_decay=self.weight_decay)
        warmup = max(self.warmup_steps, 1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def training_step(self, batch: PromptBatch, batch_idx: int) -> torch.Tensor:
        ids, labels, mask = self.encode(batch)  # [B, L] each
        loss = self.policy(input_ids=ids, attention_mask=mask, labels=labels).loss
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch))
        return loss

    def encode(self, batch: PromptBatch):
        """Right-padded ``prompt + target + EOS`` ids, labels with the prompt and padding masked (-100)."""
        tok = self.tokenizer
        targets = [self.target_template.format(reference=r) for r in batch.references]
        prompt_ids = tok(batch.prompts, add_special_tokens=False)["input_ids"]
        target_ids = tok(targets, add_special_tokens=False)["input_ids"]
        rows = [(p + t + [tok.eos_token_id], [-100] * len(p) + t + [tok.eos_token_id])
                for p, t in zip(prompt_ids, target_ids, strict=True)]
        width = max(len(r[0]) for r in rows)
        ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        for i, (x, y) in enumerate(rows):
            ids[i, : len(x)], labels[i, : len(y)] = torch.tensor(x), torch.tensor(y)
        lengths = torch.tensor([len(x) for x, _ in rows])
        mask = torch.arange(width)[None, :] < lengths[:, None]  # [B, L]
        return ids.to(self.device), labels.to(self.device), mask.long().to(self.device)
