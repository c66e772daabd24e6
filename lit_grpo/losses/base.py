"""The policy-loss interface: what a loss receives for one micro-batch and what it returns.

Shapes: ``n`` completions of the micro-batch, ``T`` completion tokens (see ``lit_grpo.types``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from torch import Tensor


@dataclass(frozen=True)
class LossInputs:
    """One micro-batch as the loss sees it. Log-probs are those of the sampled tokens, 0 on padding.

    A log-prob the loss does not declare in :class:`PolicyLoss` (``needs_*``) is ``None``: the module
    computes only what the loss reads.
    """

    logp: Tensor  # [n, T] under the policy being trained, with gradient
    old_logp: Tensor | None  # [n, T] under the policy before this rollout batch's first optimizer step
    engine_logp: Tensor | None  # [n, T] the rollout engine's sampling log-probs
    ref_logp: Tensor | None  # [n, T] under the KL reference policy
    advantages: Tensor  # [n]
    mask: Tensor  # [n, T] bool, True on generated tokens
    weights: Tensor  # [n, T] token weights: the batch loss is the sum of (loss * weights) over micro-batches


@dataclass
class LossOutput:
    """The per-token loss of a micro-batch and the statistics to log (all ``train/<name>``).

    ``means``: detached values averaged over the whole rollout batch (and every rank): ``[n, T]`` tensors over
    its completion tokens, ``[n]`` tensors over its completions (e.g. a per-sequence clip or mask flag).
    ``terms``: detached ``[n, T]`` parts of the loss, aggregated with the token weights exactly as the loss is
    (``train/kl`` is the KL term of the loss divided by ``beta``).
    """

    loss: Tensor  # [n, T]; the module minimises sum(loss * weights)
    means: dict[str, Tensor] = field(default_factory=dict)
    terms: dict[str, Tensor] = field(default_factory=dict)


class PolicyLoss(ABC):
    """Turns one micro-batch's log-probs and advantages into a per-token loss ``[n, T]``.

    The module weights it by the precomputed token weights (the ``aggregation`` of ``GRPOModule``) and sums,
    so a loss never divides by token or sequence counts itself; sequence-level losses read ``mask`` for
    lengths and put a sequence's loss on each of its tokens. Subclasses bind hyperparameters only; the maths
    lives in pure functions (:mod:`lit_grpo.losses.functional`). The ``needs_*`` properties say which
    log-probs the loss reads; the others arrive as ``None``, and the module skips their forwards;
    ``zero_advantage_inert`` says whether the module may skip the completions whose advantage is 0.
    """

    @property
    def zero_advantage_inert(self) -> bool:
        """A completion with advantage exactly 0 adds exactly 0 to the loss and to its gradient, whatever its
        log-probs (as long as they are finite), so the module may leave it out of the forward and backward
        (``GRPOModule(elide_zero_advantage=True)``). False unless a loss says so: a term that does not go
        through the advantage (a KL penalty) makes every completion count."""
        return False

    @property
    def needs_old_logp(self) -> bool:
        """Reads ``old_logp`` (with one optimizer step per rollout batch: ``logp`` detached, at no cost)."""
        return True

    @property
    def needs_ref_logp(self) -> bool:
        """Reads ``ref_logp`` (a forward of the reference policy over the rollout batch)."""
        return False

    @property
    def needs_engine_logp(self) -> bool:
        """Reads ``engine_logp`` (the engine's sampling log-probs): when the loss has an importance
        ``correction`` (:mod:`lit_grpo.losses.correction`)."""
        return getattr(self, "correction", None) is not None

    @abstractmethod
    def __call__(self, batch: LossInputs) -> LossOutput:
        """The per-token loss ``[n, T]`` of one micro-batch, with its statistics."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"
