"""``lit-grpo fit|validate|test --config ...``: LightningCLI over the GRPO and SFT modules.

The command line sits above everything: it imports the experiment tool for ``lit-grpo compare`` and hands it
:class:`LitGRPOCLI`, so nothing below imports this module. ``--config`` takes a file or the name of a built-in
config (``lit-grpo fit --config quickstart``; ``lit-grpo configs list`` shows them, see :mod:`lit_grpo.resources`).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import lightning
import yaml
from lightning import LightningModule
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

# The component packages, imported for their classes: LightningCLI resolves short names such as
# --model.estimator=Sign, --model.loss=PPOClip or --model.reward=ExactMatch among the imported subclasses.
import lit_grpo.estimators
import lit_grpo.losses
import lit_grpo.module
import lit_grpo.rewards
import lit_grpo.rollout
import lit_grpo.sft  # noqa: F401
from lit_grpo import resources
from lit_grpo.checkpoint import SaveOnInterrupt, damaged_checkpoint, exit_status
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


#: What ``lit-grpo --help`` says above LightningCLI's usage: the commands besides fit/validate/test.
DESCRIPTION = (
    "Train and evaluate with lit-grpo: lit-grpo fit|validate|test --config FILE_OR_NAME. Built-in configs run by "
    "name from any directory (lit-grpo fit --config quickstart). Other commands: lit-grpo configs list|show|copy "
    "(the built-in configs), lit-grpo compare (experiment grids over seeds), lit-grpo fidelity (estimator "
    "gradients against a large-group reference), lit-grpo models list|fetch (model sources), lit-grpo --version."
)


#: ``GRPOModule`` options that are now options of its loss component (``--model.loss``).
MOVED_TO_LOSS = ("eps_low", "eps_high", "dual_clip", "beta", "kl_estimator", "tis", "tis_cap")


class LitGRPOCLI(LightningCLI):
    """LightningCLI with lit-grpo's defaults: TensorBoard logging under ``runs/``, the prompt DataModule,
    atomic checkpoint writes (:class:`~lit_grpo.checkpoint.AtomicCheckpointIO`) and a checkpoint on Ctrl-C,
    SIGTERM or SIGUSR1 (:class:`~lit_grpo.checkpoint.SaveOnInterrupt`; ``main`` then exits with status 75).

    The model is given by class path in the config (``lit_grpo.GRPOModule`` or ``lit_grpo.SFTModule``);
    its components take short names on the command line, e.g. ``--model.estimator=Sign``.
    """

    def __init__(self, args=None, run: bool = True, **kwargs) -> None:
        given = sys.argv[1:] if args is None else args
        resolved = builtin_configs(given)  # --config quickstart: the built-in config of that name
        if resolved is not given and args is None:
            sys.argv[1:] = resolved  # LightningCLI reads the command line itself
        elif resolved is not given:
            args = resolved
        check_moved_options(resolved)
        check_callback_spelling(resolved)
        # Ctrl-C / SIGTERM / SIGUSR1 finish the step, write last.ckpt and stop: appended to the config's callbacks
        kwargs.setdefault("trainer_defaults", {**TRAINER_DEFAULTS, "callbacks": [SaveOnInterrupt()]})
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        given_kwargs = kwargs.get("parser_kwargs") or {}
        kwargs["parser_kwargs"] = {"prog": "lit-grpo", "description": DESCRIPTION, **given_kwargs}
        super().__init__(
            LightningModule, PromptDataModule, subclass_mode_model=True, args=args, run=run,
            auto_configure_optimizers=False, **kwargs,
        )

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        # the saved config.yaml (and --print_config) start with the lit-grpo version that wrote them, and
        # torch, lightning and transformers; as comment lines, the file still works as --config
        kwargs.setdefault("dump_header", [resources.version_line(), f"lightning.pytorch=={lightning.__version__}"])
        return super().init_parser(**kwargs)

    def _parse_ckpt_path(self) -> None:
        # LightningCLI reads the checkpoint's hyperparameters first: a damaged file is named here already
        try:
            super()._parse_ckpt_path()
        except Exception as err:
            damaged = damaged_checkpoint(self.config[self.config.subcommand].get("ckpt_path"), err)
            if damaged is None:
                raise
            raise damaged from err


def builtin_configs(args: Any) -> Any:
    """The arguments with each ``--config NAME`` that is not a file replaced by the path of the built-in config
    of that name (:func:`lit_grpo.resources.resolve`); exits with status 2 naming close names when there is none.
    A ``--config`` value that is YAML text rather than a path is left to LightningCLI."""
    if not isinstance(args, list | tuple):
        return args
    out: list[str] = []
    pending = False
    for arg in map(str, args):
        if pending:
            out.append(_builtin_config(arg))
            pending = False
            continue
        key, eq, value = arg.partition("=")
        if key in ("--config", "-c") and eq:
            out.append(f"{key}={_builtin_config(value)}")
        else:
            out.append(arg)
            pending = key in ("--config", "-c")
    return out if out != list(map(str, args)) else args


def _builtin_config(value: str) -> str:
    if any(c in value for c in ":{\n") and not Path(value).is_file():
        return value  # YAML text, not a file name
    try:
        return resources.resolve(value)
    except resources.ConfigNotFoundError as err:
        print(f"error: --config: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def check_moved_options(args: Any) -> None:
    """Exit with a message giving the new spelling when the command line or a ``--config`` file sets a loss
    option on the module (``model.beta`` is now ``model.loss.beta``)."""
    if not isinstance(args, list | tuple):
        return
    args = [str(a) for a in args]
    found: list[tuple[str, str]] = []  # (where, option)
    for i, arg in enumerate(args):
        key, _, value = arg.partition("=")
        if key in ("--config", "-c"):
            path = value or (args[i + 1] if i + 1 < len(args) else "")
            found += [(f"model.{name} in {path}", name) for name in _moved_in_config(path)]
        elif key.startswith("--model."):
            name = key.removeprefix("--model.").removeprefix("init_args.")
            if name in MOVED_TO_LOSS:
                found.append((key, name))
    if found:
        name = found[0][1]
        print(
            f"error: {', '.join(w for w, _ in found)}: {', '.join(MOVED_TO_LOSS)} are options of the loss "
            f"component now. Write --model.loss.{name}=... (after --model.loss=PPOClip when the config names no "
            f"loss), or in YAML under model.init_args: loss: {{class_path: lit_grpo.PPOClip, init_args: "
            f"{{{name}: ...}}}}",
            file=sys.stderr,
        )
        raise SystemExit(2)


#: A class path in the callbacks' older spelling: ``callbacks.HeldOutReport``, ``callbacks.export.SavePretrained``.
OLD_CALLBACK = re.compile(r"(?<![\w.])callbacks\.(?:[a-z_]+\.)?[A-Z]\w*")


def check_callback_spelling(args: Any) -> None:
    """Let configs name a callback as ``callbacks.X`` in a clone of the repository, whose top-level ``callbacks/``
    maps that older spelling onto :mod:`lit_grpo.callbacks` (loaded here when it is not on ``sys.path``, as for
    the ``lit-grpo`` command of an editable install); elsewhere (the installed wheel) exit with the new spelling."""
    if not isinstance(args, list | tuple):
        return
    args = [str(a) for a in args]
    texts = list(args)
    for i, arg in enumerate(args):
        key, eq, value = arg.partition("=")
        if key in ("--config", "-c"):
            path = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            try:
                texts.append(re.sub(r"(?m)^\s*#.*$", "", Path(path).read_text()))  # not in comment lines
            except OSError:
                continue
    found = sorted({m for text in texts for m in OLD_CALLBACK.findall(text)})
    if found and not resources.load_callbacks_alias():
        print(
            f"error: {', '.join(found)}: the callbacks are lit_grpo.callbacks now; write "
            f"{', '.join('lit_grpo.' + name for name in found)} (the older spelling works only in a clone of the "
            "repository)",
            file=sys.stderr,
        )
        raise SystemExit(2)


def _moved_in_config(path: str) -> list[str]:
    """Options of :data:`MOVED_TO_LOSS` set under ``model`` in a YAML config (none when it cannot be read)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return []
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        return []
    init_args = model.get("init_args") if isinstance(model.get("init_args"), dict) else model
    return [name for name in MOVED_TO_LOSS if name in init_args]


def main(args: list[str] | None = None) -> None:
    """Console entry point of ``lit-grpo``."""
    argv = sys.argv[1:] if args is None else args
    if argv and argv[0] in ("--version", "-V"):
        print(resources.version_line())
        raise SystemExit(0)
    if argv and argv[0] == "configs":
        raise SystemExit(resources.configs_main(argv[1:]))
    if argv and argv[0] == "compare":
        from lit_grpo.experiments.cli import compare_main

        raise SystemExit(compare_main(argv[1:], LitGRPOCLI))
    if argv and argv[0] == "models":
        from lit_grpo.models.cli import models_main

        raise SystemExit(models_main(argv[1:]))
    if argv and argv[0] == "fidelity":
        from lit_grpo.experiments.fidelity import main as fidelity_main

        raise SystemExit(fidelity_main(argv[1:], LitGRPOCLI))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    cli = LitGRPOCLI(args=args)
    status = exit_status(cli.trainer)  # 75 when a signal stopped the run after writing its checkpoint
    if status:
        raise SystemExit(status)


if __name__ == "__main__":
    main()
