"""The ``lit-grpo`` command (also ``python -m lit_grpo``).

``lit-grpo --version`` and ``lit-grpo configs ...`` answer at once; every other command goes to
:func:`lit_grpo.cli.main`, which loads Lightning and the trainer first.
"""

from __future__ import annotations

import sys

from lit_grpo import resources


def main(args: list[str] | None = None) -> None:
    """Console entry point of ``lit-grpo``."""
    argv = sys.argv[1:] if args is None else args
    if argv and argv[0] in ("--version", "-V"):
        print(resources.version_line())
        raise SystemExit(0)
    if argv and argv[0] == "configs":
        raise SystemExit(resources.configs_main(argv[1:]))
    from lit_grpo.cli import main as cli_main

    cli_main(args)


if __name__ == "__main__":
    main()
