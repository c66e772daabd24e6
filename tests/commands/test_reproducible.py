"""One command, run twice on one machine, gives the same numbers: every logged metric but the timings, step by step,
with the process's default intra-op threads (the CPU kernels' reductions split over them)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lit_grpo.lab.collect import read_scalars

ROOT = Path(__file__).resolve().parents[2]
STEPS = 24  # two runs differed within 8 to 13 steps when the shared-prefix backward summed rows in thread order


def _run(out: Path) -> dict[str, list[tuple[int, float]]]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    args = ["fit", "--config", "configs/quickstart.yaml", f"--trainer.max_steps={STEPS}",
            f"--trainer.val_check_interval={STEPS}", "--data.max_val_prompts=32",
            "--trainer.enable_progress_bar=false", f"--trainer.logger.init_args.save_dir={out}"]
    done = subprocess.run([sys.executable, "-m", "lit_grpo", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    scalars = read_scalars(next(out.glob("quickstart/version_*")))
    return {k: v for k, v in scalars.items() if not (k.startswith("perf/") or k.endswith("_s") or "time" in k)}


@pytest.mark.slow
def test_the_quickstart_twice_gives_the_same_numbers(tmp_path):
    first, second = _run(tmp_path / "a"), _run(tmp_path / "b")
    assert first.keys() == second.keys() and len(first["train/loss"]) == STEPS
    differ = sorted((a[0], k) for k in first for a, b in zip(first[k], second[k], strict=True) if a != b)
    assert not differ, f"first differences (step, metric): {differ[:5]}"
