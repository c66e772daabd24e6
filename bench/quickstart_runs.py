"""The README's quickstart command, run as a user runs it, for several seeds and once again for the first: the held-out
numbers it prints, their spread over seeds, and whether one command gives the same numbers twice.

    python bench/quickstart_runs.py --seeds 0 1 2 3 4     # 6 runs of 1000 steps (~3 min each on 2 idle cores)
    python bench/quickstart_runs.py --write README.md     # the README's table from docs/results/quickstart/runs.json

Each run is ``lit-grpo fit --config configs/quickstart.yaml --seed_everything=S`` (the config's own seed is 0) in a
fresh process with the machine's default threads, at every default the command resolves to (recorded as
``settings``: the parsed config and the rollout engine the module builds; a test fails when today's command
resolves a recorded setting differently, so a changed default means measuring again). Recorded per run: greedy accuracy and sampled accuracy
(temperature 1) on the 200 held-out prompts as the command prints them before and after training, and at its
validations at steps 250, 500 and 750 (a validation's sampled accuracy uses other random numbers than the report's),
the wall time from start to exit, the process's peak resident memory and the machine's load average when it
started (other work on the cores slows a run, and it is said so). The first seed runs twice; ``repeat_identical``
says whether every logged metric but the timings matched bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import ROOT, code_commit, command, resolved_settings, write_block

RESULTS = ROOT / "docs" / "results" / "quickstart" / "runs.json"
BEGIN, END = "<!-- quickstart_runs: begin -->\n", "<!-- quickstart_runs: end -->\n"
STEPS = (250, 500, 750, 1000)
#: the README's command: its settings are recorded with the runs, and tests/bench holds them to today's
USERS_ARGS = ["--config", "configs/quickstart.yaml"]
#: label: (printed before training, the validations at 250, 500 and 750, printed after training at 1000)
METRICS = {"greedy accuracy": ("heldout/accuracy_before", "val/accuracy", "heldout/accuracy_after"),
           "sampled accuracy (temperature 1)": ("heldout/reward_mean_before", "val/reward_mean",
                                                "heldout/reward_mean_after")}


def run(seed: int, folder: Path) -> dict:
    from lit_grpo.lab.collect import read_scalars
    argv = [sys.executable, "-m", "lit_grpo", "fit", *USERS_ARGS, f"--seed_everything={seed}",
            f"--trainer.logger.init_args.save_dir={folder}", "--trainer.enable_progress_bar=false"]
    load, started = os.getloadavg()[0], time.perf_counter()
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, stderr = child.communicate()
    wall = time.perf_counter() - started
    if child.returncode:
        raise RuntimeError(f"seed {seed}: exit {child.returncode}\n{stderr[-3000:]}")
    scalars = read_scalars(next(folder.glob("quickstart/version_*")))
    out = {"seed": seed, "wall_s": round(wall, 1), "load_at_start": round(load, 2)}
    for label, (before, during, after) in METRICS.items():
        at = dict(scalars[during])
        out[label] = [round(v, 4) for v in (scalars[before][0][1], *(at[s - 1] for s in STEPS[:-1]), scalars[after][0][1])]
    out["_scalars"] = {k: v for k, v in scalars.items() if not (k.startswith("perf/") or k.endswith("_s"))}
    return out


def measure(seeds: list[int]) -> dict:
    import resource

    runs, logged = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i, seed in enumerate([*seeds, seeds[0]]):  # the first seed twice
            runs.append(run(seed, Path(tmp) / str(i)))
            logged.append(runs[-1].pop("_scalars"))
            print(json.dumps(runs[-1]), flush=True)
    again = runs.pop()
    repeat = {"seed": again["seed"], "identical": logged[-1] == logged[0], "wall_s": again["wall_s"]}
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux: the largest child
    return {"runs": runs, "repeat": repeat, "peak_rss_mib": round(peak)}


def _spread(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def render() -> str:
    data = json.loads(RESULTS.read_text())
    runs, first = data["runs"], data["runs"][0]
    lines = ["| held-out (200 prompts) | starting policy | " + " | ".join(f"after {s} steps" for s in STEPS) + " |",
             "|---|---|" + "---|" * len(STEPS)]
    for label in METRICS:
        lines.append(f"| {label}, seed {first['seed']} (the config's) | " + " | ".join(f"{v:.3f}" for v in first[label])
                     + " |")
        columns = list(zip(*(r[label] for r in runs), strict=True))
        lines.append(f"| {label}, mean (min-max) over seeds {', '.join(str(r['seed']) for r in runs)} | "
                     + " | ".join(_spread(list(c)) for c in columns) + " |")
    walls = sorted(r["wall_s"] for r in runs)
    same = "gave the same numbers, every logged metric bit for bit" if data["repeat"]["identical"] else \
        "gave different numbers"
    lines += ["", f"Measured by `{data['command']}` ({data['cpus']} CPU cores, one run at a time): {len(runs)} runs of "
              f"1000 steps took {walls[0] / 60:.1f} to {walls[-1] / 60:.1f} min end to end (median "
              f"{statistics.median(walls) / 60:.1f}; {_busy(runs, data['cpus'])}), "
              f"peak RSS {data['peak_rss_mib']} MiB; seed {data['repeat']['seed']} run a second time {same}. Data: "
              "`docs/results/quickstart/runs.json`."]
    return "\n".join(lines) + "\n"


def _busy(runs: list[dict], cpus: int) -> str:
    """Which runs started beside other work, from the data: a 1-minute load average above the cores + 0.5 (the
    previous run's own threads still count in it for a minute)."""
    busy = [str(r["seed"]) for r in runs if r["load_at_start"] > cpus + 0.5]
    if not busy:
        return "each started on an otherwise idle machine"
    return f"seeds {', '.join(busy)} started beside other work, `load_at_start` in the data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--write", type=Path, help="replace the block between the markers of this doc and exit")
    args = parser.parse_args()
    if args.write:
        write_block(args.write, BEGIN, END, render())
        return
    record = {"command": command("bench/quickstart_runs.py", sys.argv[1:]), "cpus": os.cpu_count(),
              "code": code_commit(), "settings": resolved_settings(USERS_ARGS), **measure(args.seeds)}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
