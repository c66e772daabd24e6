"""The optimizer and learning-rate schedule a run chooses (the ``optim`` settings group), built from classes
of ``torch.optim`` (or any class path to an ``Optimizer`` or ``LRScheduler`` subclass).

Every schedule starts with the group's linear warm-up (``warmup_steps``); after it, the rate stays at ``lr``
(``decay: none``), falls linearly or along a half cosine to ``min_lr_ratio`` x ``lr`` over ``decay_steps``
(``decay: linear|cosine``), or follows a scheduler class of the user's (``scheduler``, ``scheduler_args``).
One schedule step is one optimizer step. The schedule's state is Lightning's to checkpoint, so a resumed run
goes on at the rate it stopped at.
"""

from __future__ import annotations

import inspect
import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lit_grpo.checks import require
from lit_grpo.components import resolve

if TYPE_CHECKING:
    from lit_grpo.settings import Optim


def build_optimizer(params: list[Tensor], optim: Optim) -> torch.optim.Optimizer:
    """The group's optimizer over ``params``: ``lr`` and ``weight_decay`` always, ``betas`` where the class
    takes them, the fused kernel where the class has one and the parameters allow it, ``optimizer_args`` on
    top."""
    cls = resolve(torch.optim.Optimizer, optim.optimizer, f"optim.optimizer={optim.optimizer!r}")
    accepted = inspect.signature(cls).parameters
    kwargs = {"lr": optim.lr, "weight_decay": optim.weight_decay}
    if "betas" in accepted:
        kwargs["betas"] = optim.betas
    if "fused" in accepted and _fused_ok(params):
        kwargs["fused"] = True
    kwargs.update(optim.optimizer_args)
    unknown = sorted(set(kwargs) - set(accepted)) if not _takes_kwargs(accepted) else []
    require(not unknown, f"optim.optimizer_args: {cls.__name__} takes no {unknown}; its arguments: "
                         f"{sorted(k for k in accepted if k != 'params')}")
    return cls(params, **kwargs)


def build_schedule(opt: torch.optim.Optimizer, optim: Optim, max_steps: int | None):
    """The group's schedule over ``opt``, stepped once an optimizer step: the warm-up, then the decay or the
    user's scheduler. ``max_steps`` (the trainer's, -1 or None when unset) sizes ``decay_steps`` when that is
    null."""
    warmup = optim.warmup_steps
    ramp = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / max(warmup, 1)))
    if optim.scheduler is None and optim.decay == "none":
        return ramp
    if optim.scheduler is not None:
        cls = resolve(torch.optim.lr_scheduler.LRScheduler, optim.scheduler,
                      f"optim.scheduler={optim.scheduler!r}")
        after = cls(opt, **optim.scheduler_args)
    else:
        steps = optim.decay_steps
        if steps is None:
            require(max_steps is not None and max_steps > warmup,
                    f"optim.decay={optim.decay!r} needs optim.decay_steps, or trainer.max_steps above "
                    f"optim.warmup_steps={warmup} (got max_steps={max_steps}) to decay over the rest")
            steps = max_steps - warmup
        after = torch.optim.lr_scheduler.LambdaLR(opt, _decay(optim.decay, steps, optim.min_lr_ratio))
    if warmup == 0:
        return after
    return torch.optim.lr_scheduler.SequentialLR(opt, [ramp, after], milestones=[warmup])


def _decay(kind: str, steps: int, floor: float):
    """The factor of ``lr`` at step ``t`` after the warm-up: from 1 at t = 0 to ``floor`` at t = steps, then
    ``floor``."""
    def factor(t: int) -> float:
        done = min(t / steps, 1.0)
        shape = 1.0 - done if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * done))
        return floor + (1.0 - floor) * shape

    return factor


def _takes_kwargs(params) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _fused_ok(params: list[Tensor]) -> bool:
    """Whether a fused optimizer kernel (one pass a tensor) applies: plain CPU or CUDA tensors, no DTensor."""
    from torch.distributed.tensor import DTensor

    plain = (p.device.type in ("cpu", "cuda") and not isinstance(p, DTensor) for p in params)
    return bool(params) and all(plain)
