"""LoRA adapters through peft: settings, wrapping a policy, and the base model as KL reference."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from lit_grpo.checks import require


@dataclass
class LoraSettings:
    """LoRA adapters on a policy (peft ``LoraConfig``); only the adapter weights are trained.

    Args:
        r: Rank of the adapter matrices.
        alpha: Scaling numerator: the adapter output is multiplied by ``alpha / r``.
        dropout: Dropout on the adapter input during training.
        target_modules: Module names (or name suffixes) that get adapters, or ``all-linear`` for every
            linear layer except the output head.
    """

    r: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: list[str] | str = "all-linear"

    def __post_init__(self) -> None:
        require(self.r >= 1, f"lora.r={self.r} must be >= 1 (typical: 8 to 64)")
        require(self.alpha > 0, f"lora.alpha={self.alpha} must be > 0 (typical: 2 * r)")
        require(0 <= self.dropout < 1, f"lora.dropout={self.dropout} must be in [0, 1)")
        require(bool(self.target_modules),
                "lora.target_modules is empty: name the layers (e.g. [q_proj, v_proj]) or use all-linear")
        if not isinstance(self.target_modules, str):
            self.target_modules = list(self.target_modules)


def apply_lora(policy: nn.Module, settings: LoraSettings) -> nn.Module:
    """``policy`` wrapped as a peft model with fresh adapters; the base weights are frozen."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(policy, config)
    except ValueError as err:  # peft names the modules it could not find
        raise ValueError(
            f"lora.target_modules={settings.target_modules!r} does not fit the model: {err}"
        ) from err


def is_peft(policy: nn.Module) -> bool:
    """Whether ``policy`` carries peft adapters."""
    return hasattr(policy, "disable_adapter") and hasattr(policy, "get_base_model")


def base_model(policy: nn.Module) -> nn.Module:
    """The Hugging Face model inside a peft wrapper (the policy itself otherwise)."""
    return policy.get_base_model() if is_peft(policy) else policy


def meta_copy(policy: nn.Module) -> nn.Module:
    """The same peft model (architecture and adapter config) on the meta device, so without memory.

    peft's ``save_pretrained(state_dict=...)`` picks the adapter entries of a full state dict by the names
    of the model's modules; under FSDP1 those names carry the nested units' ``_fsdp_wrapped_module``
    segments while the full state dict's keys do not, so the export goes through this copy instead.
    """
    import copy

    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    name = policy.active_adapter
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(base_model(policy).config)
        return get_peft_model(skeleton, copy.deepcopy(policy.peft_config[name]), adapter_name=name)


@contextmanager
def merged_for_inference(policy: nn.Module) -> Iterator[bool]:
    """Inside the block a peft ``policy`` computes with its adapters folded into its weights: each adapted
    layer's base weight is replaced by a fresh tensor ``W + delta`` and the adapter branches are switched
    off, so a forward costs one matmul per layer instead of three. The original weights are put back
    untouched on exit (bit-identical, unlike peft's ``merge_adapter``/``unmerge_adapter``, whose subtraction
    leaves rounding error in the frozen weights at every round trip). It costs one extra copy of the adapted
    weights while inside, and runs under ``no_grad`` only (nothing inside may train). Yields whether it
    merged: ``False`` (and nothing changes) for a model without adapters or with adapters it cannot fold
    exactly this way (DoRA, a layer whose base weight is not a plain local tensor such as an FSDP2 shard, or
    a model holding FSDP1 units, whose parameters are views of their flat parameter)."""
    from peft.tuners.lora import LoraLayer

    layers = [m for m in policy.modules() if isinstance(m, LoraLayer)] if is_peft(policy) else []
    if not layers or not _foldable(policy, layers):
        yield False
        return
    originals = []
    try:
        with torch.no_grad():
            for layer in layers:
                weight = layer.get_base_layer().weight
                folded = weight.detach().clone()
                for name in layer.active_adapters:
                    if name in layer.lora_A or name in getattr(layer, "lora_embedding_A", {}):
                        folded += layer.get_delta_weight(name).to(folded.dtype)
                originals.append((weight, weight.data))
                weight.data = folded
        with policy.disable_adapter():
            yield True
    finally:
        for weight, data in originals:
            weight.data = data


def _foldable(policy: nn.Module, layers: list) -> bool:
    from torch.distributed.fsdp import FullyShardedDataParallel

    if any(isinstance(m, FullyShardedDataParallel) for m in policy.modules()):
        return False
    for layer in layers:
        weight = getattr(layer.get_base_layer(), "weight", None)
        if weight is None or type(weight.data) is not torch.Tensor or getattr(layer, "merged", False):
            return False
        if any(layer.use_dora.get(name, False) for name in layer.active_adapters):
            return False
    return True


@contextmanager
def adapters_disabled(policy: nn.Module) -> Iterator[nn.Module]:
    """Inside the block ``policy`` computes the base model (the KL reference with LoRA): no second copy."""
    if not is_peft(policy):
        raise TypeError(f"adapters_disabled needs a peft model, got {type(policy).__name__}")
    with policy.disable_adapter():
        yield policy
