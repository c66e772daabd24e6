"""Sizes ``experiments/search_agent_estimators.yaml`` before it runs, from committed data alone: its power from the
pilot's run-to-run spread (``docs/results/search_agent_pilot/runs.csv``: the study's design for GRPO and SignBalance
on seeds of their own, scored on the validation split) and its wall time from the episode benchmark
(``docs/results/agents/agent_step.json``: seconds a training step and a held-out episode take on 2 threads) scaled
by the time the pilot's runs took, 2 at a time on one thread each.

``python scripts/size_search_agent_study.py`` prints the sizing; ``--write docs/results.md`` renders it into the
block between the markers of section 9 (``tests/docs`` holds the block to this output). ``--time-threads ROOT``
measures what the sizing cannot read from the pilot: the pilot's last GRPO run (under ``ROOT``, the pilot's
``lit-grpo compare --root``) run again alone on 2 threads for its first 2 steps, against the same steps on one
thread beside another run, into ``docs/results/search_agent_pilot/threads.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lit_grpo.lab.stats import binomial_se, detectable_difference, t_test_power  # noqa: E402

PILOT = ROOT / "docs/results/search_agent_pilot/runs.csv"
METRIC = "greedy validation accuracy after training (100 questions)"
REFERENCE, OTHER = "SignBalance", "GRPO"
#: the margin the study's criterion reads a comparison against, and its Holm family's size
MARGIN, FAMILY = 0.05, 3
#: episodes a training step of the study (8 questions x G = 4) and of the benchmark (its search agent: 16 x 4)
STUDY_EPISODES, PILOT_STEPS, PILOT_VAL = 32, 8, 100
THREADS = ROOT / "docs/results/search_agent_pilot/threads.json"
BEGIN, END = "<!-- size_search_agent_study: begin -->", "<!-- size_search_agent_study: end -->"


@dataclass(frozen=True)
class Design:
    """One way to spend the budget: the arms' learning-rate grid, the selection and final seeds, the test split."""

    name: str
    grid: int
    selection_seeds: int
    final_seeds: int
    test_questions: int
    arms: int = 4


#: the design as first registered, and the sized one (the last is what the experiment's YAML runs)
DESIGNS = (
    Design("as first registered", grid=3, selection_seeds=2, final_seeds=5, test_questions=500),
    Design("6 final seeds", grid=2, selection_seeds=1, final_seeds=6, test_questions=100),
    Design("sized (registered)", grid=2, selection_seeds=1, final_seeds=5, test_questions=150),
)


def pilot_rows(path: Path = PILOT) -> list[dict]:
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if r["status"] == "done"]


def paired(rows: list[dict], metric: str = METRIC) -> dict[int, tuple[float, float]]:
    """Per seed, (reference, other) values of ``metric``, for the seeds where both arms finished."""
    by = {(r["arm"], int(r["seed"])): float(r[metric]) for r in rows}
    seeds = sorted({s for (_, s) in by if (REFERENCE, s) in by and (OTHER, s) in by})
    return {s: (by[REFERENCE, s], by[OTHER, s]) for s in seeds}


STEP_FIRST = "seconds of the first training step (the supervised start's episodes)"
STEP_MEAN = "seconds a training step, over the 8"


def _step_seconds(run_dir: Path) -> list[float]:
    from lit_grpo.lab.collect import read_scalars

    (events,) = {p.parent for p in Path(run_dir).rglob("events.out.tfevents.*")}
    return [round(v, 3) for _, v in read_scalars(events)["perf/step_s"]]


def time_threads(root: Path, steps: int = 2) -> dict:
    """The pilot's last GRPO run's first ``steps`` steps again, alone on 2 threads (no validation), against the same
    steps of the pilot's run (one thread, beside another run)."""
    import shlex
    import subprocess
    import tempfile

    seed = max(paired(pilot_rows()))
    run = Path(root) / "search_agent_pilot/runs" / OTHER / "lr=3e-4" / f"seed{seed}"
    words = shlex.split((run / "command.txt").read_text())
    env, args = dict(w.split("=", 1) for w in words if w.startswith("OMP_")), [w for w in words if not
                                                                               w.startswith("OMP_")]
    replace = {"--trainer.max_steps": str(steps), "--trainer.limit_val_batches": "0"}
    with tempfile.TemporaryDirectory() as out:
        for key in ("--trainer.default_root_dir", "--trainer.logger.init_args.save_dir"):
            replace[key] = out
        args = [f"{a.split('=')[0]}={replace[a.split('=')[0]]}" if a.split("=")[0] in replace else a for a in args]
        assert args[0] == "lit-grpo", args[0]
        subprocess.run([sys.executable, "-m", "lit_grpo", *args[1:]], check=True, cwd=ROOT,
                       env={**os.environ, "OMP_NUM_THREADS": "2"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        alone = _step_seconds(Path(out))
    beside = _step_seconds(run)[:steps]
    return {"run": f"{OTHER}/lr=3e-4/seed{seed}", "pilot_threads": int(env["OMP_NUM_THREADS"]),
            "pilot_step_s": beside, "two_threads_alone_step_s": alone,
            "speedup": round(sum(beside) / sum(alone), 3)}


def sizing(rows: list[dict] | None = None) -> dict:
    rows = pilot_rows() if rows is None else rows
    pairs = paired(rows)
    diffs = [a - b for a, b in pairs.values()]
    n_pilot = len(diffs)
    sd = statistics.stdev(diffs)
    run_s = statistics.mean(float(r["seconds"]) for r in rows)
    step_s = statistics.mean(float(r[STEP_MEAN]) for r in rows)
    # what a run spends outside its 8 steps: the model load and the 100 validation episodes; counted as held-out
    # episodes, an upper bound of one episode's time
    episode_s = (run_s - PILOT_STEPS * step_s) / PILOT_VAL
    # one run on 2 threads alone against one of 2 at a time on a thread each (the same steps, measured)
    speedup = json.loads(THREADS.read_text())["speedup"]
    out = {
        "pilot_seeds": sorted(pairs),
        "differences": [round(d, 4) for d in diffs],
        "mean_difference": round(statistics.mean(diffs), 4),
        "sd_difference": round(sd, 4),
        "sd_arms": {arm: round(statistics.stdev([float(r[METRIC]) for r in rows if r["arm"] == arm]), 4)
                    for arm in (REFERENCE, OTHER)},
        "means": {arm: round(statistics.mean([float(r[METRIC]) for r in rows if r["arm"] == arm]), 4)
                  for arm in (REFERENCE, OTHER)},
        # one run's prompt-sampling SE of its accuracy on the 100 questions (binomial)
        "eval_se": round(statistics.median(binomial_se(float(r[METRIC]), PILOT_VAL) for r in rows), 4),
        "pilot_run_s": round(run_s, 1),
        "pilot_step_s": round(step_s, 1),
        "pilot_episode_s": round(episode_s, 2),
        "two_thread_speedup": round(speedup, 2),
        "designs": [],
    }
    for d in DESIGNS:
        selection = d.arms * d.grid * d.selection_seeds
        final = d.arms * d.final_seeds
        final_s = run_s + d.test_questions * episode_s
        run_seconds = selection * run_s + final * final_s  # on one thread each
        # 2 at a time on a thread each, or one at a time on both threads: whichever is sooner
        wall_h = min(run_seconds / 2, run_seconds / speedup) / 3600
        out["designs"].append({
            "name": d.name, "grid": d.grid, "selection_seeds": d.selection_seeds, "final_seeds": d.final_seeds,
            "test_questions": d.test_questions, "selection_runs": selection, "final_runs": final,
            "final_run_min": round(final_s / 60, 1), "wall_h": round(wall_h, 2),
            "jobs": 2 if speedup <= 2 else 1,
            "detectable_holm_first": round(detectable_difference(d.final_seeds, sd, 0.05 / FAMILY), 3),
            "detectable_unadjusted": round(detectable_difference(d.final_seeds, sd, 0.05), 3),
            "power_at_margin_holm_first": round(t_test_power(d.final_seeds, MARGIN, sd, 0.05 / FAMILY), 3),
            "power_at_margin_unadjusted": round(t_test_power(d.final_seeds, MARGIN, sd, 0.05), 3),
        })
    # the sd's own uncertainty: with n - 1 df, its upper 80% bound is sd sqrt((n - 1) / chi2_{0.2, n - 1})
    out["sd_upper80"] = round(sd * math.sqrt((n_pilot - 1) / _chi2_quantile(0.2, n_pilot - 1)), 4)
    return out


def _chi2_quantile(q: float, df: int) -> float:
    """The ``q`` quantile of chi-squared with ``df`` degrees of freedom: bisection on its cdf, the regularised
    lower incomplete gamma ``P(df / 2, x / 2)``."""
    import torch

    def cdf(x: float) -> float:
        return float(torch.special.gammainc(torch.tensor(df / 2, dtype=torch.float64),
                                            torch.tensor(x / 2, dtype=torch.float64)))

    low, high = 0.0, 10.0 * df + 10
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < q else (low, mid)
    return (low + high) / 2


def render(s: dict) -> str:
    diffs = ", ".join(f"{d:+.2f}".replace("-", "−") for d in s["differences"])
    lines = [
        "",
        f"Pilot (`docs/results/search_agent_pilot/runs.csv`, seeds {', '.join(map(str, s['pilot_seeds']))}, "
        f"lr 3e-4): SignBalance − GRPO in greedy validation accuracy {diffs} (mean {s['mean_difference']:+.3f}; "
        f"GRPO {s['means'][OTHER]:.3f}, SignBalance {s['means'][REFERENCE]:.3f} on average), sd of the "
        f"differences {s['sd_difference']:.3f} (with {len(s['differences']) - 1} df its upper 80% bound is "
        f"{s['sd_upper80']:.3f}); one run's prompt-sampling SE on 100 questions is about {s['eval_se']:.3f}, so "
        "most of the spread is between training runs, not between question samples. A pilot run took "
        f"{s['pilot_run_s']:.0f} s on average (2 at a time, one thread each; {s['pilot_step_s']:.1f} s a step, "
        f"{s['pilot_episode_s']:.2f} s a validation episode with the model load counted in); one alone on both "
        f"threads ran its first 2 steps {s['two_thread_speedup']:.2f} times as fast "
        "(`docs/results/search_agent_pilot/threads.json`), so 2 at a time is kept.",
        "",
        "| design | lr grid × selection seeds | final seeds | test questions | runs (selection + final) | wall "
        "(estimated) | detectable at 80% power: Holm's first step (unadjusted) | power at +0.05: Holm's first step "
        "(unadjusted) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in s["designs"]:
        lines.append(
            f"| {d['name']} | {d['grid']} × {d['selection_seeds']} | {d['final_seeds']} | {d['test_questions']} "
            f"| {d['selection_runs']} + {d['final_runs']} | {d['wall_h']:.1f} h | {d['detectable_holm_first']:.3f} "
            f"({d['detectable_unadjusted']:.3f}) | {d['power_at_margin_holm_first']:.2f} "
            f"({d['power_at_margin_unadjusted']:.2f}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="DOC", help="render the sizing into DOC between its markers")
    parser.add_argument("--time-threads", metavar="ROOT", help="measure a pilot run alone on 2 threads")
    args = parser.parse_args(argv)
    if args.time_threads:
        THREADS.write_text(json.dumps(time_threads(Path(args.time_threads)), indent=1) + "\n")
        print(THREADS.read_text())
        return 0
    s = sizing()
    if args.write:
        doc = Path(args.write)
        text = doc.read_text()
        start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
        doc.write_text(text[:start] + render(s) + text[stop:])
    print(json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
