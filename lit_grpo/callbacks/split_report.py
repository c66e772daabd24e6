"""TestSplitReport: the final numbers of a run, on the test split, with their prompt-sampling error."""

from __future__ import annotations

import csv
import math
from collections import Counter
from pathlib import Path
from typing import ClassVar

import torch
from lightning import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_only

from lit_grpo.callbacks._logging import log_scalars
from lit_grpo.callbacks._requirements import require_run
from lit_grpo.callbacks._rollouts import fork_rng
from lit_grpo.checks import require
from lit_grpo.diagnostics.passk import pass_at_k_ks, pass_at_k_per_prompt
from lit_grpo.types import PromptBatch, SamplingParams

NAME = "TestSplitReport"
#: The per-prompt results, written to the logger's directory.
PROMPTS_FILE = "test_prompts.csv"
#: Most completions generated in one engine call.
MAX_COMPLETIONS_PER_CALL = 4096


class TestSplitReport(Callback):
    """Scores the test split once, after the last training step (and, with ``before``, once before the
    first), so that final numbers come from prompts no choice (of a learning rate, a checkpoint, a
    stopping step) has looked at; the validation split stays for choosing.

    Per prompt: the greedy completion (correct or not) and ``samples`` sampled completions at the
    training sampling settings (how many correct). Sampling runs under a forked RNG seeded with
    ``seed``, so training is unchanged and every arm of a comparison is scored on the same draws of
    its starting policy. An unscorable completion counts as wrong.

    Writes the scalars in ``metrics`` at the last step (with ``before``, also at step 0 under
    ``test/before/<name>``; docs/diagnostics.md explains each), with prompt-sampling standard errors
    ``<name>_se``, and the per-prompt results to ``test_prompts.csv`` in the logger's directory (columns
    ``id``, ``greedy``, ``correct`` of ``samples``, and the same with ``before_``).

    Args:
        samples: Sampled completions per prompt (0: greedy only).
        before: Also score the starting policy when training starts.
        max_prompts: Score at most this many test prompts (null: all the data module serves).
        min_prompts: Fail at the start when the test split has fewer prompts (e.g. 1000, so that the
            prompt-sampling error is below the effects of interest).
        pass_at_k: Log the pass@k curve of the samples.
        seed: Seed of the sampling.
    """

    __test__ = False  # not a pytest class

    metrics: ClassVar[tuple[str, ...]] = (
        "test/accuracy", "test/reward_mean", "test/accuracy_se", "test/reward_mean_se", "test/pass@<k>",
        "test/pass@<k>_se", "test/num_prompts", "test/answer_entropy", "test/answer_top_share", "test/chance",
        "test/skill", "test/skill_se", "test/before/<name>",
    )

    def __init__(
        self,
        samples: int = 4,
        before: bool = False,
        max_prompts: int | None = None,
        min_prompts: int = 1,
        pass_at_k: bool = False,
        seed: int = 0,
    ) -> None:
        require(samples >= 0, f"{NAME}: samples={samples} must be >= 0 (0: greedy only)")
        require(max_prompts is None or max_prompts >= 1,
                f"{NAME}: max_prompts={max_prompts} must be >= 1 or null (all)")
        require(min_prompts >= 1, f"{NAME}: min_prompts={min_prompts} must be >= 1")
        require(not pass_at_k or samples >= 1, f"{NAME}: pass_at_k needs samples >= 1, got samples={samples}")
        self.samples, self.before, self.pass_at_k = samples, before, pass_at_k
        self.max_prompts, self.min_prompts, self.seed = max_prompts, min_prompts, seed
        self.start: dict[str, list] | None = None  # per-prompt results of the starting policy

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        require_run(NAME, trainer, pl_module, "engine", "score", "sampling")
        dm = trainer.datamodule
        source = getattr(dm, "source", None)
        has_test = hasattr(dm, "test_dataloader") and (source is None or source.has_split("test"))
        require(
            dm is not None and has_test,
            f"{NAME} needs a test split but the data source has none; give it one (e.g. "
            "SyntheticArithmetic num_test: 1000) or remove the callback",
        )
        dm.setup("test")
        available = sum(len(b) for b in dm.test_dataloader())
        scored = available if self.max_prompts is None else min(available, self.max_prompts)
        require(scored >= self.min_prompts,
                f"{NAME}: the test split serves {available} prompts (data.max_val_prompts also caps it) and "
                f"{scored} would be scored, fewer than min_prompts={self.min_prompts}; raise the source's "
                "num_test, lift data.max_val_prompts or lower min_prompts")

    # ---- measuring ---------------------------------------------------------------------------------
    def batches(self, trainer: Trainer):
        seen = 0
        for batch in trainer.datamodule.test_dataloader():
            if self.max_prompts is not None:
                if seen >= self.max_prompts:
                    return
                batch = batch.select(list(range(min(len(batch), self.max_prompts - seen))))
            seen += len(batch)
            yield batch

    @torch.no_grad()
    def score(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, list]:
        """Per prompt: ``id``, ``greedy`` (0/1), ``correct`` (of ``samples``), ``choices`` (k or None)
        and the sampled ``answers``."""
        greedy = SamplingParams(0.0, max_new_tokens=pl_module.sampling.max_new_tokens)
        out: dict[str, list] = {"id": [], "greedy": [], "correct": [], "choices": [], "answers": []}
        with fork_rng(pl_module):
            torch.manual_seed(self.seed)
            for batch in self.batches(trainer):
                step = max(1, MAX_COMPLETIONS_PER_CALL // max(self.samples, 1))
                for start in range(0, len(batch), step):
                    part = batch.select(list(range(start, min(start + step, len(batch)))))
                    self._score_part(pl_module, part, greedy, out)
        return out

    def _score_part(
        self, pl_module, batch: PromptBatch, greedy: SamplingParams, out: dict[str, list]
    ) -> None:
        rewards = pl_module.score(batch, pl_module.engine.rollout(batch, 1, greedy))[0]  # [P, 1]
        out["greedy"] += (rewards[:, 0].nan_to_num(0.0) >= 1.0).long().tolist()
        if self.samples:
            rollouts = pl_module.engine.rollout(batch, self.samples, pl_module.sampling)
            correct = pl_module.score(batch, rollouts)[0].nan_to_num(0.0) >= 1.0  # [P, S]
            out["correct"] += correct.sum(-1).tolist()
            texts = [t.strip() for t in rollouts.texts]
            out["answers"] += [texts[i * self.samples : (i + 1) * self.samples] for i in range(len(batch))]
        else:
            out["correct"] += [0] * len(batch)
            out["answers"] += [[] for _ in range(len(batch))]
        out["id"] += [str(i) for i in batch.ids]
        k = batch.columns.get("num_choices")
        out["choices"] += [int(v) for v in k] if k is not None else [None] * len(batch)

    def summary(self, result: dict[str, list]) -> dict[str, float]:
        """The metrics of one scoring (names without the ``test/`` prefix)."""
        n = len(result["id"])
        metrics: dict[str, float] = {"num_prompts": float(n)}
        if n == 0:
            return metrics

        def mean_se(name: str, values: torch.Tensor) -> None:
            metrics[name] = values.mean().item()
            metrics[f"{name}_se"] = values.std(correction=1).item() / math.sqrt(n) if n > 1 else math.nan

        mean_se("accuracy", torch.tensor(result["greedy"], dtype=torch.float64))
        if not self.samples:
            return metrics
        c = torch.tensor(result["correct"], dtype=torch.long)  # [P]
        rate = c.double() / self.samples
        mean_se("reward_mean", rate)
        if self.pass_at_k:
            for k in pass_at_k_ks(self.samples):
                mean_se(f"pass@{k}", pass_at_k_per_prompt(c, self.samples, k).double())
        counts = Counter(a for answers in result["answers"] for a in answers)
        total = sum(counts.values())
        probs = torch.tensor([v / total for v in counts.values()], dtype=torch.float64)
        metrics["answer_entropy"] = -(probs * probs.log()).sum().item()
        metrics["answer_top_share"] = probs.max().item()
        if all(k is not None for k in result["choices"]):
            chance = 1.0 / torch.tensor(result["choices"], dtype=torch.float64)  # [P]
            metrics["chance"] = chance.mean().item()
            mean_se("skill", (rate - chance) / (1 - chance))
        return metrics

    # ---- hooks -------------------------------------------------------------------------------------
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.before or self.start is not None:  # not again on resume
            return
        self.start = self.score(trainer, pl_module)
        metrics = {f"test/before/{k}": v for k, v in self.summary(self.start).items()}
        log_scalars(trainer, metrics, trainer.global_step)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        result = self.score(trainer, pl_module)
        metrics = {f"test/{k}": v for k, v in self.summary(result).items()}
        log_scalars(trainer, metrics, trainer.global_step)
        self.write(trainer, result)
        lines = [f"  {k:<24} {v:.4f}" for k, v in metrics.items()]
        rank_zero_only(print)(f"Test split ({len(result['id'])} prompts):\n" + "\n".join(lines))

    def write(self, trainer: Trainer, result: dict[str, list]) -> Path | None:
        """``test_prompts.csv`` in the first logger's directory (rank 0 only)."""
        log_dir = trainer.loggers[0].log_dir if trainer.loggers else None
        if not trainer.is_global_zero or log_dir is None:
            return None
        path = Path(log_dir) / PROMPTS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        before = self.start if self.start is not None and self.start["id"] == result["id"] else None
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(
                ["id", "greedy", "correct", "samples"]
                + (["before_greedy", "before_correct"] if before else [])
            )
            for i in range(len(result["id"])):
                row = [result["id"][i], result["greedy"][i], result["correct"][i], self.samples]
                w.writerow(row + ([before["greedy"][i], before["correct"][i]] if before else []))
        return path

    def state_dict(self) -> dict:
        return {"start": self.start}

    def load_state_dict(self, state_dict: dict) -> None:
        self.start = state_dict.get("start")
