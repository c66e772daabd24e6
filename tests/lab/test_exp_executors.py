"""``lit-grpo compare --executor ray|slurm``: the grid on a local Ray instance gives the runs, statuses and report
tables of the local executor; one retry rule for both: a run whose Ray worker or submitit job is killed mid-run is
retried and resumes from its checkpoint, as is a run that exits 75 (on Ray, and through submitit's local executor,
there stopped by submitit's USR2); a stopped grid resumes; a run on two "GPUs" is a Slurm job of two tasks, each a
rank; the sbatch flags of a job; run_grid's requeue, resume and own-error rules with a stand-in child, prepare
steps' too; bad inputs fail before anything runs; each executor conforms to the Executor interface.

Ray and submitit are optional extras (``lit-grpo[ray]``, ``lit-grpo[slurm]``): without them these tests skip."""

import inspect
import json
import os
import re
import sys
from pathlib import Path

import pytest

from lit_grpo.commands.compare import compare
from lit_grpo.lab import child, runner
from lit_grpo.lab.executors import (
    CLUSTER_ENV,
    Executor,
    LocalExecutor,
    RayExecutor,
    SlurmExecutor,
    WorkerLost,
)
from lit_grpo.lab.grid import Run
from lit_grpo.lab.loader import load_experiment
from lit_grpo.lab.runner import run_grid
from lit_grpo.lab.spec import Resources
from tests.lab.helpers import ROOT, SMALL, write_experiment

#: A callback that, the first time any run of the test reaches the end of a training step, claims ``MARKER``
#: (its pid in it), with ``SAVE`` writes the run's ``checkpoints/last.ckpt``, and sends ``SIGNAL`` to ``WHO``
#: (its own process, or its parent: the Ray worker, the submitit task), then waits until the run's SaveOnInterrupt has the signal (one passed on by the parent
#: arrives a little later), so that the run stops after this step whichever callback runs first.
ONCE = """
import os
import signal
import time

from lightning import Callback

MARKER, SIGNAL, WHO, SAVE = {marker!r}, signal.{signal}, {who}, {save}


class Once(Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        try:
            fd = os.open(MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        if SAVE:  # what a ModelCheckpoint every step would have left before a kill that writes none
            trainer.save_checkpoint(os.path.join(trainer.default_root_dir, "checkpoints", "last.ckpt"))
        os.kill(WHO(), SIGNAL)
        stop = [c for c in trainer.callbacks if type(c).__name__ == "SaveOnInterrupt"]
        deadline = time.monotonic() + 60
        while stop and not stop[0].requested and time.monotonic() < deadline:
            time.sleep(0.01)
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


def _once(tmp_path, monkeypatch, signal: str, who: str, save: bool = False):
    """An experiment of ``seeds`` whose first run to finish a step gets ``signal`` (see ONCE)."""
    monkeypatch.chdir(ROOT)
    marker = tmp_path / "signalled"
    (tmp_path / "oncemod.py").write_text(ONCE.format(marker=str(marker), signal=signal, who=who, save=save))
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
def test_a_run_whose_ray_worker_is_killed_is_retried_from_its_checkpoint(tmp_path, monkeypatch, capsys):
    pytest.importorskip("ray", reason="needs the ray extra: pip install 'lit-grpo[ray]'")
    marker, exp = _once(tmp_path, monkeypatch, "SIGKILL", "os.getppid", save=True)
    root = tmp_path / "out"
    assert compare(["--config", str(exp), "--root", str(root), "--executor", "ray", "--max-retries", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"requeued GRPO/default/seed\d: its worker or job died \(WorkerCrashedError\) at attempt 1", out)
    assert re.search(r"ok     GRPO/default/seed\d \(\d+ s, retried: attempt 2\)", out)
    _assert_resumed(root, marker, None)
    assert not _alive(int(marker.read_text()))  # its first child died with the worker (no orphan)


@pytest.mark.slow
def test_a_run_whose_submitit_job_is_killed_is_retried_from_its_checkpoint(tmp_path, monkeypatch, capsys):
    pytest.importorskip("submitit", reason="needs the slurm extra: pip install 'lit-grpo[slurm]'")
    monkeypatch.setenv(CLUSTER_ENV, "local")
    # SIGKILL to the job's process (submitit's task), as when Slurm kills a job or loses its node: the same rule
    # as for a Ray worker that dies, the run submitted again and going on from its checkpoint
    marker, exp = _once(tmp_path, monkeypatch, "SIGKILL", "os.getppid", save=True)
    root = tmp_path / "out"
    argv = ["--config", str(exp), "--root", str(root), "--executor", "slurm", "--max-retries", "1"]
    assert compare(argv) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert re.search(r"requeued GRPO/default/seed\d: its worker or job died \(UncompletedJobError\) at attempt 1",
                     out)
    _assert_resumed(root, marker, None)
    assert not _alive(int(marker.read_text()))  # its first child died with the job (no orphan)


@pytest.mark.slow
def test_submitit_s_time_limit_signal_stops_a_run_with_a_checkpoint_and_its_retry_resumes(tmp_path, monkeypatch,
                                                                                         capsys):
    pytest.importorskip("submitit", reason="needs the slurm extra: pip install 'lit-grpo[slurm]'")
    monkeypatch.setenv(CLUSTER_ENV, "local")  # submitit's local executor: the jobs are processes here
    # USR2 to the job's task, as submitit's local executor and Slurm's --signal=USR2@90 send it ahead of the
    # time limit: submitit would requeue the job and kill the child; the task passes it on to the child instead
    marker, exp = _once(tmp_path, monkeypatch, "SIGUSR2", "os.getppid")
    root = tmp_path / "out"
    argv = ["--config", str(exp), "--root", str(root), "--executor", "slurm", "--partition", "p", "--account", "a"]
    assert compare(argv) == 0
    out = capsys.readouterr().out
    assert "2 runs: 0 already finished (skipped), 2 to run, as Slurm jobs" in out
    assert re.search(r"requeued GRPO/default/seed\d: exit 75 \(interrupted, e.g. pre-empted\) at attempt 1", out)
    _assert_resumed(root, marker, "SIGUSR2")
    assert list((root / ".submitit").glob("*_log.out"))  # submitit's own files stay beside the runs


def _assert_resumed(root: Path, marker: Path, signal: str | None) -> None:
    """Both runs done, one at its second attempt, which went on from the checkpoint its first attempt wrote
    into the run's directory after step 1 (stopped by ``signal``, or, None, killed after ONCE wrote it); its log
    holds both attempts."""
    statuses = [json.loads(p.read_text()) for p in sorted(root.glob("tiny/runs/*/*/*/status.json"))]
    assert [(s["status"], s["returncode"]) for s in statuses] == [("done", 0), ("done", 0)]
    assert sorted(s["attempt"] for s in statuses) == [1, 2] and marker.is_file()
    (first,), (retried,) = ([s for s in statuses if s["attempt"] == n] for n in (1, 2))
    checkpoint = Path(retried["log"]).parent / "checkpoints" / "last.ckpt"
    assert retried["resumed_from"] == str(checkpoint) and "resumed_from" not in first
    log = Path(retried["log"]).read_text()
    if signal is not None:
        assert f"{signal}: stopped after step 1; checkpoint written to {checkpoint}" in log  # the first attempt's
    assert f"attempt 2: resuming from {checkpoint}" in log
    assert f"Restoring states from the checkpoint path at {checkpoint}" in log


@pytest.mark.slow
def test_a_ray_run_that_exits_75_is_retried_from_its_checkpoint(tmp_path, monkeypatch, capsys):
    pytest.importorskip("ray", reason="needs the ray extra: pip install 'lit-grpo[ray]'")
    marker, exp = _once(tmp_path, monkeypatch, "SIGTERM", "os.getpid")  # as a pre-emption: checkpoint, exit 75
    root = tmp_path / "out"
    assert compare(["--config", str(exp), "--root", str(root), "--executor", "ray", "--max-retries", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"requeued GRPO/default/seed\d: exit 75 \(interrupted, e.g. pre-empted\) at attempt 1", out)
    _assert_resumed(root, marker, "SIGTERM")


#: A callback that writes each rank's world size, cluster environment and submitit task to ``rank<R>``.
RANKS = """
import os
from pathlib import Path

from lightning import Callback


class Ranks(Callback):
    def on_train_start(self, trainer, pl_module):
        env = type(trainer.strategy.cluster_environment).__name__
        task = os.environ.get("SUBMITIT_LOCAL_GLOBALID")
        Path({folder!r}, f"rank{{trainer.global_rank}}").write_text(f"{{trainer.world_size}} {{env}} task {{task}}")
"""


@pytest.mark.slow
def test_a_run_on_two_gpus_is_a_job_of_two_tasks_each_a_rank(tmp_path, monkeypatch, capsys):
    pytest.importorskip("submitit", reason="needs the slurm extra: pip install 'lit-grpo[slurm]'")
    monkeypatch.setenv(CLUSTER_ENV, "local")
    monkeypatch.chdir(ROOT)
    (tmp_path / "ranksmod.py").write_text(RANKS.format(folder=str(tmp_path)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{':'.join(sys.path)}")
    # two processes on the CPU stand in for two GPUs (the local executor only sets CUDA_VISIBLE_DEVICES for them)
    args = [*SMALL, "--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp",
            "--trainer.callbacks+=ranksmod.Ranks"]
    exp = write_experiment(tmp_path / "exp.yaml", args=args, arms={"GRPO": {"estimator": "GRPO"}}, seeds=[0],
                           resources={"cpus": 1, "gpus": 2})
    root = tmp_path / "out"
    assert compare(["--config", str(exp), "--root", str(root), "--executor", "slurm"]) == 0, capsys.readouterr()
    # each rank is a task of the job, as srun starts them, and Lightning's SLURMEnvironment numbers them: not
    # one task whose child starts the other rank itself (under Slurm that child sees one task: world size 1)
    ranks = {p.name: p.read_text() for p in tmp_path.glob("rank[0-9]")}
    assert ranks == {"rank0": "2 SLURMEnvironment task 0", "rank1": "2 SLURMEnvironment task 1"}
    (status,) = [json.loads(p.read_text()) for p in root.glob("tiny/runs/*/*/*/status.json")]
    assert (status["status"], status["returncode"], status["attempt"]) == ("done", 0, 1)


def test_a_slurm_job_has_a_task_per_gpu_its_cpus_in_srun_and_no_slurm_requeue(tmp_path, monkeypatch):
    pytest.importorskip("submitit", reason="needs the slurm extra: pip install 'lit-grpo[slurm]'")
    (tmp_path / "bin").mkdir()  # a submit host where nothing is submitted: sbatch answers, srun is not run
    for name, says in [("sbatch", "echo Submitted batch job 4242"), ("srun", "exit 1")]:
        (tmp_path / "bin" / name).write_text(f"#!/bin/sh\n{says}\n")
        (tmp_path / "bin" / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    executor = SlurmExecutor(2, tmp_path / "jobs", "gpu", "proj", 90)
    job = executor.submit(Resources(cpus=3, gpus=2, memory_gb=16), print, "x")
    script = job.paths.submission_file.read_text()
    flags = set(re.findall(r"^#SBATCH (--\S+)$", script, re.M))
    assert {"--ntasks-per-node=2", "--gpus-per-node=2", "--cpus-per-task=3", "--mem=16GB", "--partition=gpu",
            "--account=proj", "--time=90", "--no-requeue", "--signal=USR2@90"} <= flags
    (srun,) = [line for line in script.splitlines() if line.startswith("srun ")]
    assert "--cpus-per-task=3" in srun.split()  # srun takes it from the job no more (Slurm >= 22.05)
    job = executor.submit(Resources(cpus=2), print, "x")  # no GPU: one task
    assert "#SBATCH --ntasks-per-node=1\n" in job.paths.submission_file.read_text()


class _Retrying(LocalExecutor):
    """The local pool as a remote executor is seen by run_grid: retries, a progress line, free resources."""

    kind, retries, progress_every = "test tasks", 1, 0.0

    def free(self) -> str:
        return "free: all"


def test_run_grid_requeues_exit_75_resumes_it_and_records_a_task_that_raised(tmp_path, monkeypatch):
    calls = []

    def call(args, log, threads, timeout, append=False):  # the child: 75 once for run a (after its checkpoint)
        calls.append(args)
        if args[1] == "b":
            raise OSError("the node's disk went away")
        with open(log, "a" if append else "w") as out:
            out.write(f"attempt {sum(c[1] == 'a' for c in calls)}\n")
        if len(calls) == 1:
            (tmp_path / "a" / "checkpoints").mkdir()
            (tmp_path / "a" / "checkpoints" / "last.ckpt").write_text("step 1")
            return 75, 0.1
        return 0, 0.1

    monkeypatch.setattr(child, "call", call)
    runs = [Run(name, (), 0, ("fit", name), tmp_path / name) for name in "ab"]
    lines = []
    assert run_grid(runs, 1, 1, echo=lines.append, executor=_Retrying(1))[0] == 2
    assert "2 runs: 0 already finished (skipped), 2 to run, as test tasks with 1 thread(s) each" in lines
    assert "requeued a/default/seed0: exit 75 (interrupted, e.g. pre-empted) at attempt 1" in lines
    assert any(re.fullmatch(r"\[\d/2\] ok     a/default/seed0 \(0 s, retried: attempt 2\)", x) for x in lines)
    # the task raised: the run's own error, recorded and not submitted again
    assert any(re.fullmatch(r"\[\d/2\] FAILED b/default/seed0 \(0 s\)  exit error: OSError: the node's disk went "
                            r"away, log: .*", x) for x in lines)
    assert lines[-1] == "[runs] 0 pending, 0 running, 1 done, 1 failed; free: all"
    # the retry went on from the checkpoint the interrupted attempt left in the run's directory
    checkpoint = tmp_path / "a" / "checkpoints" / "last.ckpt"
    assert [c for c in calls if c[1] == "a"] == [("fit", "a"), ("fit", "a", f"--ckpt_path={checkpoint}")]
    status = json.loads((tmp_path / "a" / "status.json").read_text())
    assert (status["attempt"], status["resumed_from"], status["args"]) == (2, str(checkpoint), ["fit", "a"])
    assert status["seconds"] == 0.2 and checkpoint.read_text() == "step 1"  # both attempts' time
    log = (tmp_path / "a" / "run.log").read_text()
    assert log.startswith("attempt 1\n") and f"attempt 2: resuming from {checkpoint}\nattempt 2\n" in log


class _Died(Exception):
    """What the stand-in child raises for a task whose worker died (its executor's result turns it into WorkerLost)."""


class _Losing(_Retrying):
    def result(self, handle):
        try:
            return super().result(handle)
        except _Died as err:  # as RayExecutor and SlurmExecutor report a dead worker or job
            raise WorkerLost("WorkerCrashedError") from err


def test_run_grid_retries_a_run_killed_by_a_signal_or_lost_with_its_worker_but_not_its_own_failure(tmp_path,
                                                                                                  monkeypatch):
    calls = []

    def call(args, log, threads, timeout, append=False):
        # killed: SIGKILL once; lost: its worker dies once; failed: exits 1; always: killed every time
        name, attempt = args[1], sum(c[1] == args[1] for c in calls) + 1
        calls.append(args)
        with open(log, "a" if append else "w") as out:
            out.write(f"attempt {attempt}\n")
        if attempt == 1 and name in ("killed", "lost"):  # a checkpoint from before the kill (a ModelCheckpoint's)
            (tmp_path / name / "checkpoints").mkdir()
            (tmp_path / name / "checkpoints" / "last.ckpt").write_text("step 1")
        if name == "lost" and attempt == 1:
            raise _Died
        if name == "failed":
            return 1, 0.1
        return (-9, 0.1) if name == "always" or (name == "killed" and attempt == 1) else (0, 0.1)

    monkeypatch.setattr(child, "call", call)
    names = ("killed", "lost", "failed", "always")
    runs = [Run(name, (), 0, ("fit", name), tmp_path / name) for name in names]
    lines = []
    assert run_grid(runs, 1, 1, echo=lines.append, executor=_Losing(1))[0] == 4
    assert "requeued killed/default/seed0: killed by SIGKILL at attempt 1" in lines
    assert "requeued lost/default/seed0: its worker or job died (WorkerCrashedError) at attempt 1" in lines
    assert "requeued always/default/seed0: killed by SIGKILL at attempt 1" in lines  # once: --max-retries 1
    assert not any(x.startswith("requeued failed") for x in lines)  # its own error: not run again
    statuses = {name: json.loads((tmp_path / name / "status.json").read_text()) for name in names}
    assert {n: (s["status"], s["returncode"], s["attempt"]) for n, s in statuses.items()} == {
        "killed": ("done", 0, 2), "lost": ("done", 0, 2), "failed": ("failed", 1, 1), "always": ("failed", -9, 2)}
    for name in ("killed", "lost"):  # each retry went on from the checkpoint its first attempt left
        checkpoint = tmp_path / name / "checkpoints" / "last.ckpt"
        assert [c for c in calls if c[1] == name] == [("fit", name), ("fit", name, f"--ckpt_path={checkpoint}")]
        assert statuses[name]["resumed_from"] == str(checkpoint)
    assert [c for c in calls if c[1] == "failed"] == [("fit", "failed")]


def test_a_prepare_step_lost_with_its_worker_is_submitted_again_from_an_empty_output(tmp_path, monkeypatch):
    from tests.lab.test_exp_grid import _fake_step, _prepared_experiment

    exp = _prepared_experiment(tmp_path, {"name": "val/accuracy", "reduce": "max", "min": 0.35})
    _fake_step(monkeypatch, [0.4])
    step, tries = child.call, []

    def call(args, log, threads, timeout):  # the first attempt leaves part of its output, then its worker dies
        tries.append(args)
        if len(tries) == 1:
            output = Path(next(a.partition("=")[2] for a in args if a.startswith("--trainer.callbacks.dirpath=")))
            output.mkdir(parents=True)
            raise _Died
        return step(args, log, threads, timeout)  # it makes the output directory: none may be left over

    monkeypatch.setattr(child, "call", call)
    lines = []
    executor = _Losing(1)
    try:
        outputs = runner.run_prepare(exp, tmp_path, echo=lines.append, executor=executor)
    finally:
        executor.close()
    assert len(tries) == 2 and (outputs["pol"] / runner.PREPARED_FILE).is_file()
    assert "prepare pol: its worker or job died (WorkerCrashedError); submitted again" in lines


def test_a_run_starts_from_scratch_unless_its_directory_holds_an_interrupted_attempt(tmp_path):
    run = Run("a", (), 0, ("fit", "a"), tmp_path / "a")
    checkpoint = run.run_dir / "tb" / "version_0" / "checkpoints" / "last.ckpt"  # ModelCheckpoint's, say
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_text("")
    assert runner.resume_checkpoint(run, "grid") is None  # never started by this grid, no status
    (run.run_dir / "attempt.json").write_text(json.dumps({"token": "grid", "attempt": 1}))
    assert runner.resume_checkpoint(run, "grid") == checkpoint  # this grid's attempt, lost with its worker
    assert runner.resume_checkpoint(run, "another grid") is None
    for rc, args, resumes in [(75, ["fit", "a"], True), (-9, ["fit", "a"], True), ("lost: WorkerCrashedError",
                              ["fit", "a"], True), (1, ["fit", "a"], False), ("timeout", ["fit", "a"], False),
                              ("error: OSError: x", ["fit", "a"], False), (75, ["fit", "b"], False)]:
        (run.run_dir / "status.json").write_text(json.dumps({"returncode": rc, "args": args}))
        assert runner.resume_checkpoint(run, "another grid") == (checkpoint if resumes else None)
    checkpoint.unlink()
    assert runner.resume_checkpoint(run, "grid") is None


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


# ---- the executor interface ------------------------------------------------------------------------------------


def _departures(cls: type) -> list[str]:
    """How ``cls`` departs from :class:`Executor`: a member it lacks, or a method whose parameters (names, kinds,
    defaults) differ from the interface's; empty when it conforms."""
    found = []
    for name in Executor.__annotations__:  # the data members: set on the class or declared for its instances
        if not hasattr(cls, name) and name not in getattr(cls, "__annotations__", {}):
            found.append(f"{cls.__name__} lacks {name!r}")
    methods = [n for n, v in vars(Executor).items() if callable(v) and not n.startswith("_")]
    for name in methods:
        if not callable(getattr(cls, name, None)):
            found.append(f"{cls.__name__} lacks {name}()")
            continue
        want = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(Executor, name)).parameters.values()]
        have = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(cls, name)).parameters.values()]
        if have != want:
            found.append(f"{cls.__name__}.{name}{inspect.signature(getattr(cls, name))} differs from the interface")
    return found


def test_the_interface_names_what_run_grid_and_compare_call():
    methods = {n for n, v in vars(Executor).items() if callable(v) and not n.startswith("_")}
    assert methods == {"submit", "wait", "result", "free", "close"}
    assert set(Executor.__annotations__) == {"kind", "retries", "progress_every"}


@pytest.mark.parametrize("cls", [LocalExecutor, RayExecutor, SlurmExecutor])
def test_each_executor_conforms_to_the_interface(cls):
    assert _departures(cls) == []


def test_an_executor_lacking_a_member_or_with_other_parameters_does_not_conform():
    class NoFree(LocalExecutor):
        free = None

    class OtherWait(LocalExecutor):
        def wait(self, handles, seconds):  # the interface's second parameter is `timeout`
            return []

    assert _departures(NoFree) == ["NoFree lacks free()"]
    assert _departures(OtherWait) == [f"OtherWait.wait{inspect.signature(OtherWait.wait)} differs from the interface"]
    assert not isinstance(object(), Executor)


def test_the_executors_made_here_are_executors(tmp_path):
    local = LocalExecutor(1)
    try:
        assert isinstance(local, Executor) and local.kind == "local threads"
    finally:
        local.close()
    pytest.importorskip("submitit", reason="needs the slurm extra: pip install 'lit-grpo[slurm]'")
    assert isinstance(SlurmExecutor(0, tmp_path, None, None, 5, cluster="local"), Executor)


def test_the_lab_reads_the_trainer_s_interrupted_exit_status():
    from lit_grpo.checkpoint import EXIT_INTERRUPTED

    assert runner.EXIT_INTERRUPTED == EXIT_INTERRUPTED  # the lab reads it from a child's exit, not by import
