"""``lit-grpo compare --config experiments/<name>.yaml [--quick]``: run an experiment grid and report it
(:mod:`lit_grpo.lab`).

Every config is read and every distinct run config is built (as LightningCLI would) before any run starts, so
an unknown estimator, metric, option or file fails at once. Then, per experiment: the prepare steps (cached),
the runs (finished ones skipped), and the report under ``<root>/<name>[-quick]/report.md``. The runs execute
here, or as Ray tasks or Slurm jobs (``--executor``; :mod:`lit_grpo.lab.executors`, docs/grids.md). The exit
code is 1 when a run failed (the report still lists it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

#: Where the runs execute (lit_grpo.lab.executors; importing it here would load torch for every command).
EXECUTORS = ("local", "ray", "slurm")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lit-grpo compare",
        description="Run experiment grids (arms x settings x seeds) as separate `lit-grpo fit` processes "
        "and write a report per experiment: tables over seeds, tests, figures, the commands.",
    )
    p.add_argument(
        "--config",
        nargs="+",
        action="extend",
        required=True,
        metavar="YAML",
        help="experiment config(s): files, or built-in experiments by name, e.g. degeneracy "
        "(`lit-grpo configs list`); several run one after another",
    )
    p.add_argument("--quick", action="store_true", help="smoke size: each config's `quick` section (for CI)")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="runs at a time with --executor local (default: CPU cores // the experiment's threads_per_run)",
    )
    p.add_argument("--root", default="runs/experiments", help="where runs, prepared models and reports go")
    p.add_argument("--report-only", action="store_true", help="collect and report without running anything")
    p.add_argument(
        "--dry-run", action="store_true", help="check the configs and print the commands, run nothing"
    )
    p.add_argument("--skip-failed", action="store_true", help="do not retry runs that failed before")
    p.add_argument(
        "--run-timeout", type=float, default=None, help="seconds after which a run is stopped (failed)"
    )
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="where the runs execute: local (this machine, --jobs at a time), ray (a Ray task per run with "
        "the experiment's `resources`; extra lit-grpo[ray]) or slurm (a job per run via submitit, a task per "
        "GPU; extra lit-grpo[slurm]). "
        "ray and slurm need the results directory (--root) on a filesystem every node sees; docs/grids.md",
    )
    p.add_argument(
        "--ray-address",
        metavar="HOST:PORT",
        default=None,
        help="with --executor ray: join this running Ray cluster (default: start Ray on this machine)",
    )
    p.add_argument(
        "--max-retries",
        type=int,
        default=2,
        help="with --executor ray or slurm: times a run is tried again when it exits 75 (interrupted: "
        "pre-empted, or warned of its time limit), is killed by a signal, or its worker (ray) or job (slurm) "
        "dies; it resumes from its checkpoint",
    )
    p.add_argument("--partition", default=None, help="with --executor slurm: the jobs' Slurm partition")
    p.add_argument("--account", default=None, help="with --executor slurm: the jobs' Slurm account")
    p.add_argument("--slurm-time", type=int, default=24 * 60, metavar="MINUTES",
                   help="with --executor slurm: each job's time limit")
    p.add_argument(
        "--publish", metavar="DIR", default=None,
        help="also copy the report, runs.csv (select.csv) and figures to DIR/<name>/, e.g. docs/results "
        "(full mode only), so that the numbers quoted from them can be recomputed from the repository",
    )
    p.add_argument(
        "--from-csv", metavar="CSV", default=None,
        help="with --report-only and one config: rebuild the report's tables from a runs.csv (e.g. "
        "docs/results/<name>/runs.csv) instead of the run directories (no curves)",
    )
    return p


def _record_invocation(out: Path, exp, ran: int, wall: float, jobs: int | str) -> None:
    from lit_grpo.lab.report import INVOCATIONS_FILE, compare_command

    path = out / INVOCATIONS_FILE
    history = json.loads(path.read_text()) if path.is_file() else []
    date = datetime.datetime.now().isoformat(timespec="seconds")
    history.append({"command": compare_command(exp), "date": date, "ran": ran, "wall_s": round(wall, 1),
                    "jobs": jobs, "cpus": os.cpu_count()})
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(history, indent=1))


def _plan(paths: list[str], quick: bool, root: str, cli_class: type):
    """Load and check every experiment; ``(exp, prepared, runs, cells, selection runs)`` each, or a
    ValueError. With a selection stage the final runs are known only after it: ``runs`` is then the
    grid at each arm's first candidate value, checked as a stand-in."""
    from lit_grpo.commands.compare_check import check_runs
    from lit_grpo.lab.grid import expand, expand_selection, standin_choice
    from lit_grpo.lab.loader import load_experiment
    from lit_grpo.lab.runner import prepared_outputs

    plans = []
    for path in paths:
        exp = load_experiment(path, quick=quick)
        prepared = prepared_outputs(exp, root)
        selection = expand_selection(exp, prepared, root)
        if exp.select is not None:
            check_runs(exp, selection, prepared, cli_class, {exp.select.metric.name})
        runs = expand(exp, prepared, root, standin_choice(exp, selection))
        plans.append((exp, prepared, runs, check_runs(exp, runs, prepared, cli_class), selection))
        stage = f"a selection stage of {len(selection)} runs, then " if selection else ""
        print(
            f"{path}: {stage}{len(exp.arms)} arms x {len(runs) // max(1, len(exp.arms) * len(exp.seeds))} "
            f"settings x {len(exp.seeds)} seeds = {len(runs)} runs; configs check out",
            flush=True,
        )
    return plans


def _select(exp, prepared, root, selection, args, executor) -> tuple[list, dict]:
    """Run (unless --report-only) and read the selection stage; its records and the choice."""
    from lit_grpo.lab.collect import collect
    from lit_grpo.lab.grid import out_dir
    from lit_grpo.lab.select import select_choice

    if not args.report_only:
        print(f"-- selection stage: {out_dir(exp, args.root) / 'select'}", flush=True)
        _grid(exp, selection, args, executor)
    records = collect(exp, selection, (exp.select.metric,))
    choice = select_choice(exp, records)
    print(
        "chosen: " + "; ".join(f"{arm} @ {s}: {exp.select.axis}={v}" for (arm, s), v in choice.items()),
        flush=True,
    )
    return records, choice


def compare(argv: list[str]) -> int:
    """run experiment grids (arms x settings x seeds) and report them: lit-grpo compare --config passk"""
    from lit_grpo.cli import LitGRPOCLI  # the runs' configs are checked as `lit-grpo fit` reads them

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs={args.jobs} must be >= 1")
    if args.from_csv and (not args.report_only or len(args.config) != 1):
        parser.error("--from-csv needs --report-only and exactly one --config")
    if args.ray_address and args.executor != "ray":
        parser.error("--ray-address needs --executor ray")
    if (args.partition or args.account) and args.executor != "slurm":
        parser.error("--partition and --account need --executor slurm")
    if args.max_retries < 0:
        parser.error(f"--max-retries={args.max_retries} must be >= 0")
    try:
        plans = _plan(args.config, args.quick, args.root, LitGRPOCLI)
    except (ValueError, FileNotFoundError) as err:
        print(f"lit-grpo compare: error: {err}", file=sys.stderr)
        return 2
    lacking = None if args.report_only or args.dry_run else _missing_extras(plans)
    if lacking:
        print(f"lit-grpo compare: error: {lacking}", file=sys.stderr)
        return 2
    if args.dry_run:
        from lit_grpo.lab.grid import shell_command

        for exp, _, runs, _, selection in plans:
            if selection:
                print("# selection stage")
                print("\n".join(shell_command(r.args, exp.threads_per_run) for r in selection))
                print(f"# then the runs at each arm's chosen {exp.select.axis} (shown at the first value)")
            print("\n".join(shell_command(r.args, exp.threads_per_run) for r in runs))
        return 0
    if args.from_csv:
        return _report_from_csv(plans[0][0], args)
    try:
        executor = None if args.report_only else _executor(args)
    except (ValueError, ConnectionError) as err:  # ConnectionError: ray.init found no cluster
        print(f"lit-grpo compare: error: {err}", file=sys.stderr)
        return 2
    try:
        failed = [_run(plan, args, LitGRPOCLI, executor) for plan in plans]
    finally:
        if executor is not None:
            executor.close()
    return 1 if any(failed) else 0


def _missing_extras(plans) -> str | None:
    """What an experiment needs that is not installed (an optional extra its runs' classes need), or None."""
    from lit_grpo.extras import install_hint, missing

    for exp, *_ in plans:
        for extra in missing(exp.extras):
            return (f"{exp.path}: its runs need the {extra!r} extra, which is not installed; install it with "
                    f"{install_hint(extra)} (nothing was run)")
    return None


def _executor(args):
    """The Ray or Slurm executor of ``--executor`` (None for local: a thread pool per grid, for its
    --jobs)."""
    from lit_grpo.lab.executors import make_executor

    if args.executor == "local":
        return None
    folder = Path(args.root) / ".submitit"
    return make_executor(
        args.executor,
        args.max_retries,
        args.ray_address,
        folder,
        args.partition,
        args.account,
        args.slurm_time,
    )


def _report_from_csv(exp, args) -> int:
    from lit_grpo.lab.grid import out_dir
    from lit_grpo.lab.report import write_report
    from lit_grpo.lab.results_csv import SELECT_CSV, read_runs_csv

    records = read_runs_csv(exp, args.from_csv)
    sel_path = Path(args.from_csv).with_name(SELECT_CSV)
    selection = None
    if exp.select is not None and sel_path.is_file():
        sel_records = read_runs_csv(exp, sel_path)
        choice = {
            (r.run.arm, r.run.setting_label): dict(r.run.chosen)[exp.select.axis]
            for r in records
            if r.run.chosen
        }
        selection = (sel_records, choice)
    report = write_report(exp, records, {}, out_dir(exp, args.root), args.root, selection, figures=False)
    print(f"report: {report}", flush=True)
    return 0


def _run(plan, args, cli_class: type, executor) -> bool:
    """Prepare, select, run (unless --report-only) and report one experiment; whether anything failed."""
    from lit_grpo.commands.compare_check import check_runs
    from lit_grpo.lab.collect import collect
    from lit_grpo.lab.grid import expand, out_dir
    from lit_grpo.lab.report import publish, write_report
    from lit_grpo.lab.runner import run_prepare

    exp, prepared, runs, cells, selection = plan
    out = out_dir(exp, args.root)
    print(f"== {exp.name}{' (quick)' if exp.quick else ''}: {out}", flush=True)
    chosen = None
    if not args.report_only:
        try:
            run_prepare(exp, args.root, _prepare_threads(exp, args, executor), _echo, executor)
        except RuntimeError as err:
            print(f"lit-grpo compare: {exp.name}: {err}; its runs are skipped", file=sys.stderr)
            return True
    if selection:
        try:
            chosen = _select(exp, prepared, args.root, selection, args, executor)
        except ValueError as err:
            print(f"lit-grpo compare: {err}", file=sys.stderr)
            return True
        runs = expand(exp, prepared, args.root, chosen[1])
        cells = check_runs(exp, runs, prepared, cli_class)  # the arms at their chosen values
    if not args.report_only:
        ran, wall, jobs = _grid(exp, runs, args, executor)
        _record_invocation(out, exp, ran, wall, jobs if executor is None else executor.kind)
    records = collect(exp, runs)
    print(f"report: {write_report(exp, records, cells, out, args.root, chosen)}", flush=True)
    if args.publish and not exp.quick:
        print(f"published: {publish(out, Path(args.publish) / exp.name, args.root)}", flush=True)
    elif args.publish:
        print("--publish: quick mode is not published (its numbers answer nothing)", flush=True)
    return any(r.status != "done" for r in records)


def _prepare_threads(exp, args, executor) -> int:
    """Threads for a prepare step: it runs alone, so here it gets every thread the grid's jobs would share
    (``--jobs`` x ``threads_per_run``); on Ray or Slurm the experiment's ``threads_per_run``."""
    from lit_grpo.lab.runner import default_jobs

    if executor is not None:
        return exp.threads_per_run
    return exp.threads_per_run * (args.jobs or default_jobs(exp.threads_per_run))


def _grid(exp, runs, args, executor) -> tuple[int, float, int]:
    """Run ``runs`` with the command's options; the runs started, the wall seconds and the parallel jobs."""
    from lit_grpo.lab.runner import default_jobs, run_grid

    jobs = args.jobs or default_jobs(exp.threads_per_run)
    ran, wall = run_grid(runs, exp.threads_per_run, jobs, not args.skip_failed, args.run_timeout, _echo,
                         executor, exp.resources)
    return ran, wall, jobs


def _echo(line: str) -> None:
    print(line, flush=True)
