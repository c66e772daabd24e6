"""Small builders shared by the tests: a tiny GRPO run on synthetic addition."""

from __future__ import annotations

import lightning as L

from lit_grpo import ExactMatch, GRPOModule, PromptDataModule, SyntheticArithmetic


def tiny_data(prompts_per_step: int = 4, **kwargs) -> PromptDataModule:
    source = SyntheticArithmetic(num_train=64, num_val=8, num_test=8, max_operand=20, seed=0)
    return PromptDataModule(source, prompts_per_step=prompts_per_step, val_batch_size=8, **kwargs)


def tiny_module(model: str, **kwargs) -> GRPOModule:
    defaults = {"reward": ExactMatch(), "group_size": 4, "max_new_tokens": 4, "lr": 1e-3}
    return GRPOModule(model=model, **{**defaults, **kwargs})


def tiny_trainer(tmp_path, max_steps: int = 2, **kwargs) -> L.Trainer:
    defaults = {
        "max_steps": max_steps,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "limit_val_batches": 0,
        "default_root_dir": str(tmp_path),
        "accelerator": "cpu",
    }
    return L.Trainer(**{**defaults, **kwargs})
