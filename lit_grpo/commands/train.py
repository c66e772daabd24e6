"""``lit-grpo fit|validate|test --config FILE_OR_NAME``: LightningCLI (:class:`lit_grpo.cli.LitGRPOCLI`)."""

from __future__ import annotations

import traceback


def _lightning(subcommand: str, argv: list[str]) -> int:
    import os
    import sys

    from lit_grpo.checkpoint import exit_status
    from lit_grpo.cli import LitGRPOCLI

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = [subcommand, *argv]
    try:
        cli = LitGRPOCLI(args=None if sys.argv[1:] == args else args)  # None: LightningCLI reads the command line
    except Exception as err:  # the traceback (and any config dump) above, the problem on the last line
        traceback.print_exc()
        print(f"lit-grpo {subcommand}: error: {problem(err)}", file=sys.stderr)
        return 1
    return exit_status(cli.trainer)  # 75 when a signal stopped the run after writing its checkpoint


def problem(err: BaseException) -> str:
    """The line of ``err``'s message that names the problem. A component's check raised while jsonargparse
    instantiates the config arrives wrapped in "Does not validate against any of the Union subtypes", a list of
    the errors of each allowed type and a dump of the config: the problem is the deepest error that is not the
    ``None`` alternative."""
    lines = str(err).splitlines() or [type(err).__name__]
    errors = [(len(line) - len(line.lstrip()), line.strip()[2:]) for line in lines if line.strip().startswith("- ")]
    errors = [(depth, e) for depth, e in errors if not e.startswith("Expected a <class 'NoneType'>")]
    if not errors:
        return f"{type(err).__name__}: {lines[0]}"
    deepest = max(depth for depth, _ in errors)
    return next(e for depth, e in errors if depth == deepest)


def fit(argv: list[str]) -> int:
    """train: lit-grpo fit --config FILE_OR_NAME (built-in configs by name: --config quickstart)"""
    return _lightning("fit", argv)


def validate(argv: list[str]) -> int:
    """score the validation split: lit-grpo validate --config FILE_OR_NAME [--ckpt_path CKPT]"""
    return _lightning("validate", argv)


def test(argv: list[str]) -> int:
    """score the test split: lit-grpo test --config FILE_OR_NAME [--ckpt_path CKPT]"""
    return _lightning("test", argv)
