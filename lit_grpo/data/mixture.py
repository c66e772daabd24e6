"""Several prompt sources as one (``MixedSource``): the training split drawn from them with weights and a
seed, the held-out splits one after another.

The training records are a seeded weighted interleave of the sources' training streams: each next record
comes from source i with probability ``weights[i] / sum(weights)``, taken in that source's own order. With
``stop: first_exhausted`` (the default, as ``datasets.interleave_datasets``) the mix ends when one source
runs out, so every weight holds to the end; with ``all_exhausted`` a source that runs out starts again until
every source has been read through once (the small ones are repeated). Validation and test hold every
source's split in full, in the order of ``sources``, so each is scored on all of its held-out prompts.

A record's id gets the index of its source (``train-3`` of the second source is ``train-3@1``), so ids
stay unique across the mix.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Literal

import numpy as np

from lit_grpo.checks import require
from lit_grpo.data.records import OnBadRow, Record
from lit_grpo.data.sources import PromptSource, Split

Stop = Literal["first_exhausted", "all_exhausted"]


class MixedSource(PromptSource):
    """Prompts of several sources, mixed with weights.

    Args:
        sources: The prompt sources (each any :class:`PromptSource`, configured as usual).
        weights: The share of the training records each source gives (any positive numbers; normalised);
            unset: equal shares.
        seed: Seed of the draw that decides which source gives the next training record.
        stop: ``first_exhausted`` (end the training split when one source runs out) or ``all_exhausted``
            (repeat the sources that run out until every source has been read through).
    """

    def __init__(
        self,
        sources: list[PromptSource],
        weights: list[float] | None = None,
        seed: int = 0,
        stop: Stop = "first_exhausted",
    ) -> None:
        require(isinstance(sources, list | tuple) and len(sources) >= 1
                and all(isinstance(s, PromptSource) for s in sources),
                f"MixedSource: sources must be a non-empty list of prompt sources, got {sources!r:.120}")
        weights = [1.0] * len(sources) if weights is None else [float(w) for w in weights]
        require(len(weights) == len(sources),
                f"MixedSource: {len(weights)} weights for {len(sources)} sources; give one weight per source")
        require(all(math.isfinite(w) and w > 0 for w in weights),
                f"MixedSource: weights={weights} must all be finite and > 0 (drop a source instead of "
                "weighting it 0)")
        require(stop in ("first_exhausted", "all_exhausted"),
                f"MixedSource: stop={stop!r}; use first_exhausted or all_exhausted")
        self.sources = list(sources)
        self.weights = weights
        self.seed = seed
        self.stop = stop

    def has_split(self, split: Split) -> bool:
        if split == "train":
            return all(s.has_split("train") for s in self.sources)
        return any(s.has_split(split) for s in self.sources)

    def bind_tokenizer(self, name: str) -> None:
        for source in self.sources:
            source.bind_tokenizer(name)

    def bind_system_prompt(self, text: str) -> None:
        for source in self.sources:
            source.bind_system_prompt(text)

    def load(self, split: Split) -> list[Record]:
        return list(self.stream(split))

    def stream(self, split: Split, on_bad_row: OnBadRow | None = None) -> Iterator[Record]:
        if split != "train":
            require(self.has_split(split), f"MixedSource: none of its sources has a {split} split")
            for i, source in enumerate(self.sources):
                if source.has_split(split):
                    yield from (_tagged(r, i) for r in source.stream(split, on_bad_row))
            return
        missing = [i for i, s in enumerate(self.sources) if not s.has_split("train")]
        require(not missing, f"MixedSource: sources {missing} have no train split; every source of the mix "
                             "gives training records")
        streams = [iter(s.stream("train", on_bad_row)) for s in self.sources]
        read_through = [False] * len(self.sources)
        share = np.asarray(self.weights) / sum(self.weights)
        rng = np.random.default_rng(self.seed)
        while True:
            i = int(rng.choice(len(share), p=share))
            record = next(streams[i], None)
            if record is None:  # source i ran out
                read_through[i] = True
                if self.stop == "first_exhausted" or all(read_through):
                    return
                streams[i] = iter(self.sources[i].stream("train", on_bad_row))
                record = next(streams[i], None)
                require(record is not None, f"MixedSource: source {i} ({type(self.sources[i]).__name__}) "
                                            "has no training records")
            yield _tagged(record, i)


def _tagged(record: Record, source: int) -> Record:
    return {**record, "id": f"{record['id']}@{source}"}
