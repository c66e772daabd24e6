"""Sampled and greedy accuracy of a real model on candidate verifiable tasks (choosing the RL task).

    python bench/real_tasks.py --model smollm2-135m-instruct --prompts 500 --out docs/results/real_tasks.json

Each task is a prompt source of lit_grpo.data with chat-rendered prompts and a reward; on its first
``--prompts`` validation prompts the script generates one greedy and one sampled (temperature 1)
completion per prompt (each ``--temperatures``) with the chosen engine and reports the mean rewards, the share of completions
with no number / truncated, the mean completion length and an example. Greedy and sampled accuracy are
what ``HeldOutReport`` prints as ``accuracy`` and ``reward_mean``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from provenance import command

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

NUMBER_ONLY = "Answer with the number only."
BOXED = "Put the final answer in \\boxed{}."


def tasks(n: int) -> dict:
    """name -> (source, reward, note). Sources render chat prompts with the policy's template."""
    from lit_grpo import MathVerify, SyntheticArithmetic
    from lit_grpo.data.word_problems import WordProblems
    from lit_grpo.rewards.last_number import LastNumber

    def arith(max_operand, instruction, operators="+", question="What is {a} {op} {b}?"):
        return SyntheticArithmetic(num_train=0, num_val=n, num_test=0, max_operand=max_operand, operators=operators,
                                   style="chat", instruction=instruction, question=question, seed=0)

    return {
        "add30": (arith(30, NUMBER_ONLY), LastNumber(), "What is a + b? (a, b <= 30), last number"),
        "add30-bare": (arith(30, NUMBER_ONLY, question="{a}{op}{b}="), LastNumber(),
                       "a+b= (a, b <= 30), last number"),
        "add99": (arith(99, NUMBER_ONLY), LastNumber(), "What is a + b? (a, b <= 99), last number"),
        "add99-boxed": (arith(99, BOXED), MathVerify("boxed"), "What is a + b? (a, b <= 99), \\boxed{} answer"),
        "sub30": (arith(30, NUMBER_ONLY, "-"), LastNumber(), "What is a - b? (a, b <= 30), last number"),
        "word20": (WordProblems(num_train=0, num_val=n, num_test=0, max_number=20, style="chat", seed=0),
                   LastNumber(), "one-step word problems (add, sub, compare; numbers <= 20), last number"),
    }


def write(args, name: str, row: dict) -> None:
    """Adds task ``name`` to the JSON file ``args.out`` (keeping the other tasks), with how it was measured."""
    data = json.loads(args.out.read_text()) if args.out.exists() else {"tasks": {}}
    row["measured"] = {"command": command("bench/real_tasks.py", sys.argv[1:]), "model": args.model, "engine": args.engine,
                       "max_new_tokens": args.max_new_tokens, "seed": args.seed, "load": round(os.getloadavg()[0], 1)}
    data["tasks"][name] = row
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=500)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0], help="sampling temperatures")
    parser.add_argument("--engine", choices=["vllm", "hf"], default="vllm")
    parser.add_argument("--tasks", nargs="*", help="subset of task names (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch

    from lit_grpo.models.loading import load_policy, load_tokenizer
    from lit_grpo.rewards.last_number import last_number
    from lit_grpo.rewards.scoring import call_reward
    from lit_grpo.types import SamplingParams

    torch.manual_seed(args.seed)
    policy, tokenizer = load_policy(args.model).eval(), load_tokenizer(args.model)
    if args.engine == "vllm":
        from lit_grpo.rollout import VLLMEngine

        engine = VLLMEngine(dtype="float32", kv_cache_gib=2.5, max_num_seqs=512, seed=args.seed)
    else:
        from lit_grpo.rollout import HFGenerateEngine
        from lit_grpo.rollout.hf import GENERATE_DRAWS

        engine = HFGenerateEngine(batch_size=64, **GENERATE_DRAWS)  # the draws of the published run
    engine.bind(policy, tokenizer)
    results = {}
    for name, (source, reward, note) in tasks(args.prompts).items():
        if args.tasks and name not in args.tasks:
            continue
        source.bind_tokenizer(args.model)
        records = source.load("val")[: args.prompts]
        prompts, refs = [r["prompt"] for r in records], [r["reference"] for r in records]
        row = {"note": note, "prompts": len(prompts), "example_prompt": prompts[0]}
        start = time.perf_counter()
        modes = [("greedy", SamplingParams(0.0, max_new_tokens=args.max_new_tokens))] + [
            (f"sampled_t{t:g}", SamplingParams(t, max_new_tokens=args.max_new_tokens)) for t in args.temperatures]
        for mode, sampling in modes:
            rollouts = engine.generate(prompts, 1, sampling)
            scores = call_reward(reward, rollouts.texts, refs).scores.float()
            row[mode] = {
                "accuracy": round(scores.nanmean().item(), 4),
                "no_number": round(sum(last_number(t) is None for t in rollouts.texts) / len(prompts), 4),
                "truncated": round(rollouts.truncated.float().mean().item(), 4),
                "len_mean": round(rollouts.completion_mask.sum(1).float().mean().item(), 2),
                "examples": [f"{r!r} -> {t!r}" for r, t in zip(refs[:3], rollouts.texts[:3], strict=True)],
            }
        row["seconds"] = round(time.perf_counter() - start, 1)
        results[name] = row
        if args.out:  # after every task, merged into what earlier runs wrote
            write(args, name, row)
        print(f"{name:<12} " + "  ".join(f"{mode} {row[mode]['accuracy']:.3f} (len {row[mode]['len_mean']:.1f}, "
                                         f"trunc {row[mode]['truncated']:.2f})" for mode, _ in modes)
              + f"  {row['seconds']} s", flush=True)


if __name__ == "__main__":
    main()
