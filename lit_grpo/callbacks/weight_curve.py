"""WeightCurve: the run's estimator weight curve omega(p), drawn once when training starts."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import torch
from lightning import Callback, LightningModule, Trainer

from lit_grpo.callbacks._logging import tensorboard
from lit_grpo.callbacks._requirements import require_run
from lit_grpo.checks import require
from lit_grpo.diagnostics.plots import weight_curve_figure
from lit_grpo.diagnostics.weight_curve import TABLE_PS, format_table, weight_curve
from lit_grpo.estimators import AdvantageEstimator

NAME = "WeightCurve"


class WeightCurve(Callback):
    """Expected update weight on ``grad p`` against the pass rate ``p`` (METHODS.md section 3).

    When training starts, computes ``omega(p)`` exactly (enumeration over ``K ~ Bin(G, p)``) for the
    run's estimator at its group size and for any estimators in ``compare``. Writes the TensorBoard
    figure ``estimator/weight_curve``, the text ``estimator/weight_curve_table`` (omega at a few
    pass rates) and ``weight_curve.png`` in the logger's directory. Writes no scalars. The same
    curves for any estimators, without a run: ``lit-grpo curves``.

    Args:
        compare: Further estimators to draw beside the run's.
        num_points: Pass rates drawn in (0, 1).
    """

    #: Scalars it logs: none (a figure and a table only).
    metrics: ClassVar[tuple[str, ...]] = ()

    def __init__(self, compare: list[AdvantageEstimator] | None = None, num_points: int = 199) -> None:
        require(num_points >= 2, f"WeightCurve: num_points={num_points} must be >= 2")
        self.compare = list(compare or [])
        self.num_points = num_points

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            require_run(NAME, trainer, pl_module, "estimator", "group_size", writer=True)
            for estimator in self.compare:
                require(estimator.min_group_size <= pl_module.group_size,
                        f"WeightCurve: compare contains {estimator!r}, which needs groups of at least "
                        f"{estimator.min_group_size}, but the run's group_size is {pl_module.group_size}; "
                        "drop it from compare or raise group_size")

    def curves(
        self, estimators: list[AdvantageEstimator], G: int, ps: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        out = {}
        for estimator in estimators:
            name = repr(estimator)
            out[name if name not in out else f"{name} ({len(out)})"] = weight_curve(estimator, G, ps)
        return out

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        writer = tensorboard(trainer)
        if writer is None:
            return
        G = pl_module.group_size
        estimators = [pl_module.estimator, *self.compare]
        table = format_table(self.curves(estimators, G, torch.tensor(TABLE_PS)), TABLE_PS)
        writer.add_text("estimator/weight_curve_table", f"omega(p) at G = {G}\n\n{table}", global_step=0)
        ps = torch.linspace(0, 1, self.num_points + 2, dtype=torch.float64)[1:-1]
        values = self.curves(estimators, G, ps)
        fig = weight_curve_figure(ps.tolist(), {k: v.tolist() for k, v in values.items()}, G)
        if fig is None:
            return
        log_dir = trainer.log_dir
        if log_dir is not None:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            fig.savefig(Path(log_dir) / "weight_curve.png", dpi=120)
        writer.add_figure("estimator/weight_curve", fig, global_step=0)
