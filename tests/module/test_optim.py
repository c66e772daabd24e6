"""The optimizer and schedule the ``optim`` group names: torch.optim classes by name or class path, decays after
the warm-up, a scheduler class of the user's, the errors for what cannot work, and exact resume of the schedule."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch

from lit_grpo.optim import build_optimizer, build_schedule
from lit_grpo.settings import Optim
from tests.helpers import tiny_data, tiny_module, tiny_trainer


def _params():
    return [torch.nn.Parameter(torch.zeros(3))]


def _rates(optim: Optim, steps: int, max_steps: int | None = None) -> list[float]:
    """The learning rate each optimizer step runs at (the schedule stepped after each, as the module does)."""
    opt = build_optimizer(_params(), optim)
    sched = build_schedule(opt, optim, max_steps)
    rates = []
    for _ in range(steps):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return rates


def test_the_default_is_adamw_with_the_fused_kernel_and_a_constant_rate_after_the_warm_up():
    optim = Optim(lr=1e-3, warmup_steps=2, weight_decay=0.01)
    opt = build_optimizer(_params(), optim)
    assert type(opt) is torch.optim.AdamW and opt.defaults["fused"] and opt.defaults["weight_decay"] == 0.01
    assert _rates(optim, 5) == pytest.approx([5e-4, 1e-3, 1e-3, 1e-3, 1e-3], rel=1e-12)


def test_an_optimizer_by_name_or_class_path_with_its_own_arguments():
    sgd = build_optimizer(_params(), Optim(lr=0.1, optimizer="SGD", optimizer_args={"momentum": 0.9}))
    assert type(sgd) is torch.optim.SGD and sgd.defaults["momentum"] == 0.9 and sgd.defaults["lr"] == 0.1
    adam = build_optimizer(_params(), Optim(lr=0.1, optimizer="torch.optim.Adam", betas=(0.8, 0.9)))
    assert type(adam) is torch.optim.Adam and adam.defaults["betas"] == (0.8, 0.9)


@pytest.mark.parametrize(("kind", "expected"), [
    # warm-up 2 steps (0.5, 1), then 4 decay steps from 1 to the floor 0.1, then the floor
    ("linear", [0.5, 1.0, 1.0, 0.775, 0.55, 0.325, 0.1, 0.1]),
    ("cosine", [0.5, 1.0, 1.0, 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)), 0.55,
                0.1 + 0.9 * 0.5 * (1 + math.cos(3 * math.pi / 4)), 0.1, 0.1]),
])
def test_a_decay_after_the_warm_up_ends_at_its_floor(kind, expected):
    optim = Optim(lr=2.0, warmup_steps=2, decay=kind, decay_steps=4, min_lr_ratio=0.1)
    assert _rates(optim, 8) == pytest.approx([2.0 * e for e in expected], rel=1e-12)
    # decay_steps null: over the trainer's steps after the warm-up
    assert _rates(Optim(lr=2.0, warmup_steps=2, decay=kind, min_lr_ratio=0.1), 8, max_steps=6) == \
        pytest.approx([2.0 * e for e in expected], rel=1e-12)


def test_a_scheduler_class_runs_after_the_warm_up():
    optim = Optim(lr=1.0, warmup_steps=1, scheduler="StepLR", scheduler_args={"step_size": 2, "gamma": 0.5})
    assert _rates(optim, 6) == pytest.approx([1.0, 1.0, 1.0, 0.5, 0.5, 0.25], rel=1e-12)


def test_a_class_made_at_run_time_does_not_hide_the_shipped_ones():
    # Lightning wraps each optimizer of a fit in a class no module path imports (LightningAdamW)
    made = type("LightningSGD", (torch.optim.SGD,), {"__module__": "lightning.pytorch.core.optimizer"})
    optim = Optim(lr=0.5, optimizer="SGD")
    assert type(build_optimizer(_params(), optim)) is torch.optim.SGD and made.__name__ == "LightningSGD"


@pytest.mark.parametrize(("options", "match"), [
    ({"optimizer": "NoSuchOptimizer"},
     r"optim.optimizer='NoSuchOptimizer': unknown Optimizer 'NoSuchOptimizer'; choose one of .*SGD"),
    ({"optimizer": "torch.nn.Linear"}, "not a concrete Optimizer subclass"),
    ({"optimizer": "SGD", "optimizer_args": {"betas2": 1}}, r"SGD takes no \['betas2'\]"),
    ({"optimizer_args": {"lr": 0.1}}, r"sets \['lr'\]: use optim.lr"),
    ({"decay": "cosine", "scheduler": "StepLR"}, "choose one schedule"),
    ({"decay": "exponential"}, "must be none, linear or cosine"),
    ({"scheduler_args": {"T_max": 3}}, "without optim.scheduler"),
    ({"min_lr_ratio": 2.0}, r"must be in \[0, 1\]"),
])
def test_what_cannot_work_is_named(options, match):
    with pytest.raises(ValueError, match=match):
        optim = Optim(lr=1e-3, **options)
        build_schedule(build_optimizer(_params(), optim), optim, 10)


def test_a_decay_without_a_length_names_both_ways_to_give_one():
    optim = Optim(lr=1e-3, decay="linear")
    with pytest.raises(ValueError, match="needs optim.decay_steps, or trainer.max_steps"):
        build_schedule(build_optimizer(_params(), optim), optim, -1)


def test_a_resumed_run_goes_on_at_the_rate_it_stopped_at(tmp_path, sft_model_path):
    """4 steps of a cosine decay in one run, and 2 + 2 resumed from the checkpoint: the same rate at every step
    (the schedule's state is in the checkpoint)."""
    def rates(trainer_kwargs, ckpt=None, module=None):
        seen = []

        class Rate(L.Callback):
            def on_train_batch_start(self, trainer, pl_module, *args):
                seen.append(trainer.optimizers[0].param_groups[0]["lr"])

        module = tiny_module(sft_model_path, lr=1e-3, warmup_steps=1, decay="cosine", min_lr_ratio=0.0)
        trainer = tiny_trainer(tmp_path, callbacks=[Rate(), *trainer_kwargs.pop("callbacks", [])],
                               **trainer_kwargs)
        trainer.fit(module, datamodule=tiny_data(), ckpt_path=ckpt)
        return seen

    ckpt = tmp_path / "ckpt"
    L.seed_everything(0)
    whole = rates({"max_steps": 4, "enable_checkpointing": True,
                   "callbacks": [L.pytorch.callbacks.ModelCheckpoint(dirpath=ckpt, every_n_train_steps=2,
                                                                     save_top_k=-1)]})
    second = rates({"max_steps": 4}, ckpt=str(ckpt / "epoch=0-step=2.ckpt"))
    assert second == whole[2:] and whole[1] > whole[2] > whole[3] > 0
