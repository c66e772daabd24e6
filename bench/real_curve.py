"""The curve of a real-quickstart run: per-step numbers from its TensorBoard events, as JSON and a figure.

    /usr/bin/time -v -o runs/real_quickstart/time.txt lit-grpo fit --config real/quickstart
    python bench/real_curve.py runs/real_quickstart/version_0 --time-log runs/real_quickstart/time.txt \
        --json docs/results/real_quickstart.json --figure docs/results/real_quickstart_curve.png

Reads ``rollout/reward_mean`` (the mean reward of the step's sampled completions: sampled accuracy on
training prompts the policy had not seen before, since an epoch has more prompts than the run draws),
``rollout/len_mean``, ``rollout/truncated_frac``, ``reward/no_answer``, the ``perf/*`` seconds per phase and
the held-out numbers ``heldout/*_before|after`` that ``HeldOutReport`` logs at the end; with ``--time-log``, the
whole run's wall seconds and peak RSS from the report of ``/usr/bin/time -v``. The figure shows the
per-step sampled reward with a moving average, and the held-out sampled and greedy accuracy before/after.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from provenance import portable


def read_run(run: Path) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run), size_guidance={"scalars": 0}).Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    wanted = ("rollout/reward_mean", "rollout/len_mean", "rollout/truncated_frac", "reward/no_answer",
              "train/loss", "train/grad_norm", "env/turns_mean", "env/tool_calls_mean", "env/truncated_frac",
              "env/tool_errors")
    steps = {tag: [round(v, 4) for _, v in scalars[tag]] for tag in wanted if tag in scalars}
    steps.update({tag: [round(v, 3) for _, v in values] for tag, values in scalars.items()
                  if tag.startswith("perf/") and values})
    perf = {tag: round(sum(v for _, v in values) / len(values), 2) for tag, values in scalars.items()
            if tag.startswith("perf/") and values}
    heldout = {tag: round(values[-1][1], 4) for tag, values in scalars.items() if tag.startswith("heldout/")}
    return {"run": portable(run), "steps": len(steps.get("rollout/reward_mean", [])), "per_step": steps,
            "perf_mean": perf, "heldout": heldout, "summary": summarise(steps, heldout)}


def summarise(steps: dict, heldout: dict, window: int = 5, gain: float = 0.10) -> dict:
    """Per-phase means over the first and the last 10 steps, the training minutes, and the first step at which
    the ``window``-step moving average of the sampled reward is ``gain`` above the held-out sampled accuracy
    before training (with the training minutes up to it)."""
    out = {name: {"first_10": round(sum(v[:10]) / len(v[:10]), 2), "last_10": round(sum(v[-10:]) / len(v[-10:]), 2)}
           for name, v in steps.items() if name.startswith("perf/") and v}
    seconds = steps.get("perf/step_s", [])
    out["training_min"] = round(sum(seconds) / 60, 1)
    reward, start = steps.get("rollout/reward_mean", []), heldout.get("heldout/reward_mean_before")
    if start is not None and seconds:
        for i in range(len(reward)):
            recent = reward[max(0, i - window + 1) : i + 1]
            if sum(recent) / len(recent) > start + gain:
                out[f"gain_{gain:g}_at_step"] = i + 1
                out[f"gain_{gain:g}_training_min"] = round(sum(seconds[: i + 1]) / 60, 1)
                break
    return out


def read_time_log(text: str) -> dict:
    """``wall_s`` and ``peak_rss_gib`` from the report ``/usr/bin/time -v`` writes (anywhere in ``text``)."""
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if wall is None or rss is None:
        raise SystemExit("the time log holds no '/usr/bin/time -v' report (its 'Elapsed (wall clock) time' and "
                         "'Maximum resident set size' lines); run the training under '/usr/bin/time -v -o FILE'")
    seconds = 0.0
    for part in wall.group(1).split(":"):  # h:mm:ss or m:ss.cc
        seconds = seconds * 60 + float(part)
    return {"wall_s": round(seconds, 1), "peak_rss_gib": round(int(rss.group(1)) / 2**20, 1)}


def plot(data: dict, out: Path, ylabel: str = "accuracy (last number = a + b)",
         title: str = "SmolLM2-135M-Instruct, LoRA GRPO, 2 CPU cores") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reward = data["per_step"]["rollout/reward_mean"]
    window = 5
    smooth = [sum(reward[max(0, i - window + 1) : i + 1]) / len(reward[max(0, i - window + 1) : i + 1])
              for i in range(len(reward))]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(range(1, len(reward) + 1), reward, ".", alpha=0.4, label="sampled reward of the step (8 x 8)")
    ax.plot(range(1, len(reward) + 1), smooth, "-", label=f"moving average ({window} steps)")
    held = data["heldout"]
    for key, style, label in [("reward_mean", "s", "held-out sampled accuracy (500)"),
                              ("accuracy", "^", "held-out greedy accuracy (500)")]:
        if f"heldout/{key}_before" in held:
            ax.plot([0, len(reward)], [held[f"heldout/{key}_before"], held[f"heldout/{key}_after"]], style, markersize=8,
                    label=label)
    ax.set_xlabel("GRPO step")
    calls = data["per_step"].get("env/tool_calls_mean")
    if calls:  # episodes with tools: the calls per episode on the same axis (0..1 for one call)
        ax.plot(range(1, len(calls) + 1), calls, "--", alpha=0.7, label="tool calls per episode")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, max(1.0, max(calls or [0]) * 1.05))
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the run's version directory (holding the events file)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--figure", type=Path)
    parser.add_argument("--time-log", type=Path, help="the report of /usr/bin/time -v for the run (wall time, peak RSS)")
    parser.add_argument("--note", default="", help="what else to record with the numbers (the commit, the load)")
    parser.add_argument("--ylabel", default="accuracy (last number = a + b)", help="the figure's y label")
    parser.add_argument("--title", default="SmolLM2-135M-Instruct, LoRA GRPO, 2 CPU cores", help="the figure's title")
    args = parser.parse_args()
    data = read_run(args.run)
    if args.time_log:
        data.update(read_time_log(args.time_log.read_text()))
    if args.note:
        data["note"] = args.note
    print(json.dumps({k: v for k, v in data.items() if k != "per_step"}, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    if args.figure:
        plot(data, args.figure, args.ylabel, args.title)


if __name__ == "__main__":
    main()
