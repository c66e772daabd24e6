"""Synchronous against asynchronous rollouts (``lit_grpo.AsyncRollouts``) on the quickstart, on this machine's cores.

    python bench/async_rollouts.py speed --pairs 6 --steps 200       # step time, alternated fresh processes (~4 min)
    python bench/async_rollouts.py accuracy --seeds 5 --steps 250    # held-out accuracy per seed and mode (~8 min)
    python bench/async_rollouts.py speed-real --pairs 2 --steps 6    # the real-model workload (~16 min)
    python bench/async_rollouts.py accuracy-tis --seeds 5 --steps 250  # staleness 2 with TruncatedIS (~5 min)
    python bench/async_rollouts.py speed-process --pairs 6 --steps 200  # the producer in its own process (~4 min)
    python bench/async_rollouts.py accuracy-defaults --seeds 5 --steps 250  # k = 1, 2 at the current defaults (~8 min)
    python bench/async_rollouts.py speed-k --pairs 6 --steps 200   # k = 1, 2, 4 against sync, rotated rounds (~8 min)
    python bench/async_rollouts.py --write docs/performance.md       # the doc's tables from the data

Arms (the same config otherwise; ``OMP_NUM_THREADS`` set per process; every arm's HF engine draws
``generate``'s tokens, ``GENERATE_DRAWS``, as the published runs did):
- ``sync``: the synchronous engine with all the cores;
- ``async-k1`` / ``async-k2``: ``AsyncRollouts(max_staleness=k)``, the cores split: the trainer's thread and the
  producer's thread one half each;
- ``async-k1-process``: the same at k = 1 with the producer in a process of its own (``producer: process``).

``speed`` alternates the arms' processes pair by pair (the order flipped every pair) and records each process's
median training-step time after its first 20 steps (:class:`soak.SoakProbe`). ``accuracy`` trains each arm
``--steps`` steps from each seed and records the held-out sampled accuracy (``heldout/reward_mean_after``, 200
prompts, temperature 1) and the run's wall time. The verdicts are read from :data:`CRITERION`, fixed before the
first run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import ROOT, command, write_block

from lit_grpo.lab.stats import t_quantile, t_sf
from lit_grpo.rollout.hf import GENERATE_DRAWS_ARG

#: The success criterion, fixed before the first run. Speed: per pair, r = async-k1's median step time / sync's; the
#: 95% t-interval of mean(log r) over the pairs says "async faster" when its upper end is below log 1 = 0, "async
#: slower" when its lower end is above 0, else "undetermined". Accuracy: per seed, d = async-k's held-out sampled
#: accuracy - sync's (k = 1, 2); "not worse" when the lower end of the 95% t-interval of mean d, Holm-corrected over
#: the two k, is above -margin (an equivalence-style non-inferiority bound of 5 points), "worse" when its upper end
#: is below 0, else "undetermined".
CRITERION = {"speed_level": 0.95, "accuracy_level": 0.95, "accuracy_margin": 0.05, "warmup_steps": 20}
#: The real-model workload (``speed-real``): the real quickstart's settings (SmolLM2-135M-Instruct, LoRA r16, P8 x G8 x
#: 32 new tokens) without its held-out report, each process's median step time after its first step; the same
#: interval rule as ``speed``, at the level of :data:`CRITERION`. Fixed before its first run.
REAL = {"config": "configs/real/quickstart.yaml", "warmup_steps": 1,
        "extra": ["--trainer.callbacks=[]", "--trainer.max_time=null"]}
#: ``speed-process`` asks, fixed before its first run: is async-k1 with the producer in its own process faster than
#: sync on the quickstart? The rule of ``speed`` (the 95% t-interval of the mean log ratio, alternated pairs).
SPEED_ARMS = {"speed": "async-k1", "speed-real": "async-k1", "speed-process": "async-k1-process"}
#: ``speed-real``'s published runs trained in float32, before the real quickstart's ``dtype: auto`` (bfloat16 on a
#: CPU with native bf16 matmul): a rerun keeps their dtype.
REAL_DTYPE = ["--model.dtype=float32"]

ARMS = {"sync": [], "async-k1": ["--model.engine=AsyncRollouts", "--model.engine.max_staleness=1"],
        "async-k2": ["--model.engine=AsyncRollouts", "--model.engine.max_staleness=2"],
        # PPOClip's former ``tis: token``: the same update, through the loss's importance correction
        "async-k2-tis": ["--model.engine=AsyncRollouts", "--model.engine.max_staleness=2",
                         "--model.loss.correction=TruncatedIS", "--model.loss.correction.level=token"],
        "async-k1-process": ["--model.engine=AsyncRollouts", "--model.engine.max_staleness=1",
                             "--model.engine.producer=process"],
        "async-k4": ["--model.engine=AsyncRollouts", "--model.engine.max_staleness=4"]}
#: ``speed-k`` asks, fixed before its first run, once the weight copies wait in the producer's queue (batches stay in
#: flight while the weights update): is async-k faster than sync on the quickstart, for k = 1, 2, 4 (producer
#: thread, the cores split as ``speed``)? Each round runs the four arms in fresh processes, the order rotated by one
#: every round; per round and k, r = async-k's median step time after the warm-up / sync's in that round. Per k,
#: "async faster" when the upper end of the t-interval of mean(log r) is below 0, "async slower" when its lower end
#: is above 0, else "undetermined"; the three intervals Holm-adjusted at family level 0.95. The 1-minute load average
#: is recorded with each process; a verdict measured with a load average above the core count is reported as taken
#: on a loaded machine.
SPEED_K = ("async-k1", "async-k2", "async-k4")
#: The arms of each accuracy part. ``accuracy-tis`` asks one question, fixed before its first run: does the token-level
#: truncated importance correction (cap 2) make staleness 2 not worse than sync (the same rule as ``accuracy``, a family
#: of one comparison, so no adjustment)? Its sync runs are its own, alternated with the asynchronous ones.
PARTS = {"accuracy": ("sync", "async-k1", "async-k2"), "accuracy-tis": ("sync", "async-k2-tis")}
#: ``accuracy-defaults`` asks, fixed before its first run, after ``AsyncRollouts`` made the decoupled correction its
#: default at max_staleness >= 1 (``TruncatedIS()``, token level, cap 2, unless ``correction: none``), moved the
#: weight copies into the producer's queue and gave a producer thread its own random stream: are async-k1 and
#: async-k2, at these defaults (the arms' flags name no correction), not worse than sync in held-out sampled
#: accuracy after 250 steps on the quickstart? The rule of ``accuracy``: 5 seeds (0 to 4), each arm from each seed,
#: per seed d = async-k - sync; "not worse" when the lower end of the 95% t-interval of mean d, Holm-corrected over
#: the two k, is above -0.05, "worse" when its upper end is below 0, else "undetermined". Its sync runs are its own.
#: Each run's load average (1 minute) is recorded beside it: accuracy does not depend on the load, the wall times do.
DEFAULTS_PARTS = {"accuracy-defaults": ("sync", "async-k1", "async-k2")}
#: Every accuracy part: its arms.
ACCURACY_PARTS = {**PARTS, **DEFAULTS_PARTS}
RESULTS = ROOT / "docs" / "results" / "async"
BEGIN, END = "<!-- async_rollouts: begin -->\n", "<!-- async_rollouts: end -->\n"


def _threads(arm: str) -> int:
    """The arm's torch threads: all the cores for sync, half of them for an asynchronous arm."""
    cores = os.cpu_count() or 2
    return cores if arm == "sync" else max(1, cores // 2)


def fit_args(arm: str, steps: int, seed: int, folder: Path, extra: list[str],
             config: str = "configs/quickstart.yaml") -> list[str]:
    """The ``lit-grpo fit`` arguments of one run of ``arm``."""
    # every arm draws generate's tokens, as the published runs did (before the engine's fast defaults)
    inner = GENERATE_DRAWS_ARG.replace("--model.engine=", "--model.engine.engine=")  # AsyncRollouts' engine
    pin = GENERATE_DRAWS_ARG if arm == "sync" else inner
    args = [*ARMS[arm], pin, *([f"--model.engine.producer_threads={_threads(arm)}"] if arm != "sync" else [])]
    return ["--config", config, f"--seed_everything={seed}", f"--trainer.max_steps={steps}",
            f"--trainer.logger.init_args.save_dir={folder}", "--trainer.enable_progress_bar=false",
            *args, *extra]


def _fit(arm: str, steps: int, seed: int, folder: Path, extra: list[str],
         config: str = "configs/quickstart.yaml") -> subprocess.CompletedProcess:
    threads = _threads(arm)
    argv = [sys.executable, "-m", "lit_grpo", "fit", *fit_args(arm, steps, seed, folder, extra, config)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(argv, cwd=ROOT, env=env, check=True, capture_output=True, text=True)


def workload(real: bool) -> tuple[str, int, list[str]]:
    """The config, warm-up steps and extra arguments of the quickstart's workload or (``real``) the real model's."""
    if real:
        return REAL["config"], REAL["warmup_steps"], [*REAL["extra"], *REAL_DTYPE]
    return "configs/quickstart.yaml", CRITERION["warmup_steps"], []


def speed(pairs: int, steps: int, real: bool = False, arm: str = "async-k1") -> dict:
    """Alternated processes of ``sync`` and ``arm``; each one's median step time after the warm-up (the real-model
    workload with ``real``)."""
    config, warmup, extra = workload(real)
    rows = []
    for pair in range(pairs):
        order = ["sync", arm] if pair % 2 == 0 else [arm, "sync"]
        row = {"pair": pair, "order": order}
        for one in order:
            with tempfile.TemporaryDirectory() as tmp:
                lines = Path(tmp) / "steps.jsonl"
                _fit(one, steps, 0, Path(tmp), [*extra, "--trainer.callbacks+=soak.SoakProbe",
                                                 f"--trainer.callbacks.out={lines}", "--trainer.callbacks.every=1",
                                                 *([] if real else ["--trainer.val_check_interval=100000"])], config)
                durations = [json.loads(line)["step_s_median"] for line in lines.read_text().splitlines()]
            row[one] = round(statistics.median(durations[warmup:]), 5)
        row["ratio"] = round(row[arm] / row["sync"], 4)
        rows.append(row)
        print(row, flush=True)
    logs = [math.log(r["ratio"]) for r in rows]
    low, high = _t_interval(logs, CRITERION["speed_level"])
    verdict = "async faster" if high < 0 else "async slower" if low > 0 else "undetermined"
    return {"workload": config, "arm": arm, "warmup_steps": warmup, "steps": steps, "pairs": rows, "ratio_geomean": round(math.exp(statistics.fmean(logs)), 4),
            "ratio_interval": [round(math.exp(low), 4), round(math.exp(high), 4)], "verdict": verdict}


def speed_k(rounds: int, steps: int) -> dict:
    """:data:`SPEED_K` against sync: each round the four arms in fresh processes, the order rotated every round."""
    arms, rows = ["sync", *SPEED_K], []
    for rnd in range(rounds):
        order = arms[rnd % len(arms):] + arms[: rnd % len(arms)]
        row = {"round": rnd, "order": order}
        for one in order:
            with tempfile.TemporaryDirectory() as tmp:
                lines = Path(tmp) / "steps.jsonl"
                _fit(one, steps, 0, Path(tmp), ["--trainer.callbacks+=soak.SoakProbe", f"--trainer.callbacks.out={lines}",
                                                "--trainer.callbacks.every=1", "--trainer.val_check_interval=100000"])
                durations = [json.loads(line)["step_s_median"] for line in lines.read_text().splitlines()]
            row[one] = round(statistics.median(durations[CRITERION["warmup_steps"]:]), 5)
            row[f"{one}_load"] = round(os.getloadavg()[0], 2)
        rows.append(row)
        print(row, flush=True)
    logs = {k: [math.log(r[k] / r["sync"]) for r in rows] for k in SPEED_K}
    out = {"arms": arms, "steps": steps, "rounds": rows, "comparisons": {}}
    family = 1 - CRITERION["speed_level"]
    for rank, k in enumerate(sorted(SPEED_K, key=lambda k: _p_two_sided(logs[k]))):
        level = 1 - family / (len(SPEED_K) - rank)
        low, high = _t_interval(logs[k], level)
        out["comparisons"][k] = {"ratio_geomean": round(math.exp(statistics.fmean(logs[k])), 4),
                                 "interval": [round(math.exp(low), 4), round(math.exp(high), 4)],
                                 "level": round(level, 4),
                                 "verdict": "async faster" if high < 0 else "async slower" if low > 0 else "undetermined"}
    return out


def _p_two_sided(values: list[float]) -> float:
    """Two-sided p of "mean = 0", for Holm's order."""
    n, sd = len(values), statistics.stdev(values) or 1e-12
    return 2 * t_sf(abs(statistics.fmean(values)) / (sd / math.sqrt(n)), n - 1)


def accuracy(seeds: int, steps: int, part: str = "accuracy") -> dict:
    """Each arm of ``part`` from each seed: held-out sampled accuracy after ``steps`` steps and the run's wall time;
    each asynchronous arm against sync, Holm-adjusted over the part's comparisons."""
    arms, rows = ACCURACY_PARTS[part], []
    for seed in range(seeds):
        row = {"seed": seed}
        for arm in arms:
            with tempfile.TemporaryDirectory() as tmp:
                started = time.monotonic()
                _fit(arm, steps, seed, Path(tmp), ["--trainer.val_check_interval=100000"])
                row[f"{arm}_min"] = round((time.monotonic() - started) / 60, 2)
                if part == "accuracy-defaults":  # the machine's load while it ran (1-minute average, at its end)
                    row[f"{arm}_load"] = round(os.getloadavg()[0], 2)
                row[arm] = _heldout(Path(tmp))
        rows.append(row)
        print(row, flush=True)
    tests = {k: [row[k] - row["sync"] for row in rows] for k in arms if k != "sync"}
    # Holm over the comparisons: the smallest p first at level alpha/m, the next at alpha/(m-1), ...
    level, m = CRITERION["accuracy_level"], len(tests)
    out = {"arms": list(arms), "steps": steps, "seeds": rows, "comparisons": {}}
    for rank, k in enumerate(sorted(tests, key=lambda k: _p_below(tests[k], -CRITERION["accuracy_margin"]))):
        alpha = (1 - level) / (m - rank)
        low, high = _t_interval(tests[k], 1 - alpha)
        verdict = "not worse" if low > -CRITERION["accuracy_margin"] else "worse" if high < 0 else "undetermined"
        out["comparisons"][k] = {"mean_difference": round(statistics.fmean(tests[k]), 4),
                                 "interval": [round(low, 4), round(high, 4)], "level": round(1 - alpha, 4),
                                 "verdict": verdict}
    return out


def holm_family(parts: dict[str, dict]) -> dict[str, dict]:
    """Every accuracy comparison of ``parts`` (name -> its saved record) against sync, Holm-adjusted together by the
    rule of :data:`CRITERION`, as one family: the parts compare with one baseline when their sync arms gave the same
    accuracies seed by seed (one command, reproducible from one process to the next), which is checked."""
    syncs = {name: [r["sync"] for r in a["seeds"]] for name, a in parts.items()}
    if len({tuple(v) for v in syncs.values()}) != 1:
        raise ValueError(f"the accuracy parts' sync arms differ ({syncs}): they are no common baseline to adjust over")
    tests = {k: [r[k] - r["sync"] for r in a["seeds"]] for a in parts.values() for k in a["arms"] if k != "sync"}
    margin, level, out = CRITERION["accuracy_margin"], CRITERION["accuracy_level"], {}
    for rank, k in enumerate(sorted(tests, key=lambda k: _p_below(tests[k], -margin))):
        alpha = (1 - level) / (len(tests) - rank)
        low, high = _t_interval(tests[k], 1 - alpha)
        out[k] = {"mean_difference": round(statistics.fmean(tests[k]), 4), "interval": [round(low, 4), round(high, 4)],
                  "level": round(1 - alpha, 4),
                  "verdict": "not worse" if low > -margin else "worse" if high < 0 else "undetermined"}
    return out


def _heldout(folder: Path) -> float:
    from lit_grpo.lab.collect import read_scalars

    run = next(folder.rglob("events.out.tfevents.*")).parent
    return round(read_scalars(run)["heldout/reward_mean_after"][-1][1], 4)


def _t_interval(values: list[float], level: float) -> tuple[float, float]:
    """The two-sided ``level`` t-interval of the mean of ``values``."""
    n, mean, sd = len(values), statistics.fmean(values), statistics.stdev(values)
    half = t_quantile(1 - (1 - level) / 2, n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half


def _p_below(values: list[float], bound: float) -> float:
    """One-sided p of "mean <= bound" (non-inferiority), for Holm's order."""
    n, sd = len(values), statistics.stdev(values) or 1e-12
    return t_sf((statistics.fmean(values) - bound) / (sd / math.sqrt(n)), n - 1)


def render() -> str:
    lines = []
    for name in SPEED_ARMS:
        if not (RESULTS / f"{name}.json").is_file():
            continue
        s = json.loads((RESULTS / f"{name}.json").read_text())
        lines += [""] if lines else []
        arm = s.get("arm", "async-k1")
        lines += [f"Speed, {s.get('workload', 'configs/quickstart.yaml')} (`{s['command']}`, {len(s['pairs'])} "
                  f"alternated pairs, {s['steps']} steps a process, median step time after "
                  f"{s.get('warmup_steps', CRITERION['warmup_steps'])}): {arm} / sync = {s['ratio_geomean']} (geometric "
                  f"mean; 95% interval {s['ratio_interval'][0]} to {s['ratio_interval'][1]}): **{s['verdict']}**.", "",
                  f"| pair | order | sync s/step | {arm} s/step | ratio |", "|---|---|---|---|---|"]
        lines += [f"| {r['pair']} | {' then '.join(r['order'])} | {r['sync']:.4f} | {r[arm]:.4f} | {r['ratio']} |"
                  for r in s["pairs"]]
    if (RESULTS / "speed-k.json").is_file():
        lines += _speed_k_lines(json.loads((RESULTS / "speed-k.json").read_text()))
    saved = {name: json.loads((RESULTS / f"{name}.json").read_text()) for name in ACCURACY_PARTS
             if (RESULTS / f"{name}.json").is_file()}
    for name in PARTS:
        if name in saved:
            lines += _accuracy_lines(saved[name])
    parts = {name: saved[name] for name in PARTS if name in saved}
    if len(parts) > 1:
        lines += ["", "Every accuracy comparison above as one family (the parts share the sync accuracies seed by seed), "
                  "Holm-adjusted together by the same rule:", "",
                  "| comparison | mean difference | interval (Holm-adjusted level, all parts) | verdict |", "|---|---|---|---|"]
        lines += [f"| {k} - sync | {c['mean_difference']:+.4f} | {c['interval'][0]:+.4f} to {c['interval'][1]:+.4f} "
                  f"({c['level']}) | {c['verdict']} |" for k, c in holm_family(parts).items()]
    for name in DEFAULTS_PARTS:
        if name in saved:
            family = len(DEFAULTS_PARTS[name]) - 1
            lines += ["", f"At the current defaults (`{name}`: its own sync runs, its own family of {family} "
                          "comparisons):", *_accuracy_lines(saved[name])]
    return "\n".join(lines) + "\n"


def _speed_k_lines(s: dict) -> list[str]:
    """``speed-k``'s tables: each round's median step times in the order run, and each k's verdict (Holm over k)."""
    arms = s["arms"]
    lines = ["", f"Speed at max_staleness 1, 2 and 4 (`{s['command']}`, {len(s['rounds'])} rounds of fresh processes, "
                 f"the order rotated every round, {s['steps']} steps a process, median step time after "
                 f"{CRITERION['warmup_steps']}; s/step, the load average at each process's end in brackets):", "",
             "| round | order | " + " | ".join(arms) + " |", "|---|---|" + "---|" * len(arms)]
    lines += [f"| {r['round']} | {' then '.join(r['order'])} | "
              + " | ".join(f"{r[a]:.4f} ({r[f'{a}_load']})" for a in arms) + " |" for r in s["rounds"]]
    lines += ["", "| comparison | ratio (geometric mean) | interval (Holm-adjusted level) | verdict |",
              "|---|---|---|---|"]
    lines += [f"| {k} / sync | {c['ratio_geomean']} | {c['interval'][0]} to {c['interval'][1]} ({c['level']}) | "
              f"{c['verdict']} |" for k, c in s["comparisons"].items()]
    return lines


def _accuracy_lines(a: dict) -> list[str]:
    """One accuracy part's tables: per seed, and its comparisons by its own rule."""
    lines: list[str] = []
    arms = a.get("arms", ACCURACY_PARTS["accuracy"])
    lines += ["", f"Accuracy (`{a['command']}`, held-out sampled accuracy after {a['steps']} steps, paired by seed):",
              "", "| seed | " + " | ".join([*arms, *(f"{arm} min" for arm in arms)]) + " |",
              "|---|" + "---|" * (2 * len(arms))]
    lines += ["| " + " | ".join(str(v) for v in [r["seed"], *(r[arm] for arm in arms),
                                                  *(r[f"{arm}_min"] for arm in arms)]) + " |" for r in a["seeds"]]
    loads = [r[f"{arm}_load"] for r in a["seeds"] for arm in arms if f"{arm}_load" in r]
    if loads:  # the accuracies do not depend on it; the wall times do
        lines += ["", f"Load average (1 minute) at the end of each run: {min(loads)} to {max(loads)} on "
                      f"{a.get('cpus', 2)} cores: the wall times were taken on a loaded machine."]
    lines += ["", "| comparison | mean difference | interval (Holm-adjusted level) | verdict |", "|---|---|---|---|"]
    lines += [f"| {k} - sync | {c['mean_difference']:+.4f} | {c['interval'][0]:+.4f} to {c['interval'][1]:+.4f} "
              f"({c['level']}) | {c['verdict']} |" for k, c in a["comparisons"].items()]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", nargs="?", choices=[*SPEED_ARMS, *ACCURACY_PARTS, "speed-k"])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--write", type=Path, help="replace the block between the markers of this doc and exit")
    args = parser.parse_args()
    if args.write:
        write_block(args.write, BEGIN, END, render())
        return
    record = accuracy(args.seeds, args.steps, args.part) if args.part in ACCURACY_PARTS else \
        speed_k(args.pairs, args.steps) if args.part == "speed-k" else \
        speed(args.pairs, args.steps, real=args.part == "speed-real", arm=SPEED_ARMS[args.part])
    record = {"command": command("bench/async_rollouts.py", sys.argv[1:]), "cpus": os.cpu_count(),
              "criterion": CRITERION, **record}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.part}.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
