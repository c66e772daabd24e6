"""Several processes: FSDP2 and FSDP1 sharding of the policy, layout checks, and metrics reduced across ranks.

Every rank is a data-parallel rank: it holds its own prompts (the DataModule deals them out), computes
the advantages of its own groups and its share of the loss, whose divisors are summed over all ranks
(``lit_grpo.batching.Ranks.global_counts``), so the averaged gradient is the one-process gradient of the
global batch.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from lit_grpo.checks import require
from lit_grpo.lora import base_model


def release_process_group() -> None:
    """Destroy the default process group, if this process has one, before the interpreter exits: Gloo's worker
    threads left to the interpreter's own shutdown can abort a process whose run succeeded ("terminate called
    without an active exception", SIGABRT) on some exits, which a launcher reports as a failed run."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def is_sharded(module: nn.Module) -> bool:
    """Whether ``module`` (or the model inside its peft wrapper) is sharded: FSDP2's ``fully_shard`` was
    applied to it, or it is an FSDP1 root (:func:`wrap_fsdp1`)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule) or isinstance(base_model(module), FSDPModule) or is_fsdp1(module)


def is_fsdp1(module: nn.Module) -> bool:
    """Whether ``module`` is an FSDP1 ``FullyShardedDataParallel`` wrapper."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    return isinstance(module, FullyShardedDataParallel)


def _block_types(model: nn.Module) -> set[type[nn.Module]]:
    names = set(getattr(model, "_no_split_modules", None) or ())
    return {type(m) for m in model.modules() if type(m).__name__ in names}


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
    tensor_parallel = mesh["tensor_parallel"].size() if "tensor_parallel" in names else 1
    require(
        tensor_parallel <= 1,
        f"ModelParallelStrategy(tensor_parallel_size={tensor_parallel}): lit-grpo shards "
        "the policy over data-parallel ranks only; set data_parallel_size to the number of processes "
        f"({mesh.size()}) and tensor_parallel_size: 1",
    )
    dp_mesh = mesh["data_parallel"] if "data_parallel" in names else mesh
    root = base_model(policy)
    block_types = tuple(_block_types(root))
    for module in root.modules():
        if isinstance(module, block_types):
            fully_shard(module, mesh=dp_mesh)
    fully_shard(root, mesh=dp_mesh)
    root._is_fsdp_managed_module = True  # transformers' generate then runs with synced_gpus
    return policy


def full_state_dict(module: nn.Module) -> dict[str, Tensor]:
    """The full (unsharded) state dict of ``module``; with FSDP2 every rank must call it (it comes to the
    CPU)."""
    if not is_sharded(module):
        return module.state_dict()
    if is_fsdp1(module):
        from torch.distributed.fsdp import FullStateDictConfig, StateDictType
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        config = FullStateDictConfig(offload_to_cpu=module.compute_device.type != "cpu", rank0_only=False)
        with FSDP.state_dict_type(module, StateDictType.FULL_STATE_DICT, config):
            return module.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def wrap_fsdp1(policy: nn.Module, strategy: Any) -> nn.Module:
    """The policy as its own FSDP1 root, each transformer block a nested unit, under Lightning's
    ``FSDPStrategy``.

    Lightning's ``FSDPStrategy`` would otherwise wrap the whole LightningModule as the root unit, so
    ``training_step`` (which generates, computes the loss and calls ``manual_backward``) would run inside
    the root's forward, and FSDP1 rejects a backward pass there. With the policy as the root, each
    forward ends before its backward and Lightning leaves the already-wrapped module as it is. The
    strategy's settings apply: ``auto_wrap_policy`` (default: the model's transformer blocks),
    ``sharding_strategy``, ``cpu_offload``, ``mixed_precision`` and its other FSDP keyword arguments;
    ``use_orig_params`` must stay True (the optimizer, LoRA's frozen base weights and the checkpoints
    use the original parameters). Applying it twice does nothing.
    """
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    if is_fsdp1(policy):
        return policy
    kwargs = dict(strategy.kwargs)
    require(
        kwargs.pop("use_orig_params", True) is not False,
        "FSDPStrategy(use_orig_params=False) cannot train the policy (LoRA's frozen weights and the "
        "optimizer need the original parameters); remove use_orig_params or set it to True",
    )
    auto_wrap = kwargs.pop("auto_wrap_policy", None) or ModuleWrapPolicy(_block_types(base_model(policy)))
    strategy.kwargs.pop("auto_wrap_policy", None)  # used here; Lightning would warn that it ignores it
    device = strategy.root_device
    wrapped = FullyShardedDataParallel(
        policy,
        auto_wrap_policy=auto_wrap,
        cpu_offload=strategy.cpu_offload,
        mixed_precision=strategy.mixed_precision_config,
        sharding_strategy=strategy.sharding_strategy,
        device_id=device if device.type == "cpu" else device.index,
        use_orig_params=True,
        **kwargs,
    )
    base_model(policy)._is_fsdp_managed_module = True  # transformers' generate then runs with synced_gpus
    return wrapped


@contextmanager
def generation_view(policy: nn.Module) -> Iterator[nn.Module]:
    """The module to call ``generate`` on: ``policy`` itself, or, for an FSDP1 root, the wrapped model with
    the root's own weights (embeddings, head, final norm) gathered for the block; the nested block units
    gather theirs in their forwards as usual. ``generate`` calls the wrapped model, not the root, so the
    root's mixed-precision casts do not happen: with a ``param_dtype`` the block runs under autocast to it.
    Every rank must enter it (it is a collective)."""
    if not is_fsdp1(policy):
        yield policy
        return
    with ExitStack() as stack:
        stack.enter_context(type(policy).summon_full_params(policy, recurse=False, writeback=False))
        dtype = getattr(policy.mixed_precision, "param_dtype", None)
        if dtype is not None:  # the gathered root weights stay float32, the blocks compute in ``dtype``
            stack.enter_context(torch.autocast(policy.compute_device.type, dtype=dtype))
        yield policy.module


@contextmanager
def gathered(policy: nn.Module) -> Iterator[nn.Module]:
    """The policy with every weight whole, for reading them all (the rollout engine's weight sync): an FSDP1
    root's weights are gathered for the block (changes inside are discarded); FSDP2 DTensors and plain
    modules are returned as they are (FSDP2 shards are gathered one tensor at a time by the reader)."""
    if not is_fsdp1(policy):
        yield policy
        return
    with type(policy).summon_full_params(policy, recurse=True, writeback=False):
        yield policy.module


def clip_grad_norm(policy: nn.Module, params: list[Tensor], max_norm: float) -> Tensor:
    """Clip the gradients of ``params`` to a global norm of ``max_norm`` and return that norm; for an FSDP1
    root the norm is taken over all ranks' shards (``FullyShardedDataParallel.clip_grad_norm_``)."""
    if is_fsdp1(policy):
        return policy.clip_grad_norm_(max_norm)
    return torch.nn.utils.clip_grad_norm_(params, max_norm) if params else torch.tensor(0.0)


def check_layout(world_size: int, prompts_per_step: int, train_size: int | None) -> None:
    """Reject a layout with a rank that gets no full batch of prompts, before anything is loaded.

    ``prompts_per_step`` is per rank, so one step needs ``world_size * prompts_per_step`` distinct
    prompts (no prompt, and so no group, is on two ranks). ``train_size`` None (streamed) skips the check.
    """
    if train_size is None:
        return
    share = train_size // world_size
    fix = f"lower prompts_per_step to {share} or below" if share >= 1 else "add prompts"
    require(
        world_size * prompts_per_step <= train_size,
        f"impossible parallel layout: {world_size} ranks x prompts_per_step={prompts_per_step} need "
        f"{world_size * prompts_per_step} distinct training prompts per step, but the training split has "
        f"{train_size} ({share} per rank); {fix}, or run on fewer ranks",
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


def extremes_over_ranks(
    mins: dict[str, float], maxs: dict[str, float], strategy: Any, world_size: int
) -> tuple[dict[str, float], dict[str, float]]:
    """The smallest of each of ``mins`` and the largest of each of ``maxs`` over all ranks, in one
    all-reduce."""
    if world_size == 1 or not (mins or maxs):
        return dict(mins), dict(maxs)
    values = torch.tensor([-v for v in mins.values()] + list(maxs.values()), dtype=torch.float64,
                          device=strategy.root_device)
    values = strategy.reduce(values, reduce_op="max").cpu().tolist()
    return ({k: -v for k, v in zip(mins, values[: len(mins)], strict=True)},
            dict(zip(maxs, values[len(mins) :], strict=True)))


def min_over_ranks(value: int, strategy: Any, world_size: int) -> int:
    """The smallest ``value`` over all ranks (the value itself with one process)."""
    if world_size == 1:
        return value
    tensor = torch.tensor(float(value), device=strategy.root_device)
    return int(strategy.reduce(tensor, reduce_op="min").item())


def step_seed(seed: int, step: int, rank: int) -> int:
    """The 64-bit seed of one training step of one rank (what :func:`seed_step` gives torch)."""
    state = np.random.SeedSequence([seed % 2**63, step, rank]).generate_state(2, dtype=np.uint32)
    return int(state[0]) << 32 | int(state[1])


def seed_step(seed: int, step: int, rank: int) -> None:
    """Seed torch (every device), numpy and ``random`` for one training step of one rank."""
    value = step_seed(seed, step, rank)
    torch.manual_seed(value)
    np.random.seed(value >> 32)
    random.seed(value)
