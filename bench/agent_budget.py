"""What GRPO adds over more supervised training, on the real-model tool tasks of docs/agents.md.

    python bench/agent_budget.py --task search_agent     # estimated 2 hours: two 50-minute trainings and more
    python bench/agent_budget.py --task calculator
    python bench/agent_budget.py --write docs/agents.md  # the table, from docs/results/agents/budget.json

Each task's GRPO run starts from a short supervised stage on demonstrations (``configs/real/<task>_sft.yaml``),
kept short so that RL has room to learn; docs/agents.md measures GRPO's gain over that start. This asks what the
same budget buys when it is spent on more supervised steps instead. From one supervised start (the task's SFT
config, run as published), two arms train new LoRA adapters for the same wall-clock budget, the GRPO config's
``trainer.max_time``:

- ``grpo``: ``configs/real/<task>.yaml`` as published;
- ``sft_more``: the task's SFT config continued from the start (its demonstrations, its learning rate), without
  its early stop and validation, for the same ``max_time``.

Both final policies (adapters merged) are then scored by ``scripts/probe_policy.py`` as docs/agents.md scores
its stages: one sampled episode on each of the 500 held-out prompts (the search agent's test split, the
calculator's validation split), vLLM in float32, seed 0; the per-prompt results pair the arms prompt by prompt.
The work runs in ``runs/agent_budget/<task>/`` (``--root``); a stage whose output is there is not run again.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from provenance import command, portable, write_block

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "agents" / "budget.json"
BEGIN, END = "<!-- agent_budget.py:begin -->\n", "<!-- agent_budget.py:end -->"
#: The tasks and the held-out split each is scored on (docs/agents.md's table scores the same).
TASKS = {"search_agent": "test", "calculator": "val"}
#: The two arms, named as their stages are.
ARMS = ("grpo", "sft_more")

#: The success criterion, fixed before the first run. For each task, the primary comparison is GRPO's sampled
#: held-out accuracy minus sft_more's (one sampled episode on each of the task's 500 held-out prompts, the same
#: prompts for both arms), tested by the exact two-sided McNemar test on the prompts where the arms disagree, with
#: Holm's correction over the two tasks. Each task reads: a difference of at least +``margin`` with a Holm-adjusted
#: p below ``alpha``, "GRPO adds over more supervised steps at this budget"; a significant positive difference
#: below +``margin``, "GRPO ahead, by less than the margin"; sft_more significantly ahead, "more supervised steps
#: do better at this budget"; anything else inconclusive, which is not evidence that the arms are equal. One run
#: of each arm from one supervised start: the test says how well 500 prompts pin each final policy's accuracy, not
#: how runs from other seeds would land, and the docs say so. The budget is wall-clock training time on the same
#: otherwise idle 2 cores; each arm's measured training minutes are reported beside it.
CRITERION = {"margin": 0.05, "alpha": 0.05, "prompts": 500, "seed": 0}


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: ``b`` prompts right only under one arm, ``c`` only under the other; under
    the null each disagreement goes either way with probability 1/2 (the doubled binomial tail, at most 1)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def holm(pvalues: dict[str, float]) -> dict[str, float]:
    """Holm-adjusted p-values by name (:func:`lit_grpo.lab.stats.holm_adjust`, the lab's adjustment)."""
    from lit_grpo.lab.stats import holm_adjust

    return dict(zip(pvalues, holm_adjust(list(pvalues.values())), strict=True)) if pvalues else {}


def paired(grpo: list[int], sft_more: list[int]) -> dict:
    """The paired comparison of two probes' per-prompt results (one sample a prompt: 0 or 1 each)."""
    if len(grpo) != len(sft_more):
        raise ValueError(f"the probes scored {len(grpo)} and {len(sft_more)} prompts: not the same split")
    if any(v not in (0, 1) for v in (*grpo, *sft_more)):
        raise ValueError("each prompt must have one sample (0 or 1 correct): probe with --samples 1")
    n = len(grpo)
    b = sum(g and not s for g, s in zip(grpo, sft_more, strict=True))  # GRPO right, sft_more wrong
    c = sum(s and not g for g, s in zip(grpo, sft_more, strict=True))
    diff = (b - c) / n
    se = math.sqrt(max(0.0, (b + c) - (b - c) ** 2 / n)) / n  # paired proportions (Wald)
    return {"prompts": n, "grpo": sum(grpo) / n, "sft_more": sum(sft_more) / n, "grpo_only": b, "sft_more_only": c,
            "diff": diff, "lo": diff - 1.959964 * se, "hi": diff + 1.959964 * se, "p": mcnemar_exact(b, c)}


def verdict(diff: float, p_holm: float, margin: float = CRITERION["margin"],
            alpha: float = CRITERION["alpha"]) -> str:
    """The criterion's reading of one task."""
    if p_holm < alpha and diff >= margin:
        return "GRPO adds over more supervised steps at this budget"
    if p_holm < alpha and diff > 0:
        return "GRPO ahead, by less than the margin"
    if p_holm < alpha and diff < 0:
        return "more supervised steps do better at this budget"
    return "inconclusive"


def judge(tasks: dict[str, dict]) -> dict[str, dict]:
    """Each measured task's comparison, Holm over the criterion's family (every task of :data:`TASKS`), and its
    verdict.

    A task not yet measured enters the family with p = 1. Holm's adjusted p of a measured task can then only be
    too high, never too low (with two tasks it is ``min(1, 2p)``, Bonferroni's, and the unknown p can only lower
    it), so a significant reading already holds for the whole family; any other reading waits for the missing
    tasks (``pending`` names them) and is not given yet."""
    compared = {t: paired(d["grpo"]["correct_per_prompt"], d["sft_more"]["correct_per_prompt"])
                for t, d in tasks.items() if "grpo" in d and "sft_more" in d}
    missing = [t for t in TASKS if t not in compared]
    adjusted = holm({**{t: c["p"] for t, c in compared.items()}, **dict.fromkeys(missing, 1.0)})
    for task, c in compared.items():
        c["p_holm"], c["family"], c["pending"] = adjusted[task], len(TASKS), missing
        reading = verdict(c["diff"], c["p_holm"])
        c["verdict"] = reading if reading != "inconclusive" or not missing else "not yet read"
    return compared


# ---- running the stages -------------------------------------------------------------------------------------------
def _config(task: str, sft: bool) -> Path:
    return ROOT / "configs" / "real" / f"{task}{'_sft' if sft else ''}.yaml"


def budget_of(task: str) -> str:
    """The GRPO config's ``trainer.max_time``: the budget both arms train for."""
    return yaml.safe_load(_config(task, sft=False).read_text())["trainer"]["max_time"]


def stages(task: str) -> list[tuple[str, list[str], str]]:
    """``(stage, lit-grpo fit arguments, the output that marks it done)`` in order; paths relative to the task's
    work folder, as the configs write them."""
    start = f"runs/{task}_sft/policy/merged"
    sft_more = f"runs/{task}_sft_more/policy"
    save = json.dumps({"class_path": "lit_grpo.callbacks.SavePretrained", "init_args": {"dirpath": sft_more,
                                                                                        "merge": True}})
    from lit_grpo.rollout.hf import EPISODE_DRAWS_ARG  # generate's draws, as the published runs drew

    return [
        ("start", ["--config", str(_config(task, sft=True)), EPISODE_DRAWS_ARG], start),
        ("grpo", ["--config", str(_config(task, sft=False)), EPISODE_DRAWS_ARG], f"runs/real_{task}/policy/merged"),
        ("sft_more", ["--config", str(_config(task, sft=True)), EPISODE_DRAWS_ARG, f"--model.model={start}",
                      f"--trainer.max_time={budget_of(task)}", "--trainer.max_steps=1000000",
                      "--trainer.limit_val_batches=0", "--trainer.callbacks=[]", f"--trainer.callbacks+={save}",
                      f"--trainer.logger.init_args.name={task}_sft_more"], f"{sft_more}/merged"),
    ]


def probe_args(task: str, policy: str, out: str) -> list[str]:
    """scripts/probe_policy.py's arguments for one arm, as docs/agents.md's probes were made."""
    return ["--split", TASKS[task], "--samples", "1", "--group-size", "1", "--seed", str(CRITERION["seed"]),
            "--json", out, "--", "--config", str(_config(task, sft=False)), "--model.model", policy,
            "--model.engine.init_args.engine", "lit_grpo.rollout.vllm.VLLMEngine",
            "--model.engine.init_args.engine.init_args.kv_cache_gib", "2",
            "--model.engine.init_args.engine.init_args.dtype", "float32"]


def _run(argv: list[str], cwd: Path, log: Path) -> float:
    started = time.time()
    with open(log, "w") as out:
        code = subprocess.call(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if code:
        raise SystemExit(f"agent_budget: {' '.join(argv[:4])} ... exited {code}; its output: {log}")
    return time.time() - started


def training_time(run_dir: Path) -> dict:
    """The run's training steps and the minutes from the first to the last training step's event of its TensorBoard
    log (the budget used): ``{"training_min": ..., "training_steps": ...}``, None each without a log."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    versions = sorted(run_dir.glob("version_*"))
    if not versions:
        return {"training_min": None, "training_steps": None}
    events = EventAccumulator(str(versions[-1]), size_guidance={"scalars": 0}).Reload()
    steps = events.Scalars("perf/step_s") if "perf/step_s" in events.Tags()["scalars"] else []
    if not steps:
        steps = [e for tag in events.Tags()["scalars"] if tag.startswith("train/") for e in events.Scalars(tag)]
    if not steps:
        return {"training_min": None, "training_steps": None}
    minutes = round((max(e.wall_time for e in steps) - min(e.wall_time for e in steps)) / 60, 1)
    return {"training_min": minutes, "training_steps": len({e.step for e in steps})}


def measure(task: str, root: Path, previous: dict | None = None) -> dict:
    """Run the stages not yet done and both probes; this task's record. ``previous`` is the task's record from an
    earlier call: what it measured of the stages this call finds done (their wall times, the load when they ran) is
    kept, as a call that runs nothing only reads the results again."""
    work = root / task
    work.mkdir(parents=True, exist_ok=True)
    record: dict = {**(previous or {}), "task": task, "split": TASKS[task], "budget": budget_of(task),
                    "cpus": os.cpu_count()}
    ran = False
    probes = [arm for arm in ARMS if not (work / f"probe_{arm}.json").exists()]
    if probes and importlib.util.find_spec("vllm") is None:  # checked before the hours of training, not after
        from lit_grpo.rollout.vllm import INSTALL_HINT

        raise SystemExit(f"agent_budget: the {task} probes ({', '.join(probes)}) generate with vLLM, which this "
                         f"Python ({sys.executable}) cannot import: {INSTALL_HINT}; then run this with that "
                         "environment's python")

    def run(what: str, argv: list[str], log: Path) -> float:
        nonlocal ran
        if not ran:
            record["load_at_start"], ran = os.getloadavg(), True
        print(f"[{task}] {what}", flush=True)
        return _run(argv, work, log)

    outputs = {}  # stage -> the merged policy it writes, under its run directory
    for stage, args, done in stages(task):
        outputs[stage] = done
        if not (work / done).exists():
            record[f"{stage}_wall_s"] = round(run(f"{stage}: lit-grpo fit {' '.join(args[:2])} ...",
                                                  [sys.executable, "-m", "lit_grpo", "fit", *args],
                                                  work / f"{stage}.log"), 1)
    for arm in ARMS:
        policy = outputs[arm]  # the merged policy the arm's stage wrote
        out = work / f"probe_{arm}.json"
        if not out.exists():
            run(f"probing {arm} on the {TASKS[task]} split",
                [sys.executable, str(ROOT / "scripts" / "probe_policy.py"), *probe_args(task, policy, out.name)],
                work / f"probe_{arm}.log")
        record[arm] = json.loads(out.read_text())
        record[arm]["fit_args"] = [portable(a) if a.startswith("/") else a for a in record[arm]["fit_args"]]
        record[arm].update(training_time(work / Path(policy).parents[1]))  # runs/<run>/policy/merged
    if ran:
        record["load_at_end"] = os.getloadavg()
    return record


# ---- the doc -----------------------------------------------------------------------------------------------------
def _pending(missing: list[str]) -> str:
    if not missing:
        return ""
    names = " and ".join(missing)
    return (f", with {names} not yet measured and counted as p = 1, so at most this; a reading other than "
            f"significant waits for {names}")


def render(data: dict) -> str:
    """The markdown block: each measured task's arms, the paired comparison and its verdict."""
    judged = judge(data["tasks"])
    lines = ["| task | arm | training minutes | training steps | held-out prompts | sampled accuracy | episodes with a "
             "call |", "|---|---|---|---|---|---|---|"]
    for task, d in data["tasks"].items():
        for arm, label in (("grpo", "GRPO"), ("sft_more", "more supervised steps")):
            if arm in d:
                a = d[arm]
                calls = a.get("episodes", {}).get("with_call")
                lines.append(f"| {task} | {label} | {a['training_min']} | {a.get('training_steps', '-')} | "
                             f"{a['prompts']} ({a['split']}) | "
                             f"{a['sampled_accuracy']:.3f} | {'-' if calls is None else f'{calls:.3f}'} |")
    lines.append("")
    for task, c in judged.items():
        lines.append(f"- **{task}**: GRPO − more supervised steps {c['diff']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}] "
                     f"({c['grpo_only']} prompts right only under GRPO, {c['sft_more_only']} only under more "
                     f"supervised steps; exact McNemar p {c['p']:.3g}, Holm over {c['family']}: {c['p_holm']:.3g}"
                     f"{_pending(c['pending'])}): **{c['verdict']}**.")
    lines.append("")
    for task, d in data["tasks"].items():
        lines.append(f"{task}: `{d['command']}`, budget `trainer.max_time` {d['budget']}.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), action="append", help="measure this task (repeatable)")
    parser.add_argument("--root", type=Path, default=Path("runs/agent_budget"), help="the work folders")
    parser.add_argument("--json", type=Path, default=RESULTS, help="the results file (tasks are added to it)")
    parser.add_argument("--dry-run", action="store_true", help="print each stage's command, run nothing")
    parser.add_argument("--write", type=Path, help="replace the block between the markers of this markdown file")
    args = parser.parse_args(argv)
    if not args.task and not args.write:
        parser.error("nothing to do: give --task (to measure) or --write (to render)")
    if args.dry_run:
        for task in args.task or []:
            for stage, fit_args, _ in stages(task):
                print(f"# {task} {stage}\nlit-grpo fit {' '.join(fit_args)}")
            for arm in ARMS:
                print(f"# {task} probe {arm}\npython scripts/probe_policy.py "
                      + " ".join(probe_args(task, f"<{arm} policy>", f"probe_{arm}.json")))
        return
    if args.task:
        data = json.loads(args.json.read_text()) if args.json.exists() else {"tasks": {}}
        made_with = command("bench/agent_budget.py", sys.argv[1:] if argv is None else argv)
        for task in args.task:
            data["tasks"][task] = {**measure(task, args.root.resolve(), data["tasks"].get(task)), "command": made_with}
        data["criterion"] = CRITERION
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=1) + "\n")
        print(render(data), end="")
    if args.write:
        write_block(args.write, BEGIN, END, render(json.loads(args.json.read_text())))


if __name__ == "__main__":
    main()
