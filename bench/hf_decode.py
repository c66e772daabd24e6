"""``HFGenerateEngine`` generation alone: the own decoding loop (``decoder=own``, without and with ``shrink``, each
with ``sampler=multinomial`` and ``inverse_cdf``) vs Hugging Face ``generate`` (``decoder=generate``).

    python bench/hf_decode.py --workload real --rounds 5 --reps 2 --threads 2 --publish --write docs/performance.md
    python bench/hf_decode.py --workload real --profile --threads 2 --publish --write docs/performance.md
    python bench/hf_decode.py --workload real --compile --rounds 3 --reps 2 --threads 2 --publish --write docs/performance.md
    python bench/hf_decode.py --render --write docs/performance.md    # the tables again from the committed data
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

``--compile``: the fastest setting (``shrink`` + ``inverse_cdf``) with the model's forward eager and under
``torch.compile(dynamic=True)`` (inductor, default mode), in ``--rounds`` fresh processes, each compiling from
scratch (inductor's cache in a new directory). Each process times its first compiled generation of the whole batch
(compiling included), then ``--reps`` generations a side from the same seeds, eager and compiled alternating (the
order rotating). Compiled code rounds differently, so the two sides' samples (and their lengths) can differ: the
paired figure is the eager seconds per completion token over the compiled ones. The reading, fixed before the
first run: compiling the decode step pays on this workload when that paired speedup exceeds 1 in every pair;
the table states the compile time either way. Published to docs/results/hf_decode_compile.json.
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
PROFILE = ROOT / "docs" / "results" / "hf_decode_profile.json"
BEGIN, END = "<!-- hf_decode.py:begin -->", "<!-- hf_decode.py:end -->"
PROFILE_BEGIN, PROFILE_END = "<!-- hf_decode.py:profile:begin -->", "<!-- hf_decode.py:profile:end -->"
COMPILE = ROOT / "docs" / "results" / "hf_decode_compile.json"
COMPILE_BEGIN, COMPILE_END = "<!-- hf_decode.py:compile:begin -->", "<!-- hf_decode.py:compile:end -->"
#: workload -> (model: a hub name or a tiny size built in code, prompts, samples per prompt, new tokens)
WORKLOADS = {
    "real": ("smollm2-135m-instruct", 8, 8, 32),
    "small": ("tiny:small", 8, 8, 32),
    "smoke": ("tiny:tiny", 4, 4, 8),
}
#: setting -> HFGenerateEngine options
SETTINGS = {"generate": {"decoder": "generate"},
            "own": {"decoder": "own", "shrink": False, "sampler": "multinomial"},
            "own_shrink": {"decoder": "own", "shrink": True, "sampler": "multinomial"},
            "own_cdf": {"decoder": "own", "shrink": False, "sampler": "inverse_cdf"},
            "own_shrink_cdf": {"decoder": "own", "shrink": True, "sampler": "inverse_cdf"}}


def load(model: str):
    """The policy and tokenizer of a workload: a tiny random model saved to a temporary directory, or a hub model."""
    from lit_grpo.models.loading import load_policy, load_tokenizer

    if model.startswith("tiny:"):
        from lit_grpo.models.tiny import build_tiny_model

        model = str(build_tiny_model(tempfile.mkdtemp(prefix="hf-decode-"), size=model.removeprefix("tiny:")))
    return load_policy(model).eval(), load_tokenizer(model)


def worker_batch(args) -> tuple:
    """A worker's set-up: ``args.threads`` torch threads, then its workload's ``(prompts, n, new_tokens, policy,
    tokenizer)``."""
    import torch

    torch.set_num_threads(args.threads)
    model, p, n, new_tokens = WORKLOADS[args.workload]
    return prompts_for(p, model if args.workload == "real" else None), n, new_tokens, *load(model)


def worker(args) -> None:
    """One process: warm up every setting, then time ``args.reps`` generations with each, alternating from
    ``args.first`` on; prints one ``RESULT {json}`` line."""

    from lit_grpo.rollout import HFGenerateEngine

    prompts, n, new_tokens, policy, tokenizer = worker_batch(args)
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


#: the settings the profile compares, and how many of each one's ops it keeps (by self CPU time)
PROFILED, TOP_OPS = ("own", "own_shrink_cdf"), 6


def profile_worker(args) -> None:
    """One process: warm up, then one generation of the whole batch per setting of :data:`PROFILED` under the torch
    profiler, from the same seed; prints one ``RESULT {json}`` line: per setting the total self CPU seconds and, per
    op, its share of them."""
    import torch
    from torch.profiler import profile

    from lit_grpo.rollout import HFGenerateEngine
    from lit_grpo.types import SamplingParams

    prompts, n, new_tokens, policy, tokenizer = worker_batch(args)
    out = {}
    for name in PROFILED:
        engine = HFGenerateEngine(**SETTINGS[name])
        engine.bind(policy, tokenizer)
        engine.generate(prompts[:2], 2, SamplingParams(max_new_tokens=2))  # warm-up
        torch.manual_seed(0)
        with profile() as prof:
            engine.generate(prompts, n, SamplingParams(temperature=1.0, max_new_tokens=new_tokens))
        ops = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}  # op -> self CPU seconds
        total = sum(ops.values())
        out[name] = {"self_cpu_s": total, "share": {k: v / total for k, v in ops.items()}}
    print("RESULT " + json.dumps(out), flush=True)


#: the setting the compile comparison runs (the fastest of the table)
COMPILED = "own_shrink_cdf"


def compile_worker(args) -> None:
    """One process of ``--compile``: prints one ``RESULT {json}`` line with the first compiled generation's seconds,
    per side the seconds and completion tokens of each timed generation, and what dynamo recorded."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="hf-decode-inductor-")  # compile from scratch
    import time

    import torch
    from torch._dynamo.utils import counters

    from lit_grpo.rollout import HFGenerateEngine
    from lit_grpo.types import SamplingParams

    prompts, n, new_tokens, policy, tokenizer = worker_batch(args)
    engine = HFGenerateEngine(**SETTINGS[COMPILED])
    engine.bind(policy, tokenizer)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=new_tokens)
    engine.generate(prompts[:2], 2, SamplingParams(max_new_tokens=2))  # eager warm-up
    compiled = torch.compile(policy.forward, dynamic=True)

    def generate(side: str, seed: int) -> tuple[float, int]:
        if side == "compiled":
            policy.forward = compiled  # the instance attribute shadows the class's forward
        try:
            torch.manual_seed(seed)
            start = time.perf_counter()
            r = engine.generate(prompts, n, sampling)
            return time.perf_counter() - start, int(r.completion_mask.sum())
        finally:
            policy.__dict__.pop("forward", None)

    first_s, _ = generate("compiled", 0)  # compiles, and recompiles as the shapes first change
    out: dict = {"first_compiled_s": first_s, "seconds": {"eager": [], "compiled": []},
                 "tokens": {"eager": [], "compiled": []}}
    for rep in range(args.reps):
        sides = ["eager", "compiled"] if (rep + args.first) % 2 == 0 else ["compiled", "eager"]
        for side in sides:
            seconds, tokens = generate(side, rep)
            out["seconds"][side].append(seconds)
            out["tokens"][side].append(tokens)
    out["graphs"] = int(counters["stats"]["unique_graphs"])
    out["graph_breaks"] = int(sum(counters["graph_break"].values()))
    out["torch"] = torch.__version__
    print("RESULT " + json.dumps(out), flush=True)


def compile_main(args) -> dict:
    """``--compile``: :func:`compile_worker` in ``args.rounds`` fresh processes; the summary it publishes."""
    model, p, n, new_tokens = WORKLOADS[args.workload]
    load_before = os.getloadavg()[0]
    first, eager, compiled, speedup, graphs, breaks = [], [], [], [], [], []
    for k in range(args.rounds):
        r = run_worker(__file__, ["--workload", args.workload, "--compile", "--first", str(k), "--reps",
                                  str(args.reps)], args.threads)
        per_token = {side: [s / t for s, t in zip(r["seconds"][side], r["tokens"][side], strict=True)]
                     for side in ("eager", "compiled")}
        first.append(r["first_compiled_s"])
        eager += r["seconds"]["eager"]
        compiled += r["seconds"]["compiled"]
        speedup += [e / c for e, c in zip(per_token["eager"], per_token["compiled"], strict=True)]
        graphs.append(r["graphs"])
        breaks.append(r["graph_breaks"])
        print(f"  round {k}: first compiled generation {r['first_compiled_s']:.1f} s; eager "
              f"{' '.join(f'{s:.2f}' for s in r['seconds']['eager'])} s, compiled "
              f"{' '.join(f'{s:.2f}' for s in r['seconds']['compiled'])} s", flush=True)
    return {
        "model": model, "P": p, "n": n, "max_new_tokens": new_tokens, "dtype": "float32", "threads": args.threads,
        "setting": COMPILED, "rounds": args.rounds, "reps": args.reps, "torch": r["torch"],
        "first_compiled_s": summary(first, 1), "eager_s": summary(eager, 2), "compiled_s": summary(compiled, 2),
        "paired_speedup_per_token": summary(speedup, 3), "pairs": [round(x, 3) for x in speedup],
        "graphs": sorted(set(graphs)), "graph_breaks": sorted(set(breaks)),
        "command": "python bench/hf_decode.py " + " ".join(sys.argv[1:]),
        "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
    }


def _cell(d: dict, digits: int) -> str:
    """A summary (:func:`summary`) as "median (min-max)"."""
    return f"{d['median']:.{digits}f} ({d['min']:.{digits}f}-{d['max']:.{digits}f})"


def workload_name(r: dict) -> str:
    """How the tables name a published result's workload."""
    return f"{r['model']}, {r['P']} x {r['n']} x {r['max_new_tokens']}, {r['threads']} threads"


def render_compile(data: dict) -> str:
    """The compile block: per workload of ``data`` (docs/results/hf_decode_compile.json) the eager and compiled
    seconds per batch, the paired speedup per completion token, the compile time and the reading of the rule in
    the module's docstring."""
    lines = ["| workload | eager s per batch | compiled s per batch | paired speedup per completion token | first "
             "compiled generation s (compiling included) | graphs, graph breaks |", "|---|---|---|---|---|---|"]
    notes = []
    for r in data.values():
        name = workload_name(r)
        lines.append(f"| {name} | {_cell(r['eager_s'], 2)} | {_cell(r['compiled_s'], 2)} | "
                     f"{_cell(r['paired_speedup_per_token'], 3)} | {_cell(r['first_compiled_s'], 1)} | "
                     f"{', '.join(map(str, r['graphs']))}; {', '.join(map(str, r['graph_breaks']))} |")
        pays = all(x > 1 for x in r["pairs"])
        saved = r["eager_s"]["median"] * (1 - 1 / r["paired_speedup_per_token"]["median"])  # s per generation
        extra = r["first_compiled_s"]["median"] - r["compiled_s"]["median"]  # compiling, s
        recovered = (f"; the compile time (the first generation's {extra:.0f} s more than a compiled one) is recovered "
                     f"after about {extra / saved:.0f} generations of this batch, one a training step, at the median "
                     f"speedup") if saved > 0 else ""
        notes.append(f"{name}: {LABELS[r['setting']]}, torch {r['torch']}, {r['rounds']} processes x {r['reps']} "
                     f"timed generations a side; pairs {', '.join(f'{x:.3f}' for x in r['pairs'])}: compiling the "
                     f"decode step {'pays' if pays else 'does not pay'} here (the rule: a speedup above 1 in every "
                     f"pair){recovered}; load average {r['load_before']} before and {r['load_after']} after (`{r['command']}`).")
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"


def render_profile(data: dict) -> str:
    """The profile table: the ops with the largest self CPU time in either profiled setting, and each one's share
    of that setting's self CPU time (docs/results/hf_decode_profile.json)."""
    r = data["result"]
    names = [name for name in PROFILED if name in r]
    top = sorted({op for name in names for op, _ in sorted(r[name]["share"].items(), key=lambda kv: -kv[1])[:TOP_OPS]},
                 key=lambda op: -max(r[name]["share"].get(op, 0.0) for name in names))
    lines = ["| op | " + " | ".join(f"share of {LABELS[name]}'s self CPU time" for name in names) + " |",
             "|---|" + "---|" * len(names)]
    lines += [f"| `{op}` | " + " | ".join(f"{100 * r[name]['share'].get(op, 0.0):.1f}%" for name in names) + " |"
              for op in top]
    lines += ["| all ops, self CPU seconds | " + " | ".join(f"{r[name]['self_cpu_s']:.2f}" for name in names) + " |"]
    load = f"; load average {data['load_before']} before and {data['load_after']} after" if "load_before" in data else ""
    return "\n".join(lines) + f"\n\n{data['workload']}, {data['threads']} threads, one generation a setting from the " \
        f"same seed after a warm-up{load} (`{data['command']}`).\n"


def summary(values: list[float], digits: int = 3) -> dict:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits)}


#: how the table names each setting
LABELS = {"generate": "`generate`", "own": "own loop", "own_shrink": "own loop, `shrink`",
          "own_cdf": "own loop, `inverse_cdf`", "own_shrink_cdf": "own loop, `shrink` + `inverse_cdf`"}


def render(data: dict) -> str:
    """The markdown block of docs/performance.md: per workload of ``data`` (docs/results/hf_decode.json) and setting,
    the seconds per batch and completion tokens/s (median and range over every timed generation) and the paired
    speedup over ``generate`` (each generation against the ``generate`` one of its process and repetition)."""
    lines = ["| workload | setting | s per batch, median (range) | completion tokens/s, median (range) "
             "| paired speedup over `generate`, median (range) |", "|---|---|---|---|---|"]
    notes = []
    for r in data.values():
        name = workload_name(r)
        for setting in [k.removesuffix("_s") for k in r if k.endswith("_s") and k.removesuffix("_s") in LABELS]:
            speedup = "1" if setting == "generate" else _cell(r[f"{setting}_paired_speedup"], 2)
            lines.append(f"| {name} | {LABELS[setting]} | {_cell(r[f'{setting}_s'], 2)} | "
                         f"{_cell(r[f'{setting}_tokens_per_s'], 1)} | {speedup} |")
        notes.append(f"{name}: {r['rounds']} processes x {r['reps']} timed generations a setting; the own loop "
                     f"(no `shrink`, `multinomial`) drew `generate`'s tokens from the same seed in "
                     f"{r['own_same_tokens_as_generate']}; load average {r['load_before']} before and "
                     f"{r['load_after']} after (`{r['command']}`).")
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="real")
    parser.add_argument("--smoke", action="store_true", help="the smoke workload, one round of one repetition")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes (the settings' order rotates)")
    parser.add_argument("--reps", type=int, default=1, help="timed generations per setting and process")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--publish", action="store_true", help=f"merge the result into {OUT.relative_to(ROOT)}")
    parser.add_argument("--write", type=Path, help="render the published results into this markdown file's blocks "
                        "(<!-- hf_decode.py:begin/end -->, :profile:): with --publish, after it, or with --render")
    parser.add_argument("--render", action="store_true", help="measure nothing: the --write block again from "
                        f"{OUT.relative_to(ROOT)}")
    parser.add_argument("--profile", action="store_true", help="one process profiling one generation of each of "
                        f"{', '.join(PROFILED)} (torch profiler, self CPU time by op); with --publish saved to "
                        f"{PROFILE.relative_to(ROOT)}")
    parser.add_argument("--compile", action="store_true", help=f"the {COMPILED} setting with the model's forward "
                        "eager and under torch.compile, paired (see above); with --publish saved to "
                        f"{COMPILE.relative_to(ROOT)}")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.workload, args.rounds, args.reps = "smoke", 1, 1
    if args.worker:
        (compile_worker if args.compile else profile_worker if args.profile else worker)(args)
        return
    if args.render:
        if not args.write:
            parser.error("--render rewrites the block of the file --write names")
        write(args.write)
        return
    if args.publish and args.smoke:
        parser.error("--smoke timings check that the script runs; they are not for publishing")
    if args.write and not args.publish:
        parser.error("--write renders the committed results: measure with --publish, or redraw with --render")

    if args.compile:
        result = compile_main(args)
        print("RESULT " + json.dumps(result), flush=True)
        print(render_compile({args.workload: result}))
        if args.publish:
            merge_result(COMPILE, args.workload, result)
        if args.write:
            write(args.write)
        return
    if args.profile:
        load_before = os.getloadavg()[0]
        result = run_worker(__file__, ["--workload", args.workload, "--profile"], args.threads)
        data = {"workload": args.workload, "threads": args.threads, "result": result,
                "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
                "command": "python bench/hf_decode.py " + " ".join(sys.argv[1:])}
        print(render_profile(data))
        if args.publish:
            PROFILE.write_text(json.dumps(data, indent=1) + "\n")
        if args.write:
            write(args.write)
        return
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
    if args.write:
        write(args.write)


def write(path: Path) -> None:
    """Replace the block between :data:`BEGIN` and :data:`END` of ``path`` with :func:`render` of the published
    results."""
    from provenance import write_block

    write_block(path, BEGIN, END, "\n" + render(json.loads(OUT.read_text())))
    if PROFILE.exists():
        write_block(path, PROFILE_BEGIN, PROFILE_END, "\n" + render_profile(json.loads(PROFILE.read_text())))
    if COMPILE.exists():
        write_block(path, COMPILE_BEGIN, COMPILE_END, "\n" + render_compile(json.loads(COMPILE.read_text())))
    print(f"wrote the table into {path}")


if __name__ == "__main__":
    main()
