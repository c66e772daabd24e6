"""Streaming a policy's weights to a rollout engine: full tensors in checkpoint names, one at a time."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from torch import Tensor, nn

from lit_grpo.lora import merged_for_inference

_PEFT_SKIP = re.compile(r"(^|\.)(lora_[A-Za-z_]+|original_module)\.")
_PEFT_RENAME = re.compile(r"\.(base_layer|modules_to_save\.[^.]+)\.")


def full_weights(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """``(name, full tensor)`` of every parameter and persistent buffer in checkpoint names, one at a time.

    FSDP2 (DTensor) shards are gathered as they are reached, so only one full tensor exists at a time. Tied
    tensors are yielded under each of their names (the engine may hold a packed copy per use, e.g. the CPU
    build's LM head); LoRA/``modules_to_save`` wrappers of a merged PEFT model are mapped to the base names.
    """
    for name, tensor in model.state_dict(keep_vars=True).items():
        if _PEFT_SKIP.search(name):
            continue
        if hasattr(tensor, "full_tensor"):  # a DTensor shard (FSDP2)
            tensor = tensor.full_tensor()
        yield _PEFT_RENAME.sub(".", name), tensor.detach()


@contextmanager
def merged_adapters(policy: nn.Module) -> Iterator[nn.Module]:
    """The plain model behind ``policy``: a PEFT model's adapters are folded into copies of the adapted
    weights inside the block and the originals put back after, bit-identical
    (:func:`~lit_grpo.lora.merged_for_inference`); where that cannot serve (FSDP units, DoRA) peft merges them
    in place and unmerges them after, which leaves float rounding in the frozen weights."""
    if not hasattr(policy, "merge_adapter"):
        yield policy
        return
    with merged_for_inference(policy) as folded:
        if folded:
            yield policy.get_base_model()
            return
    policy.merge_adapter()
    try:
        yield policy.get_base_model()
    finally:
        policy.unmerge_adapter()
