"""``lit-grpo configs list|show|copy``: the built-in configs and experiment grids
(:mod:`lit_grpo.resources`)."""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

from lit_grpo import resources
from lit_grpo.resources import COMMANDS, ConfigNotFoundError


def configs(argv: list[str]) -> int:
    """the built-in configs: lit-grpo configs list|show|copy"""
    parser = argparse.ArgumentParser(
        prog="lit-grpo configs",
        description="The configs that ship with lit-grpo: list them, print one, or copy one out to edit it. "
        "Run one by name: lit-grpo fit --config quickstart; lit-grpo compare --config passk.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "list", help="the built-in configs and experiment grids, with the hardware each is meant for"
    )
    show = sub.add_parser("show", help="print a built-in config")
    show.add_argument(
        "name", help="e.g. quickstart, estimators/sign, real/quickstart, or an experiment: passk"
    )
    copy = sub.add_parser("copy", help="copy a built-in config to a file to edit")
    copy.add_argument(
        "name", help="e.g. quickstart, estimators/sign, real/quickstart, or an experiment: passk"
    )
    copy.add_argument("dest", help="the file to write (or a folder: the config's file name is kept)")
    copy.add_argument("--force", action="store_true", help="overwrite an existing file")
    args = parser.parse_args(argv)
    if args.command == "list":
        _list()
        return 0
    try:
        source = _lookup(args.name)
    except ConfigNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command == "show":
        print(source.read_text(), end="")
        return 0
    dest = Path(args.dest)
    if dest.is_dir():
        dest = dest / source.name
    if dest.exists() and not args.force:
        print(f"error: {dest} exists; choose another file or add --force to overwrite it", file=sys.stderr)
        return 1
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, dest)
    command = COMMANDS["experiments" if source.parent == resources.root() / "experiments" else "configs"]
    print(f"wrote {dest} (from the built-in {args.name}); run it with: {command} {dest}")
    return 0


def _lookup(name: str) -> Path:
    """A built-in config of either kind; a name that is both a config and an experiment must say which."""
    found = {kind: resources.find(name, kind) for kind in COMMANDS}
    hits = {kind: path for kind, path in found.items() if path is not None}
    if len(hits) == 2 and hits["configs"] != hits["experiments"]:
        raise ConfigNotFoundError(
            f"{name!r} is both a config and an experiment; write configs/{name} or experiments/{name}"
        )
    if not hits:
        problem = "no built-in config or experiment of that name"
        raise ConfigNotFoundError(resources.not_found(name, "configs", problem))
    return next(iter(hits.values()))


def _list() -> None:
    for kind, title in (("configs", "configs"), ("experiments", "experiment grids")):
        entries = resources.names(kind)
        print(f"built-in {title} ({COMMANDS[kind]} NAME):")
        width = max(map(len, entries), default=0)
        for name in entries:
            print(f"  {name:<{width}}  {_summary(resources.find(name, kind))}")
    print(f"\nfiles: {resources.root()}\ncopy one to edit it: lit-grpo configs copy NAME my.yaml")


def _summary(path: Path | None, width: int = 72) -> str:
    """The first clause of a config's ``# Hardware:`` header line (what it needs to run), at most ``width``
    characters."""
    for line in (path.read_text().splitlines()[:6] if path else []):
        if line.startswith("# Hardware:"):
            text = re.split(r"(?<!e\.g)\.(?:\s|$)", line.removeprefix("# Hardware:").strip())[0]
            return text if len(text) <= width else text[: width - 3].rstrip() + "..."
    return ""
