"""An experiment: arms (estimators) x seeds x sweep settings, the metrics to report, quick mode.

Frozen dataclasses; :func:`lit_grpo.lab.loader.load_experiment` reads them from YAML and checks
them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Reduce = Literal["last", "first", "delta", "mean", "min", "max", "tail"]
Transform = Literal["none", "chance_corrected", "guess_share"]
Tests = Literal["arms", "settings", "both"]
CurveX = Literal["step", "completions", "tokens"]
#: The logged cumulative counter behind each curve x other than the step (GRPOModule logs them).
X_METRICS = {"completions": "rollout/completions_generated", "tokens": "rollout/tokens_generated"}
DEFAULT_SEED_ARGS = ("--seed_everything={seed}", "--data.seed={seed}")


@dataclass(frozen=True)
class Arm:
    """One compared variant: LightningCLI overlays and/or an estimator by name, plus extra arguments."""

    label: str
    configs: tuple[str, ...] = ()
    estimator: str | None = None
    init_args: dict[str, Any] = field(default_factory=dict)
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Metric:
    """A logged scalar reduced to one number per run (then summarised over seeds)."""

    name: str
    reduce: Reduce = "last"
    tail: float = 0.2  # share of the last logged points averaged by reduce: tail
    transform: Transform = "none"
    chance: float | None = None  # the guess rate 1/k of chance_corrected and guess_share
    test_against: float | None = None  # also test mean == this value (one-sample t and sign-flip)
    label: str | None = None
    primary: bool = False  # its tests belong to the report's multiplicity family
    equivalence: tuple[float, float] | None = None  # (target, margin): TOST of |mean - target| < margin
    prompts: int | None = None  # an accuracy over this many held-out prompts: binomial prompt-sampling SE
    se: str | None = None  # a logged metric holding the run's prompt-sampling SE of this one
    minus: str | None = None  # report the metric minus this one (same reduce), e.g. a gain over the start

    @property
    def key(self) -> str:
        if self.label:
            return self.label
        suffix = "" if self.transform == "none" else f", {self.transform}"
        minus = f" − {self.minus}" if self.minus else ""
        return f"{self.name}{minus} ({self.reduce}{suffix})"


@dataclass(frozen=True)
class Curve:
    """Logged metrics against the training step, or against the completions or completion tokens generated
    so far (``x``: compute-matched; dynamic sampling's refills count), mean and 95% band over seeds per arm
    and setting."""

    metrics: tuple[str, ...]
    smooth: int = 1  # trailing moving average over this many logged points, per run
    title: str = ""
    x: CurveX = "step"


@dataclass(frozen=True)
class Profile:
    """Several metrics as one curve over ``x`` (e.g. pass@k against k), for each reduce and arm."""

    metrics: tuple[str, ...]
    x: tuple[float, ...]
    reduces: tuple[Reduce, ...] = ("last",)
    xlabel: str = ""
    log2: bool = False
    title: str = ""
    baseline: tuple[str, ...] = ()  # one metric per x to compare with (e.g. the starting policy's pass@k)


@dataclass(frozen=True)
class Prepare:
    """A ``lit-grpo`` command run once before the grid, whose ``{output}`` directory runs can use."""

    name: str
    command: tuple[str, ...]
    quick_args: tuple[str, ...] = ()
    # what the step must reach for the experiment to mean what it says (e.g. a starting policy's accuracy):
    # a metric the step logs, reduced over its steps, and the bounds it must lie within
    require: Requirement | None = None
    configs: tuple[str, ...] = ()  # the config files its ``--config`` arguments name, as found


@dataclass(frozen=True)
class Requirement:
    """A prepare step's output must have ``metric`` (reduced over the step's log) within ``[low, high]``;
    else the experiment stops before its runs, naming the value reached. Not checked in quick mode."""

    metric: Metric
    low: float | None = None
    high: float | None = None

    def describe(self) -> str:
        bounds = [f"{op} {v:g}" for op, v in ((">=", self.low), ("<=", self.high)) if v is not None]
        return f"{self.metric.name} ({self.metric.reduce}) {' and '.join(bounds)}"

    def met(self, value: float) -> bool:
        inside = (self.low is None or value >= self.low) and (self.high is None or value <= self.high)
        return value == value and inside  # NaN (never logged) never meets it


@dataclass(frozen=True)
class Select:
    """Two-stage design: each arm's value of one sweep ``axis`` (e.g. the learning rate) is chosen on
    ``seeds`` of their own by the best mean of ``metric`` (on the validation split); the experiment's
    seeds then run at the chosen value only."""

    axis: str
    metric: Metric
    seeds: tuple[int, ...]
    mode: Literal["max", "min"] = "max"


@dataclass(frozen=True)
class Resources:
    """What one run needs where a scheduler places it (``--executor ray`` or ``slurm``; the local executor
    runs ``--jobs`` at a time and reads only ``threads_per_run``): CPUs (default: ``threads_per_run``), GPUs
    and memory."""

    cpus: int = 1
    gpus: float = 0
    memory_gb: float | None = None


@dataclass(frozen=True)
class Experiment:
    name: str
    path: str
    claim: str
    base: tuple[str, ...]
    arms: tuple[Arm, ...]
    seeds: tuple[int, ...]
    metrics: tuple[Metric, ...]
    args: tuple[str, ...] = ()
    sweep: tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]], ...] = ()  # ((axis, ((label, args),)),)
    prepare: tuple[Prepare, ...] = ()
    curves: tuple[Curve, ...] = ()
    profiles: tuple[Profile, ...] = ()
    threads_per_run: int = 1
    resources: Resources = Resources()
    seed_args: tuple[str, ...] = DEFAULT_SEED_ARGS
    tests: Tests = "arms"
    reference: str | None = None  # compare every arm with this one only (not every pair)
    select: Select | None = None
    test: dict[str, Any] | None = None  # init_args of lit_grpo.callbacks.TestSplitReport, added to every run
    runtime: str = ""
    quick: bool = False
    callbacks: tuple[str, ...] = ()  # class paths of the callbacks its configs and arguments name
    extras: tuple[str, ...] = ()  # the optional extras its runs need (lit_grpo.extras), e.g. ("reasoning",)

    @property
    def family_metrics(self) -> tuple[Metric, ...]:
        """The metrics whose tests form the multiplicity family: those marked primary, else all."""
        primary = tuple(m for m in self.metrics if m.primary)
        return primary or self.metrics

    def all_metrics(self) -> tuple[Metric, ...]:
        """Table metrics plus the (metric, reduce) pairs the profiles draw."""
        extra = tuple(Metric(m, r) for p in self.profiles for r in p.reduces for m in p.metrics + p.baseline)
        return tuple(dict.fromkeys(self.metrics + extra))
