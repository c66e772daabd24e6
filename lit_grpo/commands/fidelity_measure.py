"""The measurement behind ``lit-grpo fidelity`` (:mod:`lit_grpo.commands.fidelity`): every estimator's
gradient against a large-group reference, on the policy of a config, a model directory or a checkpoint.

:func:`load` builds the config's module as ``lit-grpo fit`` would (the policy replaced by ``--model`` or
loaded from ``--ckpt``) and takes its prompts; :func:`measure_policy` draws ``--ref-group-size`` completions
per prompt once, computes their score rows ``grad sum_t log pi(y_j,t)`` over the chosen parameters once, and
applies every estimator to ``--subsamples`` subsamples of the group size
(:mod:`lit_grpo.diagnostics.fidelity`).
"""

from __future__ import annotations

import argparse
import sys

import torch

from lit_grpo.checks import require
from lit_grpo.data.records import collate_prompts
from lit_grpo.diagnostics.fidelity import OBJECTIVES, PromptFidelity, bin_rows
from lit_grpo.diagnostics.fidelity_pool import measure, pool, prompt_table
from lit_grpo.diagnostics.gradients import select_linear_targets


def load(args: argparse.Namespace, cli_class: type):
    """``(module, prompts)``: the config's module with its policy loaded (and the checkpoint), and the prompts
    (``args``: the options of ``lit-grpo fidelity``). ``cli_class``: the LightningCLI subclass that reads the
    config. A ValueError names what is wrong."""
    overrides = [f"--model.init_args.model={args.model}"] if args.model else []
    overrides.append(f"--model.init_args.dtype={args.dtype}")
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
        require(hasattr(module, attr), f"--config must configure a lit_grpo.GRPOModule (no {attr!r})")
    module.configure_model()
    if args.ckpt:
        state = torch.load(args.ckpt, map_location="cpu", weights_only=False)
        result = module.load_state_dict(state.get("state_dict", state), strict=False)
        missing = [key for key in result.missing_keys if key.startswith("policy.")]
        example = missing[0] if missing else None
        require(not missing,
                f"{args.ckpt} lacks {len(missing)} policy weights (e.g. {example}); give the checkpoint of a "
                "run of this --config, or a model directory with --model")
    if hasattr(data.source, "bind_tokenizer"):
        data.source.bind_tokenizer(module.model_name)
    data.setup({"train": "fit", "val": "validate", "test": "test"}[args.split])
    records = data.splits.get(args.split, [])
    require(bool(records), f"the config's data has no {args.split!r} prompts; choose --split")
    return module, collate_prompts(records[: args.num_prompts])


def measure_policy(args: argparse.Namespace, module, batch, estimators: dict, G: int, T: int):
    """``(prompt rows, bin rows, counts)`` of ``estimators`` at group size ``G`` on ``module``'s policy (the
    tables of :func:`~lit_grpo.diagnostics.fidelity_pool.prompt_table` and
    :func:`~lit_grpo.diagnostics.fidelity.bin_rows`; ``counts``: unscorable completions and the row width)."""
    torch.manual_seed(args.seed)
    policy = module.policy.eval()
    targets, _ = select_linear_targets(policy, args.params, args.lora)
    require(bool(targets), f"--params {args.params} chooses no trainable nn.Linear of the policy")
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
    prompt_rows = prompt_table(prompts, batch.ids, estimators, G, args.ref_group_size)
    return prompt_rows, bin_rows(prompts, list(estimators), OBJECTIVES), counts
