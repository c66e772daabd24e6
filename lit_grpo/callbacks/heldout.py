"""HeldOutReport: held-out accuracy before and after training, printed at the end of ``fit``."""

from __future__ import annotations

from typing import ClassVar

import torch
from lightning import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_only

from lit_grpo.checks import require


class HeldOutReport(Callback):
    """Scores the validation prompts before the first training step and after the last one.

    Greedy accuracy (mean greedy reward) and sampled mean reward, as in ``PolicyModule.evaluate_batch``.
    Logs ``heldout/accuracy_before``, ``heldout/accuracy_after``, ``heldout/reward_mean_before`` and
    ``heldout/reward_mean_after``, and prints both at the end of ``fit``.

    Args:
        max_prompts: Score at most this many validation prompts (null = all).
    """

    metrics: ClassVar[tuple[str, ...]] = (
        "heldout/accuracy_before", "heldout/accuracy_after", "heldout/reward_mean_before",
        "heldout/reward_mean_after",
    )

    def __init__(self, max_prompts: int | None = None) -> None:
        self.max_prompts = max_prompts
        self.before: dict[str, float] = {}
        self.after: dict[str, float] = {}

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if not hasattr(pl_module, "evaluate_batch"):
            raise TypeError(f"HeldOutReport needs a lit_grpo PolicyModule, got {type(pl_module).__name__}")
        require(trainer.datamodule is not None and hasattr(trainer.datamodule, "val_dataloader"),
                "HeldOutReport needs a DataModule with validation prompts (set the source's val split)")

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.before:  # not again on resume
            self.before = self.evaluate(trainer, pl_module)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.after = self.evaluate(trainer, pl_module)
        for logger in trainer.loggers:
            metrics = {f"heldout/{k}_before": v for k, v in self.before.items()}
            metrics.update({f"heldout/{k}_after": v for k, v in self.after.items()})
            logger.log_metrics(metrics, step=trainer.global_step)
        lines = [
            f"  {k:<12} before {self.before.get(k, float('nan')):.3f}   after {v:.3f}"
            for k, v in self.after.items()
        ]
        rank_zero_only(print)(
            "Held-out prompts (accuracy = greedy, reward_mean = sampled):\n" + "\n".join(lines)
        )

    @torch.no_grad()
    def evaluate(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, float]:
        totals: dict[str, list[torch.Tensor]] = {}
        seen = 0
        for batch in trainer.datamodule.val_dataloader():
            if self.max_prompts is not None and seen >= self.max_prompts:
                break
            if self.max_prompts is not None:
                batch = batch.select(list(range(min(len(batch), self.max_prompts - seen))))
            seen += len(batch)
            for name, values in pl_module.evaluate_batch(batch).items():
                totals.setdefault(name, []).append(values.flatten().float())
        result = {}
        for name, parts in totals.items():
            values = torch.cat(parts)
            result[name] = values[~values.isnan()].mean().item()
        return result

    def state_dict(self) -> dict:
        return {"before": self.before}

    def load_state_dict(self, state_dict: dict) -> None:
        self.before = state_dict.get("before", {})
