"""Two ranks (torchrun) train the tiny policy with FSDP2 + LoRA and a vLLM engine per rank.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/rollout/vllm_sharded_run.py OUT

After fit every rank writes ``OUT/rank<r>.json``: its step count, its engine's executor backend and the
largest difference between its engine's sampling log-probs and its policy's on fresh rollouts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.strategies import ModelParallelStrategy

from lit_grpo.logprobs import sequence_logprobs
from lit_grpo.lora import LoraSettings
from lit_grpo.parallel import release_process_group
from lit_grpo.rollout import VLLMEngine
from lit_grpo.types import SamplingParams
from tests.helpers import tiny_data, tiny_module, tiny_trainer

ROOT = Path(__file__).resolve().parents[2]


class _Report(L.Callback):
    def __init__(self, out: Path) -> None:
        self.out = out

    def on_train_end(self, trainer, pl_module) -> None:
        engine = pl_module.engine
        r = engine.generate(["12+30=", "7+8="], 2, SamplingParams(max_new_tokens=4, seed=0))
        with torch.no_grad():
            logp, _ = sequence_logprobs(pl_module.policy, r)
        report = {
            "step": trainer.global_step,
            "backend": engine.llm.llm_engine.vllm_config.parallel_config.distributed_executor_backend,
            "max_diff": (logp * r.completion_mask - r.logprobs).abs().max().item(),
            "sharded": type(
                pl_module.policy.get_base_model().model.layers[0].mlp.up_proj.base_layer.weight
            ).__name__,
        }
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(report))


def main(out: Path) -> None:
    L.seed_everything(0)
    lora = LoraSettings(r=4, target_modules=["q_proj", "v_proj", "up_proj"])
    engine = VLLMEngine(dtype="float32", kv_cache_gib=0.25)
    module = tiny_module(str(ROOT / "assets" / "tiny-arith-sft"), engine=engine, lora=lora, lr=1e-2)
    strategy = ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    trainer = tiny_trainer(out, max_steps=2, strategy=strategy, devices=2, callbacks=[_Report(out)])
    try:
        trainer.fit(module, datamodule=tiny_data())
    finally:
        release_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
