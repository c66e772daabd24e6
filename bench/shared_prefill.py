"""``HFGenerateEngine`` with each distinct prompt prefilled once (``shared_prefill=True``) vs every row's prompt
prefilled (``False``).

    python bench/shared_prefill.py --workload real --rounds 2 --reps 2 --out docs/results/hf_shared_prefill.json
    python bench/shared_prefill.py --workload tiny --rounds 2 --reps 8 --out docs/results/hf_shared_prefill.json

``real``: SmolLM2-135M-Instruct (``lit-grpo models fetch smollm2-135m-instruct``; ``LIT_GRPO_CACHE`` names the
cache) on the real quickstart's chat prompts ("What is a + b? Answer with the number only." through the chat
template, about 46 tokens), P x n = 8 x 8, 32 new tokens. ``tiny``: the quickstart's ``tiny-arith-sft`` on its
two-digit addition prompts, 16 x 8, 6 new tokens. Sampling at temperature 1, float32, ``--threads`` torch threads
(default 1: on a 2-core machine shared with other work, 2 threads made every batch 3-4x slower and its time vary
tenfold, as one of the two threads keeps waiting for a busy core).

Each of ``--rounds`` rounds is a fresh process that warms both settings up on one short batch, then times
``--reps`` generations of the whole batch with each, alternating, from the same seed for both; which setting goes
first alternates between rounds. Paired timings are close in time, so their ratio tells more than the medians
on a shared machine. Prints and writes (``--out``, merged into the file by workload) the median and range of the
seconds per batch, of the paired speedups, and whether both settings sampled the same tokens from the same seed,
with the largest difference of their sampling log-probs on those rows.
Wall-clock seconds on whatever machine runs it: the load averages before and after are recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
#: workload -> (model, prompts, samples per prompt, new tokens)
WORKLOADS = {
    "real": ("smollm2-135m-instruct", 8, 8, 32),
    "tiny": (str(ROOT / "assets" / "tiny-arith-sft"), 16, 8, 6),
}
SETTINGS = ("plain", "shared_prefill")


def prompts_for(count: int, chat_model: str | None = None) -> list[str]:
    """``count`` addition prompts: the real quickstart's chat prompts through ``chat_model``'s template, or the
    quickstart's plain two-digit ones when None."""
    from lit_grpo import SyntheticArithmetic

    if chat_model is not None:
        source = SyntheticArithmetic(num_train=0, num_val=count, num_test=0, max_operand=30, style="chat",
                                     question="What is {a} {op} {b}?", instruction="Answer with the number only.")
        source.bind_tokenizer(chat_model)
    else:
        source = SyntheticArithmetic(num_train=0, num_val=count, num_test=0)
    return [r["prompt"] for r in source.load("val")]


def timed_generations(engines: dict, order: list[str], prompts: list[str], n: int, new_tokens: int, reps: int):
    """Warm each engine of ``engines`` (bound) up on a short batch, then generate ``n`` samples of every prompt
    ``reps`` times with each, in ``order``, from the same seed for all. Returns the seconds and the completion
    tokens of each generation by engine name, and each engine's first rollouts."""
    import torch

    from lit_grpo.types import SamplingParams

    for name in order:
        engines[name].generate(prompts[:2], 2, SamplingParams(max_new_tokens=2))  # warm-up
    seconds: dict[str, list[float]] = {name: [] for name in order}
    tokens: dict[str, list[int]] = {name: [] for name in order}
    first = {}
    for rep in range(reps):
        for name in order:
            torch.manual_seed(rep)  # the same seed for every setting
            start = time.perf_counter()
            r = engines[name].generate(prompts, n, SamplingParams(temperature=1.0, max_new_tokens=new_tokens))
            seconds[name].append(time.perf_counter() - start)
            tokens[name].append(int(r.completion_mask.sum()))
            first.setdefault(name, r)
    return seconds, tokens, first


def run_worker(script: str, flags: list[str], threads: int) -> dict:
    """``script --worker <flags>`` in a fresh process with ``threads`` torch threads: its last ``RESULT`` line."""
    cmd = [sys.executable, script, "--worker", *flags, "--threads", str(threads)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def merge_result(path: Path, workload: str, result: dict) -> None:
    """Write ``result`` into the JSON file ``path`` under ``workload``, keeping the other workloads'."""
    merged = json.loads(path.read_text()) if path.exists() else {}
    merged[workload] = result
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged, indent=1) + "\n")


def worker(args) -> None:
    """One process: warm up both settings, then time ``args.reps`` generations with each, alternating (the one
    named by ``args.first`` first); prints one ``RESULT {json}`` line."""
    import torch

    from lit_grpo.models.loading import load_policy, load_tokenizer
    from lit_grpo.rollout import HFGenerateEngine
    from lit_grpo.rollout.hf import GENERATE_DRAWS

    torch.set_num_threads(args.threads)
    model, p, n, new_tokens = WORKLOADS[args.workload]
    prompts = prompts_for(p, model if args.workload == "real" else None)
    policy, tokenizer = load_policy(model).eval(), load_tokenizer(model)
    engines = {name: HFGenerateEngine(shared_prefill=name == "shared_prefill", **GENERATE_DRAWS) for name in SETTINGS}
    for engine in engines.values():
        engine.bind(policy, tokenizer)
    order = [args.first] + [name for name in SETTINGS if name != args.first]
    seconds, _, first = timed_generations(engines, order, prompts, n, new_tokens, args.reps)
    r = first["plain"]
    print("RESULT " + json.dumps({
        "seconds": seconds, "tokens": int(r.completion_mask.sum()), "decoder": engines["plain"].decoder,
        "prompt_tokens_mean": round(float(r.prompt_mask.sum(-1).float().mean()), 1),
        "prompt_tokens_padded": r.prompt_ids.shape[1],
        **{f"{name}_completion_ids": first[name].completion_ids.tolist() for name in SETTINGS},
        **{f"{name}_logprobs": first[name].logprobs.tolist() for name in SETTINGS},
    }), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="real")
    parser.add_argument("--rounds", type=int, default=2, help="fresh-process pairs (alternating order)")
    parser.add_argument("--reps", type=int, default=1, help="timed generations per process")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--first", choices=SETTINGS, default="plain", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    import torch

    model, p, n, new_tokens = WORKLOADS[args.workload]
    load_before = os.getloadavg()[0]
    seconds: dict[str, list[float]] = {name: [] for name in SETTINGS}
    ratios, same_rows, diffs = [], [], []
    for k in range(args.rounds):
        result = run_worker(__file__, ["--workload", args.workload, "--first", SETTINGS[k % 2], "--reps", str(args.reps)],
                            args.threads)
        for name in SETTINGS:
            seconds[name] += result["seconds"][name]
            print(f"  {args.workload} {name:14s} {' '.join(f'{s:.2f}' for s in result['seconds'][name])} s", flush=True)
        ratios += [a / b for a, b in zip(result["seconds"]["plain"], result["seconds"]["shared_prefill"], strict=True)]
        a, b = (torch.tensor(result[f"{name}_completion_ids"]) for name in SETTINGS)
        rows = (a == b).all(-1) if a.shape == b.shape else torch.zeros(len(a), dtype=torch.bool)  # same seed
        same_rows.append(rows)
        if rows.any():
            la, lb = (torch.tensor(result[f"{name}_logprobs"]) for name in SETTINGS)
            diffs.append(float((la - lb).abs()[rows].max()))
    last = result
    median = {name: statistics.median(values) for name, values in seconds.items()}
    result = {
        "model": Path(model).name, "P": p, "n": n, "max_new_tokens": new_tokens, "dtype": "float32",
        "decoder": last["decoder"], "threads": args.threads, "rounds": args.rounds, "reps": args.reps,
        "prompt_tokens_mean": last["prompt_tokens_mean"], "prompt_tokens_padded": last["prompt_tokens_padded"],
        "completion_tokens_last": last["tokens"],
        **{f"{name}_s": {"median": round(median[name], 3), "min": round(min(values), 3),
                         "max": round(max(values), 3), "all": [round(s, 3) for s in values]}
           for name, values in seconds.items()},
        "speedup_of_medians": round(median["plain"] / median["shared_prefill"], 2),
        "paired_speedup": {"median": round(statistics.median(ratios), 2), "min": round(min(ratios), 2),
                           "max": round(max(ratios), 2)},
        "same_completion_rows": f"{int(sum(r.sum() for r in same_rows))}/{sum(len(r) for r in same_rows)}",
        "max_abs_logprob_diff_same_rows": max(diffs) if diffs else None,
        "command": "python bench/shared_prefill.py " + " ".join(sys.argv[1:]),
        "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
    }
    print("RESULT " + json.dumps(result), flush=True)
    if args.out:
        merge_result(args.out, args.workload, result)


if __name__ == "__main__":
    main()
