"""Wall-clock time per phase of a training step, logged as ``perf/<phase>``."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager


class PhaseTimer:
    """Accumulates seconds per named phase: ``with timer("generate_s"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._start = time.perf_counter()

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - start

    def total(self) -> float:
        """Seconds since the timer was created."""
        return time.perf_counter() - self._start
