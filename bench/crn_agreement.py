"""How long common random numbers pair two arms: the share of identical completions per step.

Two runs of one seed that differ only in the advantage estimator draw the same prompts at every step and
sample each step with the same random numbers (the module reseeds from (seed, step, rank)); at step 0 the
weights are the same, so the completions are. Afterwards the policies move apart and the same random
numbers give the same completion less and less often. This script trains arm A and arm B from a config
(the quickstart by default) for a few steps each and prints, per step, whether the prompts matched and
the share of completions that are identical (same prompt slot, same text). docs/pairing.md quotes it.

    python bench/crn_agreement.py --steps 40 --a GRPO --b Sign
    python bench/crn_agreement.py --engine vllm          # the in-process vLLM engine (vLLM installed)

Prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import lightning as L


class Record(L.Callback):
    def __init__(self) -> None:
        self.steps: list[tuple[list[str], list[str]]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        stats = outputs["rollout"]
        self.steps.append((list(stats.batch.prompts), list(stats.texts)))


def run_arm(config: str, estimator: str, steps: int, seed: int, engine: str, extra: list[str],
            sampling_seed: int | None = None) -> list:
    from lit_grpo.cli import LitGRPOCLI
    from lit_grpo.rollout.hf import GENERATE_DRAWS_ARG

    args = ["--config", config, f"--model.estimator={estimator}", f"--trainer.max_steps={steps}",
            f"--seed_everything={seed if sampling_seed is None else sampling_seed}", f"--data.seed={seed}", "--trainer.logger=false",
            "--trainer.enable_checkpointing=false", "--trainer.enable_progress_bar=false",
            "--trainer.callbacks=[]", f"--trainer.default_root_dir={tempfile.mkdtemp()}", *extra]  # fmt: skip
    if engine != "vllm":  # the draws of the published runs, before the caller's own arguments
        args.insert(len(args) - len(extra), GENERATE_DRAWS_ARG)
    if engine == "vllm":
        args.append('--model.engine={"class_path": "lit_grpo.rollout.VLLMEngine", "init_args": {"dtype": "float32", '
                    '"kv_cache_gib": 0.25}}')
    cli = LitGRPOCLI(args=args, run=False)
    record = Record()
    cli.trainer.callbacks.append(record)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return record.steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/quickstart.yaml")
    p.add_argument("--a", default="GRPO", help="estimator of arm A")
    p.add_argument("--b", default="Sign", help="estimator of arm B")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--b-sampling-seed", type=int, default=None,
                   help="arm B's seed_everything (the same prompts, independent random numbers): the baseline "
                        "agreement without common random numbers")
    p.add_argument("--engine", choices=["hf", "vllm"], default="hf")
    p.add_argument("--arg", action="append", default=[], help="extra lit-grpo fit argument for both arms")
    args = p.parse_args()
    start = time.monotonic()
    a = run_arm(args.config, args.a, args.steps, args.seed, args.engine, args.arg)
    b = run_arm(args.config, args.b, args.steps, args.seed, args.engine, args.arg, args.b_sampling_seed)
    rows = []
    for step, ((pa, ta), (pb, tb)) in enumerate(zip(a, b, strict=True)):
        same = sum(x == y for x, y in zip(ta, tb, strict=True)) / len(ta)
        rows.append({"step": step, "same_prompts": pa == pb, "identical_completions": round(same, 4)})
        print(f"step {step:3d}  prompts {'same' if pa == pb else 'DIFFER'}  identical completions {same:.3f}")
    print("RESULT " + json.dumps({"config": args.config, "a": args.a, "b": args.b, "engine": args.engine,
                                  "seed": args.seed, "b_sampling_seed": args.b_sampling_seed, "extra": args.arg, "steps": rows,
                                  "seconds": round(time.monotonic() - start, 1)}))  # fmt: skip


if __name__ == "__main__":
    main()
