"""How long ``lit-grpo fit`` takes to stop after a SIGTERM on the tiny fault-matrix model: wall seconds from the
signal (sent mid-step, as in ``test_fault_signals.py``) to the checkpoint on disk and to the process's exit.
What a scheduler's grace period (the time between its SIGTERM and its SIGKILL) must cover beyond the rest of
a step and the checkpoint write. Not a test: a measurement, printed as a table and as JSON.

    python -m tests.faults.exit_time [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from tests.faults.fault_tools import ROOT, config, write_config


def one_run(tmp: Path) -> dict[str, float]:
    """SIGTERM mid-step 2 of a 4-step run: seconds to the checkpoint's last write and to the exit."""
    cfg = config(tmp, steps=4)
    cfg["trainer"]["callbacks"].append({"class_path": "tests.faults.fault_tools.PauseAt", "init_args": {"step": 1}})
    path = write_config(tmp, cfg)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(torch.get_num_threads()),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    with open(tmp / "stderr.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "lit_grpo", "fit", "--config", str(path)], cwd=ROOT,
                                env=env, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 240
        while not (tmp / "paused").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the run ended before step 2: {(tmp / 'stderr.txt').read_text()[-2000:]}")
            time.sleep(0.002)
        sent, wall = time.monotonic(), time.time()
        proc.send_signal(signal.SIGTERM)
        while proc.poll() is None:
            time.sleep(0.002)
        exited = time.monotonic() - sent
    if proc.returncode != 75:
        raise RuntimeError(f"exit status {proc.returncode}: {(tmp / 'stderr.txt').read_text()[-2000:]}")
    written = (tmp / "ckpt" / "last.ckpt").stat().st_mtime - wall
    return {"to_checkpoint_s": written, "to_exit_s": exited, "checkpoint_to_exit_s": exited - written}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    rows = []
    for i in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(one_run(Path(tmp)))
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in rows[-1].items()), flush=True)
    summary = {k: {"median": statistics.median(r[k] for r in rows), "max": max(r[k] for r in rows)}
               for k in rows[0]}
    print(json.dumps({"runs": runs, "cpus": os.cpu_count(), "threads": torch.get_num_threads(), **summary}))


if __name__ == "__main__":
    main()
