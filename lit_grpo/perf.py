"""Wall-clock time per phase of a training step, logged as ``perf/<phase>``; what the fast paths remember
about the models they fall back on."""

from __future__ import annotations

import logging
import time
import weakref
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


class Fallback:
    """A fast path's memory of why it cannot serve a model: the reason found for a model at run time (kept
    while the model lives), and each reason logged once per process as ``message % reason``."""

    def __init__(self, logger: logging.Logger, message: str) -> None:
        self._logger, self._message = logger, message
        self._logged: set[str] = set()
        self._models: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def remembered(self, model: object) -> str | None:
        """The reason found earlier for ``model`` (None when none was)."""
        return self._models.get(model)

    def remember(self, model: object, reason: str) -> None:
        self._models[model] = reason

    def say(self, reason: str) -> None:
        """Log ``reason`` unless it was logged before."""
        if reason not in self._logged:
            self._logged.add(reason)
            self._logger.info(self._message, reason)

    def forget_logged(self) -> None:
        """Log every reason again when next given (a fresh process's behaviour)."""
        self._logged.clear()


def attention_refusal(model: object, consequence: str) -> str | None:
    """Why a cache of ``model`` is not every layer's whole keys and values: layers with other than full
    attention (``consequence`` says what that breaks); None when every layer attends fully."""
    config = getattr(model, "config", None)
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    kinds = set(getattr(text, "layer_types", None) or ["full_attention"])
    if kinds == {"full_attention"}:
        return None
    others = sorted(kinds - {"full_attention"})
    return f"{type(model).__name__} has layers with {others} attention, {consequence}"
