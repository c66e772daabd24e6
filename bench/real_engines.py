"""Both rollout engines on the real model: generation throughput, engine/trainer log-prob mismatch, weight sync.

    python bench/real_engines.py --out docs/results/real_engines.json

On SmolLM2-135M-Instruct (``lit-grpo models fetch smollm2-135m-instruct``), float32 everywhere, with the
real quickstart's chat prompts: for each engine, the best tokens/s of ``--repeats`` rollout batches of
``--prompts`` x ``--group-size`` sampled completions (after a warm-up), and on one such batch the
mismatch between the engine's sampling log-probs and the trainer's forward on the same tokens
(``logp_mismatch``: the statistics a run logs as ``rollout/logp_diff_*``). For vLLM also the startup
and the weight sync (full weights, and LoRA adapters merged for the copy). ``hf-lora`` times the HF engine on
the quickstart's LoRA policy (r 16 on every projection) with the adapters folded into the weights for
generation (``merge_lora=True``, the default) and with the adapter branches run at every token. Wall-clock
seconds on whatever machine runs it: note the load.

    python bench/real_engines.py --parts hf-lora --repeats 2
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


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def measure(engine, policy, prompts, args) -> dict:
    import torch

    from lit_grpo.logprobs import logp_mismatch, sequence_logprobs
    from lit_grpo.types import SamplingParams

    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
    engine.generate(prompts[:2], 2, SamplingParams(max_new_tokens=4))  # warm-up
    best, rollouts = 0.0, None
    for _ in range(args.repeats):
        r, seconds = timed(engine.generate, prompts, args.group_size, sampling)
        tokens = int(r.completion_mask.sum())
        if tokens / seconds > best:
            best, rollouts, best_s = tokens / seconds, r, seconds
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy, rollouts)
    stats = {k: float(v) for k, v in logp_mismatch(logp, rollouts.logprobs, rollouts.completion_mask).items()}
    return {"tokens_per_s": round(best, 1), "batch_s": round(best_s, 2), "tokens": int(rollouts.completion_mask.sum()),
            "eos_frac": round(1 - rollouts.truncated.float().mean().item(), 3),
            **{k: float(f"{v:.3g}") for k, v in stats.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--parts", default="hf,vllm,hf-lora", help="comma-separated: hf, vllm, hf-lora")
    args = parser.parse_args()

    import torch

    from lit_grpo import SyntheticArithmetic
    from lit_grpo.lora import LoraSettings, apply_lora
    from lit_grpo.models.loading import load_policy, load_tokenizer
    from lit_grpo.rollout import HFGenerateEngine, VLLMEngine
    from lit_grpo.rollout.hf import GENERATE_DRAWS

    torch.manual_seed(0)
    source = SyntheticArithmetic(num_train=0, num_val=args.prompts, num_test=0, max_operand=30, style="chat",
                                 question="What is {a} {op} {b}?", instruction="Answer with the number only.")
    source.bind_tokenizer(args.model)
    prompts = [r["prompt"] for r in source.load("val")]
    policy, tokenizer = load_policy(args.model).eval(), load_tokenizer(args.model)
    results = {"meta": {"model": args.model, "command": command("bench/real_engines.py", sys.argv[1:]), "dtype": "float32",
                        "torch_threads": torch.get_num_threads(), "load_before": os.getloadavg()[0]}}
    parts = set(args.parts.split(","))
    if "hf" in parts:
        hf = HFGenerateEngine(**GENERATE_DRAWS)  # the draws of the published run
        hf.bind(policy, tokenizer)
        results["hf"] = measure(hf, policy, prompts, args)
        print("hf  ", results["hf"], flush=True)
    if "vllm" in parts:
        engine = VLLMEngine(dtype="float32", kv_cache_gib=1.0)
        _, startup = timed(engine.bind, policy, tokenizer)
        results["vllm"] = measure(engine, policy, prompts, args)
        results["vllm"]["startup_s"] = round(startup, 1)
        results["vllm"]["sync_full_s"] = round(min(engine.sync_weights(policy) for _ in range(args.repeats)), 2)
    lora = apply_lora(policy, LoraSettings(r=16, alpha=32, target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])).eval()
    if "vllm" in parts:
        results["vllm"]["sync_lora_s"] = round(min(engine.sync_weights(lora) for _ in range(args.repeats)), 2)
        print("vllm", results["vllm"], flush=True)
    if "hf-lora" in parts:
        for folded in (True, False):
            hf = HFGenerateEngine(merge_lora=folded, **GENERATE_DRAWS)
            hf.bind(lora, tokenizer)
            key = "hf_lora_folded" if folded else "hf_lora_unfolded"
            results[key] = measure(hf, lora, prompts, args)
            print(key, results[key], flush=True)
    results["meta"]["load_after"] = os.getloadavg()[0]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
