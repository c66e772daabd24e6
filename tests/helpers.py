"""Small builders shared by the tests: a tiny GRPO run on synthetic addition."""

from __future__ import annotations

from dataclasses import fields

import lightning as L

from lit_grpo import ExactMatch, GRPOModule, PromptDataModule, SyntheticArithmetic
from lit_grpo import settings as settings_groups

#: The module's settings groups by argument name: GRPOModule(sampling=Sampling(...), optim=Optim(...), ...).
GROUPS = {"sampling": settings_groups.Sampling, "optim": settings_groups.Optim, "algorithm": settings_groups.Algorithm,
          "batching": settings_groups.Batching, "guards": settings_groups.Guards}


def grouped(**options):
    """``options`` with each setting (``lr=1e-3``, ``micro_batch_size=2``) moved into its group's dataclass
    (``optim=Optim(lr=1e-3)``), so a test names only the settings it varies; other arguments pass through."""
    out, groups = {}, {}
    for key, value in options.items():
        group = next((g for g, cls in GROUPS.items() if key in {f.name for f in fields(cls)}), None)
        if group is None:
            out[key] = value
        else:
            groups.setdefault(group, {})[key] = value
    return {**out, **{g: GROUPS[g](**values) for g, values in groups.items()}}


def tiny_data(prompts_per_step: int = 4, **kwargs) -> PromptDataModule:
    source = SyntheticArithmetic(num_train=64, num_val=8, num_test=8, max_operand=20, seed=0)
    return PromptDataModule(source, prompts_per_step=prompts_per_step, val_batch_size=8, **kwargs)


def tiny_module(model: str, **kwargs) -> GRPOModule:
    defaults = {"reward": ExactMatch(), "group_size": 4, "max_new_tokens": 4, "lr": 1e-3}
    return GRPOModule(model=model, **grouped(**{**defaults, **kwargs}))


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
