"""``HFGenerateEngine`` generation alone: the own decoding loop (``decoder=own``, without and with ``shrink``) vs
Hugging Face ``generate`` (``decoder=generate``).

    python bench/hf_decode.py --workload real --rounds 4 --reps 2 --publish
    python bench/hf_decode.py --smoke

``real``: SmolLM2-135M-Instruct (``lit-grpo models fetch smollm2-135m-instruct``; ``LIT_GRPO_CACHE`` names the
cache) on the real quickstart's chat prompts, P x n = 8 x 8 = 64 completions of 32 new tokens. ``small``: a random
"small" tiny model built in code (about 3M parameters, so completions run long), the same 64 x 32. ``--smoke``: a
random "tiny" model, 4 x 4 completions of 8 tokens, one round of one repetition: checks that the script runs, in
seconds; its timings mean nothing. Sampling at temperature 1, float32, ``--threads`` torch threads (default 1).

Each of ``--rounds`` rounds is a fresh process that builds the model, warms every setting up on one short batch,
then times ``--reps`` generations of the whole batch with each, alternating, from the same seed for all; the
order of the settings rotates between rounds. Prints one ``RESULT {json}`` line: per setting the median and range
of the seconds per batch and of the generated tokens per second, the paired speedups over ``generate``, and
whether ``own`` sampled ``generate``'s tokens from the same seed. ``--publish`` merges it, by workload, into
docs/results/hf_decode.json; publish only from a machine that runs nothing else (the load averages before and
after are recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shared_prefill import merge_result, prompts_for, run_worker, timed_generations  # noqa: E402

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results" / "hf_decode.json"
#: workload -> (model: a hub name or a tiny size built in code, prompts, samples per prompt, new tokens)
WORKLOADS = {
    "real": ("smollm2-135m-instruct", 8, 8, 32),
    "small": ("tiny:small", 8, 8, 32),
    "smoke": ("tiny:tiny", 4, 4, 8),
}
#: setting -> HFGenerateEngine options
SETTINGS = {"generate": {"decoder": "generate"}, "own": {"decoder": "own"},
            "own_shrink": {"decoder": "own", "shrink": True}}


def load(model: str):
    """The policy and tokenizer of a workload: a tiny random model saved to a temporary directory, or a hub model."""
    from lit_grpo.models.loading import load_policy, load_tokenizer

    if model.startswith("tiny:"):
        from lit_grpo.models.tiny import build_tiny_model

        model = str(build_tiny_model(tempfile.mkdtemp(prefix="hf-decode-"), size=model.removeprefix("tiny:")))
    return load_policy(model).eval(), load_tokenizer(model)


def worker(args) -> None:
    """One process: warm up every setting, then time ``args.reps`` generations with each, alternating from
    ``args.first`` on; prints one ``RESULT {json}`` line."""
    import torch

    from lit_grpo.rollout import HFGenerateEngine

    torch.set_num_threads(args.threads)
    model, p, n, new_tokens = WORKLOADS[args.workload]
    prompts = prompts_for(p, model if args.workload == "real" else None)
    policy, tokenizer = load(model)
    names = list(SETTINGS)
    engines = {name: HFGenerateEngine(**SETTINGS[name]) for name in names}
    for engine in engines.values():
        engine.bind(policy, tokenizer)
    seconds, tokens, first = timed_generations(engines, names[args.first:] + names[: args.first], prompts, n,
                                               new_tokens, args.reps)
    a, b = first["generate"], first["own"]
    same = a.completion_ids.shape == b.completion_ids.shape and bool((a.completion_ids == b.completion_ids).all())
    print("RESULT " + json.dumps({"seconds": seconds, "tokens": tokens, "own_same_tokens_as_generate": same,
                                  "max_abs_logprob_diff": float((a.logprobs - b.logprobs).abs().max()) if same
                                  else None}), flush=True)


def summary(values: list[float], digits: int = 3) -> dict:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="real")
    parser.add_argument("--smoke", action="store_true", help="the smoke workload, one round of one repetition")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes (the settings' order rotates)")
    parser.add_argument("--reps", type=int, default=1, help="timed generations per setting and process")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--publish", action="store_true", help=f"merge the result into {OUT.relative_to(ROOT)}")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.workload, args.rounds, args.reps = "smoke", 1, 1
    if args.worker:
        worker(args)
        return
    if args.publish and args.smoke:
        parser.error("--smoke timings check that the script runs; they are not for publishing")

    model, p, n, new_tokens = WORKLOADS[args.workload]
    load_before = os.getloadavg()[0]
    seconds: dict[str, list[float]] = {name: [] for name in SETTINGS}
    rates: dict[str, list[float]] = {name: [] for name in SETTINGS}
    same, diffs = [], []
    for k in range(args.rounds):
        result = run_worker(__file__, ["--workload", args.workload, "--first", str(k % len(SETTINGS)), "--reps",
                                       str(args.reps)], args.threads)
        for name in SETTINGS:
            seconds[name] += result["seconds"][name]
            rates[name] += [t / s for t, s in zip(result["tokens"][name], result["seconds"][name], strict=True)]
            print(f"  {args.workload} {name:10s} {' '.join(f'{s:.3f}' for s in result['seconds'][name])} s", flush=True)
        same.append(result["own_same_tokens_as_generate"])
        if result["max_abs_logprob_diff"] is not None:
            diffs.append(result["max_abs_logprob_diff"])
    result = {
        "model": model, "P": p, "n": n, "max_new_tokens": new_tokens, "dtype": "float32", "threads": args.threads,
        "rounds": args.rounds, "reps": args.reps,
        **{f"{name}_s": summary(values) for name, values in seconds.items()},
        **{f"{name}_tokens_per_s": summary(values, 1) for name, values in rates.items()},
        **{f"{name}_paired_speedup": summary([g / o for g, o in zip(seconds["generate"], seconds[name], strict=True)],
                                             2) for name in SETTINGS if name != "generate"},
        "own_same_tokens_as_generate": f"{sum(same)}/{len(same)} rounds",
        "own_max_abs_logprob_diff": max(diffs) if diffs else None,
        "command": "python bench/hf_decode.py " + " ".join(sys.argv[1:]),
        "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
    }
    print("RESULT " + json.dumps(result), flush=True)
    if args.publish:
        merge_result(OUT, args.workload, result)


if __name__ == "__main__":
    main()
