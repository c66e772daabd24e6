"""Feeding callbacks scripted training steps: a stand-in trainer whose logger records what is written."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from lit_grpo.types import PromptBatch, RolloutStats


class Recorder:
    """A logger that keeps every ``log_metrics`` call: ``metrics[name] -> [(step, value), ...]``."""

    def __init__(self) -> None:
        self.metrics: dict[str, list[tuple[int, float]]] = {}

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        for name, value in metrics.items():
            self.metrics.setdefault(name, []).append((step, value))


def scripted_trainer() -> SimpleNamespace:
    """Enough of a Trainer for the callbacks' per-step hooks (one process, logging every step)."""
    loop = SimpleNamespace(_batches_that_stepped=0)
    return SimpleNamespace(
        loggers=[Recorder()],
        is_global_zero=True,
        log_every_n_steps=1,
        world_size=1,
        global_step=0,
        fit_loop=SimpleNamespace(epoch_loop=loop),
    )


def step_outputs(rewards, advantages, lengths=None, ids=None) -> dict:
    """What ``GRPOModule.training_step`` returns for scripted rewards and advantages ``[P, G]``."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    advantages = torch.as_tensor(advantages, dtype=torch.float32)
    P, G = rewards.shape
    ids = ids or [f"p{i}" for i in range(P)]
    batch = PromptBatch([f"{i}+0=" for i in range(P)], [str(i) for i in range(P)], ids)
    lengths = torch.full((P * G,), 3) if lengths is None else torch.as_tensor(lengths)
    stats = RolloutStats(batch, ["x"] * (P * G), rewards, advantages, lengths, torch.zeros(P * G, dtype=torch.bool))
    return {"rollout": stats}


def advance(trainer) -> None:
    """The next training step."""
    trainer.fit_loop.epoch_loop._batches_that_stepped += 1
    trainer.global_step += 1
