"""The starting policy of experiments/sign_balance_skill.yaml rebuilt by its prepare step at a checkout, and probed.

    git worktree add STUDY <commit>     # the code the experiment ran (its runs.csv's commit)
    python scripts/residue_start.py --code STUDY --label study --json docs/results/sign_balance_skill/prepare.json
    python scripts/residue_start.py --label head --json docs/results/sign_balance_skill/prepare.json

Runs ``experiments/prepare/sft_tiny_residue.yaml`` (the experiment's ``prepare`` step, one thread, as
``lit-grpo compare`` runs it) with the ``lit_grpo`` of ``--code`` (default: this checkout), then probes the
policy it saved with this checkout's ``scripts/probe_policy.py`` on the experiment's test split (8 samples of
each of the 1000 prompts, seed 0: the command in the prepare config's header), so that policies built by
different code are measured by one yardstick. Writes, under ``--label`` in ``--json`` (other labels kept): the
commit, the validation accuracy after every 100 steps, the step it stopped at, the SFT's wall seconds and the
load around it, and the probe's numbers (sampled accuracy overall and for each modulus k).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lit_grpo.rollout.hf import GENERATE_DRAWS_ARG  # the draws of the published probe

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "experiments/prepare/sft_tiny_residue.yaml"
PROBE = ["--split", "test", "--samples", "8", "--group-size", "8"]
PROBE_FIT = ["--config", "configs/quickstart.yaml", "--model.sampling.max_new_tokens=3",
             "--data.source=lit_grpo.data.SyntheticResidue", "--data.source.init_args.num_train=8800",
             "--data.source.init_args.num_val=200", "--data.source.init_args.num_test=1000", "--trainer.logger=false",
             GENERATE_DRAWS_ARG]


def run(cmd: list[str], cwd: Path, env: dict) -> None:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"residue_start: {' '.join(cmd[:4])} ... failed (exit {done.returncode}):\n"
                         f"{done.stderr[-3000:]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--code", type=Path, default=ROOT, help="the checkout whose lit_grpo runs the SFT")
    p.add_argument("--label", required=True, help="the key of this record in --json")
    p.add_argument("--json", type=Path, required=True)
    args = p.parse_args()
    from lit_grpo.lab.collect import read_scalars

    sys.path.insert(0, str(ROOT / "bench"))
    from provenance import code_commit, code_env

    code = args.code.resolve()
    commits = {"commit": code_commit(code), "probed_at": code_commit(ROOT)}  # read before the tree can change
    env = code_env(code, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    with tempfile.TemporaryDirectory() as tmp:
        policy, logs = Path(tmp) / "policy", Path(tmp) / "tb"
        load, start = [os.getloadavg()[0]], time.perf_counter()
        run([sys.executable, "-m", "lit_grpo", "fit", "--config", CONFIG,
             "--trainer.callbacks+=lit_grpo.callbacks.SavePretrained", f"--trainer.callbacks.dirpath={policy}",
             f"--trainer.logger.init_args.save_dir={logs}", "--trainer.enable_progress_bar=false"], code, env)
        seconds = time.perf_counter() - start
        load.append(os.getloadavg()[0])
        (version,) = logs.glob("*/version_*")
        curve = read_scalars(version)["val/accuracy"]
        probe_json = Path(tmp) / "probe.json"
        probe_env = code_env(ROOT, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
        run([sys.executable, str(ROOT / "scripts" / "probe_policy.py"), *PROBE, "--json", str(probe_json), "--",
             *PROBE_FIT, f"--model.model={policy}"], ROOT, probe_env)
        probe = json.loads(probe_json.read_text())
    probe["fit_args"] = [*PROBE_FIT, "--model.model=PREPARED"]
    record = {**commits, "sft_seconds": round(seconds, 1),
              "load_1min": load, "stopped_at_step": curve[-1][0] + 1, "final_val_accuracy": curve[-1][1],
              "val_accuracy": curve, "probe": probe}
    data = json.loads(args.json.read_text()) if args.json.exists() else {}
    data[args.label] = record
    args.json.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k not in ("val_accuracy", "probe")}))


if __name__ == "__main__":
    main()
