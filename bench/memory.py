"""Peak memory (RSS) of a few GRPO steps: the quickstart and a ~100M-parameter model, with and without
gradient checkpointing, and with LoRA.

    python bench/memory.py                    # every configuration, each in a fresh process
    python bench/memory.py --only 100m-gc     # one of them
    python bench/memory.py --steps 2 --threads 2

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

ROOT = Path(__file__).resolve().parents[1]
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=sorted(CONFIGS), help="run this configuration in this process")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.only:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(measure(args.only, args.steps)))
        return
    rows = []
    for name in CONFIGS:
        cmd = [
            sys.executable,
            __file__,
            "--only",
            name,
            "--steps",
            str(args.steps),
            "--threads",
            str(args.threads),
        ]
        done = subprocess.run(
            cmd, capture_output=True, text=True, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{name}: peak {rows[-1]['peak_MiB']:.0f} MiB", file=sys.stderr)
    print(
        "| config | params (M) | trainable (M) | completions x tokens | after load (MiB) | peak (MiB) | "
        "peak - load (MiB) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['config']} | {r['params_M']:.1f} | {r['trainable_M']:.2f} | {r['completions']} x "
            f"{r['max_new_tokens']} | {r['load_MiB']:.0f} | {r['peak_MiB']:.0f} | {r['train_MiB']:.0f} |"
        )


if __name__ == "__main__":
    main()
