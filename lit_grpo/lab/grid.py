"""The grid of an experiment: one ``lit-grpo fit`` command per arm x setting x seed, and where it writes."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from lit_grpo.checks import require
from lit_grpo.lab.registry import TEST_SPLIT_REPORT
from lit_grpo.lab.spec import Arm, Experiment, Prepare

#: Arguments every run gets before the experiment's own (which may override them).
DEFAULT_ARGS = ("--trainer.enable_checkpointing=false",)
#: The TensorBoard directory of a run, relative to its run directory.
EVENTS_SUBDIR = "tb/version_0"


@dataclass(frozen=True)
class Run:
    """One grid cell: the arm, the sweep setting (``((axis, label), ...)``), the seed and its command."""

    arm: str
    setting: tuple[tuple[str, str], ...]
    seed: int
    args: tuple[str, ...]  # lit-grpo arguments, starting with "fit"
    run_dir: Path
    chosen: tuple[tuple[str, str], ...] = ()  # ((axis, label),): the value the selection stage chose

    @property
    def setting_label(self) -> str:
        return setting_label(self.setting)

    @property
    def run_id(self) -> str:
        return f"{self.arm}/{self.setting_label}/seed{self.seed}"

    @property
    def events_dir(self) -> Path:
        return self.run_dir / EVENTS_SUBDIR

    @property
    def log_path(self) -> Path:
        return self.run_dir / "run.log"


def setting_label(setting: tuple[tuple[str, str], ...]) -> str:
    """``lr=1e-4,policy=weak`` (``default`` without a sweep)."""
    return ",".join(f"{axis}={label}" for axis, label in setting) or "default"


def shell_command(args: tuple[str, ...] | list[str], threads: int) -> str:
    """The command line a person types to repeat a run."""
    return f"OMP_NUM_THREADS={threads} lit-grpo {shlex.join(args)}"


def out_dir(exp: Experiment, root: str | Path = "runs/experiments") -> Path:
    """Where an experiment's runs and report go (quick mode apart)."""
    return Path(root) / (f"{exp.name}-quick" if exp.quick else exp.name)


def prepare_args(step: Prepare, quick: bool) -> tuple[str, ...]:
    return step.command + (step.quick_args if quick else ())


def prepare_output(step: Prepare, quick: bool, root: str | Path = "runs/experiments") -> Path:
    """The cached output directory of a prepare step; a different command gets a different directory."""
    digest = hashlib.sha256(json.dumps(prepare_args(step, quick)).encode()).hexdigest()[:10]
    return Path(root) / ("prepared-quick" if quick else "prepared") / f"{step.name}-{digest}"


def substitute(
    text: str, prepared: dict[str, Path], seed: int | None = None, output: Path | None = None
) -> str:
    """Fill ``{prepared.<name>}``, ``{seed}`` and ``{output}`` (other braces, e.g. JSON, are left alone)."""
    text = re.sub(r"\{prepared\.([^}]*)\}", lambda m: str(prepared[m.group(1)]), text)
    if seed is not None:
        text = text.replace("{seed}", str(seed))
    if output is not None:
        text = text.replace("{output}", str(output))
    return text


def _configs(paths: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(x for c in paths for x in ("--config", c))


def _arm_overrides(arm: Arm) -> tuple[str, ...]:
    args: tuple[str, ...] = ()
    if arm.estimator is not None:
        value = arm.estimator
        if arm.init_args:
            value = json.dumps({"class_path": _class_path(arm.estimator), "init_args": arm.init_args})
        args += (f"--model.estimator={value}",)
    return args + arm.args


def _class_path(name: str) -> str:
    return name if "." in name else f"lit_grpo.{name}"


#: A choice of the selection stage: (arm, setting label without the chosen axis) -> the chosen label.
Choice = dict[tuple[str, str], str]


def _settings(exp: Experiment, skip: str | None = None):
    axes = [(axis, items) for axis, items in exp.sweep if axis != skip]
    return list(itertools.product(*[[(axis, lbl, a) for lbl, a in items] for axis, items in axes]))


def _test_args(exp: Experiment) -> tuple[str, ...]:
    if exp.test is None:
        return ()
    spec = {"class_path": TEST_SPLIT_REPORT, "init_args": exp.test}
    return (f"--trainer.callbacks+={json.dumps(spec)}",)


def _run(exp, arm, setting, seed, prepared, base: Path, extra=(), chosen=()) -> Run:
    args = (
        "fit",
        *_configs(exp.base + arm.configs),
        *DEFAULT_ARGS,
        *exp.args,
        *(a for _, _, xs in setting for a in xs),
        *extra,
        *_arm_overrides(arm),
        *exp.seed_args,
    )
    key = tuple((axis, lbl) for axis, lbl, _ in setting)
    run_dir = base / "runs" / arm.label / setting_label(key) / f"seed{seed}"
    args = tuple(substitute(a, prepared, seed) for a in args) + _logger_args(run_dir)
    return Run(arm.label, key, seed, args, run_dir, chosen)


def expand(
    exp: Experiment,
    prepared: dict[str, Path],
    root: str | Path = "runs/experiments",
    choice: Choice | None = None,
) -> list[Run]:
    """Every run of the experiment, seeds outermost and arms innermost: a grid stopped part-way (or run
    with a time limit) has matched arms for every setting at the seeds it finished.

    With a selection stage (``exp.select``), ``choice`` gives each arm's chosen value of the selected
    axis per setting of the other axes; the runs' settings leave that axis out (so the arms of a
    setting pair up by seed whatever each chose) and the chosen value's arguments come with the arm.
    """
    require(exp.select is None or choice is not None,
            f"{exp.name}: the runs depend on the selection stage; pass its choice (select_choice)")
    skip = exp.select.axis if exp.select is not None else None
    values = dict(dict(exp.sweep).get(skip, ())) if skip else {}
    runs = []
    for seed in exp.seeds:
        for setting in _settings(exp, skip):
            for arm in exp.arms:
                extra, chosen = _test_args(exp), ()
                if skip is not None:
                    label = choice[(arm.label, setting_label(tuple((a, lbl) for a, lbl, _ in setting)))]
                    extra, chosen = (*values[label], *extra), ((skip, label),)
                runs.append(_run(exp, arm, setting, seed, prepared, out_dir(exp, root), extra, chosen))
    return runs


def expand_selection(
    exp: Experiment, prepared: dict[str, Path], root: str | Path = "runs/experiments"
) -> list[Run]:
    """The runs of the selection stage: every arm x setting (the selected axis included) x selection
    seed, under ``<out>/select/`` (no test-split scoring: the test split is for the final runs only)."""
    if exp.select is None:
        return []
    base = out_dir(exp, root) / "select"
    return [
        _run(exp, arm, setting, seed, prepared, base)
        for seed in exp.select.seeds
        for setting in _settings(exp)
        for arm in exp.arms
    ]


def standin_choice(exp: Experiment, selection: list[Run]) -> Choice | None:
    """Each arm's first candidate value: the final runs as they would be, for checking them before the
    selection stage has chosen (None without a selection stage)."""
    if exp.select is None:
        return None
    first = dict(exp.sweep)[exp.select.axis][0][0]
    return {(r.arm, without_axis(r.setting, exp.select.axis)): first for r in selection}


def without_axis(setting: tuple[tuple[str, str], ...], axis: str) -> str:
    """The label of ``setting`` with ``axis`` left out."""
    return setting_label(tuple((a, lbl) for a, lbl in setting if a != axis))


def _logger_args(run_dir: Path) -> tuple[str, ...]:
    """Where a run writes, after the experiment's arguments: its logs, and its interrupt checkpoint
    (``<run_dir>/checkpoints/last.ckpt``, which a retried run resumes from), in its own directory."""
    return (
        f"--trainer.default_root_dir={run_dir}",
        f"--trainer.logger.init_args.save_dir={run_dir}",
        "--trainer.logger.init_args.name=tb",
        "--trainer.logger.init_args.version=0",
        "--trainer.enable_progress_bar=false",
    )
