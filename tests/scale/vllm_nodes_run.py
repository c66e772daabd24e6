"""tests/rollout/vllm_sharded_run.py (FSDP2 + LoRA over 2 ranks, one vLLM engine per rank) on the launcher's
layout, started as two "nodes" of one process each (tests/scale/test_scale_nodes.py). Every rank writes
``OUT/rank<r>.json`` as that script does (steps, its engine's executor backend, the largest difference between
its engine's sampling log-probs and its policy's after the last weight sync, the type of a sharded weight) and
its :class:`~train_tiny.Layout`.

    python -m torch.distributed.run --nnodes 2 --nproc-per-node 1 ... tests/scale/vllm_nodes_run.py OUT
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository for tests.*

from tests.helpers import tiny_trainer  # noqa: E402
from tests.rollout import vllm_sharded_run  # noqa: E402
from tests.scale.train_tiny import Layout, launch_layout  # noqa: E402


def trainer_on_the_launch_layout(out: Path, **kwargs):
    """That script's Trainer with ``devices`` and ``num_nodes`` of the launch (it asks for 2 devices on one
    node) and a :class:`Layout` record."""
    devices, nodes = launch_layout()
    callbacks = [*kwargs.pop("callbacks", []), Layout(out)]
    return tiny_trainer(out, **{**kwargs, "devices": devices, "num_nodes": nodes, "callbacks": callbacks})


if __name__ == "__main__":
    vllm_sharded_run.tiny_trainer = trainer_on_the_launch_layout
    vllm_sharded_run.main(Path(sys.argv[1]))
