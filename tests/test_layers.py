"""The package's layers (docs/design.md): the maths imports without Lightning, nothing below imports above."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lit_grpo"

MATHS = ["lit_grpo.estimators", "lit_grpo.losses", "lit_grpo.logprobs", "lit_grpo.diagnostics", "lit_grpo.types"]


def test_the_maths_imports_without_lightning():
    code = (
        "import sys\n"
        f"import {', '.join(MATHS)}\n"
        "print(sorted(m for m in sys.modules if m == 'lightning' or m.startswith('lightning.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of the file (lazy imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


#: docs/design.md's layers, top first: a file imports only from lower layers or from its own package.
LAYERS = [
    ["__main__"], ["commands"], ["cli"], ["experiments"], ["callbacks"], ["module", "sft"],
    ["step_metrics", "checkpoint", "batching"], ["policy", "data"], ["settings"], ["diagnostics", "envs"], ["rollout", "rewards"],
    ["losses", "estimators"], ["logprobs"], ["models", "parallel"], ["lora", "perf", "types", "resources", "checks", "components", "extras", "precision"],
]
RANK = {part: len(LAYERS) - i for i, parts in enumerate(LAYERS) for part in parts}


def _part(module: str) -> str | None:
    """The top-level part of ``lit_grpo`` a module name belongs to (``lit_grpo.rollout.hf`` -> ``rollout``)."""
    names = module.split(".")
    return names[1] if names[0] == "lit_grpo" and len(names) > 1 else None


def test_every_file_sits_in_a_layer():
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir() if not p.name.startswith(("_", "."))}
    assert parts | {"__main__"} == set(RANK), sorted(parts ^ set(RANK))


def test_no_file_imports_a_layer_above_its_own():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        own = rel.parts[0]
        if own == "__init__":
            continue
        tree = ast.parse(path.read_text())
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(_part(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                part = _part(node.module)
                targets.update([part] if part else [a.name for a in node.names] if node.module == "lit_grpo" else [])
        for target in sorted(t for t in targets if t and t != own):
            if RANK[target] >= RANK[own]:
                upward.append(f"{rel}: imports lit_grpo.{target}")
    assert upward == []


def _importers(folder: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    found = {}
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        bad = sorted(n for n in _imports(path) if n in forbidden or n.startswith(tuple(f"{f}." for f in forbidden)))
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    return found


@pytest.mark.parametrize(("folder", "forbidden"), [
    ("rollout", ("lit_grpo.losses", "lit_grpo.policy", "lit_grpo.module", "lit_grpo.cli", "lit_grpo.experiments")),
    ("diagnostics", ("lit_grpo.losses", "lit_grpo.policy", "lit_grpo.module", "lit_grpo.cli", "lit_grpo.experiments")),
    ("data", ("lit_grpo.losses", "lit_grpo.policy", "lit_grpo.module", "lit_grpo.cli", "lit_grpo.experiments")),
    ("estimators", ("lit_grpo.losses", "lit_grpo.policy", "lit_grpo.module", "lightning", "lit_grpo.data")),
    ("losses", ("lit_grpo.policy", "lit_grpo.module", "lightning", "lit_grpo.rollout", "lit_grpo.data")),
    ("experiments", ("lit_grpo.cli",)),
    # the module never knows its callbacks; an experiment names them by class path
    ("experiments", ("lit_grpo.callbacks",)),
])
def test_nothing_below_imports_what_sits_above(folder, forbidden):
    assert _importers(folder, forbidden) == {}


def test_no_super_init_passes_more_than_two_arguments_positionally():
    # a subclass passes its parent's options by keyword, so reordering the parent's signature cannot shift them
    positional = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__"
                    and isinstance(node.func.value, ast.Call) and getattr(node.func.value.func, "id", None) == "super"
                    and len(node.args) > 2):
                positional.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not positional, positional
