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
    ``heldout/reward_mean_after``, and prints both at the end of ``fit`` with their 95% intervals over the
    prompts (mean +- 1.96 standard errors) and the change's (the per-prompt differences' when both ran here).

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
        self.values: dict[str, dict[str, torch.Tensor]] = {}  # "before"/"after" -> name -> per-prompt values

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if not hasattr(pl_module, "evaluate_batch"):
            raise TypeError(f"HeldOutReport needs a lit_grpo PolicyModule, got {type(pl_module).__name__}")
        require(trainer.datamodule is not None and hasattr(trainer.datamodule, "val_dataloader"),
                "HeldOutReport needs a DataModule with validation prompts (set the source's val split)")

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.before:  # not again on resume
            self.before = self.evaluate(trainer, pl_module, "before")

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.after = self.evaluate(trainer, pl_module, "after")
        for logger in trainer.loggers:
            metrics = {f"heldout/{k}_before": v for k, v in self.before.items()}
            metrics.update({f"heldout/{k}_after": v for k, v in self.after.items()})
            logger.log_metrics(metrics, step=trainer.global_step)
        lines = [
            f"  {k:<12} before {self.before.get(k, float('nan')):.3f}   after {v:.3f}   {self._intervals(k)}"
            for k, v in self.after.items()
        ]
        title = "Held-out prompts (accuracy = greedy, reward_mean = sampled):\n"
        rank_zero_only(print)(title + "\n".join(lines))

    def _intervals(self, name: str) -> str:
        """``(95%: +-before, +-after; change +d +-c; n=scores)``; what this process did not score is left
        out."""
        before, after = self.values.get("before", {}).get(name), self.values.get("after", {}).get(name)
        parts = [f"+-{half_width(v):.3f}" for v in (before, after) if v is not None]
        text = f"(95%: {', '.join(parts)}"
        if before is not None and before.shape == after.shape:
            change = after - before
            text += f"; change {change.mean().item():+.3f} +-{half_width(change):.3f}"
        return text + f"; n={len(after)})"

    @torch.no_grad()
    def evaluate(self, trainer: Trainer, pl_module: LightningModule, when: str = "") -> dict[str, float]:
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
        result, kept = {}, {}
        for name, parts in totals.items():
            values = torch.cat(parts)
            kept[name] = values[~values.isnan()]
            result[name] = kept[name].mean().item()
        if when:
            self.values[when] = kept
        return result

    def state_dict(self) -> dict:
        return {"before": self.before}

    def load_state_dict(self, state_dict: dict) -> None:
        self.before = state_dict.get("before", {})


def half_width(values: torch.Tensor) -> float:
    """Half the width of the 95% normal interval of the mean of ``values``: 1.96 standard errors (sample
    standard deviation over root n; for 0/1 values at most 0.98 / root n)."""
    n = len(values)
    return float("nan") if n < 2 else 1.96 * values.double().std().item() / n**0.5
