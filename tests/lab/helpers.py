"""Writing small experiment configs for the tests."""

from __future__ import annotations

from pathlib import Path

import yaml

#: overrides that make a quickstart run a few seconds long (a grid of them is a quick test)
SMALL = [
    "--model.group_size=4",
    "--data.prompts_per_step=4",
    "--trainer.max_steps=2",
    "--trainer.val_check_interval=2",
    "--data.max_val_prompts=8",
    "--model.sampling.val_samples=1",
]

ROOT = Path(__file__).resolve().parents[2]


def write_experiment(path: Path, **overrides) -> Path:
    """A valid two-arm experiment over the quickstart config, with ``overrides`` on top."""
    spec = {
        "name": "tiny",
        "claim": "a test",
        "base": ["configs/quickstart.yaml"],
        "args": ["--model.group_size=4"],
        "arms": {"GRPO": {"config": ["configs/estimators/grpo.yaml"]}, "Sign": {"estimator": "Sign"}},
        "seeds": [0, 1],
        "metrics": [{"name": "rollout/reward_mean", "reduce": "mean"}],
    }
    spec.update(overrides)
    path.write_text("# lit-grpo compare --config " + str(path) + "\n" + yaml.safe_dump(spec, sort_keys=False))
    return path
