"""Training forward + backward three ways: per row (``sequence_logprobs``), each prompt encoded once
(``shared_prefix_logprobs(packed=False)``), and each prompt once with its completions packed end to end
(``shared_prefix_logprobs``, the default).

    python bench/shared_prefix.py [--size small] [--model DIR] [--prompts 4] [--group 8] [--prompt-tokens 48]
                                  [--completion-tokens 16] [--reps 5] [--threads 1] [--dtype float32]
    python bench/shared_prefix.py --table --json docs/results/shared_prefix.json --write docs/performance.md

``P`` groups of ``G`` completions of random tokens: each group's prompt has ``--prompt-tokens`` tokens, less
a different amount of left padding per group (up to a quarter), each completion between half and all of
``--completion-tokens`` (right padded). The model is a randomly initialised tiny Qwen2 of ``--size``, or the
converted model at ``--model``. Each repetition runs the three paths (log-probs with entropy, a weighted sum, its
backward) in rotating order; the medians are printed with the largest log-prob and relative gradient
differences from the plain path. Prints one ``RESULT {json}`` line. ``--table`` measures the rows of the table in
docs/performance.md (``TABLE``; the SmolLM2 row needs ``lit-grpo models fetch smollm2-135m-instruct``), writes
them to ``--json`` and renders the table into ``--write``; ``--render`` renders from the JSON alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PATHS = ("plain", "shared_prefix", "packed")
DATA = HERE.parent / "docs" / "results" / "shared_prefix.json"
BEGIN, END = "<!-- shared_prefix.py:begin -->", "<!-- shared_prefix.py:end -->"
#: The rows of docs/performance.md's table: (model size or "smollm2", P, G, prompt tokens, completion tokens, reps).
TABLE = [("tiny", 4, 8, 48, 16, 5), ("small", 4, 8, 48, 16, 5), ("small", 4, 2, 48, 16, 5), ("small", 4, 8, 8, 16, 5),
         ("small", 4, 8, 8, 64, 5), ("smollm2", 2, 8, 48, 16, 3)]


def measure(size: str, model: str | None, p: int, g: int, tp: int, t: int, reps: int, threads: int,
            dtype: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from lit_grpo.logprobs import sequence_logprobs, shared_prefix_logprobs
    from lit_grpo.models.loading import load_policy
    from lit_grpo.models.tiny import char_tokenizer, tiny_config
    from lit_grpo.types import Rollouts

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if model:
        policy = load_policy(model, dtype)
    else:
        policy = AutoModelForCausalLM.from_config(tiny_config(char_tokenizer(), size)).to(getattr(torch, dtype))
    policy.train()
    vocab = policy.get_output_embeddings().out_features
    n = p * g
    gen = torch.Generator().manual_seed(0)
    prompt_ids = torch.zeros(n, tp, dtype=torch.long)
    prompt_mask = torch.zeros(n, tp, dtype=torch.bool)
    for k in range(p):
        length = tp - (k * tp // (4 * p))
        prompt_ids[k * g : (k + 1) * g, tp - length :] = torch.randint(3, vocab, (length,), generator=gen)
        prompt_mask[k * g : (k + 1) * g, tp - length :] = True
    lengths = torch.randint((t + 1) // 2, t + 1, (n,), generator=gen)
    completion_mask = torch.arange(t)[None, :] < lengths[:, None]
    completion_ids = torch.randint(3, vocab, (n, t), generator=gen).masked_fill(~completion_mask, 0)
    rollouts = Rollouts(prompt_ids, prompt_mask, completion_ids, completion_mask, torch.zeros(n, t), [""] * n,
                        torch.zeros(n, dtype=torch.bool), g)
    weights = torch.rand(n, t, generator=gen) * completion_mask
    paths = {"plain": sequence_logprobs,
             "shared_prefix": lambda *a, **k: shared_prefix_logprobs(*a, packed=False, **k),
             "packed": shared_prefix_logprobs}

    def step(fn):
        policy.zero_grad(set_to_none=True)
        start = time.perf_counter()
        logp, _ = fn(policy, rollouts, 1.0, with_entropy=True)
        (logp * weights).sum().backward()
        seconds = time.perf_counter() - start
        return seconds, logp.detach() * completion_mask, [q.grad.clone() for q in policy.parameters()
                                                           if q.grad is not None]

    times: dict[str, list[float]] = {name: [] for name in PATHS}
    last = {}
    for rep in range(reps + 1):  # the first repetition warms up
        for name in PATHS[rep % 3 :] + PATHS[: rep % 3]:
            seconds, logp, grads = step(paths[name])
            if rep:
                times[name].append(seconds)
            last[name] = (logp, grads)
    median = {name: statistics.median(values) for name, values in times.items()}
    plain_lp, plain_g = last["plain"]
    result = {"model": "smollm2-135m-instruct" if model else f"tiny-{size}", "params": sum(
        q.numel() for q in policy.parameters()), "dtype": dtype, "threads": threads, "P": p, "G": g,
        "prompt_tokens": tp, "completion_tokens": t, "reps": reps, "load_1min": os.getloadavg()[0],
        "tokens": int(completion_mask.sum()), "padded_tokens": n * t}
    for name in PATHS:
        result[f"{name}_s"] = round(median[name], 4)
        if name != "plain":
            lp, grads = last[name]
            result[f"{name}_max_abs_logp_diff"] = float((lp - plain_lp).abs().max())
            result[f"{name}_max_rel_grad_diff"] = max(float((x - y).norm() / y.norm().clamp(min=1e-30))
                                                      for x, y in zip(grads, plain_g, strict=True))
    return result


def render(rows: list[dict]) -> str:
    """The markdown table of ``rows`` (the JSON ``--table`` writes)."""
    lines = ["| model | P x G | prompt / completion tokens | completion tokens / padded | plain s | shared-prefix s "
             "| packed s | packed vs plain | packed vs shared-prefix | load (1 min) |", "|" + "---|" * 10]
    for r in rows:
        name = "SmolLM2-135M-Instruct" if r["model"].startswith("smollm2") else \
            f"`{r['model'].removeprefix('tiny-')}` ({r['params'] / 1e6:.1f}M)"
        lines.append(f"| {name} | {r['P']} x {r['G']} | {r['prompt_tokens']} / {r['completion_tokens']} | "
                     f"{r['tokens']} / {r['padded_tokens']} | {r['plain_s']:.3f} | {r['shared_prefix_s']:.3f} | "
                     f"{r['packed_s']:.3f} | {r['plain_s'] / r['packed_s']:.2f} | "
                     f"{r['shared_prefix_s'] / r['packed_s']:.2f} | {r['load_1min']:.1f} |")
    worst_lp = max(max(r["shared_prefix_max_abs_logp_diff"], r["packed_max_abs_logp_diff"]) for r in rows)
    worst_g = max(max(r["shared_prefix_max_rel_grad_diff"], r["packed_max_rel_grad_diff"]) for r in rows)
    return "\n".join(lines) + (
        f"\n\nAgainst the plain path, the other two paths' log-probs differ by at most {worst_lp:.1e} and their "
        f"gradients by at most {worst_g:.1e} relative (float summation order).\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small", help="tiny-model size when no --model is given")
    parser.add_argument("--model", default=None, help="a converted model directory (load_policy)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=48)
    parser.add_argument("--completion-tokens", type=int, default=16)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--table", action="store_true", help="measure the rows of the doc's table (TABLE)")
    parser.add_argument("--render", action="store_true", help="render --json into --write without measuring")
    parser.add_argument("--json", type=Path, default=None, help="where --table writes its rows (or --render reads)")
    parser.add_argument("--write", type=Path, default=None, help="a markdown file whose shared_prefix.py block "
                                                                   "gets the table")
    args = parser.parse_args()
    if args.render:
        rows = json.loads(args.json.read_text())["rows"]
    elif args.table:
        from lit_grpo.models.sources import resolve_model

        rows = []
        for size, p, g, tp, t, reps in TABLE:
            model = str(resolve_model("smollm2-135m-instruct")) if size == "smollm2" else None
            rows.append(measure(size, model, p, g, tp, t, reps, args.threads, args.dtype))
            print("RESULT " + json.dumps(rows[-1]), flush=True)
        if args.json:
            args.json.write_text(json.dumps({"command": "python bench/shared_prefix.py --table", "rows": rows},
                                            indent=1) + "\n")
    else:
        print("RESULT " + json.dumps(measure(args.size, args.model, args.prompts, args.group, args.prompt_tokens,
                                             args.completion_tokens, args.reps, args.threads, args.dtype)))
        return
    if args.write:
        sys.path.insert(0, str(HERE))
        from provenance import write_block

        write_block(args.write, BEGIN, END, "\n" + render(rows))


if __name__ == "__main__":
    main()
