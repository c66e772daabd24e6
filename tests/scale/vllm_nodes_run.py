"""tests/rollout/vllm_sharded_run.py on the launcher's layout: FSDP2 + LoRA with one vLLM engine per rank, started
as two "nodes" of one process each (tests/scale/test_scale_nodes.py). Every rank writes ``OUT/rank<r>.json``
(steps, its engine's executor backend, the largest difference between its engine's sampling log-probs and its
policy's after the last weight sync, the type of a sharded weight) and its :class:`~train_tiny.Layout`.

    python -m torch.distributed.run --nnodes 2 --nproc-per-node 1 ... tests/scale/vllm_nodes_run.py OUT
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository for tests.*

import lightning as L  # noqa: E402
from lightning.pytorch.strategies import ModelParallelStrategy  # noqa: E402

from lit_grpo.lora import LoraSettings  # noqa: E402
from lit_grpo.parallel import release_process_group  # noqa: E402
from lit_grpo.rollout import VLLMEngine  # noqa: E402
from tests.helpers import tiny_data, tiny_module, tiny_trainer  # noqa: E402
from tests.rollout.vllm_sharded_run import ROOT, _Report  # noqa: E402
from tests.scale.train_tiny import Layout, launch_layout  # noqa: E402


def main(out: Path) -> None:
    L.seed_everything(0)
    devices, nodes = launch_layout()
    lora = LoraSettings(r=4, target_modules=["q_proj", "v_proj", "up_proj"])
    engine = VLLMEngine(dtype="float32", kv_cache_gib=0.25)
    module = tiny_module(str(ROOT / "assets" / "tiny-arith-sft"), engine=engine, lora=lora, lr=1e-2)
    strategy = ModelParallelStrategy(data_parallel_size=devices * nodes, tensor_parallel_size=1)
    trainer = tiny_trainer(out, max_steps=2, strategy=strategy, devices=devices, num_nodes=nodes,
                           callbacks=[_Report(out), Layout(out)])
    try:
        trainer.fit(module, datamodule=tiny_data())
    finally:
        release_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
