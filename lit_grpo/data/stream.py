"""The training stream: prompts sharded across ranks, shuffled per epoch, batched, resumable.

Every rank (and every DataLoader worker of a rank) computes the same deterministic order from
``(seed, epoch, rank)``, so the position in an epoch is a single number, the prompts consumed, and
resuming replays the order up to it (whatever the batch size, before or after). Each prompt goes to
exactly one rank, and a group is the completions of one prompt, so no group is split across ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import TypeVar

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from lit_grpo.checks import require
from lit_grpo.data.records import Record, collate_prompts
from lit_grpo.types import PromptBatch

T = TypeVar("T")
#: Records of a split: a list (held in memory) or a function returning a fresh iterator (streamed).
Records = Sequence[Record] | Callable[[], Iterable[Record]]


def shard(items: Iterable[T], index: int, count: int) -> Iterator[T]:
    """The items at positions ``k`` with ``k % count == index``, up to the last complete block of
    ``count`` items, so that every shard gets the same number of items and each item one shard."""
    kept = None
    for k, item in enumerate(items):
        if k % count == index:
            kept = item
        if k % count == count - 1:
            yield kept  # type: ignore[misc]


def shuffle_buffer(items: Iterable[T], size: int, rng: np.random.Generator) -> Iterator[T]:
    """A streaming shuffle: fill a buffer of ``size`` items, then emit a random one and put the next
    item in its place; the rest comes out in random order at the end. Holds ``size`` items at most."""
    buffer: list[T] = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        i = int(rng.integers(size))
        yield buffer[i]
        buffer[i] = item
    for i in rng.permutation(len(buffer)).tolist():
        yield buffer[i]


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive full batches of ``size`` items (a shorter tail is dropped)."""
    it = iter(items)
    while len(batch := list(islice(it, size))) == size:
        yield batch


class PromptStream(IterableDataset):
    """One rank's training prompts of one epoch, in batches of ``batch_size``, from record ``start`` on.

    The order of epoch ``e``: held in memory (``records`` a list), a permutation of all records
    (``torch.randperm`` seeded with ``seed + e``, the order of ``DistributedSampler``) dealt to the
    ranks by position; streamed (``records`` a function giving a fresh iterator), the file order dealt
    to the ranks by position (shifted by ``e``), then shuffled through a buffer of ``shuffle_buffer``
    records seeded by ``(seed, e, rank)``. Either way each rank gets the same number of records and no
    record goes to two ranks; a tail shorter than ``world_size`` records, or than a batch, is dropped.

    With DataLoader workers every worker computes the rank's order and yields every
    ``num_workers``-th batch, so the batches arrive in the same order as without workers.

    Args:
        records: The training records, or a function that streams them.
        batch_size: Prompts per batch (P).
        seed: Seed of the order.
        rank: This process's rank.
        world_size: Number of ranks.
        shuffle_buffer: Records in the streaming shuffle buffer.
        salt: 0 for the training order, 1 for the independent refill order.
    """

    def __init__(
        self,
        records: Records,
        batch_size: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        shuffle_buffer: int = 10_000,
        salt: int = 0,
    ) -> None:
        require(
            0 <= rank < world_size, f"PromptStream: rank={rank} must be in 0..world_size-1 "
                                    f"(world_size={world_size})"
        )
        self.records = records
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.shuffle_buffer = shuffle_buffer
        self.salt = salt
        self.epoch = 0
        self.start = 0

    def ordered(self, epoch: int) -> Iterator[Record]:
        """This rank's records of ``epoch``, in order."""
        if callable(self.records):  # streamed
            index = (self.rank - epoch) % self.world_size
            rng = np.random.default_rng([self.seed, epoch, self.rank, self.salt])
            yield from shuffle_buffer(shard(self.records(), index, self.world_size), self.shuffle_buffer, rng)
            return
        n = len(self.records)
        if self.salt == 0:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed + epoch)).tolist()
        else:
            order = np.random.default_rng([self.seed, epoch, self.salt]).permutation(n).tolist()
        yield from (self.records[i] for i in shard(order, self.rank, self.world_size))

    def __iter__(self) -> Iterator[PromptBatch]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        records = _Counting(self.ordered(self.epoch))
        for j, batch in enumerate(batched(islice(records, self.start, None), self.batch_size)):
            if j % workers == worker:
                yield collate_prompts(batch)
        require(records.count >= self.batch_size,  # the epoch has no full batch at all
                f"the training split gives rank {self.rank} of {self.world_size} no full batch of "
                f"prompts_per_step={self.batch_size} prompts; lower prompts_per_step or add prompts")

    def cycle(self, start: int = 0) -> Iterator[Record]:
        """This rank's records over epochs 0, 1, 2, ... without end, from record ``start`` on."""
        epoch, emitted = 0, 0
        while True:
            count = 0
            for record in self.ordered(epoch):
                count += 1
                if emitted >= start:
                    yield record
                emitted += 1
            require(
                count != 0, f"the training split gives rank {self.rank} of {self.world_size} no prompts to "
                            "draw from"
            )
            epoch += 1


class _Counting(Iterator[T]):
    """An iterator that counts the items taken from it."""

    def __init__(self, items: Iterable[T]) -> None:
        self.items, self.count = iter(items), 0

    def __next__(self) -> T:
        item = next(self.items)
        self.count += 1
        return item


class EpochLoader(DataLoader):
    """A DataLoader over a :class:`PromptStream` that asks ``begin()`` for ``(epoch, start record)``
    each time iteration starts (before workers copy the dataset).

    It reports itself resumable to Lightning (``state_dict``/``load_state_dict``): the position lives
    in the DataModule's checkpoint state, which Lightning restores before the loader is built.
    """

    def __init__(
        self, dataset: PromptStream, begin: Callable[[], tuple[int, int]], num_workers: int = 0
    ) -> None:
        super().__init__(dataset, batch_size=None, num_workers=num_workers)
        self._begin = begin

    def __iter__(self):
        self.dataset.epoch, self.dataset.start = self._begin()
        return super().__iter__()

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        """Nothing to do: the DataModule restores the position."""
