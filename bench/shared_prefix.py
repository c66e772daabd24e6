"""Training forward + backward with each prompt encoded once (``shared_prefix_logprobs``) vs per row
(``sequence_logprobs``).

    python bench/shared_prefix.py [--size small] [--model DIR] [--prompts 4] [--group 8] [--prompt-tokens 48]
                                  [--completion-tokens 16] [--reps 5] [--threads 1] [--dtype float32]

``P`` groups of ``G`` completions of random tokens: each group's prompt has ``--prompt-tokens`` tokens, less
a different amount of left padding per group (up to a quarter), each completion between half and all of
``--completion-tokens`` (right padded). The model is a randomly initialised tiny Qwen2 of ``--size``, or the
converted model at ``--model``. Each repetition runs both paths (log-probs with entropy, a weighted sum, its
backward) in alternating order; the medians are printed with the largest log-prob and relative gradient
differences. Prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


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
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from lit_grpo.logprobs import sequence_logprobs, shared_prefix_logprobs
    from lit_grpo.models.loading import load_policy
    from lit_grpo.models.tiny import char_tokenizer, tiny_config
    from lit_grpo.types import Rollouts

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model:
        policy = load_policy(args.model, args.dtype)
    else:
        policy = AutoModelForCausalLM.from_config(tiny_config(char_tokenizer(), args.size)).to(getattr(torch, args.dtype))
    policy.train()
    vocab = policy.get_output_embeddings().out_features
    p, g, tp, t = args.prompts, args.group, args.prompt_tokens, args.completion_tokens
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

    def step(fn):
        policy.zero_grad(set_to_none=True)
        start = time.perf_counter()
        logp, _ = fn(policy, rollouts, 1.0, with_entropy=True)
        (logp * weights).sum().backward()
        seconds = time.perf_counter() - start
        return seconds, logp.detach(), [q.grad.clone() for q in policy.parameters() if q.grad is not None]

    paths = {"plain": sequence_logprobs, "shared_prefix": shared_prefix_logprobs}
    times: dict[str, list[float]] = {name: [] for name in paths}
    last = {}
    for rep in range(args.reps + 1):  # the first repetition warms up
        for name in (list(paths) if rep % 2 else list(paths)[::-1]):
            seconds, logp, grads = step(paths[name])
            if rep:
                times[name].append(seconds)
            last[name] = (logp, grads)
    (a_lp, a_g), (b_lp, b_g) = last["shared_prefix"], last["plain"]
    median = {name: statistics.median(values) for name, values in times.items()}
    result = {
        "model": args.model or f"tiny-{args.size}", "dtype": args.dtype, "threads": args.threads,
        "P": p, "G": g, "prompt_tokens": tp, "completion_tokens": t, "reps": args.reps,
        "plain_s": round(median["plain"], 4), "shared_prefix_s": round(median["shared_prefix"], 4),
        "speedup": round(median["plain"] / median["shared_prefix"], 2),
        "max_abs_logp_diff": float((a_lp - b_lp).abs().max()),
        "max_rel_grad_diff": max(float((x - y).norm() / y.norm().clamp(min=1e-30)) for x, y in zip(a_g, b_g, strict=True)),
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
