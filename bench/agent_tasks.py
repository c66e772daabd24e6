"""The real-model tool tasks' table in docs/agents.md, rendered from their committed measurements.

    python bench/agent_tasks.py --write docs/agents.md     # after the measurements below are committed

Reads ``docs/results/agents/<task>/*.json``: the starts measured by ``scripts/probe_policy.py --json``
(``no_tool.json``: the base model answering in one turn without a tool; ``base_tool.json``: the base model with
the tool; ``sft_start.json``: after the supervised stage on demonstrations; ``after_rl.json``: after GRPO) and the
run's curve by ``bench/real_curve.py`` (``curve.json``). Every number of the table comes from those files;
tests/bench/test_agent_tasks.py fails when the doc and the files disagree.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from provenance import write_block

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "agents"
BEGIN, END = "<!-- agent_tasks.py:begin -->\n", "<!-- agent_tasks.py:end -->"
STAGES = [("no_tool.json", "base model, no tool (one turn)"), ("base_tool.json", "base model, with the tool"),
          ("sft_start.json", "after the supervised start (RL's start)"), ("after_rl.json", "after GRPO")]


def load(task_dir: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(task_dir.glob("*.json"))}


def render(results: Path = RESULTS) -> str:
    """The markdown table of every task under ``results`` (one row per measured stage)."""
    lines = ["| task | policy | held-out prompts | sampled accuracy (95% interval) | episodes with a call | truncated |",
             "|---|---|---|---|---|---|"]
    for task_dir in sorted(p for p in results.iterdir() if p.is_dir()):
        data = load(task_dir)
        for name, label in STAGES:
            if name not in data:
                continue
            d = data[name]
            episodes = d.get("episodes", {})
            call = f"{episodes['with_call']:.3f}" if "with_call" in episodes and name != "no_tool.json" else "-"
            truncated = f"{episodes['truncated']:.3f}" if "truncated" in episodes else "-"
            accuracy = f"{d['sampled_accuracy']:.3f}"
            if d.get("samples", 1) == 1:  # one episode per prompt: independent trials (several per prompt are not)
                low, high = wilson(round(d["sampled_accuracy"] * d["prompts"]), d["prompts"])
                accuracy += f" ({low:.3f}-{high:.3f})"
            lines.append(f"| {task_dir.name} | {label} | {d['prompts']} ({d['split']}) | {accuracy} | {call} "
                         f"| {truncated} |")
        curve = data.get("curve.json")
        if curve:
            s, steps = curve["summary"], curve["per_step"]
            reward, calls = steps["rollout/reward_mean"], steps.get("env/tool_calls_mean", [])
            first, last = _mean(reward[:5]), _mean(reward[-5:])
            lines.append(f"| {task_dir.name} | during GRPO ({curve['steps']} steps, {s['training_min']} min): first and "
                         f"last 5 steps | 64 per step (train) | {first:.3f} -> {last:.3f} | "
                         f"{_mean(calls[:5]):.2f} -> {_mean(calls[-5:]):.2f} calls per episode | |")
        if "sft_start.json" in data and "after_rl.json" in data:
            gain = data["after_rl.json"]["sampled_accuracy"] - data["sft_start.json"]["sampled_accuracy"]
            lines.append(f"| {task_dir.name} | **change by GRPO** | | **{100 * gain:+.1f} points** | | |")
    return "\n".join(lines) + "\n"


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson's score interval of a binomial proportion (95% by default): ``successes`` of ``n`` independent
    episodes. It stays inside [0, 1] and keeps its coverage near 0 and 1, where the normal interval does not."""
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="replace the table between the markers of this markdown file")
    args = parser.parse_args()
    table = render()
    if not args.write:
        print(table, end="")
        return
    write_block(args.write, BEGIN, END, table)


if __name__ == "__main__":
    main()
