"""Whether each published criterion, and what its verdict is read with, was committed before its data and left
unchanged since.

Two kinds of record are checked:

- every ``experiments/<name>.yaml`` with a criterion block and a published ``docs/results/<name>/runs.csv``. The
  block is the whole header comment from the line holding ``SUCCESS CRITERION``/``SUCCESS CRITERIA`` to the
  ``# Result`` line or the first YAML line (every paragraph, not the first alone). The prose is read with the
  YAML's design, held with it: the keys of :data:`DESIGN` (the arms compared and the reference, the seeds, the
  sweep's settings, the selection stage and its metric, the tests, and the metrics of the multiplicity family,
  ``primary`` included). The runs' command-line arguments, the measured ``runtime`` and the metrics outside the
  family may change after the data: they decide how runs are made or what else is reported, not the reading;
- every benchmark part in :data:`BENCHES` whose doc says its criterion came first: the criterion is the
  module-level constants named (each with the ``#:`` comment above it, and every later statement of the module
  that binds or changes the name: a second assignment further down is the value the module runs with) or the
  module docstring from a named sentence to its paragraph's end, and the verdict code named: each function with
  every module-level function and constant it reads, transitively, compared as code (their docstrings and comments
  may change). Its data is the first committed version of the part's published file.

For each, the git history answers: the data commit is the first commit that added the data file; the criterion
is read from that commit's parent, from that commit and from the working tree. It counts as committed first when
the parent holds it, the data commit left it alone and the text today is that same text. Files are followed
across renames (``git log --follow``), criteria and data alike.

**Amendments.** A criterion may grow after its data only by an amendment: a comment paragraph whose first line
starts with ``AMENDMENT`` (``# AMENDMENT (after the data): ...`` in YAML, ``#: AMENDMENT ...`` in Python) and
that runs to the next blank comment line or the end of the criterion. Amendments are removed before comparing, so
an amendment adds to the criterion the data was judged by and cannot reword it; the doc must read the result by the
original text and say what the amendment adds. An amendment that words a change of what the original fixed (its
primary metric, family, margin or bound, "instead", "replaces", a comparison with a number: :data:`REWORDS`) is
refused, whatever else it says.

An experiment that publishes data and never had a criterion block (not before its data, not at it, not today:
a pilot that sizes a study) tests nothing: its row of docs/results.md's status table must say "no criterion:
tests nothing", and that label on any other record is a problem. A record that fails is "criteria written after
the data"; the doc that publishes it must say so on a line naming
it (for experiments: a row of docs/results.md's claims or status table). Finally every paragraph of README.md and
docs/*.md, and every file under bench/ and scripts/, that claims a criterion came first ("fixed before the first
run", "committed before any run", "pre-registered", ...) must name a record this script checks (a doc's paragraph
in the claim's sentence or before it: a record named only after the claim is another result's). A published
``docs/results/<name>/runs.csv`` whose ``experiments/<name>.yaml`` is gone (removed, or renamed without its data)
fails: the record would otherwise drop out of the check.

Usage: ``python scripts/check_preregistration.py [--repo DIR] [--json]``; exit 1 when a record fails without
being labelled so, a label has no failing record, or a claim has no record; 2 when the history is not there to
check (a shallow clone: ``git fetch --unshallow``).
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

MARKER = re.compile(r"^#\s*SUCCESS CRITERI(ON|A)\b")
AMENDMENT = re.compile(r"^(#:?)?\s*AMENDMENT\b")
LABEL = "criteria written after the data"
#: the label of an experiment that never had a criterion (a pilot that sizes a study, a description): it tests
#: nothing, so it has nothing to commit first, and its row says so in place of a verdict
DESCRIPTIVE = "no criterion: tests nothing"
#: what an amendment may not say: it would change what the original fixed (the primary metric, the family, a
#: margin, bound or level, the reading) instead of adding to it
REWORDS = re.compile(
    r"\b(?:primary|instead|replac\w*|rather than|in place of|no longer|supersed\w*|overrid\w*|margin|threshold"
    r"|alpha|family|holm|success|verdict)\b"
    r"|(?:[<>]=?|[≤≥]|\bat (?:least|most)\b|\b(?:below|above)\b)\s*[-+]?\.?\d", re.I)
#: the keys of an experiment's YAML that decide how its verdict is read from its runs (see the module docstring)
DESIGN = ("arms", "reference", "seeds", "sweep", "select", "tests", "metrics")
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
    comment right above it, and any later statement binding or changing ``name``; its value and comment are
    compared, not its name, so a renamed constant lists its earlier names in ``was``), ``docstring`` (the module
    docstring from the sentence holding ``name`` to the end of its paragraph), ``code`` (the module-level function
    ``name`` with what it reads, as code), ``yaml`` (an experiment's header block) or ``design`` (its
    :data:`DESIGN` keys)."""

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


def _bench(name: str, script: str, data: str, *constants: str, docstring: str = "", code: tuple[str, ...] = (),
           doc: str = "docs/performance.md") -> Record:
    """A benchmark part: its criterion the ``constants`` of ``bench/<script>`` (``NAME<OLD``: a constant renamed
    from OLD) and the ``docstring`` from that sentence on, its verdict the functions ``code`` (with what they read);
    ``doc`` publishes it."""
    pieces = tuple(Piece(f"bench/{script}", "constant", *c.split("<")[:1], tuple(c.split("<")[1:])) for c in constants)
    pieces += (Piece(f"bench/{script}", "docstring", docstring),) if docstring else ()
    pieces += tuple(Piece(f"bench/{script}", "code", f) for f in code)
    return Record(name, pieces, f"docs/results/{data}", doc)


#: The benchmarks whose criterion their doc (docs/performance.md unless named) says was fixed before their data, with
#: the functions their verdict is read by. The asynchronous parts compute their verdict inline, in the function that
#: runs them, and record it in their data: what is held is the interval and p-value code it reads. The soak's first
#: run recorded its verdict in its data, and ``verdict`` has since grown the trend run's rule (a reading its
#: criterion does not reach), so only the trend run holds it; the compile rule is read inline by ``render_compile``.
_INTERVAL, _NOT_WORSE = ("_t_interval",), ("_t_interval", "_p_below")
BENCHES = (
    _bench("async speed", "async_rollouts.py", "async/speed.json", "CRITERION", code=_INTERVAL),
    _bench("async accuracy", "async_rollouts.py", "async/accuracy.json", "CRITERION", code=_NOT_WORSE),
    _bench("async speed-real", "async_rollouts.py", "async/speed-real.json", "CRITERION", "REAL", code=_INTERVAL),
    _bench("async accuracy-tis", "async_rollouts.py", "async/accuracy-tis.json", "CRITERION", "PARTS",
           code=_NOT_WORSE),
    _bench("async speed-process", "async_rollouts.py", "async/speed-process.json", "CRITERION", "SPEED_ARMS",
           code=_INTERVAL),
    _bench("async accuracy-defaults", "async_rollouts.py", "async/accuracy-defaults.json", "CRITERION",
           "DEFAULTS_PARTS", code=_NOT_WORSE),
    _bench("async speed-k", "async_rollouts.py", "async/speed-k.json", "CRITERION", "SPEED_K",
           code=("_t_interval", "_p_two_sided")),
    _bench("soak, first run", "soak.py", "soak/quickstart.json", "FIRST_CRITERION<CRITERION"),
    _bench("soak, trend run", "soak.py", "soak/quickstart-trend.json", "CRITERION", code=("verdict",)),
    _bench("decode step compiled", "hf_decode.py", "hf_decode_compile.json", docstring="The reading, fixed before"),
    _bench("agents: GRPO against more supervised steps", "agent_budget.py", "agents/budget.json", "CRITERION",
           code=("judge",), doc="docs/agents.md"),
)


@dataclass
class Verdict:
    experiment: str
    criterion_commit: str  # the commit the criterion is read from before the data (the data commit's parent)
    data_commit: str  # the first commit of the data file
    before_data: bool
    why: str = ""
    doc: str = field(default="docs/results.md", repr=False)
    descriptive: bool = False  # no criterion block before the data, at it, or today: it tests nothing

    def line(self) -> str:
        state = ("criterion before the data" if self.before_data else DESCRIPTIVE if self.descriptive
                 else f"{LABEL} ({self.why})")
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


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def _statements(body: list) -> list:
    """The module-level statements of ``body``, those inside module-level ``if``/``try``/``with``/``for`` blocks
    included (not function or class bodies), in order."""
    out = []
    for node in body:
        out.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for block in ("body", "handlers", "orelse", "finalbody"):
                out += _statements(getattr(node, block, []))
    return out


def _targets(node: ast.AST) -> list[str]:
    """The names an assignment target binds, or changes (``NAME[key] = ...``, ``NAME.attr = ...``)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for e in node.elts for n in _targets(e)]
    if isinstance(node, (ast.Starred, ast.Subscript, ast.Attribute)):
        return _targets(node.value)
    return []


def _bound(node: ast.AST) -> list[str]:
    """The names one statement binds or changes: a definition, an assignment (also of an item or attribute), an
    import, a loop or ``with`` target, a ``del``, or a method call on the name (``NAME.update(...)``)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.Delete)):
        return [n for t in node.targets for n in _targets(t)]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
        return _targets(node.target)
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [n for item in node.items if item.optional_vars for n in _targets(item.optional_vars)]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(alias.asname or alias.name).split(".")[0] for alias in node.names]
    if isinstance(node, ast.ExceptHandler) and node.name:
        return [node.name]
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
        return _targets(node.value.func.value)
    return []


def _bindings(tree: ast.Module) -> dict[str, list]:
    """Each module-level name with the statements that bind or change it, in order."""
    out: dict[str, list] = {}
    for node in _statements(tree.body):
        for name in dict.fromkeys(_bound(node)):
            out.setdefault(name, []).append(node)
    return out


def constant(text: str, name: str) -> str | None:
    """The ``#:`` comment lines right above the module-level assignment of ``name`` and its value's source (its
    whitespace collapsed), then every other module-level statement that binds or changes ``name`` (a second
    assignment further down is the value the module runs with), or None without an assignment."""
    tree = _parse(text)
    if tree is None:
        return None
    lines = text.splitlines()
    nodes = _bindings(tree).get(name, [])
    first = next((node for node in nodes if isinstance(node, (ast.Assign, ast.AnnAssign)) and name in [
        t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)]),
        None)  # fmt: skip
    if first is None:
        return None
    start = first.lineno - 1
    while start > 0 and lines[start - 1].startswith("#:"):
        start -= 1
    later = [" ".join(ast.get_source_segment(text, node).split()) for node in nodes if node is not first]
    value = " ".join(ast.get_source_segment(text, first.value).split())
    return "\n".join([*lines[start:first.lineno - 1], "= " + value, *later])


def _bare(node: ast.AST) -> ast.AST:
    """``node`` without the docstrings of its functions and classes (comments are not in the tree)."""
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body and isinstance(
                n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant) and isinstance(
                n.body[0].value.value, str):  # fmt: skip
            n.body = n.body[1:] or [ast.Pass()]
    return node


def code(text: str, name: str) -> str | None:
    """The module-level function ``name`` and every module-level function and constant it reads, transitively, as
    code (their syntax trees less docstrings: comments, docstrings and layout may change), or None without the
    function. The module's imports are where the module ends: what they bring in is another module's code."""
    tree = _parse(text)
    if tree is None:
        return None
    bindings = {n: [node for node in nodes if not isinstance(node, (ast.Import, ast.ImportFrom))]
                for n, nodes in _bindings(tree).items()}
    if not any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) for node in bindings.get(name, [])):
        return None
    order, todo = [], [name]
    while todo:
        current = todo.pop(0)
        if current in order or not bindings.get(current):
            continue
        order.append(current)
        todo += [n.id for node in bindings[current] for n in ast.walk(node) if isinstance(n, ast.Name)]
    return "\n".join(f"{n}: {ast.dump(_bare(node))}" for n in order for node in bindings[n])


def design(text: str) -> str | None:
    """An experiment YAML's :data:`DESIGN` keys as canonical JSON: the arms less their ``args``, the sweep's axes
    and setting labels less their arguments, and the metrics of the family (those marked ``primary``, else all);
    None where the YAML does not parse to a mapping."""
    try:
        body = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(body, dict):
        return None
    held = {key: body.get(key) for key in DESIGN}
    if isinstance(held["arms"], dict):
        held["arms"] = {label: {k: v for k, v in arm.items() if k != "args"} if isinstance(arm, dict) else arm
                        for label, arm in held["arms"].items()}
    if isinstance(held["sweep"], dict):
        held["sweep"] = {axis: [str(v) for v in values] if isinstance(values, dict) else values
                         for axis, values in held["sweep"].items()}
    if isinstance(held["metrics"], list):
        held["metrics"] = [m for m in held["metrics"] if isinstance(m, dict) and m.get("primary")] or held["metrics"]
    return json.dumps(held, sort_keys=True, default=str)


def docstring_part(text: str, anchor: str) -> str | None:
    """The module docstring from the sentence holding ``anchor`` to the end of its paragraph, or None."""
    tree = _parse(text)
    doc = ast.get_docstring(tree, clean=False) if tree else None
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
    if piece.kind == "code":
        return code(text, piece.name)
    if piece.kind == "design":
        return design(text)
    raise ValueError(f"unknown criterion kind {piece.kind!r}: use yaml, design, constant, docstring or code")


#: the kinds of piece that are prose, which may grow by amendments; the others (design, code) may not change
PROSE = ("yaml", "constant", "docstring")


def _amendments(text: str) -> tuple[str, list[str]]:
    """``text`` less its amendment paragraphs, and those paragraphs (see the module docstring)."""
    kept, found, inside = [], [], False
    for line in text.splitlines():
        bare = line.strip()
        if AMENDMENT.match(bare):
            inside = True
            found.append("")
        elif inside and (bare in ("#", "#:", "") or not bare.startswith("#")):
            inside = False
        if inside:
            found[-1] += " " + bare.lstrip("#:").strip()
        else:
            kept.append(line)
    while kept and kept[-1].strip() in ("#", "#:"):
        kept.pop()
    return "\n".join(kept), [f.strip() for f in found]


def without_amendments(text: str) -> str:
    """``text`` less its amendment paragraphs (see the module docstring)."""
    return _amendments(text)[0]


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
    if record.pieces[0].kind == "yaml" and before[0] is None and at_data[0] is None and now[0] is None:
        return Verdict(record.name, where, data_commit, False, DESCRIPTIVE, record.doc, descriptive=True)
    if any(n is None for n in now):
        return Verdict(record.name, where, data_commit, False, "no criterion in the working tree", record.doc)
    if any(b is None for b in before):
        return Verdict(record.name, where, data_commit, False, "no criterion before the data commit", record.doc)
    if before != at_data:
        return Verdict(record.name, where, data_commit, False, "changed by the data commit", record.doc)
    for piece, was, today in zip(record.pieces, before, now, strict=True):
        why = _changed(piece, was, today)
        if why:
            return Verdict(record.name, where, data_commit, False, why, record.doc)
    return Verdict(record.name, where, data_commit, True, "", record.doc)


def _changed(piece: Piece, before: str, now: str) -> str:
    """Why ``piece`` reads ``now`` where it read ``before`` at the data, or "" where that is allowed (prose that
    grew by amendments which only add)."""
    where = f"{piece.path}{': ' + piece.name if piece.name else ''}"
    if piece.kind not in PROSE:
        what = "the design the criterion is read with" if piece.kind == "design" else "the verdict code"
        return f"{what} changed after the data ({where})" if now != before else ""
    kept, amendments = _amendments(now)
    change = next((m.group(0) for a in amendments for m in [REWORDS.search(a)] if m), None)
    if change is not None:
        return (f"an AMENDMENT changes what the criterion fixed ({change!r} in {where}): an amendment may only add "
                "to the original text, which the result is read by")
    return "changed after the data without an AMENDMENT marker" if kept != before else ""


def experiment(name: str) -> Record:
    spec = f"experiments/{name}.yaml"
    return Record(name, (Piece(spec, "yaml"), Piece(spec, "design")), f"docs/results/{name}/runs.csv",
                  "docs/results.md", (f"`{name}`", f"results/{name}/"))


def records(repo: Path) -> list[Record]:
    """Every experiment with a criterion block or with published data (so that deleting a block hides nothing),
    then :data:`BENCHES`."""
    names = sorted(p.stem for p in (repo / "experiments").glob("*.yaml"))
    found = [experiment(n) for n in names if criterion_block((repo / "experiments" / f"{n}.yaml").read_text())
             or (repo / "docs" / "results" / n / "runs.csv").is_file()]
    return [*found, *BENCHES]


def lost_experiments(repo: Path) -> list[str]:
    """Published experiment data whose ``experiments/<name>.yaml`` is gone: its record would drop out of the
    check."""
    return [f"docs/results/{p.parent.name}/runs.csv is published but experiments/{p.parent.name}.yaml is gone "
            "(removed, or renamed without its data): restore the YAML, or rename its data folder with it "
            "(git mv docs/results/OLD docs/results/NEW)"
            for p in sorted(repo.glob("docs/results/*/runs.csv"))
            if not (repo / "experiments" / f"{p.parent.name}.yaml").is_file()]


def check(repo: Path, name: str) -> Verdict | None:
    """The verdict for ``experiments/<name>.yaml``; None without a criterion block or without published data."""
    spec = repo / "experiments" / f"{name}.yaml"
    if not spec.is_file() or criterion_block(spec.read_text()) is None:
        return None
    return check_record(repo, experiment(name))


def labelled_after(results_md: str, label: str = LABEL) -> set[str]:
    """Experiments the claims document labels ``label`` (``criteria written after the data``): table rows with the
    label that name the experiment (`` `name` ``) or its data (`` `results/name/runs.csv` ``)."""
    rows = [row for row in results_md.splitlines() if row.startswith("|") and label in row]
    return {m for row in rows for m in re.findall(r"`(?:results/)?([a-z_]+)[`/]", row)}


def labelled(repo: Path, record: Record, label: str = LABEL) -> bool:
    """Whether the record's doc labels it ``label``: for an experiment a table row of docs/results.md, for a
    benchmark a line of its doc holding the label and the record's data file."""
    doc = repo / record.doc
    if not doc.is_file():
        return False
    text = doc.read_text()
    if record.pieces[0].kind == "yaml":
        return record.name in labelled_after(text, label)
    return any(label in line and record.data.removeprefix("docs/") in line for line in text.splitlines())


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


def through_sentence(text: str, match: re.Match) -> str:
    """``text`` up to the end of the sentence holding ``match`` (a sentence ends at a full stop followed by white
    space, as :data:`CLAIM` reads them): where a claim's subject is named, in its sentence or before it ("Its
    criterion was committed ..."), not in a later sentence about something else."""
    end = re.search(r"\.\s", text[match.end():])
    return text[:match.end() + end.start() + 1 if end else len(text)]


def unrecorded_claims(repo: Path, known: list[Record]) -> list[str]:
    """Claims that a criterion came first which name no record this script checks."""
    problems = []
    for pattern in DOCS:
        for doc in sorted(repo.glob(pattern)):
            for para in paragraphs(doc.read_text()):
                for claim in CLAIM.finditer(para):
                    if not any(n in through_sentence(para, claim) for r in known for n in r.names()):
                        where = f"{doc.relative_to(repo)}: {para.strip().splitlines()[0][:80]!r}"
                        problems.append(f"{where} says {claim.group(0)!r} of a result this script has no record "
                                        "of (name the record's data or criterion file in the claim's sentence or before it)")
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
        descriptive = verdict is not None and verdict.descriptive
        if descriptive != labelled(args.repo, record, DESCRIPTIVE):
            problems.append(
                f"{record.name}: publishes data and never had a criterion; label its row of the status table "
                f"'{DESCRIPTIVE}' (it gives no verdict), or register a criterion and run it again" if descriptive
                else f"{record.doc} labels {record.name} '{DESCRIPTIVE}', but it has a criterion block or no "
                     "published data: remove the label")
            continue
        failed = verdict is not None and not verdict.before_data and not descriptive
        if failed and not is_labelled:
            problems.append(f"{record.name}: {verdict.why}; label it '{LABEL}' in {record.doc} (for an experiment "
                            f"its row of the status table), or restore the criterion the data was judged by")
        elif is_labelled and not failed:
            state = "has no published data yet" if verdict is None else "was committed before its data"
            problems.append(f"{record.doc} labels {record.name} '{LABEL}', but by the history its criterion {state}: "
                            "remove the label")
    problems += lost_experiments(args.repo) + unrecorded_claims(args.repo, known)
    if problems:
        print("check_preregistration:\n" + "\n".join(f"- {p}" for p in problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
