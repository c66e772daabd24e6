"""GradientRank: spectra of the per-completion gradient matrix and of chosen weight gradients."""

from __future__ import annotations

import re
from typing import ClassVar

import torch
from lightning import Callback, LightningModule, Trainer

from lit_grpo.callbacks._logging import log_scalars
from lit_grpo.callbacks._probe import GradientProbe
from lit_grpo.callbacks._requirements import require_run, require_whole_gradients
from lit_grpo.callbacks._rollouts import fork_rng, rollout_stats
from lit_grpo.callbacks._schedule import every, logging_step
from lit_grpo.checks import require
from lit_grpo.diagnostics.gradients import (
    LinearTarget,
    gradient_row_blocks,
    rows_spectrum_summary,
    take_rows,
)
from lit_grpo.diagnostics.rank import spectrum_summary

NAME = "GradientRank"


class GradientRank(Callback):
    """Effective rank of the per-completion gradient matrix (METHODS.md section 3).

    Every ``every_n_steps`` training steps, builds the matrix whose rows are
    ``A_i * grad sum_t log pi(y_i,t)`` over the chosen ``nn.Linear`` parameters for the step's
    completions with non-zero advantage, and logs its spectrum, also of the matrix with one row per
    distinct completion of a prompt (identical completions have identical rows). The rows come from
    one extra batched forward and backward after the step's update, with ``torch.autograd.grad``:
    ``.grad``, the parameters and the RNG state are left as they were, so training is unchanged. A
    matrix that is all zero is skipped and counted, never logged as a rank. The scalars are listed in
    ``metrics`` and explained in docs/diagnostics.md.

    Memory: the matrix is ``N x D`` float32 (``D`` = chosen parameters, or ``projection_dim``), plus
    one layer's per-completion gradients at a time. Choose a few layers, ``lora``, or a projection for
    large models.

    Args:
        every_n_steps: Measure at training steps ``0, n, 2n, ...``.
        probe: The parameters, projection and micro-batches of the per-completion rows (``GradientProbe``).
        weight_params: Regular expressions choosing 2-D weights whose accumulated gradient's effective
            rank is logged before the optimizer step (null: none).
        per_layer: Also log the effective rank of each chosen layer's block of the per-completion matrix.
    """

    metrics: ClassVar[tuple[str, ...]] = (
        "grad/erank", "grad/stable_rank", "grad/energy_rank_0.9", "grad/energy_rank_0.99", "grad/sigma_<i>",
        "grad/rows", "grad/skipped_zero", "grad/dedup_<statistic>", "grad/distinct_mean", "grad/distinct_min",
        "grad/layer_erank/<layer name>", "grad/weight_erank/<parameter name>", "grad/weight_skipped_zero",
    )

    def __init__(
        self,
        every_n_steps: int = 10,
        probe: GradientProbe = GradientProbe(),  # noqa: B008 (a dataclass: LightningCLI nests its options)
        weight_params: list[str] | None = None,
        per_layer: bool = False,
    ) -> None:
        require(every_n_steps >= 1, f"GradientRank: every_n_steps={every_n_steps} must be >= 1")
        require(
            not (per_layer and probe.projection_dim is not None),
            "GradientRank: per_layer needs whole rows; it cannot be combined with probe.projection_dim",
        )
        for pattern in weight_params or []:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"GradientRank: {pattern!r} is not a regular expression ({err})") from err
        self.every_n_steps = every_n_steps
        self.probe = probe
        self.weight_params = weight_params
        self.per_layer = per_layer
        self.targets: list[LinearTarget] = []
        self.weights: list[tuple[str, torch.nn.Parameter]] = []
        self.skipped = 0
        self.weight_skipped = 0
        self._measure = self._weights_pending = False
        self._step = 0

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        require_run(NAME, trainer, pl_module, "policy", "sampling")
        require_whole_gradients(
            NAME, trainer, "measure it under FSDP2 (ModelParallelStrategy), DDP or one process"
        )

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        policy = pl_module.policy
        self.targets = self.probe.targets(NAME, policy)
        if self.weight_params:
            regexes = [re.compile(p) for p in self.weight_params]
            self.weights = [
                (n, p)
                for n, p in policy.named_parameters()
                if p.dim() == 2 and p.requires_grad and any(r.search(n) for r in regexes)
            ]
            require(bool(self.weights),
                    f"GradientRank: weight_params={self.weight_params} matches no trainable 2-D "
                    "parameter of the policy; fix the regular expressions")

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int
    ) -> None:
        self._step = logging_step(trainer)
        self._measure = every(self._step, self.every_n_steps)
        self._weights_pending = self._measure

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        stats = rollout_stats(outputs)
        if not self._measure or stats is None or stats.rollouts is None:
            return
        coef = stats.advantages.reshape(-1).float()  # [N]
        rows = coef.nonzero().flatten()  # completions with a non-zero contribution
        G = stats.group_size
        keys = [(i // G, stats.texts[i]) for i in range(len(stats.texts))]
        distinct = [len(set(keys[g * G : (g + 1) * G])) for g in range(len(keys) // G)]
        first: dict[tuple[int, str], int] = {}
        for i in rows.tolist():
            first.setdefault(keys[i], i)
        keep = list(first.values())  # one row per distinct completion of a prompt
        summary = dedup = None
        metrics: dict[str, float] = {}
        if rows.numel():
            matrix, blocks = self.matrix(pl_module, take_rows(stats.rollouts, rows), coef[rows])  # [n, D]
            summary = rows_spectrum_summary(matrix)
            position = {r: j for j, r in enumerate(rows.tolist())}
            dedup = rows_spectrum_summary(matrix[[position[r] for r in keep]])
            for target, block in zip(self.targets, blocks or [], strict=False):
                layer = rows_spectrum_summary(block)
                if layer is not None:
                    metrics[f"grad/layer_erank/{target.name}"] = layer["erank"]
        if summary is None:
            self.skipped += 1
        metrics.update({f"grad/{k}": v for k, v in (summary or {}).items()})
        metrics.update({f"grad/dedup_{k}": v for k, v in (dedup or {}).items()})
        metrics.update({"grad/rows": float(rows.numel()), "grad/skipped_zero": float(self.skipped)})
        metrics["grad/dedup_rows"] = float(len(keep))
        if distinct:
            metrics["grad/distinct_mean"] = sum(distinct) / len(distinct)
            metrics["grad/distinct_min"] = float(min(distinct))
        log_scalars(trainer, metrics, self._step)

    def matrix(self, pl_module: LightningModule, rollouts, coef: torch.Tensor):
        """The rows ``coef_i * grad log pi(y_i)`` of ``rollouts``, projected if asked: ``[n, D]``; with
        ``per_layer`` also each target's block ``[n, D_target]`` (else None)."""
        with fork_rng(pl_module):
            blocks = gradient_row_blocks(
                pl_module.policy, rollouts, coef, self.targets, pl_module.sampling.temperature,
                self.probe.projection_dim, self.probe.seed, self.probe.micro_batch_size,
            )  # fmt: skip
            rows = torch.cat([b for _, b in blocks])
        layers = list(rows.split([t.numel for t in self.targets], dim=1)) if self.per_layer else None
        return rows, layers

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer) -> None:
        if not self.weights or not self._weights_pending:
            return
        self._weights_pending = False  # the first optimizer step of a measured batch
        metrics = {}
        with torch.no_grad():
            for name, param in self.weights:
                grad = param.grad
                if grad is not None and hasattr(grad, "full_tensor"):
                    grad = grad.full_tensor()  # a sharded (DTensor) gradient
                summary = spectrum_summary(grad) if grad is not None else None
                if summary is None:
                    self.weight_skipped += 1
                else:
                    metrics[f"grad/weight_erank/{name}"] = summary["erank"]
        metrics["grad/weight_skipped_zero"] = float(self.weight_skipped)
        log_scalars(trainer, metrics, self._step)

    def state_dict(self) -> dict:
        return {"skipped": self.skipped, "weight_skipped": self.weight_skipped}

    def load_state_dict(self, state_dict: dict) -> None:
        self.skipped = int(state_dict.get("skipped", 0))
        self.weight_skipped = int(state_dict.get("weight_skipped", 0))
