"""Where a grid's runs execute (``lit-grpo compare --executor``): ``local``, ``ray`` or ``slurm``.

``local`` (the default) is a thread pool on this machine, ``--jobs`` runs at a time. ``ray`` makes each run
and each prepare step a Ray task holding the resources the experiment declares (``resources:`` in its YAML).
``slurm`` makes each one a Slurm job through submitit, with one task per GPU (:func:`_task`). Either way
the task runs the same ``lit-grpo fit`` child as the local executor (:func:`lit_grpo.lab.runner.run_one`),
from the driver's working directory, and writes into the results directory, which must be on a filesystem
every node sees; the ``status.json`` rules skip finished runs next time.

The retry rule, the same for every executor (:func:`lit_grpo.lab.runner.run_grid` applies it; neither Ray
nor Slurm retries on its own: Ray tasks have ``max_retries=0``, Slurm jobs ``--no-requeue``): a run stopped
from outside is submitted again, at most ``retries`` times (``--max-retries``; 0 for ``local``, where a
signal is Ctrl-C), and goes on from the newest ``last.ckpt`` in its directory
(:func:`~lit_grpo.lab.runner.resume_checkpoint`). Stopped from outside means: its child exited 75 (stopped by
a signal after writing a checkpoint: pre-empted, or warned of its time limit), its child was killed by a
signal (the OOM killer, a node drained without warning), or its task was lost with its worker, job or node (a
Ray worker or node that died, a Slurm job killed or lost: :class:`WorkerLost`). A run that failed on its own
error (any other exit status, ``--run-timeout``, an exception in the task) is recorded as failed and not
submitted again. Prepare steps follow the same rule, each attempt from an empty output directory.

What an executor provides is :class:`Executor`; :class:`LocalExecutor`, :class:`RayExecutor` and
:class:`SlurmExecutor` conform to it (tests/lab/test_exp_executors.py checks each).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from lit_grpo.checks import require
from lit_grpo.lab import child
from lit_grpo.lab.spec import Resources

#: Seconds between the progress lines of the ray and slurm executors while no run finishes.
PROGRESS_EVERY = 60.0
#: submitit's cluster for ``--executor slurm``; ``local`` runs the jobs on this machine (for the tests).
CLUSTER_ENV = "LIT_GRPO_SUBMITIT_CLUSTER"


class WorkerLost(RuntimeError):
    """The worker, node or job of a task died before the task returned (``Executor.result`` raises it, naming
    the executor's own error); the grid submits the run again (the module docstring's retry rule)."""


@runtime_checkable
class Executor(Protocol):
    """Where a grid's runs and prepare steps execute: what :func:`~lit_grpo.lab.runner.run_grid`,
    :func:`~lit_grpo.lab.runner.run_prepare` and ``lit-grpo compare`` call. A new executor is a class with
    these members (no base class to inherit); ``isinstance(obj, Executor)`` checks that they are present.

    ``submit`` starts ``fn(*args)`` as a task holding ``resources`` and returns a handle; ``wait`` returns the
    handles of ``handles`` that have finished, at least one unless ``timeout`` seconds pass first; ``result``
    is ``fn``'s value (it raises :class:`WorkerLost` when the task's worker, node or job died, and ``fn``'s
    own error when ``fn`` raised); ``free`` is the cluster's free resources in words
    ("" when it has nothing to say); ``close`` cancels the ``pending`` handles, then lets go of the pool or
    cluster.
    """

    #: what its tasks are called in the progress lines and the invocation record ("Ray tasks")
    kind: str
    #: times a run stopped from outside (exit 75, killed by a signal, its task lost) is submitted again
    retries: int
    #: seconds between progress lines while no run finishes (None: a line per finished run only)
    progress_every: float | None

    def submit(self, resources: Resources, fn: Callable[..., Any], *args: Any) -> Any: ...

    def wait(self, handles: Iterable[Any], timeout: float | None) -> list[Any]: ...

    def result(self, handle: Any) -> Any: ...

    def free(self) -> str: ...

    def close(self, pending: Iterable[Any] = ()) -> None: ...


class LocalExecutor:
    """A thread pool of ``jobs`` threads; the runs' children get Ctrl-C with this process."""

    kind = "local threads"
    retries = 0  # a run stopped by a signal here was stopped by Ctrl-C (or this machine's OOM killer)
    progress_every: float | None = None  # one line per finished run, as before

    def __init__(self, jobs: int) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs))

    def submit(self, resources: Resources, fn: Callable, *args: Any) -> concurrent.futures.Future:
        return self.pool.submit(fn, *args)

    def wait(self, handles: Iterable, timeout: float | None) -> list:
        done, _ = concurrent.futures.wait(list(handles), timeout, concurrent.futures.FIRST_COMPLETED)
        return list(done)

    def result(self, handle: concurrent.futures.Future) -> Any:
        return handle.result()

    def free(self) -> str:
        return ""

    def close(self, pending: Iterable = ()) -> None:
        self.pool.shutdown(wait=True, cancel_futures=bool(list(pending)))


def _in_dir(cwd: str, fn: Callable, *args: Any) -> Any:
    """``fn(*args)`` in the driver's working directory (relative configs and results paths)."""
    os.chdir(cwd)
    return fn(*args)


def _import(module: str, extra: str):
    try:
        return __import__(module)
    except ImportError:
        raise ValueError(
            f"--executor {extra} needs the {module!r} package, which is not installed: "
            f"pip install 'lit-grpo[{extra}]'"
        ) from None


def _reachable(address: str) -> None:
    """A ValueError naming ``address`` unless something listens there (``ray.init`` itself waits minutes)."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except (OSError, ValueError) as err:
        raise ValueError(
            f"--ray-address {address}: no Ray cluster reachable there ({err}); give the head node's "
            "HOST:PORT (`ray status` on it prints it), or leave --ray-address out to start Ray on this "
            "machine"
        ) from None


class RayExecutor:
    """One Ray task per run: on the cluster at ``address``, else on a Ray instance started here (stopped by
    :meth:`close`)."""

    kind, progress_every = "Ray tasks", PROGRESS_EVERY
    retries: int

    def __init__(self, retries: int, address: str | None = None) -> None:
        self.ray = _import("ray", "ray")
        if address:
            _reachable(address)
            self.ray.init(address=address)
        else:
            self.ray.init(num_cpus=os.cpu_count(), include_dashboard=False)
        self.retries, self.task = retries, self.ray.remote(_in_dir)

    def submit(self, resources: Resources, fn: Callable, *args: Any):
        memory = {"memory": int(resources.memory_gb * 2**30)} if resources.memory_gb else {}
        # max_retries=0: a task whose worker dies is submitted again by the grid, as a lost Slurm job is
        options = {"num_cpus": resources.cpus, "num_gpus": resources.gpus, "max_retries": 0, **memory}
        return self.task.options(**options).remote(os.getcwd(), fn, *args)

    def wait(self, handles: Iterable, timeout: float | None) -> list:
        return self.ray.wait(list(handles), num_returns=1, timeout=timeout)[0]

    def result(self, handle) -> Any:
        errors = self.ray.exceptions
        try:
            return self.ray.get(handle)
        except errors.RayTaskError:  # fn raised (Ray's error is also of fn's error's type)
            raise
        except errors.RayError as err:  # its worker or node died (WorkerCrashedError, NodeDiedError, ...)
            raise WorkerLost(type(err).__name__) from err

    def free(self) -> str:
        free = self.ray.available_resources()
        memory = f", memory {free['memory'] / 2**30:.1f} GB" if "memory" in free else ""
        return f"free: CPU {free.get('CPU', 0):g}, GPU {free.get('GPU', 0):g}{memory}"

    def close(self, pending: Iterable = ()) -> None:
        for handle in pending:  # force: the worker dies, and its child with it
            self.ray.cancel(handle, force=True)
        self.ray.shutdown()


#: Seconds a task of a Slurm job other than the first lets its child run on after the first task has ended
#: (the ranks end together; a rank left waiting for a lost rank 0 would hold its GPU until the time limit).
FOLLOW_GRACE = 60.0


def _srun_variables(env) -> dict[str, str]:
    """The variables srun gives a task, which Lightning's ``SLURMEnvironment`` reads (ranks, world size, the
    head node, a port from the job id), from submitit's view of the task: on Slurm they are srun's own; under
    submitit's local executor, which sets only its own variables, they make the job the same to Lightning."""
    if env.cluster == "slurm":
        return {}
    return {
        "SLURM_JOB_ID": env.job_id, "SLURM_JOB_NAME": "lit-grpo", "SLURM_NODELIST": "127.0.0.1",
        "SLURM_NNODES": str(env.num_nodes), "SLURM_NTASKS": str(env.num_tasks),
        "SLURM_NTASKS_PER_NODE": str(env.num_tasks // env.num_nodes), "SLURM_NODEID": str(env.node),
        "SLURM_PROCID": str(env.global_rank), "SLURM_LOCALID": str(env.local_rank),
    }


def _pass_on(signum: int, frame: Any) -> None:
    """The signal submitit's jobs get ahead of their time limit (USR2), passed on to the ``lit-grpo fit``
    child, which finishes its step, writes its checkpoint and exits 75 (the grid submits the run again)."""
    for process in list(child.CHILDREN):
        process.send_signal(signum)


def _task(cwd: str, fn: Callable, *args: Any) -> Any:
    """One task of a Slurm job, in the driver's working directory ``cwd``. The first task runs ``fn(*args)``
    (:func:`~lit_grpo.lab.runner.run_one`, or a prepare step), whose ``lit-grpo`` child is rank 0; each
    other task starts the same command as the next rank, once the first has written it (:func:`_follow`).

    submitit answers its time-limit signal (USR2) by requeueing the job and exiting, which kills the child
    without a checkpoint: here the signal is passed on to the child instead (``SaveOnInterrupt`` handles it).
    SIGTERM (pre-emption, ``scancel``) reaches the child from Slurm itself; submitit's task ignores it."""
    submitit = _import("submitit", "slurm")

    os.chdir(cwd)
    env = submitit.JobEnvironment()
    os.environ.update(_srun_variables(env))
    signal.signal(getattr(signal, f"SIG{env.USR_SIG}"), _pass_on)
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
    command = env.paths.folder / f"{env.job_id}_{restarts}_command.json"
    if env.global_rank == 0:
        child.announce_to = command
        return fn(*args)
    first = submitit.core.utils.JobPaths(env.paths.folder, env.job_id, task_id=0).result_pickle
    return _follow(command, first)


def _follow(command: Path, first: Path) -> int | str | None:
    """A task other than the first: run the ``lit-grpo`` command the first task wrote to ``command`` (None
    when the first task ended, its ``first`` result written, without writing one), output to this task's log;
    its child is ended :data:`FOLLOW_GRACE` seconds after the first task ended, if still running."""
    while not command.exists():
        if first.exists():
            return None
        time.sleep(1)
    spec = json.loads(command.read_text())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        call = pool.submit(child.call, tuple(spec["args"]), None, spec["threads"], spec["timeout"])
        while not call.done():
            if first.exists():  # the first task has ended: this rank ends with it
                if not concurrent.futures.wait([call], FOLLOW_GRACE).done:
                    for process in list(child.CHILDREN):
                        process.kill()
                break
            time.sleep(1)
        return call.result()[0]


class SlurmExecutor:
    """One Slurm job per run through submitit, its files under ``folder``; ``cluster="local"`` runs the jobs
    as processes on this machine (submitit's local executor, for the tests).

    A run with ``resources.gpus`` G > 1 is a job of G tasks on one node (``--ntasks-per-node=G``,
    ``--gpus-per-node=G``, ``--cpus-per-task`` = ``resources.cpus`` each), as Lightning's ``SLURMEnvironment``
    expects: each task is a rank of the run (``trainer.devices`` must be G). srun is given ``--cpus-per-task``
    too (since Slurm 22.05 it no longer takes it from the job). Jobs are ``--no-requeue``: the grid submits a
    pre-empted or lost run again itself, and a run never has two jobs."""

    kind, progress_every = "Slurm jobs", PROGRESS_EVERY
    retries: int

    def __init__(
        self,
        retries: int,
        folder: str | Path,
        partition: str | None,
        account: str | None,
        minutes: int,
        cluster: str = "slurm",
    ) -> None:
        submitit = _import("submitit", "slurm")
        require(cluster != "slurm" or shutil.which("sbatch") is not None,
                "--executor slurm: no `sbatch` on PATH; run lit-grpo compare where jobs are submitted")
        self.retries, self.submitit = retries, submitit
        self.executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
        self.executor.update_parameters(
            name="lit-grpo", timeout_min=minutes, slurm_partition=partition, slurm_account=account,
            slurm_additional_parameters={"no-requeue": True},
        )

    def submit(self, resources: Resources, fn: Callable, *args: Any):
        require(resources.gpus == int(resources.gpus),
                f"resources.gpus: {resources.gpus} GPUs: Slurm gives whole GPUs; use an integer")
        gpus = int(resources.gpus)
        self.executor.update_parameters(
            tasks_per_node=max(1, gpus), cpus_per_task=resources.cpus, gpus_per_node=gpus or None,
            mem_gb=resources.memory_gb, slurm_srun_args=[f"--cpus-per-task={resources.cpus}"],
        )
        return self.executor.submit(_task, os.getcwd(), fn, *args)

    def wait(self, handles: Iterable, timeout: float | None) -> list:
        handles, start = list(handles), time.monotonic()
        while not (done := [h for h in handles if h.done()]):
            if timeout is not None and time.monotonic() - start > timeout:
                break
            time.sleep(1)
        return done

    def result(self, handle) -> Any:
        utils = self.submitit.core.utils
        try:
            return handle.results()[0]  # the first task's: it ran fn
        except utils.FailedJobError:  # fn raised in the job
            raise
        except utils.UncompletedJobError as err:  # it ended without a result: killed, cancelled, node lost
            raise WorkerLost(type(err).__name__) from err

    def free(self) -> str:
        return ""

    def close(self, pending: Iterable = ()) -> None:
        for job in pending:
            job.cancel(check=False)


def make_executor(name: str, retries: int, address: str | None, folder: str | Path, partition: str | None,
                  account: str | None, minutes: int) -> RayExecutor | SlurmExecutor:
    """The ``ray`` or ``slurm`` executor of ``lit-grpo compare``'s options (``local`` is made per grid, for
    its ``--jobs``)."""
    if name == "ray":
        return RayExecutor(retries, address)
    return SlurmExecutor(retries, folder, partition, account, minutes, os.environ.get(CLUSTER_ENV, "slurm"))
