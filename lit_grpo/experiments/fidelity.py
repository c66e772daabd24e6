"""``lit-grpo fidelity``: every estimator's gradient measured against a large-group reference, on a checkpoint.

    lit-grpo fidelity --config configs/quickstart.yaml --out runs/fidelity \\
        [--model DIR | --ckpt FILE] [--estimators GRPO DrGRPO Sign MaxRL ...] [--num-prompts 32] \\
        [--ref-group-size 256] [--subsamples 2000] [--params 'layers\\.2\\.mlp\\.'] [--projection-dim 512]

The config gives the policy, reward, sampling settings, group size and prompts (as for ``lit-grpo fit``);
``--model`` replaces the policy by a saved model directory and ``--ckpt`` loads a Lightning checkpoint of
that config. For each of ``--num-prompts`` prompts of ``--split``, ``--ref-group-size`` completions are
drawn once and their score rows ``grad sum_t log pi(y_j,t)`` computed once over the chosen parameters;
then every estimator is applied to ``--subsamples`` subsamples of the group size
(:mod:`lit_grpo.diagnostics.fidelity`). Writes ``bins.csv`` (per estimator, objective and pass-rate bin:
prompts, cosine and norm ratio of the mean estimate to the reference, variance, signal-to-noise),
``prompts.csv`` (per prompt and estimator: pass rate, measured omega and its standard error, the exact
expectation for the pool, the predicted omega(p), variance) and ``omega.png`` (measured against predicted).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from lit_grpo.data.records import collate_prompts
from lit_grpo.diagnostics.fidelity import OBJECTIVES, PromptFidelity, bin_rows
from lit_grpo.diagnostics.fidelity_pool import (
    DEFAULT_ESTIMATORS,
    figure,
    measure,
    pool,
    prompt_table,
    write_csv,
)
from lit_grpo.diagnostics.gradients import select_linear_targets


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
        "--estimators",
        nargs="+",
        default=list(DEFAULT_ESTIMATORS),
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
    p.add_argument(
        "--params",
        nargs="+",
        default=None,
        help="regular expressions choosing nn.Linear parameters (default: every Linear weight)",
    )
    p.add_argument("--lora", action="store_true", help="use the LoRA parameters")
    p.add_argument("--projection-dim", type=int, default=None, help="project the rows to this many dims")
    p.add_argument("--micro-batch-size", type=int, default=128, help="completions per gradient forward")
    p.add_argument("--seed", type=int, default=0, help="seeds sampling, the projection and the subsamples")
    p.add_argument(
        "--allow-small-reference",
        action="store_true",
        help="allow --ref-group-size below 256 (smoke tests only: the reference is then noisy)",
    )
    return p


def _check(args: argparse.Namespace, G: int) -> None:
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
    if problems:
        raise SystemExit("lit-grpo fidelity: " + "; ".join(problems))


def load(args: argparse.Namespace, cli_class: type):
    """``(module, prompts)``: the config's module with its policy loaded (and the checkpoint), and the prompts.
    ``cli_class``: the LightningCLI subclass that reads the config (``lit-grpo`` passes its own)."""
    import sys


    overrides = [f"--model.init_args.model={args.model}"] if args.model else []
    argv, sys.argv = sys.argv, sys.argv[:1]  # LightningCLI reads ``args`` only
    try:
        cli = cli_class(
            args=["--config", args.config, *overrides, "--trainer.logger=false", "--trainer.callbacks=[]"],
            run=False,
        )
    finally:
        sys.argv = argv
    module, data = cli.model, cli.datamodule
    for attr in ("policy", "engine", "score", "sampling", "group_size"):
        if not hasattr(module, attr):
            raise SystemExit(
                f"lit-grpo fidelity: --config must configure a lit_grpo.GRPOModule (no {attr!r})"
            )
    module.configure_model()
    if args.ckpt:
        state = torch.load(args.ckpt, map_location="cpu", weights_only=False)
        result = module.load_state_dict(state.get("state_dict", state), strict=False)
        missing = [key for key in result.missing_keys if key.startswith("policy.")]
        if missing:
            raise SystemExit(
                f"lit-grpo fidelity: {args.ckpt} lacks {len(missing)} policy weights (e.g. {missing[0]}); "
                "give the checkpoint of a run of this --config, or a model directory with --model"
            )
    if hasattr(data.source, "bind_tokenizer"):
        data.source.bind_tokenizer(module.model_name)
    data.setup({"train": "fit", "val": "validate", "test": "test"}[args.split])
    records = data.splits.get(args.split, [])
    if not records:
        raise SystemExit(
            f"lit-grpo fidelity: the config's data has no {args.split!r} prompts; choose --split"
        )
    return module, collate_prompts(records[: args.num_prompts])


def main(argv: Sequence[str] | None, cli_class: type) -> int:
    """Entry point of ``lit-grpo fidelity``; returns the exit code."""
    from lit_grpo.diagnostics.weight_curve_cli import parse_estimator

    args = build_parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        estimators = {spec: parse_estimator(spec) for spec in args.estimators}
    except (ValueError, TypeError) as err:
        raise SystemExit(f"lit-grpo fidelity: {err}") from err
    module, batch = load(args, cli_class)
    G = args.group_size or module.group_size
    T = args.maxrl_T if args.maxrl_T is not None else max(G - 1, 1)
    _check(args, G)
    for label, estimator in estimators.items():
        if getattr(estimator, "couples_groups", False) or getattr(estimator, "min_group_size", 1) > G:
            raise SystemExit(
                f"lit-grpo fidelity: {label} cannot be measured at G = {G}: it is batch-coupled or needs larger "
                "groups; drop it from --estimators"
            )
    torch.manual_seed(args.seed)
    policy = module.policy.eval()
    targets, _ = select_linear_targets(policy, args.params, args.lora)
    if not targets:
        raise SystemExit(
            f"lit-grpo fidelity: --params {args.params} chooses no trainable nn.Linear of the policy"
        )
    start = time.perf_counter()
    counts = {"unscorable": 0, "dim": 0}

    def report(i: int, result: PromptFidelity, rows: torch.Tensor) -> None:
        counts["dim"] = rows.shape[1]
        print(
            f"prompt {i + 1}/{len(batch)}: pass rate {result.pass_rate:.3f}, rows {tuple(rows.shape)}",
            flush=True,
        )

    def pools():
        for rows, rewards, bad in pool(
            policy, module.engine.generate, module.score, batch, args.ref_group_size, module.sampling,
            targets, args.projection_dim, args.seed, args.micro_batch_size,
        ):  # fmt: skip
            counts["unscorable"] += bad
            yield rows, rewards, bad

    prompts = measure(pools(), estimators, G, args.subsamples, args.k, T, args.seed, report)
    M = args.ref_group_size
    prompt_rows = prompt_table(prompts, batch.ids, estimators, G, M)
    bins = bin_rows(prompts, list(estimators), OBJECTIVES)
    out = Path(args.out)
    write_csv(out / "prompts.csv", prompt_rows)
    write_csv(out / "bins.csv", bins)
    title = (
        f"{Path(args.ckpt or args.model or module.model_name).name}: G = {G}, M = {M}, {len(batch)} prompts"
    )
    fig = figure(prompt_rows, bins, estimators, G, title)
    if fig is not None:
        fig.savefig(out / "omega.png", dpi=130)
    wall = time.perf_counter() - start
    print(f"wrote {out / 'bins.csv'}, {out / 'prompts.csv'}" + (", omega.png" if fig is not None else ""))
    print(
        f"{len(batch)} prompts x {M} completions, D = {counts['dim']}, {wall:.0f} s; "
        f"{counts['unscorable']} unscorable completions counted as wrong"
    )
    return 0

