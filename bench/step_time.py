"""Time per phase of a GRPO step, and completion tokens per second.

    python bench/step_time.py                 # quickstart policy and a ~20M-parameter model
    python bench/step_time.py --steps 30 --threads 2

Runs real training steps through Lightning (HF generate engine, token-mean loss, one update per batch)
and reports the median of the ``perf/*`` metrics the module logs, after ``--warmup`` steps. The 20M model
is randomly initialised: it earns no reward, but every phase still runs at full cost (zero advantages
are not skipped).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import lightning as L
import torch

from lit_grpo import ExactMatch, GRPOModule, PromptDataModule, SyntheticArithmetic
from lit_grpo.models.tiny import build_tiny_model

ROOT = Path(__file__).resolve().parents[1]
PHASES = ["generate_s", "score_s", "forward_s", "backward_s", "optimizer_s", "step_s"]


class Collect(L.Callback):
    def __init__(self, warmup: int) -> None:
        self.warmup, self.rows = warmup, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx >= self.warmup:
            metrics = trainer.callback_metrics
            self.rows.append({k: float(metrics[f"perf/{k}"]) for k in PHASES + ["tokens_per_s"]})


def run(model: str, steps: int, warmup: int, prompts: int, group: int, new_tokens: int) -> dict[str, float]:
    L.seed_everything(0)
    module = GRPOModule(model=model, reward=ExactMatch(), group_size=group, max_new_tokens=new_tokens, lr=1e-4)
    data = PromptDataModule(SyntheticArithmetic(max_operand=99), prompts_per_step=prompts)
    collect = Collect(warmup)
    trainer = L.Trainer(max_steps=steps + warmup, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        accelerator="cpu", callbacks=[collect])
    trainer.fit(module, datamodule=data)
    params = sum(p.numel() for p in module.policy.parameters())
    result = {k: statistics.median(r[k] for r in collect.rows) for k in collect.rows[0]}
    result["params_M"] = params / 1e6
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        configs = {
            "quickstart (0.6M, 6 new tokens)": (str(ROOT / "assets" / "tiny-arith-sft"), 6),
            "medium (19M, 32 new tokens)": (str(build_tiny_model(Path(tmp) / "medium", size="medium")), 32),
        }
        rows = {name: run(path, args.steps, args.warmup, args.prompts, args.group_size, new)
                for name, (path, new) in configs.items()}
    print(f"\nP={args.prompts} prompts x G={args.group_size}, {args.threads} threads, median of {args.steps} steps "
          f"after {args.warmup} warm-up steps, torch {torch.__version__}\n")
    head = "| model | " + " | ".join(p.removesuffix("_s") + " (s)" for p in PHASES) + " | tokens/s |"
    print(head)
    print("|" + "---|" * (len(PHASES) + 2))
    for name, r in rows.items():
        print(f"| {name} | " + " | ".join(f"{r[p]:.3f}" for p in PHASES) + f" | {r['tokens_per_s']:.0f} |")


if __name__ == "__main__":
    main()
