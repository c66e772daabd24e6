"""The DataModule that serves batches of prompts; the training module expands each into a group."""

from __future__ import annotations

from typing import Any

import lightning as L
import numpy as np
from torch.utils.data import DataLoader, DistributedSampler

from lit_grpo.data.records import Record, collate_prompts
from lit_grpo.data.sources import PromptSource, Split
from lit_grpo.types import PromptBatch


class PromptDataModule(L.LightningDataModule):
    """Batches of prompts from a :class:`PromptSource`.

    Training batches hold exactly ``prompts_per_step`` prompts (per process), in an order
    reshuffled each epoch from ``seed`` and the epoch number. :meth:`refill` draws further training
    prompts from an independent seeded stream, whose position is saved in checkpoints.

    Args:
        source: Where the prompts come from.
        prompts_per_step: Prompts per training step (P); each becomes a group of completions.
        val_batch_size: Prompts per validation / test batch.
        max_val_prompts: Use only the first this many validation / test prompts; None for all.
        seed: Seed of the training order and of the refill stream.
        num_workers: DataLoader worker processes.
    """

    def __init__(
        self,
        source: PromptSource,
        prompts_per_step: int = 16,
        val_batch_size: int = 64,
        max_val_prompts: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        for name, value in [("prompts_per_step", prompts_per_step), ("val_batch_size", val_batch_size)]:
            if value < 1:
                raise ValueError(f"PromptDataModule: {name}={value} must be >= 1")
        if max_val_prompts is not None and max_val_prompts < 1:
            raise ValueError(
                f"PromptDataModule: max_val_prompts={max_val_prompts} must be >= 1 or None (all)"
            )
        if num_workers < 0:
            raise ValueError(f"PromptDataModule: num_workers={num_workers} must be >= 0")
        self.source = source
        self.prompts_per_step = prompts_per_step
        self.val_batch_size = val_batch_size
        self.max_val_prompts = max_val_prompts
        self.seed = seed
        self.num_workers = num_workers
        self.splits: dict[str, list[Record]] = {}
        self._refill_drawn = 0  # training prompts drawn by refill so far
        self._refill_order: tuple[int, list[int]] = (-1, [])  # (pass over the set, its order)

    def setup(self, stage: str | None = None) -> None:
        wanted: list[Split] = {
            "fit": ["train", "val"],
            "validate": ["val"],
            "test": ["test"],
        }.get(stage or "", ["train", "val", "test"])
        for split in wanted:
            if split not in self.splits and (split == "train" or self.source.has_split(split)):
                self.splits[split] = self.source.load(split)
        train = self.splits.get("train")
        if train is not None and len(train) < self.prompts_per_step:
            raise ValueError(
                f"PromptDataModule: the training split has {len(train)} prompts, fewer than "
                f"prompts_per_step={self.prompts_per_step}; lower prompts_per_step or add prompts"
            )

    def train_dataloader(self) -> DataLoader:
        train = self._split("train")
        trainer = self.trainer
        sampler = DistributedSampler(
            train,  # type: ignore[arg-type]
            num_replicas=trainer.world_size if trainer else 1,
            rank=trainer.global_rank if trainer else 0,
            shuffle=True,
            seed=self.seed,
        )  # a seeded order per epoch; Lightning calls set_epoch
        return self._loader(train, self.prompts_per_step, sampler=sampler, drop_last=True)

    def val_dataloader(self) -> DataLoader | list:
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader | list:
        return self._eval_loader("test")

    def refill(self, n: int) -> PromptBatch:
        """``n`` further training prompts from a seeded stream that cycles over the training set."""
        if n < 0:
            raise ValueError(f"PromptDataModule.refill: n={n} must be >= 0")
        train = self._split("train")
        index = []
        for k in range(self._refill_drawn, self._refill_drawn + n):
            index.append(self._refill_pass(k // len(train))[k % len(train)])
        self._refill_drawn += n
        return collate_prompts(train[:1]).select([]) if n == 0 else collate_prompts([train[i] for i in index])

    def state_dict(self) -> dict[str, Any]:
        return {"refill_drawn": self._refill_drawn}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._refill_drawn = int(state_dict["refill_drawn"])

    def _refill_pass(self, epoch: int) -> list[int]:
        """The order of the refill stream's ``epoch``-th pass over the training set (cached)."""
        if self._refill_order[0] != epoch:
            rank = self.trainer.global_rank if self.trainer else 0
            rng = np.random.default_rng([self.seed, rank, epoch, 1])  # independent of the training order
            self._refill_order = (epoch, rng.permutation(len(self.splits["train"])).tolist())
        return self._refill_order[1]

    def _split(self, split: Split) -> list[Record]:
        if split not in self.splits:
            raise RuntimeError(f"PromptDataModule: the {split} split is not loaded; call setup() first")
        return self.splits[split]

    def _eval_loader(self, split: Split) -> DataLoader | list:
        if split not in self.splits and not self.source.has_split(split):
            return []  # not configured: Lightning skips the loop
        records = self._split(split)[: self.max_val_prompts]
        return self._loader(records, self.val_batch_size, shuffle=False)

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        """Prompt batches are text: they stay where they are; the module moves what it tokenizes."""
        if isinstance(batch, PromptBatch):
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def _loader(self, records: list[Record], batch_size: int, **kwargs: Any) -> DataLoader:
        return DataLoader(
            records,  # type: ignore[arg-type]
            batch_size=batch_size,
            collate_fn=collate_prompts,
            num_workers=self.num_workers,
            **kwargs,
        )
