"""Peak memory (RSS) of a few GRPO steps: the quickstart and a ~100M-parameter model, with and without
gradient checkpointing, and with LoRA.

    python bench/memory.py                    # every configuration, each in a fresh process
    python bench/memory.py --only 100m-gc     # one of them
    python bench/memory.py --steps 2 --threads 2
    python bench/memory.py --baseline OLD --json docs/results/memory.json --write docs/scale.md
    python bench/memory.py --render --json docs/results/memory.json --write docs/scale.md

``--baseline DIR`` measures every configuration again with the ``lit_grpo`` of another checkout (``DIR``, e.g.
``git worktree add OLD <commit>``; its commit is recorded) in the same run, the two alternating, so that a
change's effect on peak memory is read from one run. ``--json`` keeps the rows with the commits, the load and
the command; ``--write`` renders them into the block of a markdown file; ``--render`` renders the JSON alone.

Each configuration runs in its own process (peak RSS only grows), through Lightning on the CPU with the
HF generate engine. ``load_MiB`` is the RSS once the policy is loaded (Python, torch and the weights);
``peak_MiB`` the peak over the run; ``train_MiB`` their difference: gradients, optimizer state,
activations and generation. The ~100M model (``lit_grpo.models.tiny`` size ``large``) is randomly
initialised, so its completions run to ``max_new_tokens``: every step has the full length.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from provenance import code_commit, code_env, command, write_block  # bench/ is the script's directory

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "results" / "memory.json"
BEGIN, END = "<!-- memory.py:begin -->", "<!-- memory.py:end -->"
#: name -> (model, prompts per step, group size, max new tokens, gradient checkpointing, LoRA)
CONFIGS = {
    "quickstart": ("quickstart", 16, 8, 6, False, False),
    "quickstart-gc": ("quickstart", 16, 8, 6, True, False),
    "100m": ("large", 4, 4, 48, False, False),
    "100m-gc": ("large", 4, 4, 48, True, False),
    "100m-lora": ("large", 4, 4, 48, False, True),
    "100m-lora-gc": ("large", 4, 4, 48, True, True),
}


def rss_mib() -> float:
    """Current resident set size of this process in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure(name: str, steps: int) -> dict:
    import lightning as L

    from lit_grpo import ExactMatch, GRPOModule, PromptDataModule, SyntheticArithmetic
    from lit_grpo.lora import LoraSettings
    from lit_grpo.models.tiny import build_tiny_model
    from lit_grpo.settings import Batching, Optim, Sampling

    size, prompts, group, new_tokens, checkpointing, lora = CONFIGS[name]
    L.seed_everything(0)
    with tempfile.TemporaryDirectory() as tmp:
        model = (
            str(ROOT / "assets" / "tiny-arith-sft")
            if size == "quickstart"
            else str(build_tiny_model(tmp, size))
        )
        module = GRPOModule(
            model=model,
            reward=ExactMatch(),
            group_size=group,
            sampling=Sampling(max_new_tokens=new_tokens),
            optim=Optim(lr=1e-4),
            batching=Batching(gradient_checkpointing=checkpointing),
            lora=LoraSettings(r=16) if lora else None,
        )
        module.configure_model()
        float(
            sum(p.detach().abs().sum() for p in module.policy.parameters())
        )  # page in memory-mapped weights
        load = rss_mib()
        data = PromptDataModule(SyntheticArithmetic(max_operand=99, num_train=256), prompts_per_step=prompts)
        trainer = L.Trainer(
            max_steps=steps,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            accelerator="cpu",
        )
        trainer.fit(module, datamodule=data)
    params = sum(p.numel() for p in module.policy.parameters())
    trainable = sum(p.numel() for p in module.policy.parameters() if p.requires_grad)
    return {
        "config": name,
        "params_M": params / 1e6,
        "trainable_M": trainable / 1e6,
        "completions": prompts * group,
        "max_new_tokens": new_tokens,
        "load_MiB": load,
        "peak_MiB": peak_mib(),
        "train_MiB": peak_mib() - load,
    }


def run_config(name: str, steps: int, threads: int, code: Path | None) -> dict:
    """One configuration in a fresh process, importing ``lit_grpo`` from ``code`` (a checkout) when given."""
    env = code_env(code, HF_HUB_OFFLINE="1")
    cmd = [sys.executable, __file__, "--only", name, "--steps", str(steps), "--threads", str(threads)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"bench/memory.py: {name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def render(report: dict) -> str:
    """The markdown table of a ``--json`` report (with the baseline's peaks beside this code's when it has them)."""
    base = {r["config"]: r for r in report.get("baseline", {}).get("rows", [])}
    head = "| config | params (M) | trainable (M) | completions x tokens | after load (MiB) | peak (MiB) | " \
           "peak - load (MiB) |"
    if base:
        head += f" peak at {report['baseline']['commit']} (MiB) | change (MiB) |"
    lines = [head, "|" + "---|" * head.count(" |")]
    for r in report["rows"]:
        line = f"| {r['config']} | {r['params_M']:.1f} | {r['trainable_M']:.2f} | {r['completions']} x " \
               f"{r['max_new_tokens']} | {r['load_MiB']:.0f} | {r['peak_MiB']:.0f} | {r['train_MiB']:.0f} |"
        if base:
            b = base[r["config"]]
            line += f" {b['peak_MiB']:.0f} | {r['peak_MiB'] - b['peak_MiB']:+.0f} |"
        lines.append(line)
    load = ", ".join(f"{x:.1f}" for x in report["load_1min"])
    return "\n" + "\n".join(lines) + f"\n\nMeasured at {report['commit']} by `{report['command']}` " \
        f"({report['steps']} steps, {report['threads']} threads; 1-minute load before the runs and after: {load}).\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=sorted(CONFIGS), help="run this configuration in this process")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout to measure in the same run")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here (--render: read them)")
    parser.add_argument("--write", type=Path, default=None, help="a markdown file whose memory.py block gets the table")
    parser.add_argument("--render", action="store_true", help="render --json into --write without measuring")
    args = parser.parse_args()
    if args.only:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(measure(args.only, args.steps)))
        return
    if args.render:
        report = json.loads(args.json.read_text())
    else:
        load, commits = [os.getloadavg()[0]], {"commit": code_commit(ROOT)}  # read before the tree can change
        if args.baseline is not None:
            commits["baseline"] = code_commit(args.baseline)
        rows, base_rows = [], []
        for name in CONFIGS:
            rows.append(run_config(name, args.steps, args.threads, None))
            print(f"{name}: peak {rows[-1]['peak_MiB']:.0f} MiB", file=sys.stderr)
            if args.baseline is not None:
                base_rows.append(run_config(name, args.steps, args.threads, args.baseline))
                print(f"{name} at the baseline: peak {base_rows[-1]['peak_MiB']:.0f} MiB", file=sys.stderr)
        load.append(os.getloadavg()[0])
        report = {"command": command("bench/memory.py", sys.argv[1:]), "commit": commits["commit"],
                  "steps": args.steps, "threads": args.threads, "load_1min": load, "rows": rows}
        if args.baseline is not None:
            report["baseline"] = {"commit": commits["baseline"], "rows": base_rows}
        if args.json:
            args.json.write_text(json.dumps(report, indent=1) + "\n")
    table = render(report)
    print(table)
    if args.write:
        write_block(args.write, BEGIN, END, table)


if __name__ == "__main__":
    main()
