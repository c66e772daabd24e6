"""Several processes: FSDP2 sharding of the policy, layout checks, and metrics reduced across ranks.

Every rank is a data-parallel rank: it holds its own prompts (the DataModule deals them out), computes
the advantages of its own groups and its share of the loss, whose divisors are summed over all ranks
(``GRPOModule._global_counts``), so the averaged gradient is the one-process gradient of the global batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from lit_grpo.lora import base_model


def is_sharded(module: nn.Module) -> bool:
    """Whether ``fully_shard`` (FSDP2) was applied to ``module`` or to the model inside its peft wrapper."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule) or isinstance(base_model(module), FSDPModule)


def shard_policy(policy: nn.Module, mesh: Any) -> nn.Module:
    """Apply ``fully_shard`` to each transformer block of ``policy`` and then to the whole model.

    ``mesh`` is the device mesh that Lightning's ``ModelParallelStrategy`` hands to ``configure_model``;
    lit-grpo shards over its data-parallel dimension and does not use tensor parallelism. The root unit is
    the Hugging Face model (inside a peft wrapper, if any), so ``forward`` and ``generate`` both gather
    the weights, and ``generate`` keeps the ranks in step until every rank has finished (``synced_gpus``).
    Applying it twice does nothing.
    """
    from torch.distributed.fsdp import fully_shard

    if is_sharded(policy):
        return policy
    names = getattr(mesh, "mesh_dim_names", None) or ()
    if "tensor_parallel" in names and mesh["tensor_parallel"].size() > 1:
        raise ValueError(
            f"ModelParallelStrategy(tensor_parallel_size={mesh['tensor_parallel'].size()}): lit-grpo shards the "
            "policy over data-parallel ranks only; set data_parallel_size to the number of processes "
            f"({mesh.size()}) and tensor_parallel_size: 1"
        )
    dp_mesh = mesh["data_parallel"] if "data_parallel" in names else mesh
    root = base_model(policy)
    block_types = set(getattr(root, "_no_split_modules", None) or ())
    for module in root.modules():
        if type(module).__name__ in block_types:
            fully_shard(module, mesh=dp_mesh)
    fully_shard(root, mesh=dp_mesh)
    root._is_fsdp_managed_module = True  # transformers' generate then runs with synced_gpus
    return policy


def full_state_dict(module: nn.Module) -> dict[str, Tensor]:
    """The full (unsharded) state dict of ``module``; with FSDP2 every rank must call it (it comes to the CPU)."""
    if not is_sharded(module):
        return module.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def check_strategy(strategy: Any) -> None:
    """Refuse Lightning's ``FSDPStrategy`` (FSDP1) for GRPO, with the strategy to use instead.

    FSDP1 wraps the whole LightningModule as its root unit, so the GRPO step, which generates, computes the
    loss and calls ``manual_backward`` inside ``training_step``, runs its backward pass while the root's
    forward is still in progress; FSDP1 rejects that (``Expects BACKWARD_PRE or BACKWARD_POST state``).
    FSDP2 (``ModelParallelStrategy``) shards each block on its own and has no such state.
    """
    from lightning.pytorch.strategies import FSDPStrategy

    if isinstance(strategy, FSDPStrategy):
        raise ValueError(
            "FSDPStrategy (FSDP1) cannot run the GRPO step: its backward pass runs inside training_step, "
            "while FSDP1's root forward is still open. Use FSDP2 instead: trainer.strategy: "
            "{class_path: lightning.pytorch.strategies.ModelParallelStrategy, init_args: {data_parallel_size: "
            "<number of GPUs>, tensor_parallel_size: 1}} (see configs/scale/gpu8_fsdp.yaml)"
        )


def check_layout(world_size: int, prompts_per_step: int, train_size: int | None) -> None:
    """Reject a layout with a rank that gets no full batch of prompts, before anything is loaded.

    ``prompts_per_step`` is per rank, so one step needs ``world_size * prompts_per_step`` distinct
    prompts (no prompt, and so no group, is on two ranks). ``train_size`` None (streamed) skips the check.
    """
    if train_size is None or world_size * prompts_per_step <= train_size:
        return
    share = train_size // world_size
    fix = f"lower prompts_per_step to {share} or below" if share >= 1 else "add prompts"
    raise ValueError(
        f"impossible parallel layout: {world_size} ranks x prompts_per_step={prompts_per_step} need "
        f"{world_size * prompts_per_step} distinct training prompts per step, but the training split has "
        f"{train_size} ({share} per rank); {fix}, or run on fewer ranks"
    )


def reduce_ratios(pairs: dict[str, tuple[float, float]], strategy: Any, world_size: int) -> dict[str, float]:
    """``sum over ranks of numerators / sum over ranks of denominators`` for each metric, in one all-reduce.

    A per-item mean is ``(sum, count)``; a value the same on every rank or averaged over ranks is
    ``(value, 1)``; a total over ranks is ``(value, 1 / world_size)``. An empty denominator gives NaN.
    """
    if not pairs:
        return {}
    values = torch.tensor(list(pairs.values()), dtype=torch.float64, device=strategy.root_device)  # [M, 2]
    if world_size > 1:
        values = strategy.reduce(values, reduce_op="sum")
    values = values.cpu()
    return {
        name: (float(num / den) if den != 0 else float("nan"))
        for name, (num, den) in zip(pairs, values.tolist(), strict=True)
    }


def max_over_ranks(value: float, strategy: Any, world_size: int) -> float:
    """The largest ``value`` over all ranks (the value itself with one process)."""
    if world_size == 1:
        return value
    tensor = torch.tensor(float(value), dtype=torch.float64, device=strategy.root_device)
    return float(strategy.reduce(tensor, reduce_op="max").item())


def min_over_ranks(value: int, strategy: Any, world_size: int) -> int:
    """The smallest ``value`` over all ranks (the value itself with one process)."""
    if world_size == 1:
        return value
    tensor = torch.tensor(float(value), device=strategy.root_device)
    return int(strategy.reduce(tensor, reduce_op="min").item())
