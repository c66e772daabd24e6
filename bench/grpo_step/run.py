"""The command of the benchmark (``python -m bench.grpo_step``; the package's docstring says what it
measures): the plan, the measuring processes, the parts and publishing their report."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import COUNTS, PHASES
from .machine import (
    busy_reasons,
    cpu_flags,
    cpu_name,
    load_1min,
    other_cpu_s,
    own_tree,
    read_cpu,
    read_cpuinfo,
    read_state,
    refusal,
)
from .report import (
    LARGE_VOCAB,
    flop_rates,
    paired_ratio,
    render,
    render_realistic,
    roofline,
    useful_flops,
    work_flops,
    write_into,
)
from .workloads import LORA, WORKLOADS, model_dir

HERE = Path(__file__).resolve().parent  # bench/grpo_step
ROOT = HERE.parents[1]  # the repository: every measuring process runs there, as python -m bench.grpo_step.*
TRL_PYTHON = HERE.parent / ".venv-trl" / "bin" / "python"
#: The module of each side's measuring process
WORKERS = {"lit-grpo": "bench.grpo_step.lit_worker", "trl": "bench.grpo_step.trl_worker"}
DEVICE = {"name": "cpu"}  # where every measuring process trains: --device (the matmul peak stays on the CPU)
ALL_PARTS = ("peak", "compare", "memory", "scaling", "realistic", "tta")
# Peak RSS (MiB) of a workload's largest trainer process before this run has measured one: TRL's process on
# ``real`` peaked at 15.7 GiB in the committed run; the memory check uses the larger of this and the largest
# peak measured so far in the run.
NEED_MIB = {"real": 16 * 1024, "lora": 16 * 1024, "quickstart": 1024}
# this run: the largest peak RSS so far, whether --allow-busy was given, the busy reasons recorded
RUN = {"need_mib": 0.0, "allow_busy": False, "busy": []}


# ---- plans: how many processes and steps each part runs ---------------------------------------------------
def plan(quick: bool) -> dict:
    """What each part runs. ``compare`` rows: (size, precision, A/B repetitions, warm-up steps, timed steps,
    P, G, new tokens). Sized for about 15 minutes on 2 idle cores (``--quick``: 1-2 minutes), where bf16
    steps are the slow ones when the CPU has no native bf16 matmul."""
    if quick:
        return {
            "compare": [("small", "fp32", 1, 1, 2, 8, 8, 16), ("small", "bf16", 1, 0, 1, 2, 2, 4)],
            "memory": {"prompts": 2, "group": 2, "new_tokens": 4, "warmup": 0, "steps": 1},
            "scaling": {"G": [2], "P": [4], "size": ["tiny"], "warmup": 0, "steps": 1},
            "realistic": [("quickstart", 1, 1, 3)],  # a smoke run: not the >= 10 timed steps of the real plan
            "tta": {"quickstart": {"seeds": [0], "max_steps": 20, "eval_every": 10, "target": 0.99,
                                   "samples": 0}},
        }
    return {
        "compare": [
            # 5 pairs: its ratio moved between runs by more than 3 pairs' spread
            ("small", "fp32", 5, 2, 5, 8, 8, 16),
            ("medium", "fp32", 2, 1, 3, 8, 8, 16),
            ("small", "bf16", 1, 1, 1, 8, 8, 16),
            ("medium", "bf16", 1, 0, 1, 8, 8, 16),
        ],
        "memory": {"prompts": 8, "group": 8, "new_tokens": 16, "warmup": 1, "steps": 1},
        "scaling": {
            "G": [2, 4, 8, 16],
            "P": [2, 4, 8, 16],
            "size": ["tiny", "small", "medium"],
            "warmup": 1,
            "steps": 2,
        },
        # (workload, A/B pairs, warm-up steps, timed steps): at least 10 timed steps a process, as the cost of
        # a step varies about 1.6x with the sampled rewards; the real model's TRL steps take 40-70 s (about 50
        # min)
        "realistic": [("quickstart", 3, 5, 40), ("real", 3, 2, 10), ("lora", 3, 2, 10)],
        # time to accuracy, per workload: >= 5 seeds a side, paired by seed. quickstart: held-out greedy
        # accuracy 0.70; lora: held-out sampled accuracy (4 samples a prompt) 0.10 above the starting policy's
        "tta": {
            "quickstart": {"seeds": [0, 1, 2, 3, 4], "max_steps": 2000, "eval_every": 25, "target": 0.70,
                           "samples": 0},
            "lora": {"seeds": [0, 1, 2, 3, 4], "max_steps": 60, "eval_every": 5, "gain": 0.10, "samples": 4},
        },
    }


# ---- models ------------------------------------------------------------------------------------------------
def build_models(tmp: Path, sizes: set[str], large_vocab: bool) -> dict[str, str]:
    """Save each tiny model once (``save_pretrained``); both trainers load these directories."""
    from lit_grpo.models.tiny import build_tiny_model

    paths = {size: str(build_tiny_model(tmp / size, size=size, seed=0)) for size in sorted(sizes)}
    if large_vocab:
        paths["small-150k"] = str(build_large_vocab_model(tmp / "small-150k"))
    return paths


def build_large_vocab_model(path: Path, vocab_size: int = LARGE_VOCAB, size: str = "small") -> Path:
    """The ``size`` tiny model with a ``vocab_size`` vocabulary: the character tokenizer plus filler tokens
    of 2-3 bytes (no merges, so prompts tokenize exactly as with the character tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Tokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    from lit_grpo.models.tiny import SPECIAL_TOKENS, char_tokenizer, tiny_config

    vocab = dict(char_tokenizer().get_vocab())
    chars = list(bytes_to_unicode().values())
    fillers = ("".join(c) for n in (2, 3) for c in itertools.product(chars, repeat=n))
    while len(vocab) < vocab_size:
        vocab.setdefault(next(fillers), len(vocab))
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=[], **SPECIAL_TOKENS)
    tokenizer.padding_side = "left"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(tokenizer, size))
    for key in ("pad_token_id", "eos_token_id", "bos_token_id"):
        setattr(model.generation_config, key, getattr(tokenizer, key))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


# ---- running one measurement in its own process ------------------------------------------------------------
def measure(
    runner: str,
    model: str,
    threads: int,
    precision: str = "fp32",
    warmup: int = 1,
    steps: int = 3,
    prompts: int = 8,
    group: int = 8,
    new_tokens: int = 16,
    extra: tuple[str, ...] = (),
    workload: str = "zero",
    lr: float = 1e-5,
) -> dict:
    """One measuring process of ``runner`` (``lit-grpo`` or ``trl``): its ``RESULT`` with the process's
    wall time, the machine's state before it and the reasons it was busy (:func:`.machine.busy_reasons`)."""
    if runner == "trl" and not TRL_PYTHON.exists():
        raise SystemExit(
            f"{TRL_PYTHON} not found: create TRL's environment first with bash bench/setup_trl_env.sh"
        )
    python = str(TRL_PYTHON) if runner == "trl" else sys.executable
    options = {"model": model, "precision": precision, "warmup": warmup, "steps": steps, "prompts": prompts,
               "group": group, "new-tokens": new_tokens, "threads": threads, "workload": workload, "lr": lr,
               "device": DEVICE["name"]}
    flags = [x for key, value in options.items() for x in (f"--{key}", str(value))]
    cmd = [python, "-m", WORKERS[runner], *flags, *extra]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONWARNINGS": "ignore",
    }
    need = max(RUN["need_mib"], NEED_MIB.get(workload, 0.0))
    state, cpu = read_state(), read_cpu()
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["process_s"] = time.perf_counter() - start
    others_cpu = other_cpu_s(cpu, read_cpu(), own_tree([], os.getpid()), os.sysconf("SC_CLK_TCK"))
    result["machine_before"] = {**state, "need_mib": need, "others_cpu_s": others_cpu}
    result["busy"] = busy_reasons(state, need, threads, os.cpu_count() or 1, check_load=False,
                                  other_cpu=others_cpu, wall_s=result["process_s"])
    RUN["need_mib"] = max(RUN["need_mib"], result["peak_rss_mib"])
    RUN["busy"] += [f"{runner} {Path(model).name} ({workload}): {r}" for r in result["busy"]]
    for reason in result["busy"]:
        print(f"  busy: {reason}", flush=True)
    print(
        f"  {runner:8s} {Path(model).name:10s} {precision} P={prompts} G={group}: "
        f"{_median(result['steps'], 'tokens_per_s'):7.0f} tokens/s, "
        f"{_median(result['steps'], 'step_s'):.3f} s/step, "
        f"peak {result['peak_rss_mib']:.0f} MiB ({result['process_s']:.0f} s)",
        flush=True,
    )
    return result


def _median(steps: list[dict], key: str) -> float:
    return statistics.median(s.get(key, 0.0) for s in steps)


#: What a side's processes report once, the same in each: the settings they ran with
SETTINGS = ("params", "trainable", "trl", "engine", "trl_settings", "dtype", "autocast")


def combine(results: list[dict]) -> dict:
    """Medians over the timed steps of several processes, with the range of the per-process medians, and the
    settings they ran with (:data:`SETTINGS`, from the first)."""
    steps = [s for r in results for s in r["steps"]]
    keys = [*PHASES, "step_s", "tokens", "prompt_tokens", "tokens_per_s", *COUNTS]
    out = {k: _median(steps, k) for k in keys}
    out["sums"] = {k: sum(s.get(k, 0.0) for s in steps) for k in COUNTS}
    out["time_sums"] = {k: sum(s.get(k, 0.0) for s in steps) for k in [*PHASES, "step_s"]}
    per = [_median(r["steps"], "tokens_per_s") for r in results]
    out.update(
        tps_min=min(per),
        tps_max=max(per),
        peak_rss_mib=max(r["peak_rss_mib"] for r in results),
        load_rss_mib=min(r.get("load_rss_mib", 0.0) for r in results),
        processes=len(results),
        steps_timed=len(steps),
        **{key: results[0].get(key) for key in SETTINGS},
        machine=[r.get("machine_before") for r in results],
        busy=[reason for r in results for reason in r.get("busy", [])],
    )
    return out


# ---- the matmul peak ---------------------------------------------------------------------------------------
PEAK_SCRIPT = """
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
sizes = (1024, 2048, 4096, 8192) if device == "cuda" else (256, 512, 1024, 2048)
out = {}
for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
        slow = False
        for op in (torch.matmul, torch.nn.functional.linear):  # the two reach different kernels in bf16
            op(a, b); sync()
            t = time.perf_counter(); op(a, b); sync(); once = time.perf_counter() - t
            reps, times = max(3, min(50, int(0.5 / max(once, 1e-6)))), []
            for _ in range(min(reps, 3) if once > 0.5 else reps):
                t = time.perf_counter(); op(a, b); sync(); times.append(time.perf_counter() - t)
            best = max(best, 2 * n**3 / min(times) / 1e9)
            slow = slow or once > 0.5
        if slow:
            break
    out[name] = best
import json
print("RESULT", json.dumps(out))
"""


def matmul_peak(threads: int, device: str = "cpu") -> dict[str, float]:
    """GFLOP/s of the best square matmul (``matmul`` or ``linear``, n = 256..2048 on the CPU, 1024..8192 on a
    GPU) in fp32 and bf16, on ``device``."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, str(threads), device], capture_output=True, text=True, env=env,
        check=True,
    )
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    peak = json.loads(line.removeprefix("RESULT "))
    print(
        f"  matmul peak on {device}, {threads} threads: fp32 {peak['fp32']:.1f} GFLOP/s, "
        f"bf16 {peak['bf16']:.1f} GFLOP/s"
    )
    return peak


def same_prompts(runs: dict[str, list[dict]]) -> bool | None:
    """Whether every process of both sides sampled from the same prompts at every step (``None``: a runner
    that does not report them)."""
    digests = [r.get("step_prompts") for rs in runs.values() for r in rs]
    if any(d is None for d in digests):
        return None
    return all(d == digests[0] for d in digests)


def ratio_spread(ratios: list[float]) -> dict[str, float]:
    """Median and range of the per-pair ratios (each pair: one lit-grpo and one TRL process, run one after
    the other)."""
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "pairs": len(ratios)}


def pair_ratios(runs: dict[str, list[dict]]) -> dict:
    """Per A/B pair (the i-th process of each side), from the two process medians: lit-grpo's tokens/s over
    TRL's (``pair_ratios``, with their median and range, ``pair_ratio``) and TRL's step time over lit-grpo's
    (``pair_step_ratios``); both > 1 where lit-grpo is the faster."""
    pairs = list(zip(runs["lit-grpo"], runs["trl"], strict=True))
    ratios = [_median(a["steps"], "tokens_per_s") / _median(b["steps"], "tokens_per_s") for a, b in pairs]
    steps = [_median(b["steps"], "step_s") / _median(a["steps"], "step_s") for a, b in pairs]
    return {"pair_ratios": ratios, "pair_ratio": ratio_spread(ratios), "pair_step_ratios": steps}


def ab_row(model: str, threads: int, reps: int, precision: str = "fp32", **kw) -> dict:
    """``reps`` A/B pairs of fresh processes, lit-grpo then TRL, on ``model``: each side's :func:`combine`,
    the per-pair ratios (:func:`pair_ratios`), the ratio of the medians and whether both sides sampled from
    the same prompts at every step."""
    runs: dict[str, list[dict]] = {"lit-grpo": [], "trl": []}
    for _ in range(reps):  # A B A B ...
        for runner in runs:
            runs[runner].append(measure(runner, model, threads, precision, **kw))
    row = {"lit": combine(runs["lit-grpo"]), "trl": combine(runs["trl"]), **pair_ratios(runs),
           "same_prompts": same_prompts(runs)}
    row["ratio"] = row["lit"]["tokens_per_s"] / row["trl"]["tokens_per_s"]
    return row


# ---- the parts ---------------------------------------------------------------------------------------------
def part_compare(models: dict[str, str], threads: int, quick: bool) -> list[dict]:
    rows = []
    for size, precision, reps, warmup, steps, prompts, group, new_tokens in plan(quick)["compare"]:
        kw = {"warmup": warmup, "steps": steps, "prompts": prompts, "group": group, "new_tokens": new_tokens}
        row = {"size": size, "precision": precision, **ab_row(models[size], threads, reps, precision, **kw),
               **kw}
        for side in ("lit", "trl"):
            row[side].update(flop_rates(models[size], row[side], prompts * group))
        rows.append(row)
    return rows


def part_memory(models: dict[str, str], threads: int, quick: bool) -> list[dict]:
    kw = plan(quick)["memory"]
    model = models["small-150k"]
    rows = [
        (
            "lit-grpo (chunked LM head, per-step sampling log-probs)",
            measure("lit-grpo", model, threads, **kw),
        ),
        (
            "lit-grpo, previous paths (whole [N, T, V] logits)",
            measure("lit-grpo", model, threads, **kw, extra=("--full-logits",)),
        ),
        ("TRL 1.16 GRPOTrainer", measure("trl", model, threads, **kw)),
    ]
    return [
        {
            "name": name,
            "peak_rss_mib": r["peak_rss_mib"],
            "load_rss_mib": r.get("load_rss_mib", 0.0),
            "step_s": _median(r["steps"], "step_s"),
            "params": r["params"],
            **kw,
        }
        for name, r in rows
    ]


def part_scaling(models: dict[str, str], threads: int, quick: bool) -> dict[str, list[dict]]:
    p = plan(quick)["scaling"]
    kw = {"warmup": p["warmup"], "steps": p["steps"]}
    out: dict[str, list[dict]] = {"G": [], "P": [], "size": []}
    for g in p["G"]:
        out["G"].append(
            {"G": g, "P": 8, **combine([measure("lit-grpo", models["small"], threads, group=g, **kw)])}
        )
    for n in p["P"]:
        out["P"].append(
            {"G": 8, "P": n, **combine([measure("lit-grpo", models["small"], threads, prompts=n, **kw)])}
        )
    for size in p["size"]:
        row = combine([measure("lit-grpo", models[size], threads, **kw)])
        out["size"].append({"size": size, **row, **flop_rates(models[size], row, 64)})
    return out


def part_realistic(threads: int, quick: bool, device: str = "cpu", workloads: tuple[str, ...] | None = None,
                   precision: str = "fp32") -> tuple[list[dict], dict]:
    """lit-grpo against TRL on the real workloads (those of the plan named in ``workloads``; all by default),
    alternating fresh processes, in ``precision`` on both sides; each row with the CPU's flags; and the matmul
    peak, measured before and after them (the roofline uses the larger)."""
    peaks = [matmul_peak(threads, device)]
    rows = []
    for workload, reps, warmup, steps in plan(quick)["realistic"]:
        if workloads is not None and workload not in workloads:
            continue
        w = WORKLOADS[workload]
        model = model_dir(w.model)
        kw = {"warmup": warmup, "steps": steps, "prompts": w.prompts, "group": w.group,
              "new_tokens": w.new_tokens, "workload": workload, "lr": w.lr}
        row = {"workload": workload, "model": w.model, "lora": LORA if w.lora else None,
               "precision": precision, "cpu_flags": cpu_flags(read_cpuinfo()),
               **ab_row(model, threads, reps, precision, **kw), **kw}
        for side in ("lit", "trl"):
            row[side].update(work_flops(model, row[side]["sums"], row[side]["steps_timed"], row["lora"]))
        rows.append(row)
    peaks.append(matmul_peak(threads, device))
    peak = {k: max(p[k] for p in peaks) for k in ("fp32", "bf16")}
    for row in rows:
        for side in ("lit", "trl"):
            add_roofline(row[side], model_dir(row["model"]), peak[precision], row["lora"])
    return rows, {**peak, "before": peaks[0], "after": peaks[1], "device": device}


def add_roofline(side: dict, model: str, peak_gflops: float, lora: dict | None = None) -> None:
    """The useful FLOPs of one side's phases, their rate and fraction of the peak (``side["roofline"]``)."""
    n = side["steps_timed"]
    gflop = useful_flops(model, side["sums"], n, lora)
    if gflop is not None:
        side["roofline"] = roofline(gflop, {k: v / n for k, v in side["time_sums"].items()}, peak_gflops)


def part_tta(threads: int, quick: bool, workloads: tuple[str, ...] | None = None, precision: str = "fp32",
             ) -> list[dict]:
    """Training time until held-out accuracy reaches each workload's target (``plan()["tta"]``), per seed
    and trainer, the trainers alternating, in ``precision`` on both sides; and per seed both reached, the
    paired ratio TRL / lit-grpo."""
    out = []
    for workload, p in plan(quick)["tta"].items():
        if workloads is not None and workload not in workloads:
            continue
        w = WORKLOADS[workload]
        model = model_dir(w.model)
        extra = ["--eval-every", str(p["eval_every"]), "--eval-samples", str(p["samples"])]
        extra += ["--target-gain", str(p["gain"])] if "gain" in p else ["--target", str(p["target"])]
        runs: dict[str, list[dict]] = {"lit-grpo": [], "trl": []}
        for seed in p["seeds"]:
            for runner in ("lit-grpo", "trl"):
                r = measure(runner, model, threads, precision, warmup=0, steps=p["max_steps"],
                            prompts=w.prompts, group=w.group, new_tokens=w.new_tokens, workload=workload,
                            lr=w.lr, extra=(*extra, "--seed", str(seed)))
                hit = next((e for e in r["evals"] if e["step"] > 0 and e["accuracy"] >= r["target"]), None)
                settings = {key: r.get(key) for key in SETTINGS if key not in ("params", "trainable")}
                runs[runner].append({"seed": seed, "reached": hit is not None, "step": hit and hit["step"],
                                     "train_s": hit and hit["train_s"], "target": r["target"],
                                     "evals": r["evals"], "step_s": _median(r["steps"], "step_s"),
                                     **settings})
        out.append({"workload": workload, **p, "precision": precision, "cpu_flags": cpu_flags(read_cpuinfo()),
                    "runs": runs, "paired": paired_ratios(runs)})
    return out


def paired_ratios(runs: dict[str, list[dict]]) -> dict:
    """Per seed both trainers reached the target: TRL's time / lit-grpo's; their geometric mean and its 95% t
    interval (on the log ratios; None below 2 seeds), and how many seeds each side reached."""
    pairs = zip(runs["lit-grpo"], runs["trl"], strict=True)
    both = [(a["seed"], b["train_s"] / a["train_s"]) for a, b in pairs
            if a["reached"] and b["reached"] and a["train_s"] > 0]
    out = {"ratios": dict(both), "seeds": len(runs["lit-grpo"]),
           "reached": {side: sum(r["reached"] for r in rs) for side, rs in runs.items()}, "geomean": None,
           "ci95": None}
    if both:
        out["geomean"], ci = paired_ratio([r for _, r in both])
        out["ci95"] = list(ci) if ci else None
    return out


def main() -> None:
    from . import __doc__ as description

    parser = argparse.ArgumentParser(prog="python -m bench.grpo_step", description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a 1-2 minute smoke run of every part")
    parser.add_argument(
        "--parts", default="peak,compare,memory,scaling", help=f"comma separated, of {ALL_PARTS}"
    )
    names = ", ".join(w for w, *_ in plan(False)["realistic"])
    parser.add_argument("--workloads", help=f"comma separated: the realistic and tta parts' workloads, of "
                        f"{names} (default: all); a selection is written into a block of its own "
                        "(<!-- grpo_step.py:realistic:NAMES:begin -->)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads on both sides")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="the realistic and tta parts' dtype, the same on both sides (bf16: autocast; "
                        "the compare part runs both); each record holds it with the CPU's flags")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where both trainers train and generate (cuda: one GPU)")
    parser.add_argument("--write", type=Path, help="replace the generated block of this markdown file")
    parser.add_argument("--json", type=Path, help="also save the raw results here")
    parser.add_argument("--render", type=Path, help="measure nothing: write the tables of this saved --json")
    parser.add_argument("--allow-busy", action="store_true",
                        help="measure and publish even when other processes hold the memory or cores the "
                        "trainers need (bench/grpo_step/machine.py: the rule); the report records the "
                        "machine's state")
    args = parser.parse_args()
    RUN["allow_busy"] = args.allow_busy
    if args.render:
        report = json.loads(args.render.read_text())
        publish(report, [p for p in ALL_PARTS if p in report], args.write, None)
        return
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - set(ALL_PARTS)
    if unknown:
        parser.error(f"--parts {args.parts}: unknown {sorted(unknown)}; choose from {', '.join(ALL_PARTS)}")
    workloads = None
    if args.workloads is not None:
        workloads = tuple(w.strip() for w in args.workloads.split(",") if w.strip())
    quick = plan(args.quick)
    known = list(dict.fromkeys([w for w, *_ in quick["realistic"]] + list(quick["tta"])))
    if workloads is not None and (not workloads or set(workloads) - set(known)
                                  or not {"realistic", "tta"} & set(parts)):
        parser.error(f"--workloads {args.workloads}: needs --parts realistic or tta and names of "
                     f"{', '.join(known)}")

    import torch
    import transformers

    DEVICE["name"] = args.device
    machine_start = read_state()
    if args.write or args.json:  # results that will be published: refuse a busy machine before measuring
        p = plan(args.quick)
        measured = [w for w, *_ in p["realistic"]] * ("realistic" in parts)
        measured += list(p["tta"]) * ("tta" in parts)
        need = max([NEED_MIB.get(w, 0.0) for w in measured if workloads is None or w in workloads] or [0.0])
        reasons = busy_reasons(machine_start, need, args.threads, os.cpu_count() or 1)
        if reasons and not args.allow_busy:
            raise SystemExit(refusal(reasons, "measure for --write/--json"))
        RUN["busy"] += [f"at the start: {r}" for r in reasons]
    start, load_before = time.perf_counter(), load_1min()
    report: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        old_parts = {"peak", "compare", "memory", "scaling"} & set(parts)
        sizes = {"small"} if old_parts else set()
        if "compare" in parts and not args.quick:
            sizes.add("medium")
        if "scaling" in parts:
            sizes |= set(plan(args.quick)["scaling"]["size"])
        models = build_models(Path(tmp), sizes, "memory" in parts)
        if "peak" in parts:
            report["peak"] = matmul_peak(args.threads)
        if "compare" in parts:
            report["compare"] = part_compare(models, args.threads, args.quick)
        if "memory" in parts:
            report["memory"] = part_memory(models, args.threads, args.quick)
        if "scaling" in parts:
            report["scaling"] = part_scaling(models, args.threads, args.quick)
        if "realistic" in parts:
            report["realistic"], report["realistic_peak"] = part_realistic(
                args.threads, args.quick, args.device, workloads, args.precision)
        if "tta" in parts:
            report["tta"] = part_tta(args.threads, args.quick, workloads, args.precision)
    command = "python -m bench.grpo_step" + "".join(f" {a}" for a in sys.argv[1:])
    trl_version = next((r["trl"]["trl"] for r in [*report.get("compare", []), *report.get("realistic", [])]),
                       next((r["trl"] for t in report.get("tta", []) for r in t["runs"]["trl"]), None))
    report["meta"] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "command": command,
        "threads": args.threads,
        "device": args.device,
        "cpu": cpu_name(read_cpuinfo()),
        "cpu_flags": cpu_flags(read_cpuinfo()),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "load_before": load_before,
        "load_after": load_1min(),
        "elapsed_min": (time.perf_counter() - start) / 60,
        "machine_start": machine_start,
        "machine_end": read_state(),
        "busy": RUN["busy"],
        "allow_busy": args.allow_busy,
        "block": block_name(parts, workloads),
    }
    if trl_version:
        report["meta"]["trl"] = trl_version
    publish(report, parts, args.write, args.json)


def block_name(parts: list[str], workloads: tuple[str, ...] | None) -> str:
    """The markdown block a run of the realistic or tta part writes: ``grpo_step.py:realistic``, with a
    suffix naming a selection of workloads (``:lora``) and a run of the tta part alone (``:tta``,
    ``:tta_quickstart``), so that each such run has a block, and a JSON
    (``grpo_step_realistic-SUFFIX.json``), of its own."""
    names = ["tta"] if "realistic" not in parts else []
    if workloads:
        names.append("+".join(workloads))
    suffix = "_".join(names)
    return "grpo_step.py:realistic" + (f":{suffix}" if suffix else "")


def publish(report: dict, parts: list[str], write: Path | None, save: Path | None) -> None:
    """Print the tables, save the raw report (``save``) and write the tables into a markdown file
    (``write``)."""
    blocks = {}
    if {"peak", "compare", "memory", "scaling"} & set(parts):
        blocks["grpo_step.py"] = render(report)
    if {"realistic", "tta"} & set(parts):
        blocks[report["meta"].get("block", "grpo_step.py:realistic")] = render_realistic(report)
    for text in blocks.values():
        print("\n" + text)
    if save:
        save.write_text(json.dumps(report, indent=1))
    busy = report.get("meta", {}).get("busy") or []
    if write and busy and not RUN["allow_busy"]:
        saved = f" The results are saved in {save}." if save else ""
        raise SystemExit(refusal(busy, f"write into {write}") + saved)
    if write:
        for name, text in blocks.items():
            write_into(write, text, name)
        print(f"wrote the tables into {write}")
