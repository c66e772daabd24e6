"""``lit-grpo compare --executor ray|slurm``: the grid on a local Ray instance gives the runs, statuses and report
tables of the local executor; a Ray worker killed mid-run is retried; a stopped grid resumes; submitit's local
executor runs a grid and requeues a run that exits 75; run_grid's requeue and lost-task rules with a stand-in
child; bad inputs fail before anything runs.

Ray and submitit are optional extras (``lit-grpo[ray]``, ``lit-grpo[slurm]``): without them these tests skip."""

import json
import re
import sys
from pathlib import Path

import pytest

from lit_grpo.commands.compare import compare
from lit_grpo.experiments import runner
from lit_grpo.experiments.executors import CLUSTER_ENV, LocalExecutor
from lit_grpo.experiments.grid import Run
from lit_grpo.experiments.loader import load_experiment
from lit_grpo.experiments.runner import run_grid
from lit_grpo.experiments.spec import Resources
from tests.experiments.helpers import ROOT, SMALL, write_experiment

#: A callback that, the first time any run of the test reaches the end of a training step, claims ``MARKER``
#: (its pid in it) and sends ``SIGNAL`` to ``WHO`` (its own process, or its parent: the Ray worker).
ONCE = """
import os
import signal

from lightning import Callback

MARKER, SIGNAL, WHO = {marker!r}, signal.{signal}, {who}


class Once(Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        try:
            fd = os.open(MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        os.kill(WHO(), SIGNAL)
"""


def _tables(root) -> str:
    """The degeneracy report without what depends on time: the runtime section and the runs' seconds."""
    report = (root / "degeneracy-quick" / "report.md").read_text().replace(str(root), "ROOT")
    report = report[report.index("## Arms as resolved") :]
    return re.sub(r"\| done \| \d+ \|", "| done | s |", report)


@pytest.mark.slow
def test_a_grid_on_ray_matches_the_local_one_and_resumes(tmp_path, monkeypatch, capsys):
    pytest.importorskip("ray", reason="needs the ray extra: pip install 'lit-grpo[ray]'")
    monkeypatch.chdir(ROOT)
    local, remote = tmp_path / "local", tmp_path / "ray"
    assert compare(["--quick", "--root", str(local), "--config", "experiments/degeneracy.yaml"]) == 0
    argv = ["--quick", "--root", str(remote), "--config", "experiments/degeneracy.yaml", "--executor", "ray"]
    assert compare(argv) == 0
    assert "2 runs: 0 already finished (skipped), 2 to run, as Ray tasks" in capsys.readouterr().out
    runs = {}
    for root in (local, remote):
        results = json.loads((root / "degeneracy-quick" / "results.json").read_text())["runs"]
        runs[root] = {r["id"]: r for r in results}
    assert runs[local].keys() == runs[remote].keys() == {"GRPO/default/seed0", "GRPO/default/seed1"}
    for run_id, run in runs[local].items():
        other = runs[remote][run_id]
        assert (run["status"], run["returncode"]) == (other["status"], other["returncode"]) == ("done", 0)
        mine, its = (json.loads(Path(r["run_dir"], "status.json").read_text())["args"] for r in (run, other))
        assert mine == [a.replace(str(remote), str(local)) for a in its]
        # measured on 2 CPU cores: the same run (seed, one thread) twice gives equal values to the last bit, here
        # and on a Ray worker alike, so the values are compared exactly
        assert run["values"] == other["values"]
    assert _tables(local) == _tables(remote)
    assert "as Ray tasks (the driver has" in (remote / "degeneracy-quick" / "report.md").read_text()

    # stopped before seed1 finished: its status is missing; the finished run is skipped, as with local
    seed0, seed1 = (remote / "degeneracy-quick" / "runs" / "GRPO" / "default" / f"seed{s}" / "status.json" for s in (0, 1))
    before = seed0.read_text()
    seed1.unlink()
    assert compare(argv) == 0
    out = capsys.readouterr().out
    assert "2 runs: 1 already finished (skipped), 1 to run, as Ray tasks" in out
    assert "[2/2] ok     GRPO/default/seed1" in out and seed0.read_text() == before and seed1.is_file()


def _once(tmp_path, monkeypatch, signal: str, who: str):
    """An experiment of ``seeds`` whose first run to finish a step gets ``signal`` (see ONCE)."""
    monkeypatch.chdir(ROOT)
    marker = tmp_path / "signalled"
    (tmp_path / "oncemod.py").write_text(ONCE.format(marker=str(marker), signal=signal, who=who))
    monkeypatch.syspath_prepend(str(tmp_path))  # the config check imports it here, the runs in their process
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{':'.join(sys.path)}")
    args = [*SMALL, "--trainer.callbacks+=oncemod.Once", f"--trainer.default_root_dir={tmp_path}"]
    return marker, write_experiment(tmp_path / "exp.yaml", args=args, arms={"GRPO": {"estimator": "GRPO"}})


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_a_run_whose_ray_worker_is_killed_is_retried(tmp_path, monkeypatch, capsys):
    pytest.importorskip("ray", reason="needs the ray extra: pip install 'lit-grpo[ray]'")
    marker, exp = _once(tmp_path, monkeypatch, "SIGKILL", "os.getppid")
    root = tmp_path / "out"
    assert compare(["--config", str(exp), "--root", str(root), "--executor", "ray", "--max-retries", "1"]) == 0
    out = capsys.readouterr().out
    statuses = [json.loads(p.read_text()) for p in sorted(root.glob("tiny/runs/*/*/*/status.json"))]
    assert [s["status"] for s in statuses] == ["done", "done"]
    assert sorted(s["attempt"] for s in statuses) == [1, 2]  # the killed run ran again; the other once
    assert re.search(r"ok     GRPO/default/seed\d \(\d+ s, retried: attempt 2\)", out)
    assert not _alive(int(marker.read_text()))  # its first child died with the worker (no orphan)


@pytest.mark.slow
def test_submitit_runs_the_grid_and_requeues_a_run_that_exits_75(tmp_path, monkeypatch, capsys):
    pytest.importorskip("submitit", reason="needs the slurm extra: pip install 'lit-grpo[slurm]'")
    monkeypatch.setenv(CLUSTER_ENV, "local")  # submitit's local executor: the jobs are processes here
    marker, exp = _once(tmp_path, monkeypatch, "SIGTERM", "os.getpid")  # as a pre-emption: checkpoint, exit 75
    root = tmp_path / "out"
    argv = ["--config", str(exp), "--root", str(root), "--executor", "slurm", "--partition", "p", "--account", "a"]
    assert compare(argv) == 0
    out = capsys.readouterr().out
    assert "2 runs: 0 already finished (skipped), 2 to run, as Slurm jobs" in out
    assert re.search(r"requeued GRPO/default/seed\d: exit 75 \(interrupted, e.g. pre-empted\) at attempt 1", out)
    statuses = [json.loads(p.read_text()) for p in sorted(root.glob("tiny/runs/*/*/*/status.json"))]
    assert [(s["status"], s["returncode"]) for s in statuses] == [("done", 0), ("done", 0)]
    assert sorted(s["attempt"] for s in statuses) == [1, 2] and marker.is_file()
    assert list((root / ".submitit").glob("*_log.out"))  # submitit's own files stay beside the runs


class _Retrying(LocalExecutor):
    """The local pool as a remote executor is seen by run_grid: retries, a progress line, free resources."""

    kind, retries, progress_every = "test tasks", 1, 0.0

    def free(self) -> str:
        return "free: all"


def test_run_grid_requeues_exit_75_and_records_a_lost_task(tmp_path, monkeypatch):
    calls = []

    def call(args, log, threads, timeout):  # stands in for the child: 75 once for run a, an error for run b
        calls.append(args[1])
        if args[1] == "b":
            raise OSError("the node's disk went away")
        return (75 if calls.count("a") == 1 else 0), 0.1

    monkeypatch.setattr(runner, "_call", call)
    runs = [Run(name, (), 0, ("fit", name), tmp_path / name) for name in "ab"]
    lines = []
    assert run_grid(runs, 1, 2, echo=lines.append, executor=_Retrying(2))[0] == 2
    assert "2 runs: 0 already finished (skipped), 2 to run, as test tasks with 1 thread(s) each" in lines
    assert "requeued a/default/seed0: exit 75 (interrupted, e.g. pre-empted) at attempt 1" in lines
    assert any(re.fullmatch(r"\[\d/2\] ok     a/default/seed0 \(0 s, retried: attempt 2\)", x) for x in lines)
    assert any(re.fullmatch(r"\[\d/2\] FAILED b/default/seed0 \(0 s\)  exit lost: OSError, log: .*", x) for x in lines)
    assert lines[-1] == "[runs] 0 pending, 0 running, 1 done, 1 failed; free: all" and calls.count("a") == 2
    assert json.loads((tmp_path / "a" / "status.json").read_text())["attempt"] == 2


@pytest.mark.parametrize(("executor", "module"), [("ray", "ray"), ("slurm", "submitit")])
def test_a_missing_extra_is_named_before_anything_runs(tmp_path, monkeypatch, capsys, executor, module):
    monkeypatch.chdir(ROOT)
    monkeypatch.setitem(sys.modules, module, None)  # its import fails as if it were not installed
    path = write_experiment(tmp_path / "exp.yaml")
    assert compare(["--config", str(path), "--root", str(tmp_path / "out"), "--executor", executor]) == 2
    assert f"--executor {executor} needs the {module!r} package" in (err := capsys.readouterr().err)
    assert f"pip install 'lit-grpo[{executor}]'" in err and not (tmp_path / "out" / "tiny").exists()


def test_a_cluster_out_of_reach_is_named_before_anything_runs(tmp_path, monkeypatch, capsys):
    pytest.importorskip("ray", reason="needs the ray extra: pip install 'lit-grpo[ray]'")
    pytest.importorskip("submitit", reason="needs the slurm extra: pip install 'lit-grpo[slurm]'")
    monkeypatch.chdir(ROOT)
    path = write_experiment(tmp_path / "exp.yaml")
    argv = ["--config", str(path), "--root", str(tmp_path / "out")]
    assert compare([*argv, "--executor", "ray", "--ray-address", "127.0.0.1:1"]) == 2  # nothing listens on port 1
    assert "--ray-address 127.0.0.1:1: no Ray cluster reachable there" in capsys.readouterr().err
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch: not a Slurm submit host
    monkeypatch.delenv(CLUSTER_ENV, raising=False)
    assert compare([*argv, "--executor", "slurm"]) == 2
    assert "--executor slurm: no `sbatch` on PATH" in capsys.readouterr().err
    assert not (tmp_path / "out" / "tiny").exists()


def test_resources_load_and_bad_ones_or_an_unknown_executor_are_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    path = write_experiment(tmp_path / "exp.yaml", threads_per_run=2, resources={"gpus": 1, "memory_gb": 8})
    assert load_experiment(path).resources == Resources(cpus=2, gpus=1, memory_gb=8)  # cpus: threads_per_run
    path = write_experiment(tmp_path / "exp.yaml", resources={"cpu": 2})
    assert compare(["--config", str(path), "--root", str(tmp_path / "out")]) == 2
    assert "resources: unknown key(s) ['cpu']; allowed: ['cpus', 'gpus', 'memory_gb']" in capsys.readouterr().err
    path = write_experiment(tmp_path / "exp.yaml", resources={"cpus": 0})
    assert compare(["--config", str(path), "--root", str(tmp_path / "out")]) == 2
    assert "resources.cpus: 0 must be a number >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare(["--config", str(path), "--executor", "k8s"])
    assert "invalid choice: 'k8s' (choose from 'local', 'ray', 'slurm')" in capsys.readouterr().err
