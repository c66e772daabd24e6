"""LoRA adapters through peft: settings, wrapping a policy, and the base model as KL reference."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from torch import nn


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
        if self.r < 1:
            raise ValueError(f"lora.r={self.r} must be >= 1 (typical: 8 to 64)")
        if self.alpha <= 0:
            raise ValueError(f"lora.alpha={self.alpha} must be > 0 (typical: 2 * r)")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"lora.dropout={self.dropout} must be in [0, 1)")
        if not self.target_modules:
            raise ValueError(
                "lora.target_modules is empty: name the layers (e.g. [q_proj, v_proj]) or use all-linear"
            )
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

    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    name = policy.active_adapter
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(base_model(policy).config)
        return get_peft_model(skeleton, copy.deepcopy(policy.peft_config[name]), adapter_name=name)


@contextmanager
def adapters_disabled(policy: nn.Module) -> Iterator[nn.Module]:
    """Inside the block ``policy`` computes the base model (the KL reference with LoRA): no second copy."""
    if not is_peft(policy):
        raise TypeError(f"adapters_disabled needs a peft model, got {type(policy).__name__}")
    with policy.disable_adapter():
        yield policy
