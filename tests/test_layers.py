"""The package's layers (docs/design.md): the maths imports without Lightning, nothing below imports above."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lit_grpo"

MATHS = ["lit_grpo.estimators", "lit_grpo.losses", "lit_grpo.logprobs", "lit_grpo.diagnostics",
         "lit_grpo.rollout.mismatch", "lit_grpo.types"]


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
    (".", ("callbacks",)),  # the library never imports the callbacks; experiments name them by class path
])
def test_nothing_below_imports_what_sits_above(folder, forbidden):
    assert _importers(folder, forbidden) == {}
