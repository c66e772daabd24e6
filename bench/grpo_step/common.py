"""What both measuring processes of the benchmark share: their options, the prompts, the step clock, the
result.

Imported by :mod:`.lit_worker` (lit-grpo's environment) and :mod:`.trl_worker` (TRL's), so it imports nothing
beyond the standard library.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

PHASES = ["generate_s", "score_s", "forward_s", "backward_s", "optimizer_s"]
#: The counts of a step's rows (:func:`group_counts`)
COUNTS = ("useful_rows", "useful_prompt_tokens", "useful_tokens", "mixed_groups", "groups", "trained_rows",
          "trained_prompt_tokens", "trained_tokens", "useful_context", "trained_context",
          "sampled_prompt_tokens", "sampled_tokens", "sampled_context")


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
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where the policy trains and generates")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workload", choices=["zero", "real", "lora", "quickstart"], default="zero",
                        help="prompts, reward and held-out set (bench/grpo_step/workloads.py)")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--eval-every", type=int, default=0,
                        help="held-out accuracy every this many steps (0: never); its time is not counted")
    parser.add_argument("--eval-samples", type=int, default=0,
                        help="0: greedy accuracy (one completion a prompt); N: sampled, N completions a "
                        "prompt")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--target", type=float, default=None,
                        help="stop at the first evaluation whose held-out accuracy reaches this")
    target.add_argument("--target-gain", type=float, default=None,
                        help="evaluate the starting policy too and stop at the first evaluation this far "
                        "above it")


def bench_prompts(n: int, seed: int = 0) -> list[str]:
    """``n`` two-digit addition prompts (``"12+34="``), the same on both sides."""
    rng = random.Random(seed)
    return [f"{rng.randrange(100)}+{rng.randrange(100)}=" for _ in range(n)]


def step_seed(seed: int, step: int) -> int:
    """The torch seed both runners set right before step ``step``'s (0-based, warm-up included) generation, so
    that both sample each step from the same random state whatever either consumed before."""
    return seed * 1_000_003 + step


class StepClock:
    """Seconds per phase and tokens of each optimizer step; a step ends at :meth:`end_step`, and its
    ``step_s`` is the wall time since the previous step ended."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self._phases: dict[str, float] = defaultdict(float)
        self._open: dict[str, float] = {}
        self._tokens = self._prompt_tokens = 0
        self._last = time.perf_counter()
        self.prompts: list[str] = []  # per step, the digest of its distinct prompts (:func:`prompts_digest`)

    def begin(self) -> None:
        self._last = time.perf_counter()

    def start_step(self, seed: int, prompts: list[str]) -> None:
        """Before a step's generation: record its prompts' digest and reseed torch with :func:`step_seed`, so
        that both runners sample each step from the same random state whatever either consumed before."""
        import torch

        torch.manual_seed(step_seed(seed, len(self.steps)))
        self.prompts.append(prompts_digest(prompts))

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

    def add_counts(self, counts: dict[str, float]) -> None:
        """Extra numbers of the current step (summed if given twice)."""
        for key, value in counts.items():
            self._phases[key] += value

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


def causal_context(prompt_len: int, completion_len: int, prompt: bool = True) -> int:
    """Keys attended by a sequence's tokens under a causal mask (token ``i``, 0-based, attends to ``i + 1``):
    ``p (p + 1) / 2`` over the prompt (``prompt``) plus ``t p + t (t + 1) / 2`` over the completion."""
    p, t = prompt_len, completion_len
    return (p * (p + 1) // 2 if prompt else 0) + t * p + t * (t + 1) // 2


def group_counts(rewards: list[float], prompt_lens: list[int], completion_lens: list[int], group: int,
                 trained_rows: list[bool] | None = None, prompt_once: bool = False) -> dict[str, float]:
    """Token counts of one step's ``N`` rows (group-major, ``group`` rows a prompt). Useful work: the rows of
    groups whose rewards are not all equal (the only rows with a non-zero group-centred advantage), their
    completions and each such group's prompt once. Executed work: the rows a trainer ran forward and backward
    (``trained_rows``; default all), with the prompt once per group that has any (``prompt_once``) or once per
    row. Sampled work (generation): every group's prompt once and every sampled token. Each ``*_context`` is
    the causal attention context of those tokens (:func:`causal_context`), for the FLOP count."""
    useful = dict.fromkeys(COUNTS, 0.0)
    trained_rows = trained_rows if trained_rows is not None else [True] * len(rewards)
    for start in range(0, len(rewards), group):
        rows = range(start, start + group)
        p = prompt_lens[start]
        context = [causal_context(p, completion_lens[i], prompt=False) for i in rows]  # completions only
        scores = {rewards[i] for i in rows if rewards[i] == rewards[i]}  # NaN (unscorable) left out
        useful["groups"] += 1
        useful["sampled_prompt_tokens"] += p
        useful["sampled_tokens"] += sum(completion_lens[i] for i in rows)
        useful["sampled_context"] += causal_context(p, 0) + sum(context)
        if len(scores) > 1:
            useful["mixed_groups"] += 1
            useful["useful_rows"] += group
            useful["useful_prompt_tokens"] += p
            useful["useful_tokens"] += sum(completion_lens[i] for i in rows)
            useful["useful_context"] += causal_context(p, 0) + sum(context)
        trained = [i for i in rows if trained_rows[i]]
        prompts = min(len(trained), 1) if prompt_once else len(trained)  # how often the prompt is encoded
        useful["trained_rows"] += len(trained)
        encoded = prompts * p if prompt_once else sum(prompt_lens[i] for i in trained)
        useful["trained_prompt_tokens"] += encoded
        useful["trained_tokens"] += sum(completion_lens[i] for i in trained)
        useful["trained_context"] += prompts * causal_context(p, 0) + sum(context[i - start] for i in trained)
    return useful


def prompts_digest(prompts: list[str]) -> str:
    """A short digest of one step's distinct prompts, in order: equal on both sides when they sampled from
    the same prompts."""
    distinct = list(dict.fromkeys(prompts))
    return hashlib.sha1("\n".join(distinct).encode()).hexdigest()[:10]


def rss_mib() -> float:
    """Current resident set size of this process in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def emit(clock: StepClock, args: argparse.Namespace, **info) -> None:
    """Print the measurement of one process as a ``RESULT {json}`` line (timed steps only), with the step
    prompts' digests (``clock.prompts``) and the settings both runners report."""
    result = {
        "steps": clock.steps[args.warmup :],
        "threads": args.threads,
        "precision": args.precision,
        "prompts": args.prompts,
        "group": args.group,
        "new_tokens": args.new_tokens,
        "workload": args.workload,
        "peak_rss_mib": peak_rss_mib(),
        "step_prompts": clock.prompts,
        **info,
    }
    print("RESULT " + json.dumps(result), flush=True)
