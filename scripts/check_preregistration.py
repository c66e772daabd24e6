"""Whether each published criterion was committed before its data, and left unchanged since.

Two kinds of record are checked:

- every ``experiments/<name>.yaml`` with a criterion block and a published ``docs/results/<name>/runs.csv``. The
  block is the whole header comment from the line holding ``SUCCESS CRITERION``/``SUCCESS CRITERIA`` to the
  ``# Result`` line or the first YAML line (every paragraph, not the first alone);
- every benchmark part in :data:`BENCHES` whose doc says its criterion came first: the criterion is the
  module-level constants named (each with the ``#:`` comment above it) or the module docstring from a named
  sentence to its paragraph's end, and its data is the first committed version of the part's published file.

For each, the git history answers: the data commit is the first commit that added the data file; the criterion
is read from that commit's parent, from that commit and from the working tree. It counts as committed first when
the parent holds it, the data commit left it alone and the text today is that same text. Files are followed
across renames (``git log --follow``), criteria and data alike.

**Amendments.** A criterion may grow after its data only by an amendment: a comment paragraph whose first line
starts with ``AMENDMENT`` (``# AMENDMENT (after the data): ...`` in YAML, ``#: AMENDMENT ...`` in Python) and
that runs to the next blank comment line or the end of the criterion. Amendments are removed before comparing, so
an amendment adds to the criterion the data was judged by and cannot reword it; the doc must read the result by the
original text and say what the amendment adds.

A record that fails is "criteria written after the data"; the doc that publishes it must say so on a line naming
it (for experiments: a row of docs/results.md's claims or status table). Finally every paragraph of README.md and
docs/*.md, and every file under bench/ and scripts/, that claims a criterion came first ("fixed before the first
run", "committed before any run", "pre-registered", ...) must name a record this script checks.

Usage: ``python scripts/check_preregistration.py [--repo DIR] [--json]``; exit 1 when a record fails without
being labelled so, a label has no failing record, or a claim has no record; 2 when the history is not there to
check (a shallow clone: ``git fetch --unshallow``).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

MARKER = re.compile(r"^#\s*SUCCESS CRITERI(ON|A)\b")
AMENDMENT = re.compile(r"^(#:?)?\s*AMENDMENT\b")
LABEL = "criteria written after the data"
#: a sentence that says a criterion (rule, target, question, reading, bound) was fixed before something, or was
#: committed first or pre-registered (a sentence ends at a full stop followed by a space)
CLAIM = re.compile(
    r"\b(?:criteri(?:on|a)|rule|target|question|reading|bound|margin|threshold)\b(?:(?!\.\s).){0,120}?"
    r"\b(?:fixed|committed|written|stated|set|registered|chosen)\b(?:(?!\.\s).){0,60}?\bbefore\b"
    r"|\bcommitted first\b|\bpre-?registered\b|\bcame first\b", re.I | re.S)
#: the docs whose paragraphs are read for claims, and the code whose files are
DOCS, CODE = ("README.md", "docs/*.md"), ("bench/*.py", "scripts/*.py", "experiments/*.yaml")


@dataclass(frozen=True)
class Piece:
    """Where one part of a criterion lives: ``constant`` (a module-level assignment of ``name`` with the ``#:``
    comment right above it; its value and comment are compared, not its name, so a renamed constant lists its
    earlier names in ``was``), ``docstring`` (the module docstring from the sentence holding ``name`` to the end of
    its paragraph) or ``yaml`` (an experiment's header block)."""

    path: str
    kind: str
    name: str = ""
    was: tuple[str, ...] = ()  # the constant's earlier names, read where ``name`` is not there yet


@dataclass(frozen=True)
class Record:
    """A published result whose doc says its criterion came first."""

    name: str
    pieces: tuple[Piece, ...]
    data: str  # the published data file (its name today, or its last name where it was removed)
    doc: str  # the doc that publishes the verdict
    refs: tuple[str, ...] = ()  # strings that name it in a doc's paragraph (besides its data and criterion files)

    def names(self) -> tuple[str, ...]:
        data = self.data.removeprefix("docs/")
        return (self.data, data, *(p.path for p in self.pieces), *self.refs)


def _bench(name: str, script: str, data: str, *constants: str, docstring: str = "",
           doc: str = "docs/performance.md") -> Record:
    """A benchmark part: its criterion the ``constants`` of ``bench/<script>`` (``NAME<OLD``: a constant renamed
    from OLD) and the ``docstring`` from that sentence on; ``doc`` publishes it."""
    pieces = tuple(Piece(f"bench/{script}", "constant", *c.split("<")[:1], tuple(c.split("<")[1:])) for c in constants)
    pieces += (Piece(f"bench/{script}", "docstring", docstring),) if docstring else ()
    return Record(name, pieces, f"docs/results/{data}", doc)


#: The benchmarks whose criterion their doc (docs/performance.md unless named) says was fixed before their data.
BENCHES = (
    _bench("async speed", "async_rollouts.py", "async/speed.json", "CRITERION"),
    _bench("async accuracy", "async_rollouts.py", "async/accuracy.json", "CRITERION"),
    _bench("async speed-real", "async_rollouts.py", "async/speed-real.json", "CRITERION", "REAL"),
    _bench("async accuracy-tis", "async_rollouts.py", "async/accuracy-tis.json", "CRITERION", "PARTS"),
    _bench("async speed-process", "async_rollouts.py", "async/speed-process.json", "CRITERION", "SPEED_ARMS"),
    _bench("async accuracy-defaults", "async_rollouts.py", "async/accuracy-defaults.json", "CRITERION",
           "DEFAULTS_PARTS"),
    _bench("async speed-k", "async_rollouts.py", "async/speed-k.json", "CRITERION", "SPEED_K"),
    _bench("soak, first run", "soak.py", "soak/quickstart.json", "FIRST_CRITERION<CRITERION"),
    _bench("soak, trend run", "soak.py", "soak/quickstart-trend.json", "CRITERION"),
    _bench("decode step compiled", "hf_decode.py", "hf_decode_compile.json", docstring="The reading, fixed before"),
    _bench("agents: GRPO against more supervised steps", "agent_budget.py", "agents/budget.json", "CRITERION",
           doc="docs/agents.md"),
)


@dataclass
class Verdict:
    experiment: str
    criterion_commit: str  # the commit the criterion is read from before the data (the data commit's parent)
    data_commit: str  # the first commit of the data file
    before_data: bool
    why: str = ""
    doc: str = field(default="docs/results.md", repr=False)

    def line(self) -> str:
        state = "criterion before the data" if self.before_data else f"{LABEL} ({self.why})"
        return f"{self.experiment}: {state} (criterion {self.criterion_commit[:10]}, data {self.data_commit[:10]})"


def criterion_block(text: str) -> str | None:
    """The criterion block of a YAML header (every paragraph up to the ``# Result`` line or the first YAML line,
    trailing blank comment lines dropped), or None without one."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if MARKER.match(line)), None)
    if start is None:
        return None
    block = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith("#") or line.startswith("# Result"):
            break
        block.append(line)
    while block and block[-1].strip() == "#":
        block.pop()
    return "\n".join(block)


def constant(text: str, name: str) -> str | None:
    """The ``#:`` comment lines right above the module-level assignment of ``name`` and its value's source (its
    whitespace collapsed), or None."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    lines = text.splitlines()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            start = node.lineno - 1
            while start > 0 and lines[start - 1].startswith("#:"):
                start -= 1
            return "\n".join([*lines[start:node.lineno - 1], "= " + " ".join(ast.get_source_segment(text, node.value).split())])
    return None


def docstring_part(text: str, anchor: str) -> str | None:
    """The module docstring from the sentence holding ``anchor`` to the end of its paragraph, or None."""
    try:
        doc = ast.get_docstring(ast.parse(text), clean=False)
    except SyntaxError:
        return None
    if not doc or anchor not in doc:
        return None
    at = doc.index(anchor)
    end = doc.find("\n\n", at)
    return doc[at:end if end >= 0 else len(doc)].strip()


def read(piece: Piece, text: str | None) -> str | None:
    if text is None:
        return None
    if piece.kind == "yaml":
        return criterion_block(text)
    if piece.kind == "constant":
        return next((c for c in (constant(text, n) for n in (piece.name, *piece.was)) if c is not None), None)
    if piece.kind == "docstring":
        return docstring_part(text, piece.name)
    raise ValueError(f"unknown criterion kind {piece.kind!r}: use yaml, constant or docstring")


def without_amendments(text: str) -> str:
    """``text`` less its amendment paragraphs (see the module docstring)."""
    kept, inside = [], False
    for line in text.splitlines():
        bare = line.strip()
        if AMENDMENT.match(bare):
            inside = True
        elif inside and (bare in ("#", "#:", "") or not bare.startswith("#")):
            inside = False
        if not inside:
            kept.append(line)
    while kept and kept[-1].strip() in ("#", "#:"):
        kept.pop()
    return "\n".join(kept)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _names(repo: Path, path: str) -> list[tuple[str, str]]:
    """(commit, the file's name after that commit) for every commit that touched ``path``, newest first, followed
    across renames."""
    out = _git(repo, "log", "--follow", "--format=%x00%H", "--name-status", "--", path)
    rows = []
    for chunk in out.split("\x00")[1:]:
        head, *rest = chunk.strip().split("\n")
        fields = next((r.split("\t") for r in rest if r.strip()), None)
        if fields:
            rows.append((head.strip(), fields[-1]))
    return rows


def _first_added(repo: Path, path: str) -> str | None:
    added = _git(repo, "log", "--follow", "--diff-filter=A", "--format=%H", "--", path).split()
    return added[-1] if added else None


def _show(repo: Path, commit: str, path: str) -> str | None:
    done = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def _at(repo: Path, commit: str, history: list[tuple[str, str]]) -> str | None:
    """The file's text at ``commit``, under the name it had there."""
    ancestors = set(_git(repo, "rev-list", commit).split())
    name = next((n for c, n in history if c in ancestors), None)
    return None if name is None else _show(repo, commit, name)


def check_record(repo: Path, record: Record) -> Verdict | None:
    """The verdict for one record; None while its data is not published."""
    data_commit = _first_added(repo, record.data)
    if data_commit is None:
        return None
    parent = _git(repo, "rev-list", "--parents", "-n", "1", data_commit).split()[1:2]
    before, at_data, now = [], [], []
    for piece in record.pieces:
        history = _names(repo, piece.path)
        before.append(read(piece, _at(repo, parent[0], history)) if parent else None)
        at_data.append(read(piece, _at(repo, data_commit, history)))
        today = repo / piece.path
        now.append(read(piece, today.read_text() if today.is_file() else None))
    where = parent[0] if parent else data_commit
    if any(n is None for n in now):
        return Verdict(record.name, where, data_commit, False, "no criterion in the working tree", record.doc)
    if any(b is None for b in before):
        return Verdict(record.name, where, data_commit, False, "no criterion before the data commit", record.doc)
    if before != at_data:
        return Verdict(record.name, where, data_commit, False, "changed by the data commit", record.doc)
    if [without_amendments(n) for n in now] != before:
        return Verdict(record.name, where, data_commit, False,
                       "changed after the data without an AMENDMENT marker", record.doc)
    return Verdict(record.name, where, data_commit, True, "", record.doc)


def experiment(name: str) -> Record:
    return Record(name, (Piece(f"experiments/{name}.yaml", "yaml"),), f"docs/results/{name}/runs.csv",
                  "docs/results.md", (f"`{name}`", f"results/{name}/"))


def records(repo: Path) -> list[Record]:
    """Every experiment with a criterion block or with published data (so that deleting a block hides nothing),
    then :data:`BENCHES`."""
    names = sorted(p.stem for p in (repo / "experiments").glob("*.yaml"))
    found = [experiment(n) for n in names if criterion_block((repo / "experiments" / f"{n}.yaml").read_text())
             or (repo / "docs" / "results" / n / "runs.csv").is_file()]
    return [*found, *BENCHES]


def check(repo: Path, name: str) -> Verdict | None:
    """The verdict for ``experiments/<name>.yaml``; None without a criterion block or without published data."""
    spec = repo / "experiments" / f"{name}.yaml"
    if not spec.is_file() or criterion_block(spec.read_text()) is None:
        return None
    return check_record(repo, experiment(name))


def labelled_after(results_md: str) -> set[str]:
    """Experiments the claims document labels ``criteria written after the data``: table rows with the label that
    name the experiment (`` `name` ``) or its data (`` `results/name/runs.csv` ``)."""
    rows = [row for row in results_md.splitlines() if row.startswith("|") and LABEL in row]
    return {m for row in rows for m in re.findall(r"`(?:results/)?([a-z_]+)[`/]", row)}


def labelled(repo: Path, record: Record) -> bool:
    """Whether the record's doc labels it: for an experiment a table row of docs/results.md, for a benchmark a line
    of its doc holding the label and the record's data file."""
    doc = repo / record.doc
    if not doc.is_file():
        return False
    text = doc.read_text()
    if record.pieces[0].kind == "yaml":
        return record.name in labelled_after(text)
    return any(LABEL in line and record.data.removeprefix("docs/") in line for line in text.splitlines())


def paragraphs(text: str) -> list[str]:
    """A markdown text's paragraphs, a list item or a table row each its own."""
    out, current = [], []
    for line in text.splitlines():
        if not line.strip() or re.match(r"\s*([-*]|\d+\.)\s", line) or line.startswith("|"):
            if current:
                out.append("\n".join(current))
            current = [line] if line.strip() else []
        else:
            current.append(line)
    if current:
        out.append("\n".join(current))
    return out


def unrecorded_claims(repo: Path, known: list[Record]) -> list[str]:
    """Claims that a criterion came first which name no record this script checks."""
    problems = []
    for pattern in DOCS:
        for doc in sorted(repo.glob(pattern)):
            for para in paragraphs(doc.read_text()):
                claim = CLAIM.search(para)
                if claim and not any(n in para for r in known for n in r.names()):
                    where = f"{doc.relative_to(repo)}: {para.strip().splitlines()[0][:80]!r}"
                    problems.append(f"{where} says {claim.group(0)!r} of a result this script has no record of")
    sources = {p.path for r in known for p in r.pieces} | {"scripts/check_preregistration.py"}
    for pattern in CODE:
        for path in sorted(repo.glob(pattern)):
            relative = str(path.relative_to(repo))
            claim = CLAIM.search(path.read_text())
            if claim and relative not in sources:
                problems.append(f"{relative} says {claim.group(0)!r} but holds no criterion this script checks "
                                f"(add it to BENCHES, or give the experiment a SUCCESS CRITERION block)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    args = parser.parse_args(argv)
    if _git(args.repo, "rev-parse", "--is-shallow-repository").strip() == "true":
        print("check_preregistration: a shallow clone holds too little history to check; fetch the whole history "
              "(git fetch --unshallow) and run again", file=sys.stderr)
        return 2
    known = records(args.repo)
    checked = [(r, check_record(args.repo, r)) for r in known]
    verdicts = [v for _, v in checked if v is not None]
    print(json.dumps([asdict(v) for v in verdicts], indent=1) if args.json else "\n".join(v.line() for v in verdicts))
    problems = []
    for record, verdict in checked:
        is_labelled = labelled(args.repo, record)
        failed = verdict is not None and not verdict.before_data
        if failed and not is_labelled:
            problems.append(f"{record.name}: {verdict.why}; label it '{LABEL}' in {record.doc} (for an experiment "
                            f"its row of the status table), or restore the criterion the data was judged by")
        elif is_labelled and not failed:
            state = "has no published data yet" if verdict is None else "was committed before its data"
            problems.append(f"{record.doc} labels {record.name} '{LABEL}', but by the history its criterion {state}: "
                            "remove the label")
    problems += unrecorded_claims(args.repo, known)
    if problems:
        print("check_preregistration:\n" + "\n".join(f"- {p}" for p in problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
