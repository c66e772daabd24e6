"""Prompt sources and the DataModule that serves them."""

from lit_grpo.data.datamodule import PromptDataModule
from lit_grpo.data.sources import FileSource, HubSource, PromptSource, SyntheticArithmetic

__all__ = ["PromptSource", "SyntheticArithmetic", "FileSource", "HubSource", "PromptDataModule"]
