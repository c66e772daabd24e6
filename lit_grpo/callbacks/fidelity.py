"""GradientFidelity: every estimator's size-G gradient estimate against a large-group reference, during
training."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from lightning import Callback, LightningModule, Trainer

from lit_grpo.callbacks._logging import add_figure, log_scalars, tensorboard
from lit_grpo.callbacks._probe import GradientProbe
from lit_grpo.callbacks._requirements import require_run
from lit_grpo.callbacks._rollouts import fork_rng
from lit_grpo.callbacks._schedule import due_step
from lit_grpo.checks import require
from lit_grpo.diagnostics.fidelity import ALL, OBJECTIVES, bin_rows
from lit_grpo.diagnostics.fidelity_pool import csv_text, figure, measure, pool, prompt_table
from lit_grpo.diagnostics.gradients import LinearTarget
from lit_grpo.diagnostics.shadow import unique_labels
from lit_grpo.estimators import AdvantageEstimator
from lit_grpo.types import PromptBatch

NAME = "GradientFidelity"
#: Smallest reference group.
MIN_REFERENCE = 256


class GradientFidelity(Callback):
    """Bias, variance and signal-to-noise of each estimator's gradient against a large-group reference.

    Every ``every_n_steps`` steps (after the step's update, from step 0), on global rank 0, for the first
    ``num_prompts`` validation prompts: draws ``ref_group_size`` completions per prompt once, computes their
    score rows ``grad sum_t log pi(y_j,t)`` once over the chosen parameters, forms the reference gradient of
    each objective (expected reward, ``pass@k``, ``log pass@k``, MaxRL's truncated likelihood ``J_T``) and
    applies every estimator to ``subsamples`` subsamples of the run's group size
    (:mod:`lit_grpo.diagnostics.fidelity`; ``lit-grpo fidelity`` does the same on a checkpoint). Writes the
    scalars in ``metrics`` (docs/diagnostics.md), the figure ``fidelity/omega`` and bins.csv and prompts.csv
    in the run directory's fidelity/step_N. Needs binary rewards. Sampling runs under a forked RNG, the rows
    use ``torch.autograd.grad`` (``.grad`` untouched), so training is unchanged; the other ranks wait at
    the next step. Cost: ``num_prompts x ref_group_size`` generated completions and as many rows.

    Args:
        estimators: Estimators to measure (null: the run's own). Batch-coupled estimators (ReinforcePlusPlus,
            GPG, GRPO with ``scale: batch``) have no per-prompt estimate and are refused.
        every_n_steps: Measure at steps ``0, n, 2n, ...``.
        num_prompts: Validation prompts measured.
        ref_group_size: Completions per prompt in the reference group (at least 256).
        subsamples: Size-G subsamples per prompt.
        k: The k of the ``pass@k`` and ``log_pass@k`` objectives.
        maxrl_T: Truncation T of the MaxRL objective (null: group size - 1, what MaxRL's estimator climbs).
        probe: The parameters, projection and micro-batches of the score rows (``GradientProbe``; by default
            128 completions per forward; its seed also draws the subsamples).
    """

    metrics: ClassVar[tuple[str, ...]] = (
        "fidelity/<estimator>/cos_<objective>", "fidelity/<estimator>/norm_ratio_<objective>",
        "fidelity/<estimator>/snr", "fidelity/<estimator>/snr_<bin>", "fidelity/pass_rate_mean",
    )

    def __init__(
        self,
        estimators: list[AdvantageEstimator] | None = None,
        every_n_steps: int = 250,
        num_prompts: int = 8,
        ref_group_size: int = 256,
        subsamples: int = 1000,
        k: int = 4,
        maxrl_T: int | None = None,
        # a default instance (B008): LightningCLI nests its options
        probe: GradientProbe = GradientProbe(micro_batch_size=128),  # noqa: B008
    ) -> None:
        checks = [
            (every_n_steps >= 1, f"every_n_steps={every_n_steps} must be >= 1"),
            (num_prompts >= 1, f"num_prompts={num_prompts} must be >= 1"),
            (ref_group_size >= MIN_REFERENCE, f"ref_group_size={ref_group_size} must be >= {MIN_REFERENCE}"),
            (subsamples >= 2, f"subsamples={subsamples} must be >= 2 (e.g. 1000)"),
            (1 <= k <= ref_group_size, f"k={k} must lie in [1, ref_group_size]"),
            (
                maxrl_T is None or 1 <= maxrl_T <= ref_group_size,
                f"maxrl_T={maxrl_T} must lie in [1, ref_group_size]",
            ),
        ]
        for ok, message in checks:
            require(ok, f"{NAME}: {message}")
        self.estimators = list(estimators) if estimators else None
        self.every_n_steps, self.num_prompts = every_n_steps, num_prompts
        self.ref_group_size, self.subsamples, self.k, self.maxrl_T = ref_group_size, subsamples, k, maxrl_T
        self.probe = probe
        self.targets: list[LinearTarget] = []

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        require_run(
            NAME,
            trainer,
            pl_module,
            "policy",
            "engine",
            "score",
            "sampling",
            "group_size",
            "estimator",
            writer=True,
        )
        from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

        require(
            not isinstance(trainer.strategy, FSDPStrategy | ModelParallelStrategy),
            f"{NAME} runs the policy on rank 0 alone, which a sharded policy cannot do; measure a checkpoint "
            "with `lit-grpo fidelity` instead, or train under DDP or one process",
        )
        estimators = self.estimators or [pl_module.estimator]
        G = pl_module.group_size
        for estimator in estimators:
            require(
                not (estimator.couples_groups or estimator.needs_lengths or estimator.min_group_size > G),
                f"{NAME}: {estimator!r} has no per-prompt estimate at group_size {G} (it is batch-coupled, "
                "needs the completions' lengths or needs larger groups); list other estimators in estimators",
            )
        dm = trainer.datamodule
        require(dm is not None and hasattr(dm, "val_dataloader"),
                f"{NAME} needs validation prompts; give the data a validation split or remove {NAME}")

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.targets = self.probe.targets(NAME, pl_module.policy)

    def prompts(self, trainer: Trainer) -> PromptBatch:
        parts, have = [], 0
        for batch in trainer.datamodule.val_dataloader():
            parts.append(batch)
            have += len(batch)
            if have >= self.num_prompts:
                break
        require(bool(parts), f"{NAME}: the validation split has no prompts; give the data a validation split")
        return PromptBatch.concat(parts).select(list(range(min(have, self.num_prompts))))

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        step = due_step(trainer, self.every_n_steps)
        if step is None or not trainer.is_global_zero:
            return
        estimators = self.estimators or [pl_module.estimator]
        named = dict(zip(unique_labels(estimators), estimators, strict=True))
        G, M = pl_module.group_size, self.ref_group_size
        T = self.maxrl_T if self.maxrl_T is not None else max(G - 1, 1)
        prompts = self.prompts(trainer)
        with fork_rng(pl_module):
            pools = pool(
                pl_module.policy, pl_module.engine.generate, pl_module.score, prompts, M, pl_module.sampling,
                self.targets, self.probe.projection_dim, self.probe.seed, self.probe.micro_batch_size,
            )  # fmt: skip
            results = measure(
                pools, named, G, self.subsamples, self.k, T, self.probe.seed
            )  # one prompt's rows at a time
        per_prompt = prompt_table(results, prompts.ids, named, G, M)
        bins = bin_rows(results, list(named), OBJECTIVES)
        metrics = {"fidelity/pass_rate_mean": sum(r.pass_rate for r in results) / len(results)}
        for row in bins:
            label = row["estimator"]
            if row["bin"] == ALL:
                metrics[f"fidelity/{label}/cos_{row['objective']}"] = row["cos"]
                metrics[f"fidelity/{label}/norm_ratio_{row['objective']}"] = row["norm_ratio"]
            if row["objective"] == "reward":
                suffix = "" if row["bin"] == ALL else f"_{row['bin']}"
                metrics[f"fidelity/{label}/snr{suffix}"] = row["snr"]
        log_scalars(trainer, metrics, step)  # NaN (an empty reference) is left out
        if trainer.log_dir is not None:
            out = Path(trainer.log_dir) / "fidelity" / f"step_{step}"
            out.mkdir(parents=True, exist_ok=True)
            (out / "bins.csv").write_text(csv_text(bins), newline="")
            (out / "prompts.csv").write_text(csv_text(per_prompt), newline="")
        fig = figure(per_prompt, bins, named, G, f"step {step}: G = {G}, M = {M}, {len(results)} prompts")
        add_figure(tensorboard(trainer), "fidelity/omega", fig, step)
