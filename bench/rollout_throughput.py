"""Rollout throughput of HF ``generate`` and vLLM on the same prompts, and the cost of a weight sync.

    python bench/rollout_throughput.py                       # tiny, medium, large; G = 8; 128 new tokens
    python bench/rollout_throughput.py --sizes tiny --prompts 4

For each size of ``lit_grpo.models.tiny`` (randomly initialised, so completions rarely stop early) it times
rollout batches with each engine after a warm-up (the best of ``--repeats``: shared machines are noisy),
then training steps with the vLLM engine: generate, a policy-gradient forward/backward and AdamW step on
the rollouts, and the weight sync. It prints a Markdown table (the one in docs/vllm.md). Timings are
wall-clock seconds on whatever machine runs it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from lit_grpo.logprobs import sequence_logprobs
from lit_grpo.models.loading import load_policy, load_tokenizer
from lit_grpo.models.tiny import SIZES, build_tiny_model
from lit_grpo.rollout import HFGenerateEngine, VLLMEngine
from lit_grpo.types import SamplingParams


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def rollout_rate(engine, prompts: list[str], group_size: int, sampling: SamplingParams, repeats: int):
    """Generated tokens per second of one rollout batch after a warm-up: the best of ``repeats`` batches."""
    engine.generate(prompts[:2], 2, SamplingParams(max_new_tokens=8, seed=0))
    best, tokens = 0.0, 0
    for _ in range(repeats):
        rollouts, seconds = timed(engine.generate, prompts, group_size, sampling)
        n = int(rollouts.completion_mask.sum())
        best, tokens = max(best, n / seconds), max(tokens, n)
    return best, tokens


def train_step(policy, optimizer, engine, prompts, group_size, sampling) -> dict[str, float]:
    """One GRPO-shaped step with the vLLM engine: generate, update on the rollouts, sync the weights."""
    rollouts, generate_s = timed(engine.generate, prompts, group_size, sampling)
    start = time.perf_counter()
    logp, _ = sequence_logprobs(policy, rollouts, sampling.temperature)  # [N, T]
    advantages = torch.randn(len(rollouts), 1)  # stand-in: the cost does not depend on the values
    loss = -(logp * advantages * rollouts.completion_mask).sum() / rollouts.completion_mask.sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    update_s = time.perf_counter() - start
    sync_s = engine.sync_weights(policy)
    return {
        "generate_s": generate_s,
        "update_s": update_s,
        "sync_s": sync_s,
        "step_s": generate_s + update_s + sync_s,
    }


def bench_size(size: str, args) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(build_tiny_model(tmp, size=size, seed=0))
        tokenizer, policy = load_tokenizer(path), load_policy(path)
        params = sum(p.numel() for p in policy.parameters())
        prompts = [f"{a}+{b}=" for a, b in zip(range(11, 99, 7), range(23, 99, 5), strict=False)][
            : args.prompts
        ]
        sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
        hf = HFGenerateEngine()
        hf.bind(policy, tokenizer)
        hf_rate, hf_tokens = rollout_rate(hf, prompts, args.group_size, sampling, args.repeats)
        engine = VLLMEngine(dtype=args.dtype, kv_cache_gib=args.kv_cache_gib)
        _, startup_s = timed(engine.bind, policy, tokenizer)
        vllm_rate, vllm_tokens = rollout_rate(engine, prompts, args.group_size, sampling, args.repeats)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5)
        steps = [
            train_step(policy, optimizer, engine, prompts, args.group_size, sampling)
            for _ in range(args.steps)
        ]
        step = {k: sum(s[k] for s in steps) / len(steps) for k in steps[0]}
        engine.llm = None  # release the engine before the next size
        return {
            "size": size,
            "params_m": params / 1e6,
            "hf_tok_s": hf_rate,
            "vllm_tok_s": vllm_rate,
            "speedup": vllm_rate / hf_rate,
            "tokens": (hf_tokens + vllm_tokens) / 2,
            "startup_s": startup_s,
            **step,
            "sync_frac": step["sync_s"] / step["step_s"],
        }


def markdown(rows: list[dict[str, float]], args) -> str:
    head = (
        "| size | params | HF generate tok/s | vLLM tok/s | vLLM / HF | weight sync s | step s "
        "(generate + update + sync) | sync share of step |\n|---|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r['size']} | {r['params_m']:.1f}M | {r['hf_tok_s']:,.0f} | {r['vllm_tok_s']:,.0f} | "
        f"{r['speedup']:.2f}x | {r['sync_s']:.3f} | {r['step_s']:.2f} ({r['generate_s']:.2f} + "
        f"{r['update_s']:.2f} + {r['sync_s']:.3f}) | {100 * r['sync_frac']:.1f}% |\n"
        for r in rows
    )
    setup = (
        f"\n{args.prompts} prompts x G={args.group_size}, {args.max_new_tokens} new tokens, temperature 1, "
        f"vLLM dtype {args.dtype}, HF float32, torch threads {torch.get_num_threads()}.\n"
    )
    return head + body + setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny", "medium", "large"], choices=sorted(SIZES))
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="rollout batches timed per engine (best kept)")
    parser.add_argument("--steps", type=int, default=2, help="training steps timed per size (averaged)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--kv-cache-gib", type=float, default=1.0)
    args = parser.parse_args()
    rows = []
    for size in args.sizes:
        rows.append(bench_size(size, args))
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in rows[-1].items()}, flush=True)
    print(markdown(rows, args))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
