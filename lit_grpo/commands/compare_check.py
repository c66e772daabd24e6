"""Checks of a grid's runs before any starts (``lit-grpo compare``): each distinct run config parses and
builds as LightningCLI would build it, logs to TensorBoard, has the callbacks its reported metrics need, and
names existing models. Here the research lab (:mod:`lit_grpo.lab`, which imports no trainer code) meets the
trainer: the commands hand it ``LitGRPOCLI``."""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import warnings
from pathlib import Path

from lit_grpo.checks import require
from lit_grpo.lab.grid import Run
from lit_grpo.lab.pairing import pairing_of
from lit_grpo.lab.registry import metric_sources
from lit_grpo.lab.report import CellInfo
from lit_grpo.lab.spec import X_METRICS, Experiment


@contextlib.contextmanager
def _quiet_lightning():
    """Lightning's info lines (seed, accelerators) are for runs, not for checking their configs."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _instantiate(run: Run, cli_class: type):
    err = io.StringIO()
    try:
        with (
            _quiet_lightning(),
            contextlib.redirect_stderr(err),
            contextlib.redirect_stdout(io.StringIO()),
            warnings.catch_warnings(),
        ):
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
            return cli_class(args=list(run.args[1:]), run=False)
    except (Exception, SystemExit) as exc:  # jsonargparse reports bad configs by SystemExit
        detail = err.getvalue().strip().splitlines()
        message = "\n".join(detail[-8:]) or f"{type(exc).__name__}: {exc}"
        raise ValueError(
            f"run {run.run_id}: its config does not build:\n{message}\ncommand: lit-grpo {' '.join(run.args)}"
        ) from None


def _class(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _check_metrics(exp: Experiment, cli, run: Run, names: set[str] | None = None) -> None:
    present = [cli.model, *cli.trainer.callbacks]
    if names is None:
        names = {m.name for m in exp.all_metrics()} | {m for c in exp.curves for m in c.metrics}
        names |= {X_METRICS[c.x] for c in exp.curves if c.x in X_METRICS}
        names |= {m.se for m in exp.metrics if m.se is not None} | {m.minus for m in exp.metrics if m.minus}
    for name in sorted(names):
        sources = metric_sources(name, exp.callbacks)
        require(any(isinstance(obj, _class(s)) for s in sources for obj in present),
                f"run {run.run_id}: metric {name!r} is written by {' or '.join(sources)}, which this "
                "run does not have; add the callback to the experiment's args, e.g. "
                f"--trainer.callbacks+={sources[0]}")


def _check_model(cli, run: Run, prepared: dict[str, Path]) -> None:
    from lit_grpo.models.loading import looks_local

    name = str(cli.model.model_name)
    # a prepare step's output, or a path inside it (SavePretrained(merge: true) writes <output>/merged): made
    # later
    if any(Path(name) == p or Path(name).is_relative_to(p) for p in map(Path, prepared.values())):
        return
    if not looks_local(name):
        return
    require(Path(name).expanduser().is_dir(),
            f"run {run.run_id}: model={name!r} is not a directory; fix the path or produce it with a "
            "`prepare` step and refer to it as {prepared.<name>}")


def check_runs(
    exp: Experiment,
    runs: list[Run],
    prepared: dict[str, Path],
    cli_class: type,
    metrics: set[str] | None = None,
) -> dict[tuple[str, str], CellInfo]:
    """Build each distinct arm x setting once (first seed) with ``cli_class`` (the LightningCLI subclass
    ``lit-grpo`` runs, :class:`lit_grpo.cli.LitGRPOCLI`); a ValueError names the first problem.

    ``metrics``: the metric names the runs must write (default: every metric the experiment reports).
    """
    from lightning.pytorch.loggers import TensorBoardLogger

    cells: dict[tuple[str, str], CellInfo] = {}
    for run in runs:
        key = (run.arm, run.setting_label)
        if key in cells:
            continue
        cli = _instantiate(run, cli_class)
        require(isinstance(cli.trainer.logger, TensorBoardLogger),
                f"run {run.run_id}: the trainer logger must be a TensorBoardLogger (the report reads its "
                f"events), got {type(cli.trainer.logger).__name__}")
        _check_metrics(exp, cli, run, metrics)
        _check_model(cli, run, prepared)
        model = cli.model
        cells[key] = CellInfo(
            repr(getattr(model, "estimator", None)),
            str(model.algorithm.aggregation) if hasattr(model, "algorithm") else "",
            int(getattr(model, "group_size", 0)),
            float(model.optim.lr),
            str(model.model_name),
            pairing_of(cli),
        )
    return cells
