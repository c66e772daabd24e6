"""LightningCLI over the GRPO and SFT modules: what ``lit-grpo fit|validate|test --config ...`` runs
(:mod:`lit_grpo.commands`), and what ``lit-grpo compare`` and ``lit-grpo fidelity`` read configs with.

Nothing in the library imports this module; the commands above it do. ``--config`` takes a file or the name of
a built-in config (``lit-grpo fit --config quickstart``; ``lit-grpo configs list`` shows them, see
:mod:`lit_grpo.resources`).
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
import typing
from pathlib import Path
from typing import Any

import lightning
import torch
import yaml
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
    stopped_resumably,
)
from lit_grpo.components import resolve
from lit_grpo.console import quiet_libraries, use_run_console
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
    "Train and evaluate with lit-grpo: lit-grpo fit|validate|test --config FILE_OR_NAME. Built-in configs "
    "run by name from any directory (lit-grpo fit --config quickstart; lit-grpo configs list shows them). "
    "lit-grpo --help lists the other commands."
)


class LitGRPOCLI(LightningCLI):
    """LightningCLI with lit-grpo's defaults: TensorBoard logging under ``runs/``, the prompt DataModule,
    atomic checkpoint writes (:class:`~lit_grpo.checkpoint.AtomicCheckpointIO`) and a checkpoint on Ctrl-C,
    SIGTERM, SIGUSR1 or SIGUSR2 (:class:`~lit_grpo.checkpoint.SaveOnInterrupt`; ``lit-grpo fit`` then exits
    with status 75).

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
        # an option that does not exist is named with its fix, before parsing
        problem = check_options(resolved)
        if problem is not None:
            print(f"error: {problem}", file=sys.stderr)
            raise SystemExit(2)
        # Ctrl-C / SIGTERM / SIGUSR1 / SIGUSR2 finish the step, write last.ckpt and stop: appended to the
        # callbacks
        quiet_libraries()  # no advertising tips or Lightning's own deprecation warning on every run
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
        kwargs.setdefault(
            "dump_header", [resources.version_line(), f"lightning.pytorch=={lightning.__version__}"]
        )
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

    def instantiate_trainer(self, **kwargs: Any) -> lightning.Trainer:
        # a SaveOnInterrupt the config lists (to set its options) takes the place of the default one
        trainer = super().instantiate_trainer(**kwargs)
        defaults = self.trainer_defaults.get("callbacks") or []
        defaults = defaults if isinstance(defaults, list) else [defaults]
        stops = [c for c in trainer.callbacks if isinstance(c, SaveOnInterrupt)]
        default = [c for c in stops if any(c is d for d in defaults)]
        if len(stops) > len(default):
            for callback in default:
                trainer.callbacks.remove(callback)
        return trainer

    def before_fit(self) -> None:
        check_outputs(self.trainer)  # a folder the run cannot write fails now, naming its option
        use_run_console(self.trainer)  # a bar of the run's steps, a summary without FLOPs

    def _run_subcommand(self, subcommand: str) -> None:
        # a start that fails before anything is logged (bad data, a refused resume) leaves no
        # runs/<name>/version_N
        fresh = new_log_dirs(self.trainer)
        try:
            super()._run_subcommand(subcommand)
        except BaseException as err:
            if stopped_resumably(self.trainer, err):
                return  # a write failed as a signal stopped the run, with a checkpoint to resume from: 75
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


#: Keys jsonargparse accepts at every class's level besides the class's own options.
_ANY_CLASS = ("help", "dict_kwargs")


def check_options(args: Any) -> str | None:
    """The first problem with what ``args`` (and each config file its ``--config`` arguments name) sets for
    the model and the data, read in the order LightningCLI applies them, else None: an option the class (or
    settings group) does not take, an option of a component the config names no class for, or a value an
    ``int``, ``float`` or choice option cannot take. Checked before LightningCLI parses, so each problem is
    named with its fix; what this check does not know (other types, the trainer's options) is left to the
    parser."""
    if not isinstance(args, list | tuple):
        return None
    chosen: dict[str, Any] = {"data": PromptDataModule}  # component path -> its class (None: none named)
    for label, parts, value, raw in _settings(list(map(str, args))):
        try:
            problem = _check(chosen, label, parts, value, raw)
        except ValueError as err:  # a class name that does not resolve
            return str(err)
        if problem is not None:
            return problem
    return None


def _settings(args: list[str]) -> Any:
    """``(label, key parts without init_args, value, value as written)`` of each model or data setting, in
    order: those of a config file where its ``--config`` stands."""
    i = 0
    while i < len(args):
        key, eq, text = args[i].partition("=")
        takes_next = not eq and i + 1 < len(args) and not args[i + 1].startswith("-")
        if not eq:
            text = args[i + 1] if takes_next else ""
        i += 2 if takes_next else 1
        if key in ("--config", "-c"):
            yield from _config_settings(text)
        elif key.startswith(("--model", "--data")) and key.lstrip("-").split(".")[0] in ("model", "data"):
            parts = [p for p in key[2:].split(".") if p != "init_args"]
            yield key, parts, _yaml_value(text), text


def _config_settings(text: str) -> Any:
    path = Path(text)
    try:
        tree = yaml.safe_load(path.read_text() if path.is_file() else text)
    except (OSError, yaml.YAMLError):
        return  # LightningCLI names an unreadable config
    if isinstance(tree, dict):
        for root in ("model", "data"):
            if root in tree:
                yield from _flatten(tree[root], [root], text if path.is_file() else "the --config text")


def _flatten(value: Any, keys: list[str], source: str) -> Any:
    if not isinstance(value, dict):
        yield f"{'.'.join(keys)} in {source}", [k for k in keys if k != "init_args"], value, repr(value)
        return
    for key in sorted(value, key=lambda k: k != "class_path"):  # the class first, then its options
        yield from _flatten(value[key], [*keys, str(key)], source)


def _yaml_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _check(chosen: dict[str, Any], label: str, parts: list[str], value: Any, raw: str) -> str | None:
    """The problem of setting ``parts`` to ``value``, else None; a class it names is recorded in
    ``chosen``."""
    if parts[-1] == "class_path":
        parts = parts[:-1]
    elif isinstance(value, dict) or parts[-1] in _ANY_CLASS:
        return None
    path, owner = parts[0], chosen.get(parts[0])
    if len(parts) == 1:  # --model=CLASS
        if isinstance(value, str):
            chosen["model"] = resolve(LightningModule, value, label)
        return None
    for i, part in enumerate(parts[1:], start=2):
        options = _options(owner)
        if options is None:  # a class unknown here, or one that takes any keyword
            return None
        if part not in options:
            return (f"{label}: {owner.__name__} takes no option {part!r}; its options are "
                    f"{', '.join(options)}")
        path, annotation, rest = f"{path}.{part}", options[part], parts[i:]
        kind, target = _kind(annotation)
        if not rest:
            if kind == "component" and (value is None or isinstance(value, str)):
                chosen[path] = None if value is None else resolve(target, value, label)
                return None
            return _value_problem(label, owner, part, annotation, value)
        if kind == "settings":
            owner = target
        elif kind != "component":
            return None  # a dict or a list: its keys are not options
        elif chosen.get(path, _default(owner, part)) is None:
            component, option = path.split(".", 1)[1], ".".join(rest)
            return (f"{label}: the config names no class for {component!r}, so there is nothing to set "
                    f"{option!r} on (a component left out of the config is built by the module's default). "
                    f"Name the class first: --{path}=CLASS --{path}.{option}={raw}, or give "
                    f"'{part}: {{class_path: ...}}' in the config")
        else:
            # absent: a default instance, whose class this check leaves to the parser
            owner = chosen.get(path)
    return None


def _options(owner: Any) -> dict[str, Any] | None:
    """A class's options (its constructor's parameters, or a settings dataclass's fields) with their types;
    None when unknown or when it takes any keyword."""
    if not isinstance(owner, type):
        return None
    try:
        hints = typing.get_type_hints(owner if dataclasses.is_dataclass(owner) else owner.__init__)
        params = inspect.signature(owner).parameters.values()
    except (NameError, TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name: hints.get(p.name, Any) for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL}


def _default(owner: Any, name: str) -> Any:
    """The default of ``owner``'s option ``name``: None also when it has none (nothing to build from)."""
    default = inspect.signature(owner).parameters[name].default
    return None if default is inspect.Parameter.empty else default


def _kind(annotation: Any) -> tuple[str, Any]:
    """``("settings", dataclass)``, ``("component", base class)`` or ``("value", annotation)``: what an option
    of this type holds, ``None`` aside."""
    single = _without_none(annotation)
    if dataclasses.is_dataclass(single) and isinstance(single, type):
        return "settings", single
    if isinstance(single, type) and single.__module__ != "builtins" and typing.get_origin(single) is None:
        return "component", single
    return "value", annotation


def _without_none(annotation: Any) -> Any:
    """``X`` for ``X | None``, else the annotation itself."""
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if len(args) == 1 else annotation


def _value_problem(label: str, owner: type, part: str, annotation: Any, value: Any) -> str | None:
    """What is wrong with ``value`` for an option of type ``annotation`` when that is ``int``, ``float`` or a
    choice (``None`` allowed where the type allows it), else None; other types are left to the parser."""
    optional = type(None) in typing.get_args(annotation)
    single = _without_none(annotation)
    if value is None and optional:
        return None
    where = f"{owner.__name__}'s {part}"
    if typing.get_origin(single) is typing.Literal:
        choices = typing.get_args(single)
        if value in choices:
            return None
        return f"{label}: {value!r} is not a choice of {where}; choose one of {', '.join(map(str, choices))}"
    if single in (int, float):
        if _number(value, single):
            return None
        return f"{label}: {where} takes {_NUMBER[single]}, not {value!r}"
    return None


#: What an ``int`` and a ``float`` option take, in words.
_NUMBER = {int: "a whole number", float: "a number"}


def _number(value: Any, kind: type) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, kind) or (kind is float and isinstance(value, int)):
        return True
    if isinstance(value, str):
        try:
            kind(value)
        except ValueError:
            return False
        return True
    return False


def root_cause(err: BaseException) -> str:
    """The exception at the bottom of ``err``'s chain (a component's own check, below jsonargparse's
    wrapping), as ``Type: first line`` (a ValueError by its message alone)."""
    while (err.__cause__ or err.__context__) is not None:
        err = err.__cause__ or err.__context__
    line = (str(err).splitlines() or [""])[0]
    return line if type(err) is ValueError else f"{type(err).__name__}: {line}"


def builtin_configs(args: Any) -> Any:
    """The arguments with each ``--config NAME`` that is not a file replaced by the path of the built-in
    config of that name (:func:`lit_grpo.resources.resolve`); exits with status 2 naming close names when
    there is none. A ``--config`` value that is YAML text rather than a path is left to LightningCLI."""
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
