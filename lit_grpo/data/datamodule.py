"""The DataModule that serves batches of prompts; the training module expands each into a group."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterable
from functools import partial
from itertools import islice
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from lit_grpo.checks import differences, require, require_at_least
from lit_grpo.data.records import BadRowError, OnBadRow, Record, collate_prompts
from lit_grpo.data.sources import PromptSource, Split
from lit_grpo.data.stream import EpochLoader, PromptStream
from lit_grpo.types import PromptBatch

logger = logging.getLogger(__name__)

#: A streamed training split is fingerprinted by this many of its first records (:func:`content_fingerprint`).
STREAM_FINGERPRINT_RECORDS = 1000


def content_fingerprint(records: Iterable[Record], limit: int | None = None) -> str:
    """``"<n> records, sha256 <16 hex digits>"``: a hash of each record's id, prompt, reference and columns,
    in order (the order fixes which prompt a data position means), of at most ``limit`` records (``"first
    <n> records, ..."`` when it stopped there). Checked on resume (:meth:`GRPOModule.fingerprint`), so that a
    checkpoint resumes on the prompts it was trained on, not on as many others."""
    digest, n = hashlib.sha256(), 0
    for record in islice(records, limit):
        row = [record["id"], record["prompt"], record["reference"], record["columns"]]
        digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False, default=repr).encode())
        digest.update(b"\n")
        n += 1
    return f"{'first ' if n == limit else ''}{n} records, sha256 {digest.hexdigest()[:16]}"


def _ignore(error: BadRowError) -> None:
    """A bad row skipped without counting it."""


class SkippedRows:
    """Counts the bad rows skipped per split; the first of each split is logged with its error."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()

    def callback(self, split: Split) -> OnBadRow:
        return partial(self.add, split)

    def add(self, split: Split, error: BadRowError) -> None:
        if not self.counts[split]:
            logger.warning("skipping a bad row of the %s split (skip_bad_rows is set): %s", split, error)
        self.counts[split] += 1


class PromptDataModule(L.LightningDataModule):
    """Batches of prompts from a :class:`PromptSource`.

    Training batches hold exactly ``prompts_per_step`` prompts per process. Each epoch has a new order,
    fixed by ``seed`` and the epoch number; the prompts are dealt to the ranks so that no prompt (and so
    no group) is on two ranks. With ``streaming`` the training split is read from the source one record
    at a time every epoch, through a shuffle buffer, so it need not fit in memory; otherwise it is
    loaded once and fully shuffled. The position in the epoch and in the :meth:`refill` stream is saved
    in checkpoints, counted in prompts, so a resumed run continues with exactly the prompts the
    uninterrupted run would have seen; resuming with settings that change which prompt a position
    means is refused with an error naming them (docs/data.md, "Resume"), and so is one on other prompts, of
    the same number or not: :attr:`train_content` fingerprints the training records (all of them held in
    memory; streamed, the first :data:`STREAM_FINGERPRINT_RECORDS`, as reading a whole stream at every
    start costs a pass over data that need not fit in memory).

    Validation and test prompts are held in memory, in file order (the first ``max_val_prompts``).

    Args:
        source: Where the prompts come from.
        prompts_per_step: Prompts per training step (P); each becomes a group of completions.
        val_batch_size: Prompts per validation / test batch.
        max_val_prompts: Use only the first this many validation / test prompts; None for all.
        seed: Seed of the training order and of the refill stream.
        num_workers: DataLoader worker processes.
        streaming: Read the training split anew each epoch instead of holding it in memory.
        shuffle_buffer: Records in the streaming shuffle buffer (with ``streaming``).
        skip_bad_rows: Skip rows that cannot become prompts (a line that is not UTF-8 or not JSON, a
            missing field, an empty prompt, an unusable reference), counted in :attr:`skipped_rows`, the
            first of each split logged with its error, and the total logged by ``GRPOModule`` as
            ``data/skipped_rows`` every step; otherwise the first one raises an error naming the file,
            line and field. A streamed split counts its bad rows again in every epoch that reads it
            (with ``num_workers > 0``, in the workers, so they do not reach the metric).
        system_prompt: The system prompt of every prompt ("" for none): the system message in the ``chat``
            style, a paragraph before the prompt in ``plain`` and ``think``; records with chat messages that
            hold a system message of their own keep theirs.
    """

    def __init__(
        self,
        source: PromptSource,
        prompts_per_step: int = 16,
        val_batch_size: int = 64,
        max_val_prompts: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        streaming: bool = False,
        shuffle_buffer: int = 10_000,
        skip_bad_rows: bool = False,
        system_prompt: str = "",
    ) -> None:
        super().__init__()
        require(isinstance(system_prompt, str),
                f"PromptDataModule: system_prompt must be a text, got {type(system_prompt).__name__}")
        if system_prompt:
            source.bind_system_prompt(system_prompt)
        self.system_prompt = system_prompt
        require_at_least(
            "PromptDataModule", 1, prompts_per_step=prompts_per_step, val_batch_size=val_batch_size,
            shuffle_buffer=shuffle_buffer,
        )  # fmt: skip
        require(max_val_prompts is None or max_val_prompts >= 1,
                f"PromptDataModule: max_val_prompts={max_val_prompts} must be >= 1 or None (all)")
        require(num_workers >= 0, f"PromptDataModule: num_workers={num_workers} must be >= 0")
        self.source = source
        self.prompts_per_step = prompts_per_step
        self.val_batch_size = val_batch_size
        self.max_val_prompts = max_val_prompts
        self.seed = seed
        self.num_workers = num_workers
        self.streaming = streaming
        self.shuffle_buffer = shuffle_buffer
        self.skip_bad_rows = skip_bad_rows
        self.splits: dict[str, list[Record]] = {}
        self._skipped = SkippedRows()
        self._epoch = 0  # the data epoch of the training position (own count, not Lightning's)
        self._prompts = 0  # training prompts this rank consumed in that epoch
        self._resume = True  # the next training iterator continues at the position above
        self._refill_drawn = 0  # training prompts drawn by refill so far
        self._refill_stream = None
        self.train_content: str | None = None  # the training records' content_fingerprint, once loaded

    @property
    def skipped_rows(self) -> dict[str, int]:
        """Bad rows skipped per split (with ``skip_bad_rows``), in this process."""
        return dict(self._skipped.counts)

    def bind_policy(self, module: Any) -> None:
        """Render chat prompts with the template of ``module``'s model (a module with a ``model_name``,
        e.g. :class:`~lit_grpo.GRPOModule`); :meth:`setup` does it with the trainer's module, a script that
        builds the data module without a trainer calls it itself."""
        if isinstance(getattr(module, "model_name", None), str):
            self.source.bind_tokenizer(module.model_name)

    def setup(self, stage: str | None = None) -> None:
        self.bind_policy(None if self.trainer is None else getattr(self.trainer, "lightning_module", None))
        wanted: list[Split] = {
            "fit": ["train", "val"],
            "validate": ["val"],
            "test": ["test"],
        }.get(stage or "", ["train", "val", "test"])
        for split in wanted:
            if split not in self.splits and (split == "train" or self.source.has_split(split)):
                self._load(split)

    def _load(self, split: Split) -> None:
        records = self.source.stream(split, self._skipped.callback(split) if self.skip_bad_rows else None)
        if split != "train":
            self.splits[split] = list(islice(records, self.max_val_prompts))
        elif not self.streaming:
            self.splits[split] = list(records)
            self._check_size(len(self.splits[split]))
            self.train_content = content_fingerprint(self.splits[split])
        elif next(records, None) is None:  # streamed: fail now on a missing or unreadable file
            self._check_size(0)
        else:  # its first records, read again, past their bad rows: each epoch's read counts or raises them
            head = self.source.stream(split, _ignore)
            self.train_content = content_fingerprint(head, limit=STREAM_FINGERPRINT_RECORDS)

    def _check_size(self, size: int) -> None:
        skipped = self._skipped.counts.get("train", 0)
        why = ""
        if skipped:
            why = f" ({skipped} bad rows were skipped: skip_bad_rows is set; the warnings above name them)"
        require(size >= self.prompts_per_step,
                f"PromptDataModule: the training split has {size} prompts{why}, fewer than "
                f"prompts_per_step={self.prompts_per_step}; lower prompts_per_step or add prompts")

    def train_dataset(
        self, rank: int | None = None, world_size: int | None = None, salt: int = 0
    ) -> PromptStream:
        """The training stream of ``rank`` of ``world_size`` (default: the trainer's, else 0 of 1)."""
        trainer = self.trainer
        if rank is None:
            rank = trainer.global_rank if trainer else 0
        if world_size is None:
            world_size = trainer.world_size if trainer else 1
        if self.streaming:
            on_bad = self._skipped.callback("train") if self.skip_bad_rows else None
            records: Any = partial(self.source.stream, "train", on_bad)
        else:
            records = self._split("train")
        return PromptStream(
            records, self.prompts_per_step, self.seed, rank, world_size, self.shuffle_buffer, salt
        )

    def train_dataloader(self) -> DataLoader:
        return EpochLoader(self.train_dataset(), self._begin_epoch, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader | list:
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader | list:
        return self._eval_loader("test")

    def refill(self, n: int) -> PromptBatch:
        """``n`` further training prompts of this rank from a seeded stream (independent of the
        training order) that cycles over the rank's share of the training set."""
        require(n >= 0, f"PromptDataModule.refill: n={n} must be >= 0")
        if not self.streaming:
            self._split("train")
        if self._refill_stream is None:
            self._refill_stream = self.train_dataset(salt=1).cycle(start=self._refill_drawn)
        records = list(islice(self._refill_stream, n))
        self._refill_drawn += n
        if n == 0:  # an empty batch that still has the columns
            return collate_prompts(list(islice(self.train_dataset(salt=1).cycle(), 1))).select([])
        return collate_prompts(records)

    def state_dict(self) -> dict[str, Any]:
        """The position: the data epoch, the prompts each rank consumed in it (the same on every rank) and
        the number of ranks, the prompts drawn by :meth:`refill` (one count per rank with several ranks:
        they refill apart), and the settings that fix which prompts a position means
        (:meth:`position_settings`)."""
        refill: int | list[int] = self._refill_drawn
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            counts = [None] * torch.distributed.get_world_size()  # every rank writes the checkpoint state
            torch.distributed.all_gather_object(counts, self._refill_drawn)
            refill = [int(c) for c in counts]  # type: ignore[arg-type]
        return {"epoch": self._epoch, "prompts": self._prompts, "world_size": self._world_size(),
                "refill_drawn": refill, "settings": self.position_settings()}

    def position_differences(self, state_dict: dict[str, Any]) -> list[str]:
        """Each setting of :meth:`position_settings` that a saved position (``state_dict``) holds with another
        value, as ``data.<key>: checkpoint X, this run Y``."""
        return differences(state_dict.get("settings", {}), self.position_settings(), prefix="data.")

    def position_settings(self) -> dict[str, Any]:
        """What the saved position depends on: the order's seed, streaming and, streamed, its shuffle buffer
        and the number of processes (each rank shuffles its own share), else the number of training
        prompts (it fixes the permutation). Not among them: ``prompts_per_step`` (the position is counted
        in prompts) and, held in memory, the number of processes (the ranks deal one permutation by
        position, so the prompts consumed are its first ``prompts x ranks``, whatever the number)."""
        settings: dict[str, Any] = {"seed": self.seed, "streaming": self.streaming}
        if self.streaming:
            settings |= {"shuffle_buffer": self.shuffle_buffer, "world_size": self._world_size()}
        elif "train" in self.splits:
            settings["train_prompts"] = len(self.splits["train"])
        return settings

    def _world_size(self) -> int:
        return self.trainer.world_size if self.trainer is not None else 1

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the position; refuses one saved with settings that give its prompts another meaning.

        Held in memory, a position saved with another number of processes continues after the prompts
        consumed in all; when they do not divide evenly among the new ranks, up to ``ranks - 1`` of them are
        seen again (a warning says how many), none is skipped."""
        differ = self.position_differences(state_dict)
        require(not differ,
                "PromptDataModule: the checkpoint's data position was saved with other data settings, so it "
                "does not point at the same prompts in this run: " + "; ".join(differ) + ". Resume with the "
                "checkpoint's settings (the same seed, data and streaming options; streamed, the same number "
                "of processes), or start a new run from exported weights (lit_grpo.callbacks.SavePretrained) "
                "to change them.")
        self._epoch = int(state_dict.get("epoch", 0))
        # checkpoints written before the position was counted in prompts hold batches of prompts_per_step
        prompts = int(state_dict.get("prompts", state_dict.get("batches", 0) * self.prompts_per_step))
        world, saved_world = self._world_size(), int(state_dict.get("world_size", self._world_size()))
        self._prompts, again = divmod(prompts * saved_world, world)
        if again:
            logger.warning(
                "resuming on %d processes a data position saved on %d: %d prompts of this epoch are seen "
                "again",
                world, saved_world, again)
        self._resume = True
        refill = state_dict["refill_drawn"]
        if isinstance(refill, list):
            rank = self.trainer.global_rank if self.trainer is not None else 0
            refill = refill[rank] if rank < len(refill) else 0
        self._refill_drawn = int(refill)
        self._refill_stream = None

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Counts the training prompts consumed (at step time, so prefetched batches do not count)."""
        if self.trainer is None or self.trainer.training:
            self._prompts += len(batch)
        return batch

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        """Prompt batches are text: they stay where they are; the module moves what it tokenizes."""
        if isinstance(batch, PromptBatch):
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def _begin_epoch(self) -> tuple[int, int]:
        """``(epoch, first record)`` for a training iterator starting now (Lightning starts one per
        epoch): the saved position for the first one after setup or a restore, which ends at once when
        that epoch was used up, else the start of the next data epoch."""
        if self._resume:
            self._resume = False
        else:
            self._epoch, self._prompts = self._epoch + 1, 0
        return self._epoch, self._prompts

    def _split(self, split: Split) -> list[Record]:
        if split not in self.splits:
            raise RuntimeError(f"PromptDataModule: the {split} split is not loaded; call setup() first")
        return self.splits[split]

    def _eval_loader(self, split: Split) -> DataLoader | list:
        if split not in self.splits and not self.source.has_split(split):
            return []  # not configured: Lightning skips the loop
        records = self._split(split)
        return DataLoader(
            records,  # type: ignore[arg-type]
            batch_size=self.val_batch_size,
            collate_fn=collate_prompts,
            num_workers=self.num_workers,
            shuffle=False,
        )
