"""``lit-grpo fit|validate|test --config ...``: LightningCLI over the GRPO and SFT modules."""

from __future__ import annotations

import os

from lightning import LightningModule
from lightning.pytorch.cli import LightningCLI

from lit_grpo.checkpoint import SaveOnInterrupt
from lit_grpo.data import PromptDataModule

TRAINER_DEFAULTS = {
    "logger": {
        "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
        "init_args": {"save_dir": "runs", "name": "lit-grpo"},
    },
    "log_every_n_steps": 1,
    "num_sanity_val_steps": 0,
    # checkpoints are written to a temporary file and renamed: a crash never leaves a torn last.ckpt
    "plugins": [{"class_path": "lit_grpo.checkpoint.AtomicCheckpointIO"}],
}


class LitGRPOCLI(LightningCLI):
    """LightningCLI with lit-grpo's defaults: TensorBoard logging under ``runs/``, the prompt DataModule,
    atomic checkpoint writes (:class:`~lit_grpo.checkpoint.AtomicCheckpointIO`) and a checkpoint on Ctrl-C
    (:class:`~lit_grpo.checkpoint.SaveOnInterrupt`).

    The model is given by class path in the config (``lit_grpo.GRPOModule`` or ``lit_grpo.SFTModule``);
    its components take short names on the command line, e.g. ``--model.estimator=Sign``.
    """

    def __init__(self, args=None, run: bool = True, **kwargs) -> None:
        # Ctrl-C finishes the step, writes last.ckpt and stops: appended to the config's callbacks
        kwargs.setdefault("trainer_defaults", {**TRAINER_DEFAULTS, "callbacks": [SaveOnInterrupt()]})
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        super().__init__(
            LightningModule, PromptDataModule, subclass_mode_model=True, args=args, run=run,
            auto_configure_optimizers=False, **kwargs,
        )


def main(args: list[str] | None = None) -> None:
    """Console entry point of ``lit-grpo``."""
    import sys

    argv = sys.argv[1:] if args is None else args
    if argv and argv[0] == "compare":
        from lit_grpo.experiments.cli import compare_main

        raise SystemExit(compare_main(argv[1:]))
    if argv and argv[0] == "models":
        from lit_grpo.models.cli import models_main

        raise SystemExit(models_main(argv[1:]))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import lit_grpo  # noqa: F401  (registers every component for short names)

    LitGRPOCLI(args=args)


if __name__ == "__main__":
    main()
