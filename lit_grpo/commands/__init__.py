"""The ``lit-grpo`` command (also ``python -m lit_grpo``): one table from command name to the function that
runs it.

Each command function takes the arguments after its name and returns the exit status. A command parses its
own arguments and writes its own files; the work is done by library functions it imports when it runs, so
that ``lit-grpo --version`` and ``lit-grpo configs`` answer without building LightningCLI's parser (``import
lit_grpo`` itself loads torch and Lightning).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from lit_grpo.commands.compare import compare
from lit_grpo.commands.configs import configs
from lit_grpo.commands.curves import curves
from lit_grpo.commands.fidelity import fidelity
from lit_grpo.commands.models import models
from lit_grpo.commands.train import fit, test, validate

COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "fit": fit,
    "validate": validate,
    "test": test,
    "compare": compare,
    "fidelity": fidelity,
    "curves": curves,
    "configs": configs,
    "models": models,
}


def usage() -> str:
    """What ``lit-grpo --help`` prints: every command with the first line of its docstring."""
    width = max(map(len, [*COMMANDS, "--version"]))
    lines = [
        f"  {name:<{width}}  {(fn.__doc__ or '').strip().splitlines()[0]}" for name, fn in COMMANDS.items()
    ]
    return "\n".join(
        [
            "usage: lit-grpo COMMAND [ARGS]  (lit-grpo COMMAND --help: the command's options)",
            "",
            "commands:",
            *lines,
            f"  {'--version':<{width}}  what is installed: lit-grpo, python, torch, lightning, transformers",
        ]
    )


def main(args: list[str] | None = None) -> int:
    """Console entry point of ``lit-grpo``: runs the command named by the first argument; returns its exit
    status (the console script and ``python -m lit_grpo`` exit with it)."""
    argv = list(sys.argv[1:] if args is None else args)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] in ("--version", "-V"):
        from lit_grpo.resources import version_line

        print(version_line())
        return 0
    command = COMMANDS.get(argv[0])
    if command is None:
        print(f"lit-grpo: error: unknown command {argv[0]!r}; choose one of {', '.join(COMMANDS)} "
              "(lit-grpo --help says what each does)", file=sys.stderr)
        return 2
    return command(argv[1:])
