"""GRPO step throughput of lit-grpo against TRL's GRPOTrainer, side by side; FLOP/s, memory and scaling.

    bash bench/setup_trl_env.sh                        # once: TRL in its own environment, bench/.venv-trl
    python bench/grpo_step.py --json docs/results/grpo_step.json --write docs/performance.md   # the full report
    python bench/grpo_step.py --quick                  # a 1-2 minute smoke run of every part
    python bench/grpo_step.py --parts scaling          # one part (peak, compare, memory, scaling)

One GRPO step on both sides: P = 8 prompts x G = 8 completions of 16 new tokens sampled at temperature 1
by each side's Hugging Face decoding (lit-grpo's own loop, which draws ``generate``'s samples from a seed; TRL's
``generate``), a reward that is always 0, token-mean clipped loss without KL, one
forward/backward and one AdamW step; fp32, or bf16 autocast (Lightning ``bf16-mixed``, TRL
``bf16=True``). The character-level Qwen2 models of ``lit_grpo.models.tiny`` (``small`` ~3M, ``medium``
~19M parameters) are saved once with ``save_pretrained`` and loaded by both trainers. A random model earns
no reward, so every advantage is 0; neither side skips such batches, so every phase runs at full cost.

Every measurement is a fresh process (``bench/grpo_step_lit.py``, ``bench/grpo_step_trl.py``) that runs
warm-up steps and then timed ones; the two trainers alternate (A B A B ...) so drifting background load
hits both alike. Reported: medians over all timed steps, with the range of the per-process medians, and the
ratio of each A/B pair with the median and range of those; tokens/s = completion tokens of a step (EOS
included) / wall time between the ends of consecutive steps. Both sides take the same prompts in the same
order (TRL reads them unshuffled in lit-grpo's order) and reseed torch with the same seed before each step's
generation. The sampled completions still differ: the two sides' logits differ in rounding (lit-grpo
prefills each prompt once per group, TRL every row) and, once the policies have been updated by different
code, in value, so the per-step rewards, and with them the work a step needs, are not paired.

The machine's state (load, free memory, the largest other processes) is recorded at the start, the end and
before every measuring process; a run that writes results refuses a busy machine (``--allow-busy``
overrides; the rule is in ``bench/grpo_step_machine.py``).

Parts: ``peak`` (square fp32 and bf16 matmuls on the same threads), ``compare`` (lit-grpo vs TRL, both
sizes and precisions, with the training phase's FLOP/s against the peak), ``memory`` (peak RSS of steps
of a model with a 151,936-token vocabulary), ``scaling`` (lit-grpo step time against G, P and size).

The realistic parts run real workloads with real rewards (``bench/grpo_step_workloads.py``), each side
with its defaults for what it may skip (lit-grpo: zero-advantage elision and the shared-prefix training
forward, both exact; TRL trains every row):

    python bench/grpo_step.py --parts realistic,tta --json docs/results/grpo_step_realistic.json \
        --write docs/performance.md

``realistic``: (a) ``real``: SmolLM2-135M-Instruct (``lit-grpo models fetch smollm2-135m-instruct``),
chat prompts "What is a + b? Answer with the number only.", ``LastNumber``, P = 8 x G = 8, 32 new tokens,
full fine-tune, fp32; (b) ``quickstart``: ``tiny-arith-sft`` on two-digit addition, ``ExactMatch``,
P = 16 x G = 8, 6 new tokens, lr 1e-4; (c) ``lora``: (a) with the real quickstart's adapters (LoRA r16,
alpha 32 on every projection, lr 3e-4; TRL through ``peft``), the workload its users run. On (a) and (c) lit-grpo's
engine runs with ``shrink`` and ``sampler="inverse_cdf"`` (``Workload.engine``: the same distribution as its
default, other samples for the same seed). ``--workloads`` measures some of them, and a run of ``tta`` alone is
written into a block (and a JSON) of its own (:func:`block_name`):

    python bench/grpo_step.py --parts tta --workloads quickstart \
        --json docs/results/grpo_step_realistic-tta_quickstart.json --write docs/performance.md

At least 10 timed steps a process (``plan()``). Alongside throughput:
the training tokens each side ran forward and backward against the useful ones (the rows of groups whose
rewards differ, each prompt once), as FLOPs; and the roofline: per phase (generation, training) and for the
whole step, the useful FLOPs (``grpo_step_report.useful_flops``), their rate and its share of the matmul peak
measured in the same run (before and after the workloads, the larger).
``tta``: wall-clock training time (evaluations excluded) for each trainer to reach a held-out accuracy from the
same start, evaluated by the same code (``grpo_step_workloads.HeldOut``), 5 seeds a side, alternating, and per
seed the paired ratio TRL / lit-grpo with its geometric mean and 95% t interval: ``quickstart`` to greedy accuracy
0.70 (evaluated every 25 steps); ``lora`` to sampled accuracy (4 completions a prompt, a fixed evaluation seed)
0.10 above the starting policy's (every 5 steps, at most 60). ``--workloads`` picks them here too.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from grpo_step_common import PHASES  # noqa: E402
from grpo_step_machine import busy_reasons, other_cpu_s, own_tree, read_cpu, read_state, refusal  # noqa: E402
from grpo_step_report import (  # noqa: E402
    LARGE_VOCAB,
    flop_rates,
    render,
    render_realistic,
    roofline,
    useful_flops,
    work_flops,
    write_into,
)
from grpo_step_workloads import LORA, WORKLOADS, model_dir  # noqa: E402

TRL_PYTHON = HERE / ".venv-trl" / "bin" / "python"
DEVICE = {"name": "cpu"}  # where every measuring process trains: --device (the matmul peak stays on the CPU)
ALL_PARTS = ("peak", "compare", "memory", "scaling", "realistic", "tta")
COUNTS = ("useful_rows", "useful_prompt_tokens", "useful_tokens", "mixed_groups", "groups", "trained_rows",
          "trained_prompt_tokens", "trained_tokens", "useful_context", "trained_context", "sampled_prompt_tokens",
          "sampled_tokens", "sampled_context")
# Peak RSS (MiB) of a workload's largest trainer process before this run has measured one: TRL's process on
# ``real`` peaked at 15.7 GiB in the committed run; the memory check uses the larger of this and the largest
# peak measured so far in the run.
NEED_MIB = {"real": 16 * 1024, "lora": 16 * 1024, "quickstart": 1024}
RUN = {"need_mib": 0.0, "allow_busy": False, "busy": []}  # this run: largest peak RSS so far, recorded reasons


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
            "tta": {"quickstart": {"seeds": [0], "max_steps": 20, "eval_every": 10, "target": 0.99, "samples": 0}},
        }
    return {
        "compare": [
            ("small", "fp32", 5, 2, 5, 8, 8, 16),  # 5 pairs: its ratio moved between runs by more than 3 pairs' spread
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
        # (workload, A/B pairs, warm-up steps, timed steps): at least 10 timed steps a process, as the cost of a
        # step varies about 1.6x with the sampled rewards; the real model's TRL steps take 40-70 s (about 50 min)
        "realistic": [("quickstart", 3, 5, 40), ("real", 3, 2, 10), ("lora", 3, 2, 10)],
        # time to accuracy, per workload: >= 5 seeds a side, paired by seed. quickstart: held-out greedy accuracy
        # 0.70; lora: held-out sampled accuracy (4 samples a prompt) 0.10 above the starting policy's
        "tta": {
            "quickstart": {"seeds": [0, 1, 2, 3, 4], "max_steps": 2000, "eval_every": 25, "target": 0.70, "samples": 0},
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
    if runner == "trl" and not TRL_PYTHON.exists():
        raise SystemExit(
            f"{TRL_PYTHON} not found: create TRL's environment first with bash bench/setup_trl_env.sh"
        )
    python, script = (
        (str(TRL_PYTHON), HERE / "grpo_step_trl.py")
        if runner == "trl"
        else (sys.executable, HERE / "grpo_step_lit.py")
    )
    cmd = [
        python,
        str(script),
        "--model",
        model,
        "--precision",
        precision,
        "--warmup",
        str(warmup),
        "--steps",
        str(steps),
        "--prompts",
        str(prompts),
        "--group",
        str(group),
        "--new-tokens",
        str(new_tokens),
        "--threads",
        str(threads),
        "--workload",
        workload,
        "--lr",
        str(lr),
        "--device",
        DEVICE["name"],
        *extra,
    ]
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
        f"{_median(result['steps'], 'tokens_per_s'):7.0f} tokens/s, {_median(result['steps'], 'step_s'):.3f} s/step, "
        f"peak {result['peak_rss_mib']:.0f} MiB ({result['process_s']:.0f} s)",
        flush=True,
    )
    return result


def _median(steps: list[dict], key: str) -> float:
    return statistics.median(s.get(key, 0.0) for s in steps)


def combine(results: list[dict]) -> dict:
    """Medians over the timed steps of several processes, with the range of the per-process medians."""
    steps = [s for r in results for s in r["steps"]]
    out = {k: _median(steps, k) for k in [*PHASES, "step_s", "tokens", "prompt_tokens", "tokens_per_s", *COUNTS]}
    out["sums"] = {k: sum(s.get(k, 0.0) for s in steps) for k in COUNTS}
    out["time_sums"] = {k: sum(s.get(k, 0.0) for s in steps) for k in [*PHASES, "step_s"]}
    per = [_median(r["steps"], "tokens_per_s") for r in results]
    out.update(
        tps_min=min(per),
        tps_max=max(per),
        peak_rss_mib=max(r["peak_rss_mib"] for r in results),
        load_rss_mib=min(r.get("load_rss_mib", 0.0) for r in results),
        params=results[0]["params"],
        trainable=results[0].get("trainable"),
        processes=len(results),
        steps_timed=len(steps),
        trl=results[0].get("trl"),
        machine=[r.get("machine_before") for r in results],
        busy=[reason for r in results for reason in r.get("busy", [])],
    )
    return out


# ---- the matmul peak ----------------------------------------------------------------------------------------
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
        f"  matmul peak on {device}, {threads} threads: fp32 {peak['fp32']:.1f} GFLOP/s, bf16 {peak['bf16']:.1f} "
        "GFLOP/s"
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


# ---- the parts ----------------------------------------------------------------------------------------------
def part_compare(models: dict[str, str], threads: int, quick: bool) -> list[dict]:
    rows = []
    for size, precision, reps, warmup, steps, prompts, group, new_tokens in plan(quick)["compare"]:
        kw = {"warmup": warmup, "steps": steps, "prompts": prompts, "group": group, "new_tokens": new_tokens}
        runs: dict[str, list[dict]] = {"lit-grpo": [], "trl": []}
        for _ in range(reps):  # A B A B ...
            for runner in ("lit-grpo", "trl"):
                runs[runner].append(measure(runner, models[size], threads, precision, **kw))
        pairs = [a["steps"] for a in runs["lit-grpo"]], [b["steps"] for b in runs["trl"]]
        ratios = [
            _median(a, "tokens_per_s") / _median(b, "tokens_per_s") for a, b in zip(*pairs, strict=True)
        ]
        row = {
            "size": size,
            "precision": precision,
            "lit": combine(runs["lit-grpo"]),
            "trl": combine(runs["trl"]),
            "pair_ratios": ratios,
            "pair_ratio": ratio_spread(ratios),
            **kw,
        }
        row["ratio"] = row["lit"]["tokens_per_s"] / row["trl"]["tokens_per_s"]
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
                   ) -> tuple[list[dict], dict]:
    """lit-grpo against TRL on the real workloads (those of the plan named in ``workloads``; all by default),
    alternating fresh processes; and the matmul peak, measured before and after them (the roofline uses the
    larger)."""
    peaks = [matmul_peak(threads, device)]
    rows = []
    for workload, reps, warmup, steps in plan(quick)["realistic"]:
        if workloads is not None and workload not in workloads:
            continue
        w = WORKLOADS[workload]
        model = model_dir(w.model)
        kw = {"warmup": warmup, "steps": steps, "prompts": w.prompts, "group": w.group,
              "new_tokens": w.new_tokens, "workload": workload, "lr": w.lr}
        runs: dict[str, list[dict]] = {"lit-grpo": [], "trl": []}
        for _ in range(reps):  # A B A B ...
            for runner in ("lit-grpo", "trl"):
                runs[runner].append(measure(runner, model, threads, **kw))
        ratios = [_median(a["steps"], "tokens_per_s") / _median(b["steps"], "tokens_per_s")
                  for a, b in zip(runs["lit-grpo"], runs["trl"], strict=True)]
        row = {"workload": workload, "model": w.model, "lora": LORA if w.lora else None, "lit": combine(runs["lit-grpo"]),
               "trl": combine(runs["trl"]), "pair_ratios": ratios, "pair_ratio": ratio_spread(ratios),
               "same_prompts": same_prompts(runs), **kw}
        row["ratio"] = row["lit"]["tokens_per_s"] / row["trl"]["tokens_per_s"]
        for side in ("lit", "trl"):
            row[side].update(work_flops(model, row[side]["sums"], row[side]["steps_timed"], row["lora"]))
        rows.append(row)
    peaks.append(matmul_peak(threads, device))
    peak = {k: max(p[k] for p in peaks) for k in ("fp32", "bf16")}
    for row in rows:
        for side in ("lit", "trl"):
            add_roofline(row[side], model_dir(row["model"]), peak["fp32"], row["lora"])  # the workloads run fp32
    return rows, {**peak, "before": peaks[0], "after": peaks[1], "device": device}


def add_roofline(side: dict, model: str, peak_gflops: float, lora: dict | None = None) -> None:
    """The useful FLOPs of one side's phases, their rate and fraction of the peak (``side["roofline"]``)."""
    n = side["steps_timed"]
    gflop = useful_flops(model, side["sums"], n, lora)
    if gflop is not None:
        side["roofline"] = roofline(gflop, {k: v / n for k, v in side["time_sums"].items()}, peak_gflops)


def part_tta(threads: int, quick: bool, workloads: tuple[str, ...] | None = None) -> list[dict]:
    """Training time until held-out accuracy reaches each workload's target (``plan()["tta"]``), per seed and
    trainer, the trainers alternating; and per seed both reached, the paired ratio TRL / lit-grpo."""
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
                r = measure(runner, model, threads, warmup=0, steps=p["max_steps"], prompts=w.prompts, group=w.group,
                            new_tokens=w.new_tokens, workload=workload, lr=w.lr, extra=(*extra, "--seed", str(seed)))
                hit = next((e for e in r["evals"] if e["step"] > 0 and e["accuracy"] >= r["target"]), None)
                runs[runner].append({"seed": seed, "reached": hit is not None, "step": hit and hit["step"],
                                     "train_s": hit and hit["train_s"], "target": r["target"], "evals": r["evals"],
                                     "step_s": _median(r["steps"], "step_s"), "trl": r.get("trl")})
        out.append({"workload": workload, **p, "runs": runs, "paired": paired_ratios(runs)})
    return out


def paired_ratios(runs: dict[str, list[dict]]) -> dict:
    """Per seed both trainers reached the target: TRL's time / lit-grpo's; their geometric mean and its 95% t
    interval (on the log ratios; None below 2 seeds), and how many seeds each side reached."""
    from lit_grpo.lab.stats import t_quantile

    both = [(a["seed"], b["train_s"] / a["train_s"]) for a, b in zip(runs["lit-grpo"], runs["trl"], strict=True)
            if a["reached"] and b["reached"] and a["train_s"] > 0]
    logs = [math.log(r) for _, r in both]
    out = {"ratios": dict(both), "seeds": len(runs["lit-grpo"]),
           "reached": {side: sum(r["reached"] for r in rs) for side, rs in runs.items()},
           "geomean": math.exp(statistics.fmean(logs)) if logs else None, "ci95": None}
    if len(logs) >= 2:
        half = t_quantile(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
        out["ci95"] = [math.exp(statistics.fmean(logs) - half), math.exp(statistics.fmean(logs) + half)]
    return out


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a 1-2 minute smoke run of every part")
    parser.add_argument(
        "--parts", default="peak,compare,memory,scaling", help=f"comma separated, of {ALL_PARTS}"
    )
    parser.add_argument("--workloads", help=f"comma separated: the realistic and tta parts' workloads, of "
                        f"{', '.join(w for w, *_ in plan(False)['realistic'])} (default: all); a selection is written "
                        "into a block of its own (<!-- grpo_step.py:realistic:NAMES:begin -->)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads on both sides")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where both trainers train and generate (cuda: one GPU)")
    parser.add_argument("--write", type=Path, help="replace the generated block of this markdown file")
    parser.add_argument("--json", type=Path, help="also save the raw results here")
    parser.add_argument("--render", type=Path, help="measure nothing: write the tables of this saved --json")
    parser.add_argument("--allow-busy", action="store_true",
                        help="measure and publish even when other processes hold the memory or cores the trainers "
                        "need (bench/grpo_step_machine.py: the rule); the report records the machine's state")
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
    workloads = None if args.workloads is None else tuple(w.strip() for w in args.workloads.split(",") if w.strip())
    known = list(dict.fromkeys([w for w, *_ in plan(args.quick)["realistic"]] + list(plan(args.quick)["tta"])))
    if workloads is not None and (not workloads or set(workloads) - set(known) or not {"realistic", "tta"} & set(parts)):
        parser.error(f"--workloads {args.workloads}: needs --parts realistic or tta and names of {', '.join(known)}")

    import torch
    import transformers

    DEVICE["name"] = args.device
    machine_start = read_state()
    if args.write or args.json:  # results that will be published: refuse a busy machine before measuring
        p = plan(args.quick)
        measured = [w for w, *_ in p["realistic"]] * ("realistic" in parts) + list(p["tta"]) * ("tta" in parts)
        need = max([NEED_MIB.get(w, 0.0) for w in measured if workloads is None or w in workloads] or [0.0])
        reasons = busy_reasons(machine_start, need, args.threads, os.cpu_count() or 1)
        if reasons and not args.allow_busy:
            raise SystemExit(refusal(reasons, "measure for --write/--json"))
        RUN["busy"] += [f"at the start: {r}" for r in reasons]
    start, load_before = time.perf_counter(), _load()
    report: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        old_parts = {"peak", "compare", "memory", "scaling"} & set(parts)
        sizes = ({"small"} if old_parts else set()) | ({"medium"} if "compare" in parts and not args.quick else set())
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
            report["realistic"], report["realistic_peak"] = part_realistic(args.threads, args.quick, args.device,
                                                                           workloads)
        if "tta" in parts:
            report["tta"] = part_tta(args.threads, args.quick, workloads)
    command = "python bench/grpo_step.py" + "".join(f" {a}" for a in sys.argv[1:])
    trl_version = next((r["trl"]["trl"] for r in [*report.get("compare", []), *report.get("realistic", [])]),
                       next((r["trl"] for t in report.get("tta", []) for r in t["runs"]["trl"]), None))
    report["meta"] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "command": command,
        "threads": args.threads,
        "device": args.device,
        "cpu": _cpu(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "load_before": load_before,
        "load_after": _load(),
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
    """The markdown block a run of the realistic or tta part writes: ``grpo_step.py:realistic``, with a suffix
    naming a selection of workloads (``:lora``) and a run of the tta part alone (``:tta``, ``:tta_quickstart``),
    so that each such run has a block, and a JSON (``grpo_step_realistic-SUFFIX.json``), of its own."""
    suffix = "_".join([*(["tta"] if "realistic" not in parts else []), *(["+".join(workloads)] if workloads else [])])
    return "grpo_step.py:realistic" + (f":{suffix}" if suffix else "")


def publish(report: dict, parts: list[str], write: Path | None, save: Path | None) -> None:
    """Print the tables, save the raw report (``save``) and write the tables into a markdown file (``write``)."""
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
        raise SystemExit(refusal(busy, f"write into {write}") + (f" The results are saved in {save}." if save else ""))
    if write:
        for name, text in blocks.items():
            write_into(write, text, name)
        print(f"wrote the tables into {write}")


def _cpu() -> str:
    try:
        name = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        name = platform.processor() or "unknown CPU"
    return f"{name} ({os.cpu_count()} logical CPUs)"


if __name__ == "__main__":
    main()
