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


def test_the_report_keeps_what_passed_tests_printed_and_publishes_without_the_machines_paths(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_check

    (tmp_path / "tests.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.gpu.test_gpu" name="test_fsdp1">'
        "<system-out>---- Captured Out ----\nFSDP1 vs single device: max |diff| = 1.0e-07\n</system-out></testcase>"
        '<testcase classname="tests.gpu.test_gpu" name="test_quiet"><system-out>-- Captured Out --\n</system-out>'
        "</testcase>"
        '<testcase classname="tests.gpu.test_gpu" name="test_bad"><failure message="x"/>'
        "<system-out>not kept</system-out></testcase></testsuite></testsuites>")
    counts = gpu_check.junit_counts(tmp_path / "tests.xml")
    assert counts["passed"] == 2 and counts["failed"] == 1
    assert counts["printed"] == {"tests.gpu.test_gpu::test_fsdp1": ["FSDP1 vs single device: max |diff| = 1.0e-07"]}
    work = tmp_path / "gpu_check.x1"
    report = {"work_dir": str(work), "root": "/srv/repo", "parts": {
        "tests": {"command": f"pytest --junitxml={work}/tests.xml",
                  "log_tail": ["/opt/v/lib/python3.12/site-packages/a.py:1: W"]},
        "fetch": {"command": "lit-grpo models fetch m --wheel /tmp/gw/m.whl --config /srv/repo/configs/a.yaml",
                  "log_tail": ["/root/.cache/lit-grpo/models/m"]}}}
    (tmp_path / "raw.json").write_text(json.dumps(report))
    assert gpu_check.main(["publish", str(tmp_path / "raw.json"), "--out", str(tmp_path / "out.json")]) == 0
    published = json.loads((tmp_path / "out.json").read_text())
    assert published["work_dir"] == "<work>"
    assert published["parts"]["tests"] == {"command": "pytest --junitxml=<work>/tests.xml",
                                           "log_tail": ["<site-packages>/a.py:1: W"]}
    assert published["parts"]["fetch"] == {
        "command": "lit-grpo models fetch m --wheel <machine>/m.whl --config <repo>/configs/a.yaml",
        "log_tail": ["<machine>/m"]}
