"""The real quickstart timed as a user runs it: wall time by phase, held-out accuracy before and after with
95% intervals, the CPU's flags and the dtype ``dtype: auto`` chose, into one JSON; and docs/real_model.md's
block rendered from that JSON.

    python bench/real_quickstart_time.py                                  # the whole command, one run
    python bench/real_quickstart_time.py --max-steps 3 --json /tmp/profile.json  # a short profile
    python bench/real_quickstart_time.py --json docs/results/real_quickstart_time_float32.json -- --model.dtype=float32
    python bench/real_quickstart_time.py --write docs/real_model.md       # the doc's block from the JSONs
    python bench/real_quickstart_time.py --keep runs/rq && python bench/real_curve.py \
        runs/rq/runs/real_quickstart/version_0 --time-log runs/rq/time.txt --json docs/results/real_quickstart.json \
        --figure docs/results/real_quickstart_curve.png                   # and the same run's curve

The run is ``lit-grpo fit --config configs/real/quickstart.yaml`` in a fresh process (in a temporary folder, so
its ``runs/`` go there; the model must be in the cache: ``lit-grpo models fetch smollm2-135m-instruct``).
Phases come from the wall clock of the lines it prints and of its TensorBoard events: ``start`` (imports,
parsing the config, until it prints the dtype it chose), ``model`` (tokenizer, weights, LoRA, trainer setup,
until Lightning prints the model summary), ``heldout_before`` (until the first step starts: the first step's
event time less its ``perf/step_s``), ``training`` (until the last step's event), ``heldout_after`` (until the
report is printed) and ``exit``. Recorded beside them: the load average at start and end (other work on the
cores slows a run: say so), the peak resident memory, the CPU flags that matter to the dtype choice, torch's
CPU capability, the number of cores, and the held-out lines as printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import ROOT, code_commit, command, write_block

CONFIG = ROOT / "configs" / "real" / "quickstart.yaml"
RESULTS = ROOT / "docs" / "results"
FULL = RESULTS / "real_quickstart_time.json"
FLOAT32 = RESULTS / "real_quickstart_time_float32.json"  # the same command with --model.dtype=float32
BEGIN, END = "<!-- real_quickstart_time: begin -->\n", "<!-- real_quickstart_time: end -->\n"
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
TIME = Path("/usr/bin/time")
PHASES = ("start", "model", "heldout_before", "training", "heldout_after", "exit")
#: a held-out line as HeldOutReport prints it
HELD = re.compile(r"^\s*(accuracy|reward_mean)\s+before ([\d.]+)\s+after ([\d.]+)\s+\(95%: \+-([\d.]+), "
                  r"\+-([\d.]+); change ([+-][\d.]+) \+-([\d.]+); n=(\d+)\)")
DTYPE = re.compile(r"model\.dtype=auto: (\w+) \((.*)\)")


def given_dtype(options: list[str] | tuple[str, ...]) -> str | None:
    """The dtype the options set, in either form (``--model.dtype=float32``, ``--model.dtype float32``); the
    last one counts, as on the command line; None when they set none."""
    given = None
    for i, option in enumerate(options):
        if option.startswith("--model.dtype="):
            given = option.split("=", 1)[1]
        elif option == "--model.dtype" and i + 1 < len(options):
            given = options[i + 1]
    return given


def parse_heldout(lines: list[str]) -> dict:
    """The held-out lines of the report: per metric, before/after with their half-widths and the change's."""
    out = {}
    for line in lines:
        found = HELD.match(line)
        if found:
            name, *numbers, n = found.groups()
            keys = ("before", "after", "before_half", "after_half", "change", "change_half")
            out[name] = {**dict(zip(keys, map(float, numbers), strict=True)), "n": int(n)}
    return out


def phases(started: float, printed: list[tuple[float, str]], steps: list[tuple[float, float]],
           ended: float) -> dict[str, float]:
    """Seconds per phase (:data:`PHASES`) from the time each line was printed and each step's (event wall
    time, ``perf/step_s``)."""
    def first(text: str) -> float:
        return next(t for t, line in printed if text in line)

    chosen = "model.dtype=auto" if any("model.dtype=auto" in line for _, line in printed) else "Seed set to"
    marks = [started, first(chosen), first("Trainable params"), steps[0][0] - steps[0][1],
             steps[-1][0], first("Held-out prompts"), ended]
    return {name: round(b - a, 1) for name, a, b in zip(PHASES, marks[:-1], marks[1:], strict=True)}


def run(max_steps: int | None, keep: Path | None = None, extra: list[str] = ()) -> dict:
    """One run in a fresh process; in ``keep`` (its ``runs/`` and, under ``/usr/bin/time -v``, ``time.txt``
    stay there for bench/real_curve.py) or in a temporary folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lit_grpo.precision import cpu_flags

    with tempfile.TemporaryDirectory() if keep is None else contextlib.nullcontext(keep) as tmp:
        Path(tmp).mkdir(parents=True, exist_ok=True)
        timer = ["/usr/bin/time", "-v", "-o", str(Path(tmp) / "time.txt")] if keep and TIME.exists() else []
        argv = [*timer, sys.executable, "-m", "lit_grpo", "fit", "--config", str(CONFIG),
                "--trainer.enable_progress_bar=false", *extra]
        if max_steps is not None:
            argv.append(f"--trainer.max_steps={max_steps}")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        load_start, started = os.getloadavg(), time.time()
        child = subprocess.Popen(argv, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        printed = [(time.time(), line.rstrip("\n")) for line in child.stdout]
        ended = time.time()
        if child.wait():
            tail = "\n".join(line for _, line in printed[-40:])
            raise RuntimeError(f"exit {child.returncode}:\n{tail}")
        load_end = os.getloadavg()
        events = EventAccumulator(str(next(Path(tmp).glob("runs/real_quickstart/version_*"))),
                                  size_guidance={"scalars": 0}).Reload()
        step_s = events.Scalars("perf/step_s")
        sampled = [round(e.value, 4) for e in events.Scalars("rollout/reward_mean")]
    lines = [line for _, line in printed]
    auto = next((DTYPE.search(line) for line in lines if DTYPE.search(line)), None)
    given = given_dtype(extra)
    dtype, reason = (auto.group(1), auto.group(2)) if auto else (given, f"set by --model.dtype={given}")
    import torch

    flags = cpu_flags() or frozenset()
    return {
        "max_steps": max_steps, "steps": len(step_s), "wall_s": round(ended - started, 1),
        "phases_s": phases(started, printed, [(e.wall_time, e.value) for e in step_s], ended),
        "heldout": parse_heldout(lines), "heldout_lines": [line for line in lines if HELD.match(line)],
        "dtype": dtype, "dtype_reason": reason, "options": list(extra),
        "cpu_flags": {flag: flag in flags for flag in FLAGS}, "torch_cpu_capability":
            torch.backends.cpu.get_cpu_capability(), "cpus": os.cpu_count(), "threads": torch.get_num_threads(),
        "load_at_start": [round(v, 2) for v in load_start], "load_at_end": [round(v, 2) for v in load_end],
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20, 2),
        "per_step_sampled_reward": sampled,
    }


def _interval(part: dict, key: str) -> str:
    return f"{part[key]:.3f} +-{part[key + '_half']:.3f}"


def render_one(data: dict, label: str) -> list[str]:
    lines = [f"{label}: `{data['command']}` at {data['commit']}, {data['steps']} steps, {data['wall_s'] / 60:.1f} "
             f"min wall, load average {data['load_at_start'][0]:.1f} at start and {data['load_at_end'][0]:.1f} at "
             f"the end on {data['cpus']} cores; dtype {data['dtype']} ({data['dtype_reason']}); peak RSS "
             f"{data['peak_rss_gib']} GiB.", "",
             "| phase | " + " | ".join(PHASES) + " |", "|---|" + "---|" * len(PHASES),
             "| seconds | " + " | ".join(f"{data['phases_s'][p]:.1f}" for p in PHASES) + " |", ""]
    names = {"accuracy": "greedy accuracy", "reward_mean": "sampled accuracy"}
    lines += [f"| held-out, {next(iter(data['heldout'].values()))['n']} prompts, 95% intervals | before | after "
              "| change |", "|---|---|---|---|"]
    for key, name in names.items():
        part = data["heldout"][key]
        lines.append(f"| {name} | {_interval(part, 'before')} | {_interval(part, 'after')} | "
                     f"{part['change']:+.3f} +-{part['change_half']:.3f} |")
    return [*lines, ""]


def render() -> str:
    """The doc's block: the whole command's run at the defaults and the same in float32, where they exist."""
    out = []
    for path, label in ((FULL, "Whole command"), (FLOAT32, "Whole command in float32")):
        if path.exists():
            out += render_one(json.loads(path.read_text()), label)
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, help="stop after this many steps (a short profile)")
    parser.add_argument("--json", type=Path, help=f"where to write (default {FULL.relative_to(ROOT)})")
    parser.add_argument("--write", type=Path, help="replace the block between the markers of this doc and exit")
    parser.add_argument("--keep", type=Path, help="run in this folder and keep its runs/ and time.txt (for "
                        "bench/real_curve.py: the per-step curve of the same run)")
    parser.add_argument("options", nargs="*", help="more options of lit-grpo fit, e.g. --model.dtype=float32 "
                        "(after --)")
    args = parser.parse_args()
    if args.write:
        write_block(args.write, BEGIN, END, render())
        return
    record = {"command": command("bench/real_quickstart_time.py", sys.argv[1:]), "commit": code_commit(),
              **run(args.max_steps, args.keep and args.keep.resolve(), args.options)}
    out = args.json or FULL
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "per_step_sampled_reward"}, indent=1))


if __name__ == "__main__":
    main()
