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
accuracy for each number of answers k beside its chance 1/k. ``--json PATH`` writes the same numbers, with the
fit arguments and each prompt's number of correct samples, to a file. The experiments and docs/agents.md quote it for their starting policies; the
engine is the fit arguments' own, so a quoted command on a config at the engine's defaults names the draws
its numbers came from (``lit_grpo.rollout.hf.GENERATE_DRAWS_ARG`` for those drawn before the fast defaults).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

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
    p.add_argument("--json", default=None, help="also write the numbers (and the fit arguments) to this JSON file")
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
    summary = summarise(correct, args.group_size, episodes, choices)
    summary = {"split": args.split, "seed": args.seed, "fit_args": fit_args, **summary}
    print_summary(summary)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")


def summarise(correct: torch.Tensor, G: int, episodes: list, choices: list) -> dict:
    """The probe's numbers from ``correct`` ``[P, n]`` (bool), the episodes and the bounded-answer columns."""
    P, n = correct.shape
    groups = correct[:, : (n // G) * G].reshape(P, n // G, G).sum(-1)  # [P, n // G]
    c = correct.sum(-1)
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k = k * 4 if k * 4 <= n or k == n else n
    out = {"prompts": P, "samples": n, "group_size": G, "sampled_accuracy": round(correct.double().mean().item(), 4),
           "all_wrong_groups": round((groups == 0).double().mean().item(), 4),
           "all_correct_groups": round((groups == G).double().mean().item(), 4),
           "never_solved": round((c == 0).double().mean().item(), 4),
           "pass_at_k": {str(k): round(pass_at_k_per_prompt(c, n, k).mean().item(), 4) for k in ks},
           # each prompt's correct samples, in the split's order: two probes of one split pair by prompt
           "correct_per_prompt": [int(v) for v in c.tolist()]}
    if episodes:  # multi-turn episodes (an EpisodeEngine): how the policy used its turns and tools
        e = len(episodes)
        out["episodes"] = {"turns_mean": round(sum(x.turns for x in episodes) / e, 4),
                           "tool_calls_mean": round(sum(x.tool_calls for x in episodes) / e, 4),
                           "with_call": round(sum(x.tool_calls > 0 for x in episodes) / e, 4),
                           "tool_errors": sum(x.tool_errors for x in episodes),
                           "tool_timeouts": sum(x.tool_timeouts for x in episodes),
                           "truncated": round(sum(x.truncated for x in episodes) / e, 4)}
    if choices and None not in choices:  # a bounded-answer task: k answers per prompt, a guess right 1/k
        at = torch.tensor(choices)
        out["by_choices"] = {str(k): {"sampled_accuracy": round(correct[at == k].double().mean().item(), 4),
                                      "chance": round(1 / k, 4), "prompts": int((at == k).sum())}
                             for k in sorted(set(choices))}
    return out


def print_summary(s: dict) -> None:
    print(f"{s['split']} split: {s['prompts']} prompts x {s['samples']} samples")
    print(f"sampled accuracy {s['sampled_accuracy']:.3f}")
    print(f"G = {s['group_size']} groups: all wrong {s['all_wrong_groups']:.3f}, "
          f"all correct {s['all_correct_groups']:.3f}")
    print(f"prompts never solved in {s['samples']} samples: {s['never_solved']:.3f}")
    for k, value in s["pass_at_k"].items():
        print(f"pass@{k} {value:.3f}")
    if "episodes" in s:
        e = s["episodes"]
        print(f"episodes: turns {e['turns_mean']:.2f} per episode, tool calls {e['tool_calls_mean']:.2f} per "
              f"episode, episodes with a call {e['with_call']:.3f}, tool errors {e['tool_errors']}, "
              f"timeouts {e['tool_timeouts']}, truncated {e['truncated']:.3f}")
    for k, b in s.get("by_choices", {}).items():
        print(f"k = {k}: sampled accuracy {b['sampled_accuracy']:.3f} (chance {b['chance']:.3f}, "
              f"{b['prompts']} prompts)")

if __name__ == "__main__":
    main()
