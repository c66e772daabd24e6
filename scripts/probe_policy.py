"""How a starting policy does on a task before any RL: sampled accuracy, all-wrong groups, pass@k.

    python scripts/probe_policy.py --split test --samples 16 --group-size 4 -- \\
        --config configs/quickstart.yaml --data.source.init_args.max_operand=149 \\
        --data.source.init_args.num_test=1000

Everything after ``--`` is ``lit-grpo fit`` arguments: the run is built as LightningCLI builds it (not
trained). Every prompt of the split gets ``--samples`` completions at the module's sampling settings
(seed ``--seed``); printed: the sampled accuracy, the shares of all-wrong and all-correct groups when
the samples are cut into groups of ``--group-size``, the share of prompts never solved, pass@k for
k = 1, 4, 16, ... up to the samples, for multi-turn episodes (an ``EpisodeEngine`` config) the turns, tool calls
and tool errors per episode, and on bounded-answer tasks (a ``num_choices`` column) the sampled
accuracy for each number of answers k beside its chance 1/k. The experiments quote it for their starting
policies.
"""

from __future__ import annotations

import argparse
import sys

import torch

from lit_grpo.diagnostics.passk import pass_at_k_per_prompt


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ours, fit_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--split", choices=["val", "test"], default="val")
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-prompts", type=int, default=None, help="only the split's first this many prompts")
    args = p.parse_args(ours)
    if args.samples < args.group_size:
        p.error(f"--samples={args.samples} must be at least --group-size={args.group_size}")
    import warnings

    from lit_grpo.cli import LitGRPOCLI

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        cli = LitGRPOCLI(args=fit_args, run=False)
    module, data = cli.model, cli.datamodule
    module.configure_model()
    data.bind_policy(module)  # no Trainer here to do it: chat prompts use the policy's template
    data.setup("fit" if args.split == "val" else "test")
    loader = data.val_dataloader() if args.split == "val" else data.test_dataloader()
    torch.manual_seed(args.seed)
    parts, seen, choices, episodes = [], 0, [], []
    with torch.no_grad():
        for batch in loader:
            if args.max_prompts is not None:
                batch = batch.select(list(range(min(len(batch), max(0, args.max_prompts - seen)))))
            seen += len(batch)
            for start in range(0, len(batch), max(1, 4096 // args.samples)):
                part = batch.select(list(range(start, min(start + max(1, 4096 // args.samples), len(batch)))))
                rollouts = module.engine.rollout(part, args.samples, module.sampling)  # episodes too
                parts.append(module.score(part, rollouts)[0].nan_to_num(0.0) >= 1.0)
                episodes += rollouts.episodes or []
                choices += part.columns.get("num_choices", [None] * len(part))
    correct = torch.cat([p for p in parts if p.numel()])  # [P, n]
    P, n, G = correct.shape[0], args.samples, args.group_size
    groups = correct[:, : (n // G) * G].reshape(P, n // G, G).sum(-1)  # [P, n // G]
    c = correct.sum(-1)
    print(f"{args.split} split: {P} prompts x {n} samples")
    print(f"sampled accuracy {correct.double().mean():.3f}")
    print(f"G = {G} groups: all wrong {(groups == 0).double().mean():.3f}, all correct {(groups == G).double().mean():.3f}")
    print(f"prompts never solved in {n} samples: {(c == 0).double().mean():.3f}")
    k = 1
    while k <= n:
        print(f"pass@{k} {pass_at_k_per_prompt(c, n, k).mean():.3f}")
        k = k * 4 if k * 4 <= n or k == n else n
    if episodes:  # multi-turn episodes (an EpisodeEngine): how the policy used its turns and tools
        k = len(episodes)
        print(f"episodes: turns {sum(e.turns for e in episodes) / k:.2f} per episode, tool calls "
              f"{sum(e.tool_calls for e in episodes) / k:.2f} per episode, episodes with a call "
              f"{sum(e.tool_calls > 0 for e in episodes) / k:.3f}, tool errors {sum(e.tool_errors for e in episodes)}, "
              f"timeouts {sum(e.tool_timeouts for e in episodes)}, truncated {sum(e.truncated for e in episodes) / k:.3f}")
    if choices and None not in choices:  # a bounded-answer task: k answers per prompt, a guess right 1/k
        ks = torch.tensor(choices)
        for k in sorted(set(choices)):
            at = ks == k
            print(f"k = {k}: sampled accuracy {correct[at].double().mean():.3f} (chance {1 / k:.3f}, {int(at.sum())} prompts)")


if __name__ == "__main__":
    main()
