"""The sampled start of a small instruct model on reasoning-gym tasks at several difficulties (choosing a study cell).

    python bench/reasoning_gym_start.py --out docs/results/reasoning_gym/start.json        # measure (CPU, minutes)
    python bench/reasoning_gym_start.py --write docs/data.md                                # render the committed data

For each cell (a reasoning-gym dataset and a config of its difficulty knobs) the script takes the first
``--prompts`` validation prompts of :class:`~lit_grpo.data.ReasoningGymSource` (chat template, reasoning-gym's own
instruction, or "Answer with the number only."), samples ``--samples`` completions of each at temperature 1 with the
Hugging Face engine and scores them with :class:`~lit_grpo.data.ReasoningGymScore` (the generator's own
``score_answer`` on the last ``<answer>`` tag). It reports the mean score, the share of completions scoring 1,
the share of groups of ``--samples`` where no completion scores 1 (GRPO learns nothing from a group that is all
wrong), the share where no answer was read and the share cut at the cell's ``max_new_tokens``. Most cells ask for
the number only and read the last number (:data:`READINGS`): SmolLM2-135M never writes the ``<answer>`` tag that
reasoning-gym's own instruction asks for, which one cell shows. The aim: a cell where the
sampled accuracy is 0.05-0.20, so most groups of 4 are all wrong, for a later study.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from provenance import command, write_block

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "reasoning_gym" / "start.json"
BEGIN, END = "<!-- reasoning_gym_start.py:begin -->\n", "<!-- reasoning_gym_start.py:end -->"

NUMBER_ONLY = "Answer with the number only."
#: how a cell asks and reads: (instruction, ReasoningGymScore's answer_format, max_new_tokens); None: reasoning-gym's
#: own instruction (think, then <answer>...</answer>)
READINGS: dict[str, tuple[str | None, str, int]] = {"number": (NUMBER_ONLY, "last_number", 32), "tag": (None, "tag", 128)}
#: cell name -> (dataset, config, reading): a handful of tasks, each at rising difficulty
CELLS: dict[str, tuple[str, dict, str]] = {
    "chain_sum/2x1": ("chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}, "number"),
    "chain_sum/2x2": ("chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2}, "number"),
    "chain_sum/3x1": ("chain_sum", {"min_terms": 3, "max_terms": 3, "min_digits": 1, "max_digits": 1}, "number"),
    "basic_arithmetic/2x1": ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1,
                                                  "allow_parentheses": False, "allow_negation": False}, "number"),
    "letter_counting/5-15": ("letter_counting", {}, "number"),
    # operands of one or two digits: tens of thousands of distinct questions, room for a 1000-prompt test split
    "basic_arithmetic/2x1-2": ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2,
                                                    "allow_parentheses": False, "allow_negation": False}, "number"),
    "chain_sum/2x1-2": ("chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}, "number"),
    "chain_sum/2x1 (tag)": ("chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}, "tag"),
}


def measure(args, dataset: str, config: dict, reading: str, engine) -> dict:
    import torch

    from lit_grpo.data import ReasoningGymScore, ReasoningGymSource
    from lit_grpo.data.reasoning_gym import DEFAULT_INSTRUCTION
    from lit_grpo.data.records import collate_prompts
    from lit_grpo.rewards.scoring import call_reward
    from lit_grpo.types import SamplingParams

    instruction, answer_format, max_new_tokens = READINGS[reading]
    source = ReasoningGymSource(dataset, config, num_train=0, num_val=args.prompts, num_test=0, seed=args.seed,
                                style="chat", instruction=instruction or DEFAULT_INSTRUCTION)
    source.bind_tokenizer(args.model)
    batch = collate_prompts(source.load("val"))
    g = args.samples
    start = time.perf_counter()
    rollouts = engine.generate(batch.prompts, g, SamplingParams(1.0, max_new_tokens=max_new_tokens))
    expand = [i for i in range(len(batch.prompts)) for _ in range(g)]  # group-major: completion i of prompt i // g
    references = [batch.references[i] for i in expand]
    columns = {k: [v[i] for i in expand] for k, v in batch.columns.items()}
    out = call_reward(ReasoningGymScore(answer_format), rollouts.texts, references, **columns)
    scores = out.scores.nan_to_num(0.0)  # [P * G]
    solved = (scores == 1.0).float().view(-1, g)  # [P, G]
    return {
        "dataset": dataset,
        "config": config,
        "instruction": instruction or "reasoning-gym's default (think, then <answer>...</answer>)",
        "answer_format": answer_format,
        "max_new_tokens": max_new_tokens,
        "prompts": len(batch.prompts),
        "samples": g,
        "score_mean": round(scores.mean().item(), 4),
        "accuracy": round(solved.mean().item(), 4),
        "groups_all_wrong": round((solved.sum(1) == 0).float().mean().item(), 4),
        "no_answer": round(out.counters.get("no_answer", 0) / len(scores), 4),
        "truncated": round(rollouts.truncated.float().mean().item(), 4),
        "len_mean": round(rollouts.completion_mask.sum(1).float().mean().item(), 1),
        "errors": int(out.counters.get("errors", 0)),
        "seconds": round(time.perf_counter() - start, 1),
        "example": f"{batch.references[0]!r} -> {rollouts.texts[0]!r}"[:400],
        "example_question": json.loads(batch.columns["rg_entry"][0])["question"],
        "torch_threads": torch.get_num_threads(),
    }


def render(results: Path = RESULTS) -> str:
    """The markdown table of the measurements in ``results`` (what ``--write`` puts between the markers)."""
    data = json.loads(results.read_text())
    s = data["settings"]
    lines = [
        f"Model `{s['model']}`, {s['prompts']} val prompts per cell (seed {s['seed']}), {s['samples']} samples each "
        f"at temperature 1 ({s['engine']} engine, {s['threads']} thread), chat template; reward: ReasoningGymScore, "
        "the generator's own `score_answer`. Reading `last_number`: the instruction \"Answer with the number only.\" and "
        "the completion's last number (`answer_format: last_number`); `tag`: reasoning-gym's own instruction and the "
        "last `<answer>` tag. Data: `docs/results/reasoning_gym/start.json`.",
        "",
        "| cell | config | reading, max_new_tokens | accuracy (score = 1) | mean score | groups of "
        f"{s['samples']} all wrong | no answer read | truncated | mean length |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in data["cells"].items():
        config = ", ".join(f"{k}={v}" for k, v in row["config"].items())
        lines.append(
            f"| {name} | {config or 'defaults'} | {row['answer_format']}, {row['max_new_tokens']} | {row['accuracy']:.3f} |"
            f" {row['score_mean']:.3f} | {row['groups_all_wrong']:.3f} | "
            f"{row['no_answer']:.3f} | {row['truncated']:.3f} | {row['len_mean']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--samples", type=int, default=4, help="completions per prompt (the group size G)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the CPU is shared)")
    parser.add_argument("--cells", nargs="*", help=f"subset of {list(CELLS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="JSON file the measurements are merged into")
    parser.add_argument("--write", type=Path, help="replace the table between the markers of this markdown file")
    args = parser.parse_args()
    if args.write:
        write_block(args.write, BEGIN, END, render(args.out or RESULTS))
        return

    import torch

    from lit_grpo.models.loading import load_policy, load_tokenizer
    from lit_grpo.rollout import HFGenerateEngine
    from lit_grpo.rollout.hf import GENERATE_DRAWS

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    policy, tokenizer = load_policy(args.model).eval(), load_tokenizer(args.model)
    engine = HFGenerateEngine(batch_size=args.batch_size, **GENERATE_DRAWS)  # the draws of the published run
    engine.bind(policy, tokenizer)
    settings = {"command": command("bench/reasoning_gym_start.py", sys.argv[1:]), "model": args.model,
                "prompts": args.prompts, "samples": args.samples,
                "temperature": 1.0, "engine": "hf", "threads": args.threads, "seed": args.seed}  # fmt: skip
    for name, (dataset, config, reading) in CELLS.items():
        if args.cells and name not in args.cells:
            continue
        row = measure(args, dataset, config, reading, engine)
        row["load"], row["command"] = round(os.getloadavg()[0], 1), settings["command"]  # cells merge across runs
        print(f"{name:<22} accuracy {row['accuracy']:.3f}  all-wrong groups {row['groups_all_wrong']:.3f}  "
              f"no answer {row['no_answer']:.3f}  truncated {row['truncated']:.3f}  {row['seconds']} s", flush=True)
        if args.out:  # after every cell, merged into what earlier runs wrote
            data = json.loads(args.out.read_text()) if args.out.exists() else {"cells": {}}
            data["settings"] = settings
            data["cells"][name] = row
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
