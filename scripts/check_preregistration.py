"""Whether each experiment's success criterion was committed before its data, and left unchanged since.

For every ``experiments/<name>.yaml`` with a criterion block (the header comment from the line holding
``SUCCESS CRITERION``/``SUCCESS CRITERIA`` to the next blank comment line, ``# Result`` line or YAML line) and
a published ``docs/results/<name>/runs.csv``, the git history answers two questions:

- **written before the data**: the commit that gave the block its present text is an ancestor of, and not the
  same as, the first commit that added the runs.csv;
- **unchanged since**: no later commit changed the block (which the first answer implies: the block's
  present text dates from that commit).

An experiment that fails is "criteria written after the data"; docs/results.md says so in its claims table.
Usage: ``python scripts/check_preregistration.py [--repo DIR] [--json]``; exit 1 when an experiment fails
without being labelled so in docs/results.md, 2 when the history is not there to check (a shallow clone).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

MARKER = re.compile(r"^#\s*SUCCESS CRITERI(ON|A)\b")
LABEL = "criteria written after the data"


@dataclass
class Verdict:
    experiment: str
    criterion_commit: str  # the commit that gave the block its present text
    data_commit: str  # the first commit of docs/results/<name>/runs.csv
    before_data: bool

    def line(self) -> str:
        state = "criterion before the data" if self.before_data else LABEL
        return f"{self.experiment}: {state} (criterion {self.criterion_commit[:10]}, data {self.data_commit[:10]})"


def criterion_block(text: str) -> str | None:
    """The criterion block of a YAML header, or None without one."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if MARKER.match(line)), None)
    if start is None:
        return None
    block = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith("#") or line.strip() == "#" or line.startswith("# Result"):
            break
        block.append(line)
    return "\n".join(block)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _history(repo: Path, path: str) -> list[str]:
    """Commits that touched ``path``, oldest first (renames not followed: the experiments keep their names)."""
    return _git(repo, "log", "--format=%H", "--reverse", "--", path).split()


def _show(repo: Path, commit: str, path: str) -> str | None:
    done = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def check(repo: Path, name: str) -> Verdict | None:
    """The verdict for ``experiments/<name>.yaml``; None without a criterion block or without published data."""
    spec, data = f"experiments/{name}.yaml", f"docs/results/{name}/runs.csv"
    present = criterion_block((repo / spec).read_text())
    data_commits = _history(repo, data)
    if present is None or not data_commits:
        return None
    since = None  # the first commit of the latest unbroken run of commits holding the present block
    for commit in _history(repo, spec):
        block = _show(repo, commit, spec)
        if block is not None and criterion_block(block) == present:
            since = since or commit
        else:
            since = None
    if since is None:  # the present text is not committed yet
        return Verdict(name, "uncommitted", data_commits[0], False)
    first_data = data_commits[0]
    ancestor = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", since, first_data]).returncode
    return Verdict(name, since, first_data, since != first_data and ancestor == 0)


def labelled_after(results_md: str) -> set[str]:
    """Experiments the claims document labels ``criteria written after the data``: table rows with the label that
    name the experiment (`` `name` ``) or its data (`` `results/name/runs.csv` ``)."""
    rows = [row for row in results_md.splitlines() if row.startswith("|") and LABEL in row]
    return {m for row in rows for m in re.findall(r"`(?:results/)?([a-z_]+)[`/]", row)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    args = parser.parse_args(argv)
    if _git(args.repo, "rev-parse", "--is-shallow-repository").strip() == "true":
        print("check_preregistration: a shallow clone holds too little history to check; fetch the whole history "
              "(git fetch --unshallow) and run again", file=sys.stderr)
        return 2
    names = sorted(p.stem for p in (args.repo / "experiments").glob("*.yaml"))
    verdicts = [v for v in map(lambda n: check(args.repo, n), names) if v is not None]
    print(json.dumps([asdict(v) for v in verdicts], indent=1) if args.json else "\n".join(v.line() for v in verdicts))
    after = {v.experiment for v in verdicts if not v.before_data}
    labelled = labelled_after((args.repo / "docs" / "results.md").read_text()) & set(names)
    if after != labelled:
        print(f"check_preregistration: docs/results.md labels {sorted(labelled)} '{LABEL}'; the history says "
              f"{sorted(after)}. Label exactly those experiments in its status table", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
