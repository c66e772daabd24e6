"""The research lab: multi-seed comparisons of estimators, the library of ``lit-grpo compare --config
experiments/<name>.yaml`` (:mod:`lit_grpo.commands.compare`). It imports no trainer code (docs/design.md,
tests/test_layers.py): the command builds each run's config with the trainer's CLI
(:mod:`lit_grpo.commands.compare_check`), and each run is a ``lit-grpo fit`` child process.

An experiment config names arms (estimators), seeds, optional sweep axes and the metrics to report;
:func:`load_experiment` reads and checks it, :func:`expand` makes one ``lit-grpo fit`` command per arm x
setting x seed, :func:`run_grid` runs them in separate processes (resumable), :func:`collect` reads
their TensorBoard events and :func:`write_report` writes the markdown report with its figures.
"""

from lit_grpo.lab.collect import collect, read_scalars, reduce_series
from lit_grpo.lab.grid import Run, expand
from lit_grpo.lab.loader import load_experiment
from lit_grpo.lab.report import write_report
from lit_grpo.lab.runner import run_grid, run_prepare
from lit_grpo.lab.spec import Arm, Curve, Experiment, Metric, Prepare, Profile
from lit_grpo.lab.stats import one_sample_t_test, sign_flip_test

__all__ = [
    "Arm",
    "Curve",
    "Experiment",
    "Metric",
    "Prepare",
    "Profile",
    "Run",
    "load_experiment",
    "expand",
    "run_prepare",
    "run_grid",
    "collect",
    "read_scalars",
    "reduce_series",
    "write_report",
    "one_sample_t_test",
    "sign_flip_test",
]
