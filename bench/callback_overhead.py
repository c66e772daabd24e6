"""Overhead of each diagnostic callback as a percentage of the quickstart's training step time.

    python bench/callback_overhead.py                  # configs/diagnostics.yaml, 60 steps
    python bench/callback_overhead.py --steps 100 --config configs/diagnostics.yaml

Runs the config (the quickstart with every diagnostic callback on) for ``--steps`` steps with one
validation at the end, and times every hook of every diagnostic callback. A callback's overhead is

    (its per-step hook time per step
     + its time per validation / the quickstart's val_check_interval
     + its one-off time at the start / the quickstart's max_steps) / the mean step time

where the step time is the training step without any callback time inside it (the first
``--warmup`` steps are left out of both). A callback that measures every ``every_n_steps`` steps, more
than a bench run lasts (``GradientFidelity``), counts its mean time per measurement (step 0 included)
divided by ``every_n_steps`` instead of its per-step hook time. Prints a markdown table; budgets: GradientRank under 10%,
the others under 2%. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
import yaml
from lightning import Callback

ROOT = Path(__file__).resolve().parents[1]
DIAGNOSTICS = (
    "DegeneracyMonitor",
    "PassAtK",
    "GradientRank",
    "GradientBudget",
    "AdvantageStats",
    "CompletionSamples",
    "WeightCurve",
    "ShadowEstimators",
    "GradientFidelity",
)
BUDGET_PCT = {"GradientRank": 10.0, "ShadowEstimators": 10.0, "GradientFidelity": 10.0}
#: Callbacks that measure at steps 0, n, 2n, ... with n (their ``every_n_steps``) beyond a bench run: their
#: overhead is their mean time per measurement (step 0 included) / n.
PERIODIC = {"GradientFidelity"}
HOOKS = sorted(
    {n for n in dir(Callback) if n.startswith("on_")} - {"on_save_checkpoint", "on_load_checkpoint"}
)
STEP_HOOKS = {
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_optimizer_step",
    "on_before_backward",
    "on_after_backward",
    "on_before_zero_grad",
}
START_HOOKS = {"on_fit_start", "on_train_start", "on_train_epoch_start"}


class Timed(Callback):
    """Runs a callback's hooks and adds up their wall-clock seconds by hook and by training step."""

    def __init__(self, inner: Callback, clock: StepClock) -> None:
        self.inner, self.clock = inner, clock
        self.seconds: dict[str, float] = defaultdict(float)
        self.step_seconds: dict[int, float] = defaultdict(float)  # all per-step hooks
        self.inside_seconds: dict[int, float] = defaultdict(float)  # those inside the clock's window

    @property
    def state_key(self) -> str:
        return self.inner.state_key

    def setup(self, *args, **kwargs):
        return self.inner.setup(*args, **kwargs)

    def teardown(self, *args, **kwargs):
        return self.inner.teardown(*args, **kwargs)


def _timed(hook: str):
    def call(self: Timed, *args, **kwargs):
        start = time.perf_counter()
        out = getattr(self.inner, hook)(*args, **kwargs)
        seconds = time.perf_counter() - start
        self.seconds[hook] += seconds
        if hook in STEP_HOOKS:
            self.step_seconds[self.clock.step] += seconds
            if hook != "on_train_batch_end":
                self.inside_seconds[self.clock.step] += seconds
        return out

    return call


for _hook in HOOKS:
    setattr(Timed, _hook, _timed(_hook))


class StepClock(Callback):
    """Wall time of each training step, from batch start to the first ``on_train_batch_end``."""

    def __init__(self) -> None:
        self.step, self.start, self.seconds = -1, 0.0, {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.step = trainer.global_step
        self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.seconds[self.step] = time.perf_counter() - self.start


def run(config: Path, steps: int, logdir: str):
    """Fit ``steps`` steps of ``config`` with timed diagnostic callbacks; returns (clock, {name: Timed})."""
    from lit_grpo.cli import LitGRPOCLI

    args = [
        "--config",
        str(config),
        f"--trainer.max_steps={steps}",
        f"--trainer.val_check_interval={steps}",
        "--trainer.enable_checkpointing=false",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        f"--trainer.logger.init_args.save_dir={logdir}",
    ]
    sys.argv = sys.argv[:1]  # the CLI reads its arguments from ``args`` only
    cli = LitGRPOCLI(args=args, run=False)
    clock, timed, kept = StepClock(), {}, []
    for cb in cli.trainer.callbacks:
        name = type(cb).__name__
        if name in DIAGNOSTICS:
            timed[name] = Timed(cb, clock)
            kept.append(timed[name])
        elif name != "HeldOutReport":  # not a diagnostic: left out of the timing run
            kept.append(cb)
    cli.trainer.callbacks[:] = [clock, *kept]  # the clock's batch-end runs first
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return clock, timed


def table(clock: StepClock, timed: dict[str, Timed], warmup: int, quickstart: dict) -> tuple[str, bool]:
    steps = [s for s in clock.seconds if s >= warmup]
    inside = {s: sum(t.inside_seconds.get(s, 0.0) for t in timed.values()) for s in steps}
    base = sum(clock.seconds[s] - inside[s] for s in steps) / len(steps)
    val_every, max_steps = quickstart["val_check_interval"], quickstart["max_steps"]
    lines = [
        f"Mean quickstart step without callbacks: {base * 1000:.1f} ms (steps {warmup}-{max(steps)}).",
        "",
        "| callback | per step (ms) | per validation (s) | once at start (s) | overhead (% of step) | budget |",
        "|---|---|---|---|---|---|",
    ]
    ok = True
    for name, t in timed.items():
        per_step = sum(t.step_seconds.get(s, 0.0) for s in steps) / len(steps)
        if name in PERIODIC:
            n = t.inner.every_n_steps
            measured = [s for s in clock.seconds if s % n == 0]
            per_step = sum(t.step_seconds.get(s, 0.0) for s in measured) / max(len(measured), 1) / n
        per_val = sum(v for k, v in t.seconds.items() if k.startswith("on_validation"))
        once = sum(v for k, v in t.seconds.items() if k in START_HOOKS)
        pct = 100 * (per_step + per_val / val_every + once / max_steps) / base
        limit = BUDGET_PCT.get(name, 2.0)
        ok &= pct < limit
        lines.append(
            f"| {name} | {per_step * 1000:.2f} | {per_val:.2f} | {once:.2f} | {pct:.2f} | "
            f"< {limit:g}% {'ok' if pct < limit else 'OVER'} |"
        )
    return "\n".join(lines), ok


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "diagnostics.yaml"))
    parser.add_argument(
        "--quickstart",
        default=str(ROOT / "configs" / "quickstart.yaml"),
        help="where val_check_interval and max_steps are read from",
    )
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    if args.steps <= args.warmup:
        raise SystemExit(f"--steps={args.steps} must exceed --warmup={args.warmup}")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.chdir(ROOT)  # the configs name assets/ relative to the repository
    quickstart = yaml.safe_load(Path(args.quickstart).read_text())["trainer"]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as logdir:
        clock, timed = run(Path(args.config), args.steps, logdir)
    text, ok = table(clock, timed, args.warmup, quickstart)
    print(
        f"\n{_cpu()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, torch {torch.__version__}; "
        f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; "
        f"{args.steps} steps of {args.config}\n"
    )
    print(text)
    print("\nall within budget" if ok else "\nsome callbacks are over budget")


if __name__ == "__main__":
    main()
