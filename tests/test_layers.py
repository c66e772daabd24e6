"""The package's layers (docs/design.md): the maths imports without Lightning, nothing below imports above; the
research lab (lit_grpo/lab) and the trainer are two rooms: no trainer file imports the lab, and the lab imports
only itself and the light shared helpers (read from the sources, not from sys.modules: importing lit_grpo may
load torch and Lightning for its public names)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lit_grpo"

MATHS = ["lit_grpo.estimators", "lit_grpo.losses", "lit_grpo.logprobs", "lit_grpo.diagnostics", "lit_grpo.types"]


def test_the_maths_imports_without_lightning():
    # lit_grpo/__init__.py imports every export, Lightning's modules among them: a bare package module stands in
    # for it, so that what loads is what the maths modules import themselves
    code = (
        "import sys, types\n"
        "package = types.ModuleType('lit_grpo')\n"
        f"package.__path__ = [{str(PACKAGE)!r}]\n"
        "sys.modules['lit_grpo'] = package\n"
        f"import {', '.join(MATHS)}\n"
        "assert sys.modules['lit_grpo'] is package and not hasattr(package, 'GRPOModule')\n"
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


#: docs/design.md's layers, top first: a file imports only from lower layers or from its own package. The lab
#: (lit_grpo/lab) shares the line of cli.py: the commands may import it, nothing below them may; what the lab
#: itself imports is held by test_the_lab_imports_only_itself_and_the_shared_helpers.
LAYERS = [
    ["__main__"], ["commands"], ["cli", "lab"], ["callbacks"], ["module", "sft"],
    ["step_metrics", "checkpoint", "batching"], ["policy", "data"], ["optim"], ["settings"], ["diagnostics", "envs"],
    ["rollout", "rewards"], ["losses", "estimators"], ["logprobs"], ["models", "parallel"],
    ["lora", "perf", "types", "resources", "components", "figure", "precision", "console"], ["extras"],
    ["checks", "version"],
]
RANK = {part: len(LAYERS) - i for i, parts in enumerate(LAYERS) for part in parts}
#: What the lab may import of lit_grpo besides itself: the light shared helpers (the argument check, the shipped
#: files, the optional extras, the name-to-class lookup, the figure canvas). It reads the trainer's classes by
#: the class paths its configs name (lit_grpo.lab.registry, lit_grpo.lab.loader), never by an import.
LAB_SHARED = ("checks", "resources", "extras", "components", "figure", "version")
#: Packages of the trainer the lab never imports; torch is the numerics of the lab's statistics alone.
TRAINER_PACKAGES = ("lightning", "transformers", "peft", "torchmetrics", "vllm")
LAB_TORCH = {"stats.py"}


def _part(module: str) -> str | None:
    """The top-level part of ``lit_grpo`` a module name belongs to (``lit_grpo.rollout.hf`` -> ``rollout``)."""
    names = module.split(".")
    return names[1] if names[0] == "lit_grpo" and len(names) > 1 else None


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of a module at any depth (lazy ones included), less those under
    ``if TYPE_CHECKING:``, which never run."""
    found = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and getattr(child.test, "id", None) == "TYPE_CHECKING":
                for rest in child.orelse:
                    visit(rest)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append(child)
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the lit_grpo modules it imports when it runs. ``from pkg import name`` imports the module
    ``pkg.name`` where that is a module, else ``pkg`` itself (its ``__init__``)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name in modules)
            elif node.level == 0 and node.module in modules:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                targets.update(m for m in subs if m in modules)
                if any(m not in modules for m in subs):
                    targets.add(node.module)
        graph[name] = targets - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    """No modules import each other in a loop, lazy imports included: a loop is a design that hides behind a
    function-local import. (A module that imports the top-level package ``lit_grpo``, whose ``__init__``
    imports every public name, is in a loop with it.)"""
    assert _cycles(import_graph()) == []


def test_no_module_imports_the_package_face():
    """``lit_grpo/__init__.py`` imports every public name (torch and Lightning with them): a module that
    imports it would load the whole package and sit above all of it."""
    assert sorted(m for m, targets in import_graph().items() if "lit_grpo" in targets and m != "lit_grpo") == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]] and _cycles({"a": {"b"}, "b": set()}) == []


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
    ("rollout", ("lit_grpo.losses", "lit_grpo.policy", "lit_grpo.module", "lit_grpo.cli")),
    ("diagnostics", ("lit_grpo.losses", "lit_grpo.policy", "lit_grpo.module", "lit_grpo.cli")),
    ("data", ("lit_grpo.losses", "lit_grpo.policy", "lit_grpo.module", "lit_grpo.cli")),
    ("estimators", ("lit_grpo.losses", "lit_grpo.policy", "lit_grpo.module", "lightning", "lit_grpo.data")),
    ("losses", ("lit_grpo.policy", "lit_grpo.module", "lightning", "lit_grpo.rollout", "lit_grpo.data")),
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


def _lit_grpo_imports(source: str) -> set[str]:
    """The parts of lit_grpo (``lab``, ``checks``, ...) a source imports at any depth, by any import form."""
    parts = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            parts.update(_part(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "lit_grpo":
            parts.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts.add(_part(node.module))
    return parts - {None}


def _lab_departures(name: str, source: str) -> list[str]:
    """What a lab file ``name`` imports that the lab may not: trainer parts of lit_grpo, trainer packages,
    torch outside :data:`LAB_TORCH`."""
    found = [f"{name}: imports lit_grpo.{p}" for p in sorted(_lit_grpo_imports(source) - {"lab", *LAB_SHARED})]
    roots = {m.split(".")[0] for m in _imports_of(source)}
    found += [f"{name}: imports {r}" for r in sorted(roots & set(TRAINER_PACKAGES))]
    if "torch" in roots and name not in LAB_TORCH:
        found.append(f"{name}: imports torch")
    return found


def _imports_of(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_lab_imports_only_itself_and_the_shared_helpers():
    lab = sorted((PACKAGE / "lab").rglob("*.py"))
    assert len(lab) > 10
    found = [d for path in lab for d in _lab_departures(path.name, path.read_text())]
    assert found == []


def test_the_lab_check_finds_a_trainer_import_in_any_form():
    sources = {
        "a.py": "from lit_grpo.module import GRPOModule",
        "b.py": "def f():\n    import lit_grpo.rollout.hf",
        "c.py": "from lit_grpo import policy, checks",
        "d.py": "from lightning.pytorch.loggers import TensorBoardLogger",
        "e.py": "import torch",
        "stats.py": "import torch\nfrom lit_grpo.lab.spec import Metric\nfrom lit_grpo.checks import require",
    }
    found = [d for name, source in sources.items() for d in _lab_departures(name, source)]
    assert found == ["a.py: imports lit_grpo.module", "b.py: imports lit_grpo.rollout", "c.py: imports lit_grpo.policy",
                     "d.py: imports lightning", "e.py: imports torch"]


def test_no_trainer_file_imports_the_lab():
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ("lab", "commands", "__main__.py"):
            continue
        if "lab" in _lit_grpo_imports(path.read_text()):
            importers.append(str(rel))
    assert importers == []
