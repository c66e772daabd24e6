"""SavePretrained: write the policy in Hugging Face format at the end of training."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from lightning import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info


class SavePretrained(Callback):
    """Saves the policy and tokenizer with ``save_pretrained`` when ``fit`` ends (or is interrupted).

    The directory can be given as ``model:`` to the next stage (e.g. SFT, then GRPO). A LoRA policy is
    saved as its adapters in peft's format (``adapter_config.json``, ``adapter_model.safetensors``), which
    ``peft.PeftModel.from_pretrained`` and transformers load on top of the base model; ``merge`` also writes
    the merged full model. A sharded (FSDP2) policy is gathered first: every rank takes part, rank 0 writes.
    Writes no metrics.

    Args:
        dirpath: Output directory; created if needed.
        dtype: Save in this dtype (e.g. ``bfloat16`` halves the file); null keeps the training dtype.
        merge: With LoRA, also write the base model with the adapters merged in, under ``<dirpath>/merged``.
    """

    #: Scalars it logs: none.
    metrics: ClassVar[tuple[str, ...]] = ()

    def __init__(self, dirpath: str, dtype: str | None = None, merge: bool = False) -> None:
        self.dirpath = dirpath
        self.dtype = dtype
        self.merge = merge

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if not hasattr(pl_module, "save_pretrained"):
            raise TypeError(f"SavePretrained needs a lit_grpo PolicyModule, got {type(pl_module).__name__}")

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        import torch

        from lit_grpo.lora import is_peft
        from lit_grpo.parallel import full_state_dict

        state = full_state_dict(pl_module.policy)  # a collective under FSDP2: on every rank
        if trainer.is_global_zero:
            if self.dtype is not None:
                dtype = getattr(torch, self.dtype)
                state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
            path = Path(self.dirpath)
            path.mkdir(parents=True, exist_ok=True)
            pl_module.save_pretrained(path, state_dict=state)
            if self.merge and is_peft(pl_module.policy):
                save_merged(path, path / "merged")
            rank_zero_info(f"SavePretrained: policy written to {path}")
        trainer.strategy.barrier()


def save_merged(adapter_dir: Path, out: Path) -> None:
    """Load the base model and the adapters saved in ``adapter_dir``, merge them and save the result to
    ``out``."""
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoTokenizer

    merged = AutoPeftModelForCausalLM.from_pretrained(adapter_dir).merge_and_unload()
    merged.save_pretrained(out)
    AutoTokenizer.from_pretrained(adapter_dir).save_pretrained(out)
