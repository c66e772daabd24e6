"""SFTModule: supervised fine-tuning on reference answers or demonstration episodes, the usual first stage
before RL."""

from __future__ import annotations

from typing import ClassVar

import torch

from lit_grpo.checks import require
from lit_grpo.envs.demonstrations import IGNORE, demonstration_row, render_turns
from lit_grpo.envs.engine import EpisodeEngine
from lit_grpo.envs.rollout import records_of
from lit_grpo.lora import LoraSettings
from lit_grpo.policy import DType, PolicyModule
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.settings import Batching, Optim, Sampling
from lit_grpo.types import PromptBatch


class SFTModule(PolicyModule):
    """Next-token cross-entropy on ``target_template`` (default: the reference) followed by EOS.

    Only the answer tokens are trained; the prompt is context. Held-out scoring is the same as for
    ``GRPOModule`` (``val/accuracy``, ``val/reward_mean``), so an ``EarlyStopping`` on ``val/accuracy``
    with a ``stopping_threshold`` stops at a chosen starting accuracy for RL. Logs ``train/loss``.

    With an :class:`~lit_grpo.envs.EpisodeEngine` and ``turns``, each row is a demonstration episode instead:
    the given assistant turns played through the engine's environment (its tools really run), only the turns
    trained (:mod:`lit_grpo.envs.demonstrations`); held-out scoring then runs whole episodes.

    Args:
        model: Hub id or local directory (with ``from_scratch``, only its config and tokenizer are used).
        reward: Reward used to score held-out completions.
        engine: Rollout engine for held-out generation (default ``HFGenerateEngine()``).
        from_scratch: Initialise the weights randomly from the model's config.
        seed: Seed of the random initialisation.
        target_template: ``str.format`` template over ``reference`` giving the trained completion.
        turns: The assistant turns of a demonstration episode, ``str.format`` templates over the record's
            ``prompt``, ``reference``, ``id`` and columns (needs an ``EpisodeEngine``; replaces
            ``target_template``).
        optim: AdamW, warm-up and clipping (:class:`~lit_grpo.settings.Optim`; here lr 1e-4, betas (0.9, 0.98)
            and no clipping by default; ``max_grad_norm`` clips the global gradient norm when set).
        dtype: Parameter dtype of the policy.
        sampling: Held-out sampling (``temperature``, ``max_new_tokens``, ``val_samples``;
            :class:`~lit_grpo.settings.Sampling`).
        lora: Train LoRA adapters (peft) instead of all weights.
        gradient_checkpointing: ``Batching.gradient_checkpointing`` (:class:`~lit_grpo.settings.Batching`),
            an option of its own here.
    """

    #: Scalars it logs besides PolicyModule's; ``lit-grpo compare`` checks the names an experiment reads.
    metrics: ClassVar[tuple[str, ...]] = ("train/loss",)

    def __init__(
        self,
        model: str,
        reward: RewardFunction,
        engine: RolloutEngine | None = None,
        from_scratch: bool = False,
        seed: int = 0,
        target_template: str = "{reference}",
        turns: list[str] | None = None,
        optim: Optim = Optim(lr=1e-4, betas=(0.9, 0.98), max_grad_norm=None),
        dtype: DType = "float32",
        sampling: Sampling = Sampling(),
        lora: LoraSettings | None = None,
        gradient_checkpointing: bool = Batching.gradient_checkpointing,
    ) -> None:
        super().__init__(model, reward, engine=engine, dtype=dtype, from_scratch=from_scratch, seed=seed,
                         sampling=sampling, optim=optim, lora=lora,
                         batching=Batching(gradient_checkpointing=gradient_checkpointing))
        require(turns is None or (isinstance(self.engine, EpisodeEngine) and len(turns) >= 1),
                "SFTModule: turns (a demonstration episode) need a non-empty list and an engine of class "
                "lit_grpo.envs.EpisodeEngine, whose environment answers them; got "
                f"{type(self.engine).__name__}")
        self.target_template, self.turns = target_template, turns

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None,
                                    gradient_clip_algorithm=None) -> None:
        if self.optim.max_grad_norm is not None:  # optim.max_grad_norm, else the Trainer's gradient_clip_val
            gradient_clip_val, gradient_clip_algorithm = self.optim.max_grad_norm, "norm"
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def training_step(self, batch: PromptBatch, batch_idx: int) -> torch.Tensor:
        ids, labels, mask = self.encode(batch)  # [B, L] each
        loss = self.policy(input_ids=ids, attention_mask=mask, labels=labels).loss
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch))
        return loss

    def encode(self, batch: PromptBatch):
        """Right-padded ``prompt + target + EOS`` ids (or demonstration episodes), labels with everything but
        the trained tokens masked (-100), and the attention mask."""
        tok = self.tokenizer
        if self.turns is not None:
            eos = tok.eos_token_id
            env, chat = self.engine.environment, self.engine.chat
            rows = [demonstration_row(env, chat, r, render_turns(self.turns, r), eos)
                    for r in records_of(batch)]
        else:
            targets = [self.target_template.format(reference=r) for r in batch.references]
            prompt_ids = tok(batch.prompts, add_special_tokens=False)["input_ids"]
            target_ids = tok(targets, add_special_tokens=False)["input_ids"]
            rows = [(p + t + [tok.eos_token_id], [IGNORE] * len(p) + t + [tok.eos_token_id])
                    for p, t in zip(prompt_ids, target_ids, strict=True)]
        width = max(len(r[0]) for r in rows)
        ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        for i, (x, y) in enumerate(rows):
            ids[i, : len(x)], labels[i, : len(y)] = torch.tensor(x), torch.tensor(y)
        lengths = torch.tensor([len(x) for x, _ in rows])
        mask = torch.arange(width)[None, :] < lengths[:, None]  # [B, L]
        return ids.to(self.device), labels.to(self.device), mask.long().to(self.device)
