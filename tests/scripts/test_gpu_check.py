"""scripts/gpu_check.sh --dry-run: the GPU check's commands, configs and benchmark options hold on the CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PARTS = ["tests", "fetch", "train", "trl_env", "bench"]


def dry_run(tmp: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", "--out", str(tmp / "gpu_check.json")],
        cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp), **env},
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two dry runs started side by side: as committed (about 25 s here), and the train part alone with the GPU
    overlay's precision key renamed (its first line names the configs it applies over, itself included)."""
    good, bad = tmp_path_factory.mktemp("good"), tmp_path_factory.mktemp("bad")
    overlay = (ROOT / "configs" / "real" / "quickstart_gpu.yaml").read_text().split("\n", 1)[1]
    (bad / "gpu.yaml").write_text(f"# lit-grpo fit --config configs/real/quickstart.yaml --config {bad / 'gpu.yaml'}\n"
                                  + overlay.replace("precision: bf16-mixed", "precison: bf16-mixed"))
    procs = {"good": (good, dry_run(good)), "bad": (bad, dry_run(bad, GPU_CHECK_CONFIG=str(bad / "gpu.yaml"), GPU_CHECK_PARTS="train"))}
    return {name: (tmp, proc, proc.communicate(timeout=300)[0]) for name, (tmp, proc) in procs.items()}


def test_dry_run_prints_every_command_and_writes_every_part_as_dry_run(runs):
    tmp, proc, out = runs["good"]
    assert proc.returncode == 0, out
    result = json.loads((tmp / "gpu_check.json").read_text())
    assert result["mode"] == "dry-run" and result["ok"] and result["problems"] == []
    assert list(result["parts"]) == PARTS
    for name, part in result["parts"].items():
        assert part["status"] == "dry-run", name
        assert part["command"] and f"[{name}] {part['command']}" in out  # printed as it would run
        assert part["checks"] and all(c["ok"] for c in part["checks"]), part
    commands = {name: part["command"] for name, part in result["parts"].items()}
    assert "tests/gpu/test_gpu.py" in commands["tests"]
    assert "configs/real/quickstart_gpu.yaml" in commands["train"] and "--trainer.max_steps=5" in commands["train"]
    assert "--device cuda" in commands["bench"]
    assert {"gpu", "versions", "git_commit"} <= set(result["environment"])
    assert not [p for p in tmp.glob("gpu_check.*") if p.is_dir()]  # a dry run removes its work directory


def test_dry_run_fails_naming_a_renamed_config_key(runs):
    tmp, proc, out = runs["bad"]
    assert proc.returncode != 0
    assert "PROBLEM train" in out and "precison" in out
    result = json.loads((tmp / "gpu_check.json").read_text())
    assert not result["ok"] and any("precison" in p for p in result["problems"])
    assert list(result["parts"]) == ["train"] and result["parts"]["train"]["status"] == "dry-run"
