"""``lit-grpo fit|validate|test --config FILE_OR_NAME``: LightningCLI (:class:`lit_grpo.cli.LitGRPOCLI`)."""

from __future__ import annotations

import traceback


def _lightning(subcommand: str, argv: list[str]) -> int:
    import os
    import sys

    from lit_grpo.checkpoint import exit_status
    from lit_grpo.cli import LitGRPOCLI, root_cause
    from lit_grpo.parallel import release_process_group

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = [subcommand, *argv]
    try:
        # None: LightningCLI reads the command line
        cli = LitGRPOCLI(args=None if sys.argv[1:] == args else args)
    except Exception as err:  # the traceback (and any config dump) above, the problem on the last line
        traceback.print_exc()
        print(f"lit-grpo {subcommand}: error: {root_cause(err)}", file=sys.stderr)
        return 1
    finally:
        release_process_group()
    return exit_status(cli.trainer)  # 75 when a signal stopped the run after writing its checkpoint


def fit(argv: list[str]) -> int:
    """train: lit-grpo fit --config FILE_OR_NAME (built-in configs by name: --config quickstart)"""
    return _lightning("fit", argv)


def validate(argv: list[str]) -> int:
    """score the validation split: lit-grpo validate --config FILE_OR_NAME [--ckpt_path CKPT]"""
    return _lightning("validate", argv)


def test(argv: list[str]) -> int:
    """score the test split: lit-grpo test --config FILE_OR_NAME [--ckpt_path CKPT]"""
    return _lightning("test", argv)
