"""Where a grid's runs execute (``lit-grpo compare --executor``): ``local``, ``ray`` or ``slurm``.

``local`` (the default) is a thread pool on this machine, ``--jobs`` runs at a time. ``ray`` makes each run and
each prepare step a Ray task holding the resources the experiment declares (``resources:`` in its YAML); Ray runs
a task again when its worker or node dies (``max_retries``). ``slurm`` makes each one a Slurm job through
submitit. Either way the task runs the same ``lit-grpo fit`` child as the local executor
(:func:`lit_grpo.experiments.runner.run_one`), from the driver's working directory, and writes into the results
directory, which must be on a filesystem every node sees; the ``status.json`` rules skip finished runs next time.
A run whose child exits 75 (stopped by SIGTERM or SIGUSR1 after writing a checkpoint: pre-empted) is submitted
again by :func:`~lit_grpo.experiments.runner.run_grid`, at most ``retries`` times.

An executor has ``submit(resources, fn, *args)`` (a handle), ``wait(handles, timeout)`` (those finished),
``result(handle)`` (``fn``'s value; an exception when the task was lost), ``free()`` (the cluster's free
resources, in words) and ``close(pending)`` (cancels those, then lets go of the pool or cluster); ``kind``
names its tasks, ``retries`` bounds the resubmissions, ``progress_every`` spaces the progress lines (None: none).
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from lit_grpo.experiments.spec import Resources

#: Seconds between the progress lines of the ray and slurm executors while no run finishes.
PROGRESS_EVERY = 60.0
#: submitit's cluster for ``--executor slurm``; ``local`` runs the jobs on this machine (for the tests).
CLUSTER_ENV = "LIT_GRPO_SUBMITIT_CLUSTER"


class LocalExecutor:
    """A thread pool of ``jobs`` threads; the runs' children get Ctrl-C with this process."""

    retries = 0  # a run stopped with exit 75 here was stopped by Ctrl-C: not run again
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
            f"--executor {extra} needs the {module!r} package, which is not installed: pip install 'lit-grpo[{extra}]'"
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
            f"--ray-address {address}: no Ray cluster reachable there ({err}); give the head node's HOST:PORT "
            "(`ray status` on it prints it), or leave --ray-address out to start Ray on this machine"
        ) from None


class RayExecutor:
    """One Ray task per run: on the cluster at ``address``, else on a Ray instance started here (stopped by
    :meth:`close`)."""

    kind, progress_every = "Ray tasks", PROGRESS_EVERY

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
        options = {"num_cpus": resources.cpus, "num_gpus": resources.gpus, "max_retries": self.retries, **memory}
        return self.task.options(**options).remote(os.getcwd(), fn, *args)

    def wait(self, handles: Iterable, timeout: float | None) -> list:
        return self.ray.wait(list(handles), num_returns=1, timeout=timeout)[0]

    def result(self, handle) -> Any:
        return self.ray.get(handle)

    def free(self) -> str:
        free = self.ray.available_resources()
        memory = f", memory {free['memory'] / 2**30:.1f} GB" if "memory" in free else ""
        return f"free: CPU {free.get('CPU', 0):g}, GPU {free.get('GPU', 0):g}{memory}"

    def close(self, pending: Iterable = ()) -> None:
        for handle in pending:  # force: the worker dies, and its child with it
            self.ray.cancel(handle, force=True)
        self.ray.shutdown()


class SlurmExecutor:
    """One Slurm job per run through submitit, its files under ``folder``; ``cluster="local"`` runs the jobs as
    processes on this machine (submitit's local executor, for the tests)."""

    kind, progress_every = "Slurm jobs", PROGRESS_EVERY

    def __init__(self, retries: int, folder: str | Path, partition: str | None, account: str | None, minutes: int,
                 cluster: str = "slurm") -> None:
        submitit = _import("submitit", "slurm")
        if cluster == "slurm" and shutil.which("sbatch") is None:
            raise ValueError("--executor slurm: no `sbatch` on PATH; run lit-grpo compare where jobs are submitted")
        self.retries, self.executor = retries, submitit.AutoExecutor(folder=folder, cluster=cluster)
        self.executor.update_parameters(
            name="lit-grpo", timeout_min=minutes, slurm_partition=partition, slurm_account=account
        )

    def submit(self, resources: Resources, fn: Callable, *args: Any):
        if resources.gpus != int(resources.gpus):
            raise ValueError(f"resources.gpus: {resources.gpus} GPUs: Slurm gives whole GPUs; use an integer")
        self.executor.update_parameters(
            cpus_per_task=resources.cpus, gpus_per_node=int(resources.gpus) or None, mem_gb=resources.memory_gb
        )
        return self.executor.submit(_in_dir, os.getcwd(), fn, *args)

    def wait(self, handles: Iterable, timeout: float | None) -> list:
        handles, start = list(handles), time.monotonic()
        while not (done := [h for h in handles if h.done()]):
            if timeout is not None and time.monotonic() - start > timeout:
                break
            time.sleep(1)
        return done

    def result(self, handle) -> Any:
        return handle.result()

    def free(self) -> str:
        return ""

    def close(self, pending: Iterable = ()) -> None:
        for job in pending:
            job.cancel(check=False)


def make_executor(name: str, retries: int, address: str | None, folder: str | Path, partition: str | None,
                  account: str | None, minutes: int) -> RayExecutor | SlurmExecutor:
    """The ``ray`` or ``slurm`` executor of ``lit-grpo compare``'s options (``local`` is made per grid, for its
    ``--jobs``)."""
    if name == "ray":
        return RayExecutor(retries, address)
    return SlurmExecutor(retries, folder, partition, account, minutes, os.environ.get(CLUSTER_ENV, "slurm"))
