"""Run ``.ci/run`` and record what the README says of it: each pytest pass's counts and time, why tests skipped,
the wheel check's time and the whole run's wall time, in one JSON; render the README's sentence from that JSON.

    python3 scripts/ci_record.py --run --log ci.log --json ci_run.json     # on a clean clone: runs .ci/run
    python3 scripts/ci_record.py --render --json docs/results/ci_run.json --write README.md

Standard library only (it runs before any environment exists). ``--run`` exits with ``.ci/run``'s status and writes
the JSON only when it passed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from provenance import write_block  # noqa: E402  (the standard library only)

DATA = ROOT / "docs" / "results" / "ci_run.json"
BEGIN, END = "<!-- ci_record.py:begin -->", "<!-- ci_record.py:end -->"
SUMMARY = re.compile(r"^=+ (.+) in ([\d.]+)s(?: \([\d:]+\))? =+$")
COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")
SKIPPED = re.compile(r"^SKIPPED \[(\d+)\] [^:]+:\d+: (.*)$")
WHEEL = re.compile(r"^\[check_wheel (\d+) s\]")
RERUN = re.compile(r"^(\d+) tests or modules skipped for want of an optional extra")


def skip_reason(text: str) -> str:
    """The kind of a skip reason, as the README groups them."""
    if "vllm" in text.lower() or "lit-grpo[" in text:
        return "for an extra"
    if "GPU" in text or "CUDA" in text:
        return "without a GPU"
    return "others"


def parse(log: str) -> dict:
    """The passes, skip kinds, the size of the extras' rerun and the wheel-check seconds of a ``.ci/run`` log."""
    passes, skips, wheel, rerun = [], {}, None, None
    for line in log.splitlines():
        line = line.strip()
        if m := SUMMARY.match(line):
            counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n)
                      for n, kind in COUNT.findall(m.group(1))}
            passes.append({"counts": counts, "seconds": float(m.group(2)), "skips": skips})
            skips = {}
        elif m := SKIPPED.match(line):
            kind = skip_reason(m.group(2))
            skips[kind] = skips.get(kind, 0) + int(m.group(1))
        elif m := WHEEL.match(line):
            wheel = int(m.group(1))
        elif m := RERUN.match(line):
            rerun = int(m.group(1))
    if len(passes) != 2 or wheel is None or rerun is None:
        raise ValueError(f"not a whole .ci/run log: {len(passes)} pytest summaries (want 2), wheel check "
                         f"{'found' if wheel is not None else 'missing'}, extras' rerun line "
                         f"{'found' if rerun is not None else 'missing'}")
    return {"suite": passes[0], "extras": passes[1], "extras_rerun": rerun, "wheel_check_s": wheel}


def minutes(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"


def _counts(p: dict) -> str:
    skipped = p["counts"].get("skipped", 0)
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(p["skips"].items(), key=lambda kv: -kv[1]))
    return f"{p['counts'].get('passed', 0)} passed, {skipped} skipped" + (f" ({kinds})" if kinds else "")


def render(record: dict) -> str:
    """The README's sentences on the last recorded ``.ci/run`` (of the commit it ran, where recorded: later commits
    may have added or removed tests); ``beside``, where the record has it, says what else ran on the machine."""
    return (
        f"\nOn a clean clone{' of ' + record['commit'] if record.get('commit') else ''} ({record['date']}, "
        f"{record['cpus']} cores, load average {record['load_at_start']:.1f} "
        f"at the start, a warm package cache{', ' + record['beside'] if record.get('beside') else ''}): the whole "
        f"suite {_counts(record['suite'])} in "
        f"{minutes(record['suite']['seconds'])}; the {record['extras_rerun']} tests and modules that skipped for want "
        f"of an optional extra, rerun after installing every extra and vLLM's CPU build: {_counts(record['extras'])} "
        f"in {minutes(record['extras']['seconds'])}; `scripts/check_wheel.sh` {minutes(record['wheel_check_s'])}, most of "
        f"it installing; {minutes(record['wall_s'])} in all (`python3 scripts/ci_record.py --run`, "
        f"docs/results/ci_run.json).\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="store_true", help="run .ci/run here, logging to --log, recording to --json")
    parser.add_argument("--render", action="store_true", help="render --json into --write")
    parser.add_argument("--log", type=Path, default=Path("ci.log"))
    parser.add_argument("--json", type=Path, default=DATA)
    parser.add_argument("--write", type=Path, default=None, help="a markdown file with the ci_record.py markers")
    args = parser.parse_args()
    if args.run:
        load, start = os.getloadavg()[0], time.monotonic()
        with args.log.open("w") as log:
            rc = subprocess.run(["bash", ".ci/run"], stdout=log, stderr=subprocess.STDOUT).returncode
        wall = time.monotonic() - start
        print(f".ci/run exited {rc} after {minutes(wall)}; log: {args.log}")
        if rc:
            return rc
        commit = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT).stdout
        record = {**parse(args.log.read_text()), "wall_s": round(wall), "load_at_start": round(load, 2),
                  "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "commit": commit.strip() or None}
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    if args.write:
        write_block(args.write, BEGIN, END, render(json.loads(args.json.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
