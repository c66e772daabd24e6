"""``lit-grpo fidelity``: every estimator's gradient measured against a large-group reference, on a
checkpoint.

The config gives the policy, reward, sampling settings, group size and prompts (as for ``lit-grpo fit``); the
options (``--help``) choose a saved model or checkpoint instead, the estimators (named as for ``lit-grpo
curves``), the prompts and the reference. The measurement is :mod:`lit_grpo.commands.fidelity_measure`; what
``bins.csv``, ``prompts.csv`` and ``omega.png`` hold, docs/diagnostics.md.
"""

from __future__ import annotations

import argparse

from lit_grpo.checks import require
from lit_grpo.commands.curves import estimator_from_spec

#: What ``--estimators`` defaults to.
DEFAULT_ESTIMATORS = ("GRPO", "DrGRPO", "RLOO", "Sign", "MaxRL", "SoftmaxGRPO", "PassAtK")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lit-grpo fidelity",
        description="Measure every estimator's size-G gradient estimate against a large-group reference "
        "gradient of each objective, per pass-rate bin, on the policy of a config, model or checkpoint.",
    )
    p.add_argument("--config", required=True, help="a lit-grpo fit config (policy, reward, sampling, data)")
    p.add_argument("--out", required=True, help="output directory for bins.csv, prompts.csv and omega.png")
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--model", default=None, help="a saved model directory to measure instead of the config's"
    )
    src.add_argument("--ckpt", default=None, help="a Lightning checkpoint (.ckpt) of this config to load")
    p.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16", "auto"],
        help="the policy's dtype, in place of the config's (default float32, the measurement's precision: "
        "the real quickstart's dtype auto would pick bfloat16 on a CPU with native bf16 matmul)",
    )
    p.add_argument(
        "--estimators", nargs="+", default=list(DEFAULT_ESTIMATORS),
        help="estimator names or class paths with optional ':key=value,...' (GRPO:std=population); "
        "batch-coupled ones (ReinforcePlusPlus, GPG, GRPO scale=batch) have no per-prompt estimate",
    )
    p.add_argument("--split", default="val", choices=["train", "val", "test"], help="where prompts come from")
    p.add_argument("--num-prompts", type=int, default=32, help="prompts measured (the first of the split)")
    p.add_argument("--ref-group-size", type=int, default=256, help="completions drawn per prompt (>= 256)")
    p.add_argument(
        "--group-size", "-G", type=int, default=None, help="G of the estimates (default: the config's)"
    )
    p.add_argument("--subsamples", type=int, default=2000, help="size-G subsamples per prompt")
    p.add_argument("--k", type=int, default=4, help="the k of the pass@k and log pass@k objectives")
    p.add_argument(
        "--maxrl-T", type=int, default=None, help="truncation T of the MaxRL objective (default G - 1)"
    )
    p.add_argument("--params", nargs="+", default=None,
                   help="regular expressions choosing nn.Linear parameters (default: every Linear weight)")
    p.add_argument("--lora", action="store_true", help="use the LoRA parameters")
    p.add_argument("--projection-dim", type=int, default=None, help="project the rows to this many dims")
    p.add_argument("--micro-batch-size", type=int, default=128, help="completions per gradient forward")
    p.add_argument("--seed", type=int, default=0, help="seeds sampling, the projection and the subsamples")
    p.add_argument("--allow-small-reference", action="store_true",
                   help="allow --ref-group-size below 256 (smoke tests only: the reference is then noisy)")
    return p


def _problems(args: argparse.Namespace, G: int, estimators: dict) -> list[str]:
    """What is wrong with the options at group size ``G`` (nothing: an empty list)."""
    problems = []
    if args.ref_group_size < 256 and not args.allow_small_reference:
        problems.append(
            f"--ref-group-size {args.ref_group_size} is below 256; the reference must be a large group"
        )
    if not 1 <= G <= args.ref_group_size:
        problems.append(f"the group size {G} must lie in [1, --ref-group-size {args.ref_group_size}]")
    if args.num_prompts < 1:
        problems.append(f"--num-prompts {args.num_prompts} must be >= 1")
    if args.subsamples < 2:
        problems.append(f"--subsamples {args.subsamples} must be >= 2")
    if not 1 <= args.k <= args.ref_group_size:
        problems.append(f"--k {args.k} must lie in [1, --ref-group-size]")
    if args.projection_dim is not None and args.projection_dim < 1:
        problems.append(f"--projection-dim {args.projection_dim} must be >= 1")
    problems += [
        f"{label} cannot be measured at G = {G}: it is batch-coupled or needs larger groups; drop it from "
        "--estimators"
        for label, estimator in estimators.items()
        if estimator.couples_groups or estimator.min_group_size > G
    ]
    return problems


def fidelity(argv: list[str]) -> int:
    """each estimator's gradient against a large-group reference: lit-grpo fidelity --config FILE --out DIR"""
    import os
    import time
    from pathlib import Path

    from lit_grpo.cli import LitGRPOCLI
    from lit_grpo.commands.fidelity_measure import load, measure_policy
    from lit_grpo.diagnostics.fidelity_pool import csv_text, figure

    args = build_parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        estimators = {spec: estimator_from_spec(spec) for spec in args.estimators}
        module, batch = load(args, LitGRPOCLI)
        G = args.group_size or module.group_size
        problems = _problems(args, G, estimators)
        require(not problems, "; ".join(problems))
        start = time.perf_counter()
        T = args.maxrl_T if args.maxrl_T is not None else max(G - 1, 1)
        prompt_rows, bins, counts = measure_policy(args, module, batch, estimators, G, T)
    except ValueError as err:
        raise SystemExit(f"lit-grpo fidelity: {err}") from err
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "prompts.csv").write_text(csv_text(prompt_rows), newline="")
    (out / "bins.csv").write_text(csv_text(bins), newline="")
    M = args.ref_group_size
    title = (
        f"{Path(args.ckpt or args.model or module.model_name).name}: G = {G}, M = {M}, {len(batch)} prompts"
    )
    fig = figure(prompt_rows, bins, estimators, G, title)
    if fig is not None:
        fig.savefig(out / "omega.png", dpi=130)
    print(f"wrote {out / 'bins.csv'}, {out / 'prompts.csv'}" + (", omega.png" if fig is not None else ""))
    print(
        f"{len(batch)} prompts x {M} completions, D = {counts['dim']}, {time.perf_counter() - start:.0f} s; "
        f"{counts['unscorable']} unscorable completions counted as wrong"
    )
    return 0
