"""Reward scoring throughput (items/s), in process and in a worker pool, and its share of a step.

    OMP_NUM_THREADS=1 .venv/bin/python bench/reward_throughput.py --items 512 --workers 1 2 \
        --quickstart-steps 5 [--json docs/results/reward_throughput.json]

Prints a markdown table: items/s of each reward on a fixed mix of completions (GSM8K-style, boxed
LaTeX, answer tags, wrong and missing answers), the pool's start-up time, and, with
``--quickstart-steps``, the seconds a quickstart step (16 prompts x 8 completions, the committed tiny
policy) spends scoring against the whole step, with ExactMatch (the quickstart's reward) and with
MathVerify in its place.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def workload(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``n`` (completion, reference) pairs mixing answer styles, right and wrong, with reasoning text."""
    rng = random.Random(seed)
    completions, references = [], []
    for i in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        reasoning = f"First, {a} plus {b} is computed step by step. Then we check the units. " * 3
        kind = i % 6
        right = rng.random() < 0.5
        value = a + b if right else a + b + 1
        if kind == 0:
            completions.append(f"{reasoning}\n#### {value}")
            references.append(f"{a} + {b} = {a + b}\n#### {a + b}")
        elif kind == 1:
            completions.append(f"{reasoning} So the answer is $\\boxed{{\\frac{{{value}}}{{2}}}}$.")
            references.append(f"\\frac{{{a + b}}}{{2}}")
        elif kind == 2:
            completions.append(f"<think>{reasoning}</think> <answer>{value}</answer>")
            references.append(str(a + b))
        elif kind == 3:
            completions.append(f"{reasoning} \\boxed{{{value}\\sqrt{{2}}}}")
            references.append(f"\\sqrt{{{2 * (a + b) ** 2}}}")
        elif kind == 4:
            completions.append(f"{reasoning} \\boxed{{x^2 + {value}x}}")
            references.append(f"x(x + {a + b})")
        else:
            completions.append(reasoning)  # no final answer
            references.append(str(a + b))
    return completions, references


def throughput(reward, completions, references, repeats: int) -> float:
    """Items per second: the median of ``repeats`` timed calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        reward(completions, references)
        times.append(time.perf_counter() - start)
    return len(completions) / statistics.median(times)


def reward_rows(items: int, workers: list[int], repeats: int) -> list[tuple[str, float, str]]:
    from lit_grpo.rewards import ExactMatch, MathVerify, TextSimilarity

    completions, references = workload(items)
    rows = [("ExactMatch, in process", throughput(ExactMatch(), completions, references, repeats), "")]
    rows.append(
        ("TextSimilarity, in process", throughput(TextSimilarity(), completions, references, repeats), "")
    )
    rows.append(("MathVerify, in process", throughput(MathVerify(), completions, references, repeats), ""))
    for k in workers:
        reward = MathVerify(workers=k)
        start = time.perf_counter()
        reward(completions[:k], references[:k])  # starts the pool
        startup = time.perf_counter() - start
        rows.append((f"MathVerify, pool of {k}", throughput(reward, completions, references, repeats),
                     f"pool start {startup:.1f} s"))  # fmt: skip
        reward.close()
    return rows


def quickstart_rows(steps: int) -> list[tuple[str, float, float]]:
    """(reward, mean score_s, mean step_s) over ``steps`` quickstart steps after one warm-up step."""
    import lightning as L

    from lit_grpo import GRPOModule, PromptDataModule, SyntheticArithmetic
    from lit_grpo.rewards import ExactMatch, MathVerify
    from lit_grpo.settings import Optim, Sampling

    class Perf(L.Callback):
        def __init__(self) -> None:
            self.rows: list[tuple[float, float]] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            m = trainer.callback_metrics
            self.rows.append((float(m["perf/score_s"]), float(m["perf/step_s"])))

    rows = []
    for name, reward in [("ExactMatch", ExactMatch()), ("MathVerify", MathVerify())]:
        L.seed_everything(0, verbose=False)
        perf = Perf()
        module = GRPOModule(
            model="assets/tiny-arith-sft", reward=reward, group_size=8, optim=Optim(lr=1e-4),
            sampling=Sampling(max_new_tokens=6),
        )
        source = SyntheticArithmetic(max_operand=99, num_val=200, num_test=200, seed=0)
        trainer = L.Trainer(max_steps=steps + 1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, limit_val_batches=0, callbacks=[perf], accelerator="cpu")  # fmt: skip
        trainer.fit(module, datamodule=PromptDataModule(source, prompts_per_step=16))
        score, step = zip(*perf.rows[1:], strict=True)
        rows.append((name, statistics.mean(score), statistics.mean(step)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=512, help="completions per scoring call")
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2], help="pool sizes to measure")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per reward (the median is kept)")
    parser.add_argument("--quickstart-steps", type=int, default=0, help="also time quickstart steps")
    parser.add_argument("--json", default=None, help="also write the results and the load here")
    args = parser.parse_args()

    import torch

    load_before = os.getloadavg()[0]
    print(f"Hardware: {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs; "
          f"Python {platform.python_version()}, torch {torch.__version__}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}\n")  # fmt: skip
    print(f"| reward ({args.items} items per call) | items/s | note |\n|---|---:|---|")
    rewards = reward_rows(args.items, args.workers, args.repeats)
    for name, rate, note in rewards:
        print(f"| {name} | {rate:,.0f} | {note} |")
    steps = quickstart_rows(args.quickstart_steps) if args.quickstart_steps else []
    if steps:
        print(
            "\n| quickstart step (16 x 8 completions) | score s/step | step s | scoring share |\n|---|---:|---:|---:|"
        )
        for name, score, step in steps:
            print(f"| {name} | {score:.3f} | {step:.2f} | {score / step:.1%} |")
    if args.json:
        record = {
            "settings": {k: getattr(args, k) for k in ("items", "workers", "repeats", "quickstart_steps")},
            "machine": {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                        "python": platform.python_version(), "torch": torch.__version__,
                        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                        "load_1min_before": load_before, "load_1min_after": os.getloadavg()[0]},
            "rewards": [{"reward": name, "items_per_s": rate, "note": note} for name, rate, note in rewards],
            "quickstart": [{"reward": name, "score_s": score, "step_s": step} for name, score, step in steps],
        }  # fmt: skip
        with open(args.json, "w") as f:
            f.write(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
