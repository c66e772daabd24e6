"""LightningCLI over the GRPO and SFT modules: what ``lit-grpo fit|validate|test --config ...`` runs
(:mod:`lit_grpo.commands`), and what ``lit-grpo compare`` and ``lit-grpo fidelity`` read configs with.

Nothing in the library imports this module; the commands above it do. ``--config`` takes a file or the name of a
built-in config (``lit-grpo fit --config quickstart``; ``lit-grpo configs list`` shows them, see
:mod:`lit_grpo.resources`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import lightning
import torch
from lightning import LightningModule
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_only

# The component packages, imported for their classes: LightningCLI resolves short names such as
# --model.estimator=Sign, --model.loss=PPOClip or --model.reward=ExactMatch among the imported subclasses.
import lit_grpo.envs
import lit_grpo.estimators
import lit_grpo.losses
import lit_grpo.module
import lit_grpo.rewards
import lit_grpo.rollout
import lit_grpo.sft  # noqa: F401
from lit_grpo import resources
from lit_grpo.checkpoint import (
    SaveOnInterrupt,
    check_outputs,
    damaged_checkpoint,
    new_log_dirs,
    remove_unused_log_dirs,
)
from lit_grpo.data import PromptDataModule
from lit_grpo.precision import resolve_dtype

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


#: What ``lit-grpo fit --help`` says above LightningCLI's usage.
DESCRIPTION = (
    "Train and evaluate with lit-grpo: lit-grpo fit|validate|test --config FILE_OR_NAME. Built-in configs run by "
    "name from any directory (lit-grpo fit --config quickstart; lit-grpo configs list shows them). lit-grpo --help "
    "lists the other commands."
)


class LitGRPOCLI(LightningCLI):
    """LightningCLI with lit-grpo's defaults: TensorBoard logging under ``runs/``, the prompt DataModule,
    atomic checkpoint writes (:class:`~lit_grpo.checkpoint.AtomicCheckpointIO`) and a checkpoint on Ctrl-C,
    SIGTERM, SIGUSR1 or SIGUSR2 (:class:`~lit_grpo.checkpoint.SaveOnInterrupt`; ``lit-grpo fit`` then exits with
    status 75).

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
        # Ctrl-C / SIGTERM / SIGUSR1 / SIGUSR2 finish the step, write last.ckpt and stop: appended to the callbacks
        kwargs.setdefault("trainer_defaults", {**TRAINER_DEFAULTS, "callbacks": [SaveOnInterrupt()]})
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        given_kwargs = kwargs.get("parser_kwargs") or {}
        kwargs["parser_kwargs"] = {"prog": "lit-grpo", "description": DESCRIPTION, **given_kwargs}
        kwargs.setdefault("parser_class", ArgumentParser)
        super().__init__(
            LightningModule, PromptDataModule, subclass_mode_model=True, args=args, run=run,
            auto_configure_optimizers=False, **kwargs,
        )

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        # the saved config.yaml (and --print_config) start with the lit-grpo version that wrote them, and
        # torch, lightning and transformers; as comment lines, the file still works as --config
        kwargs.setdefault("dump_header", [resources.version_line(), f"lightning.pytorch=={lightning.__version__}"])
        return super().init_parser(**kwargs)

    def before_instantiate_classes(self) -> None:
        # model.dtype=auto: the dtype the CPU runs natively (lit_grpo.precision), printed and saved in
        # config.yaml
        config = self.config[self.subcommand] if self.subcommand else self.config
        init_args = config.get("model.init_args")
        if init_args is not None and init_args.get("dtype") == "auto":
            accelerator = str(config.get("trainer.accelerator", "auto"))
            gpu = torch.cuda.is_available() or torch.backends.mps.is_available()
            on_cpu = accelerator == "cpu" or (accelerator == "auto" and not gpu)
            choice = resolve_dtype("auto", on_cpu=on_cpu, lora=init_args.get("lora") is not None)
            init_args.dtype = choice.dtype
            rank_zero_only(print)(choice.line("model.dtype"))

    def before_fit(self) -> None:
        check_outputs(self.trainer)  # a folder the run cannot write fails now, naming its option

    def _run_subcommand(self, subcommand: str) -> None:
        # a start that fails before anything is logged (bad data, a refused resume) leaves no runs/<name>/version_N
        fresh = new_log_dirs(self.trainer)
        try:
            super()._run_subcommand(subcommand)
        except BaseException:
            if self.trainer.is_global_zero:
                remove_unused_log_dirs(fresh)
            raise

    def _parse_ckpt_path(self) -> None:
        # LightningCLI reads the checkpoint's hyperparameters first: a damaged file is named here already
        try:
            super()._parse_ckpt_path()
        except Exception as err:
            damaged = damaged_checkpoint(self.config[self.config.subcommand].get("ckpt_path"), err)
            if damaged is None:
                raise
            raise damaged from err


class ArgumentParser(LightningArgumentParser):
    """LightningCLI's parser whose errors end with a line that names the problem and its fix where jsonargparse's
    own message does not (:func:`explain`)."""

    def error(self, message: str, ex: Exception | None = None):  # type: ignore[override]
        hint = explain(message)
        return super().error(message if hint is None else f"{message}\n{hint}", ex)


#: jsonargparse's words for the parser key and the outermost value of a failed union (``--model.loss.dual_clip=3``)
_PARENT = re.compile(r'^Parser key "(?P<parent>[\w.]+)":')
_NESTED = re.compile(r"NestedArg\(key='(?P<key>\w+(?:\.\w+)*)', val=(?P<val>.*)\)$", re.M)


def explain(message: str) -> str | None:
    """One line that names the problem of a parse error jsonargparse words as a union mismatch, else None.
    Setting an option of a component that the config leaves to the module's default (``--model.loss.dual_clip=3``
    with no ``loss`` in the config: ``GRPOModule`` builds ``PPOClip()`` in code) has no class to give it to; any
    other failure of such an option is the deepest error of the nest (``Option 'bogus' is not accepted``)."""
    parent, nested = _PARENT.match(message), list(_NESTED.finditer(message))
    if parent is None:
        return None
    if not nested or "." not in nested[-1]["key"]:  # a value in a config file, or an option of the class itself
        where = f"--{parent['parent']}" + (f".{nested[-1]['key']}" if nested else "")
        rest = [line.strip() for line in message.splitlines()[1:] if line.strip()]
        error = deepest_error(message) or (" ".join(rest) if 0 < len(rest) <= 2 else None)  # a plain type error
        return None if error is None else f"{where}: {error}"
    found = nested[-1]  # the outermost: its key runs from the parser key's level
    component, option = found["key"].rsplit(".", 1)
    flag = f"--{parent['parent']}.{component}"
    if "is abstract" not in message:
        return f"{flag}.{option}: {deepest_error(message) or found['val']}"
    return (f"{flag}.{option}: the config names no class for {component!r}, so there is nothing to set {option!r} "
            f"on (a component left out of the config is built by the module's default). Name the class first: "
            f"{flag}=CLASS {flag}.{option}={found['val'].strip(chr(39))}, or give "
            f"'{component.rsplit('.', 1)[-1]}: {{class_path: ...}}' in the config")


def deepest_error(message: str) -> str | None:
    """The line of a jsonargparse message that names the problem. A failure inside a component arrives wrapped in
    "Does not validate against any of the Union subtypes", a list of the errors of each allowed type (and, when
    instantiation fails, a dump of the config): the problem is the deepest error that is not the ``None``
    alternative, with the chain of ever deeper lines below it joined to it (``Problem with given class_path '...': Parser key
    "group_size": Expected a <class 'int'>. Got value: abc``). None when the message has no such list."""
    lines = message.splitlines()
    items = [(_indent(line), i) for i, line in enumerate(lines) if line.strip().startswith("- ")]
    items = [(depth, i) for depth, i in items if not lines[i].strip().startswith("- Expected a <class 'NoneType'>")]
    if not items:
        return None
    deepest = max(depth for depth, _ in items)
    i = next(i for depth, i in items if depth == deepest)
    block, depth = [lines[i].strip()[2:]], deepest
    for line in lines[i + 1:]:  # the chain of ever deeper lines below it
        if not line.strip() or _indent(line) <= depth:
            break
        block.append(line.strip())
        depth = _indent(line)
    return " ".join(block)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


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
