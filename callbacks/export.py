"""SavePretrained: write the policy in Hugging Face format at the end of training."""

from __future__ import annotations

from pathlib import Path

from lightning import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only


class SavePretrained(Callback):
    """Saves the policy and tokenizer with ``save_pretrained`` when ``fit`` ends (or is interrupted).

    The directory can be given as ``model:`` to the next stage (e.g. SFT, then GRPO). Writes no metrics.

    Args:
        dirpath: Output directory; created if needed.
        dtype: Save in this dtype (e.g. ``bfloat16`` halves the file); null keeps the training dtype.
    """

    def __init__(self, dirpath: str, dtype: str | None = None) -> None:
        self.dirpath = dirpath
        self.dtype = dtype

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if not hasattr(pl_module, "save_pretrained"):
            raise TypeError(f"SavePretrained needs a lit_grpo PolicyModule, got {type(pl_module).__name__}")

    @rank_zero_only
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        import copy

        import torch

        path = Path(self.dirpath)
        path.mkdir(parents=True, exist_ok=True)
        policy = pl_module.policy
        if self.dtype is not None:
            policy = copy.deepcopy(policy).to(getattr(torch, self.dtype))
        policy.save_pretrained(path)
        pl_module.tokenizer.save_pretrained(path)
        rank_zero_info(f"SavePretrained: policy written to {path}")
