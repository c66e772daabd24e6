"""What both runners of ``bench/grpo_step.py`` share: their options, the prompts, the step clock, the result.

Imported by ``bench/grpo_step_lit.py`` (lit-grpo's environment) and ``bench/grpo_step_trl.py`` (TRL's), so
it imports nothing beyond the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

PHASES = ["generate_s", "score_s", "forward_s", "backward_s", "optimizer_s"]


def add_worker_args(parser: argparse.ArgumentParser) -> None:
    """The options every measuring process takes."""
    parser.add_argument("--model", required=True, help="directory of a saved model and tokenizer")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--steps", type=int, default=6, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--prompts", type=int, default=8, help="P")
    parser.add_argument("--group", type=int, default=8, help="G")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)


def bench_prompts(n: int, seed: int = 0) -> list[str]:
    """``n`` two-digit addition prompts (``"12+34="``), the same on both sides."""
    rng = random.Random(seed)
    return [f"{rng.randrange(100)}+{rng.randrange(100)}=" for _ in range(n)]


class StepClock:
    """Seconds per phase and tokens of each optimizer step; a step ends at :meth:`end_step`, and its
    ``step_s`` is the wall time since the previous step ended."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self._phases: dict[str, float] = defaultdict(float)
        self._open: dict[str, float] = {}
        self._tokens = self._prompt_tokens = 0
        self._last = time.perf_counter()

    def begin(self) -> None:
        self._last = time.perf_counter()

    def start(self, phase: str) -> None:
        self._open[phase] = time.perf_counter()

    def stop(self, phase: str) -> None:
        self._phases[phase] += time.perf_counter() - self._open.pop(phase)

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        self.start(phase)
        try:
            yield
        finally:
            self.stop(phase)

    def add_tokens(self, completion: int, prompt: int) -> None:
        self._tokens += completion
        self._prompt_tokens += prompt

    def set_phases(self, phases: dict[str, float]) -> None:
        self._phases.update(phases)

    def end_step(self) -> None:
        now = time.perf_counter()
        row = {
            **self._phases,
            "step_s": now - self._last,
            "tokens": float(self._tokens),
            "prompt_tokens": float(self._prompt_tokens),
        }
        row["tokens_per_s"] = row["tokens"] / row["step_s"]
        self.steps.append(row)
        self._phases, self._tokens, self._prompt_tokens, self._last = defaultdict(float), 0, 0, now


def rss_mib() -> float:
    """Current resident set size of this process in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def emit(clock: StepClock, args: argparse.Namespace, **info) -> None:
    """Print the measurement of one process as a ``RESULT {json}`` line (timed steps only)."""
    result = {
        "steps": clock.steps[args.warmup :],
        "threads": args.threads,
        "precision": args.precision,
        "prompts": args.prompts,
        "group": args.group,
        "new_tokens": args.new_tokens,
        "peak_rss_mib": peak_rss_mib(),
        **info,
    }
    print("RESULT " + json.dumps(result), flush=True)
