"""PassAtK: the unbiased pass@k curve of the validation prompts, against the starting policy's."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar

import torch
from lightning import Callback, LightningModule, Trainer
from torch import Tensor
from torchmetrics import Metric

from lit_grpo.callbacks._logging import tensorboard
from lit_grpo.callbacks._requirements import require_logger, require_module
from lit_grpo.callbacks._rollouts import fork_rng
from lit_grpo.callbacks._schedule import logging_step
from lit_grpo.checks import require
from lit_grpo.diagnostics.passk import pass_at_k_ks, pass_at_k_per_prompt
from lit_grpo.diagnostics.plots import pass_at_k_figure
from lit_grpo.types import PromptBatch

NAME = "PassAtK"


class PassAtKMetric(Metric):
    """Mean unbiased pass@k over prompts for ``k`` in ``pass_at_k_ks(n)``; sums reduce across ranks.

    ``update(correct)`` takes ``[P, n]`` bool; ``compute()`` returns ``[len(ks)]`` float64 (NaN
    before any update).
    """

    full_state_update = False

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.ks = pass_at_k_ks(n)
        self.add_state("total", default=torch.zeros(len(self.ks), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, correct: Tensor) -> None:
        require(correct.dim() == 2 and correct.shape[1] == self.n,
                f"correct must have shape [P, n={self.n}], got {tuple(correct.shape)}")
        c = correct.bool().sum(-1)  # [P]
        per_k = torch.stack([pass_at_k_per_prompt(c, self.n, k).sum() for k in self.ks])  # [K]
        self.total += per_k.to(self.total.device)
        self.count += correct.shape[0]

    def compute(self) -> Tensor:
        return self.total / self.count  # [K]


class PassAtK(Callback):
    """Unbiased pass@k of the validation prompts (Chen et al. 2021; METHODS.md section 3).

    At every validation, samples ``n`` completions per prompt at the training sampling settings
    (a separate draw: greedy ``val/accuracy`` stays the module's), counts the correct ones and logs
    the curve for ``k = 1, 2, 4, ..., n``. The curve of the starting policy is measured once when
    training starts (``baseline_at_start``; otherwise the first validation's curve is the
    reference) and drawn with the current one: gains at ``k = 1`` only are search compression, gains
    at large ``k`` capacity expansion. Sampling runs under a forked RNG, so training is unchanged.
    Accumulates in a torchmetrics ``Metric``, so the curve reduces across ranks.

    Writes ``val/pass@1``, ``val/pass@2``, ``val/pass@4``, ..., ``val/pass@<n>`` (also at the start,
    step 0), and the TensorBoard figure ``val/pass_at_k_curve`` (start against now).

    Args:
        n: Samples per prompt (the largest k).
        max_prompts: Score at most this many validation prompts per process (null: all).
        correct_threshold: A completion is correct when its reward is at least this (NaN is wrong).
        temperature: Sampling temperature (null: the module's training temperature).
        baseline_at_start: Measure the starting policy's curve when training starts.
        log_figure: Draw the figure (needs a TensorBoard logger and matplotlib).
    """

    metrics: ClassVar[tuple[str, ...]] = ("val/pass@<k>",)

    def __init__(
        self,
        n: int = 16,
        max_prompts: int | None = None,
        correct_threshold: float = 1.0,
        temperature: float | None = None,
        baseline_at_start: bool = True,
        log_figure: bool = True,
    ) -> None:
        require(n >= 1, f"PassAtK: n={n} must be >= 1 (e.g. 16)")
        require(max_prompts is None or max_prompts >= 1,
                f"PassAtK: max_prompts={max_prompts} must be >= 1 or null (all)")
        require(temperature is None or temperature > 0,
                f"PassAtK: temperature={temperature} must be > 0 or null (training temperature)")
        self.n, self.max_prompts = n, max_prompts
        self.correct_threshold, self.temperature = correct_threshold, temperature
        self.baseline_at_start, self.log_figure = baseline_at_start, log_figure
        self.metric = PassAtKMetric(n)
        self.start: dict[int, float] | None = None
        self._seen = 0

    @property
    def ks(self) -> list[int]:
        return self.metric.ks

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage not in ("fit", "validate"):
            return
        require_module(NAME, pl_module, "engine", "score", "sampling")
        dm = trainer.datamodule
        require(dm is not None and hasattr(dm, "val_dataloader") and len(dm.val_dataloader()) > 0,
                "PassAtK needs validation prompts but the run has none; give the data source a validation "
                "split (e.g. SyntheticArithmetic num_val > 0) or remove PassAtK")
        require(stage != "fit" or trainer.limit_val_batches != 0,
                "PassAtK needs validation but limit_val_batches=0 turns it off; "
                "set trainer.limit_val_batches > 0 or remove PassAtK")
        require_logger(NAME, trainer, writer=self.log_figure, figure_option="log_figure: false")

    # ---- measuring ---------------------------------------------------------------------------------
    @torch.no_grad()
    def update(self, pl_module: LightningModule, batch: PromptBatch) -> None:
        """Sample ``n`` completions for (the first allowed prompts of) ``batch`` and count the correct
        ones."""
        if self.max_prompts is not None:
            batch = batch.select(list(range(min(len(batch), self.max_prompts - self._seen))))
        if len(batch) == 0:
            return
        self._seen += len(batch)
        sampling = pl_module.sampling
        if self.temperature is not None:
            sampling = replace(sampling, temperature=self.temperature)
        with fork_rng(pl_module):
            rollouts = pl_module.engine.rollout(batch, self.n, sampling)
        rewards = pl_module.score(batch, rollouts)[0]  # [P, n]
        self.metric.to(pl_module.device).update(rewards.nan_to_num(-math.inf) >= self.correct_threshold)

    def reset(self) -> None:
        self.metric.reset()
        self._seen = 0

    def curve(self) -> dict[int, float]:
        """The accumulated curve ``{k: pass@k}`` (synchronised across ranks); resets the metric."""
        values = self.metric.compute().tolist()
        self.reset()
        return dict(zip(self.ks, values, strict=True))

    def sweep(self, trainer: Trainer, pl_module: LightningModule) -> dict[int, float]:
        """The curve over the validation loader, outside Lightning's validation loop."""
        self.reset()
        for batch in trainer.datamodule.val_dataloader():
            if self.max_prompts is not None and self._seen >= self.max_prompts:
                break
            self.update(pl_module, batch)
        return self.curve()

    # ---- hooks -------------------------------------------------------------------------------------
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.baseline_at_start or self.start is not None:  # not again on resume
            return
        self.start = self.sweep(trainer, pl_module)
        for logger in trainer.loggers:
            logger.log_metrics({f"val/pass@{k}": v for k, v in self.start.items()}, step=trainer.global_step)
        self.draw(trainer, self.start)

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.reset()

    def on_validation_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs,
        batch,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not trainer.sanity_checking and isinstance(batch, PromptBatch):
            self.update(pl_module, batch)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        current = self.curve()
        if any(math.isnan(v) for v in current.values()):
            return  # no prompt was scored
        if self.start is None and trainer.state.fn == "fit":
            self.start = current
        for k, v in current.items():
            pl_module.log(f"val/pass@{k}", v, batch_size=1)
        self.draw(trainer, current)

    def draw(self, trainer: Trainer, current: dict[int, float]) -> None:
        writer = tensorboard(trainer) if self.log_figure else None
        if writer is None:
            return
        curves = {"start": self.start} if self.start is not None and current is not self.start else {}
        step = max(logging_step(trainer) - 1, 0)  # where Lightning logs this validation's scalars
        curves[f"step {step}"] = current
        fig = pass_at_k_figure(curves, title=f"pass@k, n = {self.n}")
        if fig is not None:
            writer.add_figure("val/pass_at_k_curve", fig, global_step=step)

    def state_dict(self) -> dict:
        return {"start": self.start}

    def load_state_dict(self, state_dict: dict) -> None:
        start = state_dict.get("start")
        self.start = {int(k): float(v) for k, v in start.items()} if start is not None else None
