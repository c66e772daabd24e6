"""The gradient probe's settings, shared by the gradient callbacks: which parameters, projected or whole, in
what micro-batches."""

from __future__ import annotations

import re
from dataclasses import dataclass

from lightning.pytorch.utilities import rank_zero_warn
from torch import nn

from lit_grpo.checks import require
from lit_grpo.diagnostics.gradients import LinearTarget, select_linear_targets


@dataclass
class GradientProbe:
    """How the gradient callbacks (GradientRank, GradientBudget, ShadowEstimators, GradientFidelity) take
    per-completion gradients ``grad sum_t log pi(y_i,t)``: over which parameters, projected or whole, in what
    micro-batches. In YAML: ``probe: {params: ['layers\\.2\\.mlp\\.'], projection_dim: 4096}``.

    Args:
        params: Regular expressions searched in parameter names (e.g. ``["layers\\.1\\.mlp"]``); only
            ``nn.Linear`` weights and biases count. Null: every Linear weight (not one tied to an embedding).
        lora: Use the LoRA parameters (``lora_`` in the name) instead of ``params``.
        projection_dim: Project each row to this many dimensions with a fixed Gaussian matrix drawn chunk-wise
            from ``seed`` (null: keep rows whole). Drawing costs ``D x projection_dim`` normal numbers per
            measurement.
        seed: Seed of the projection (GradientFidelity also draws its subsamples from it).
        micro_batch_size: Completions per forward of the measurement (null: all at once).
    """

    params: list[str] | None = None
    lora: bool = False
    projection_dim: int | None = None
    seed: int = 0
    micro_batch_size: int | None = None

    def __post_init__(self) -> None:
        require(not (self.lora and self.params),
                f"probe: give either lora: true or params: {self.params}, not both")
        require(
            self.projection_dim is None or self.projection_dim >= 1,
            f"probe.projection_dim={self.projection_dim} must be >= 1 or null (no projection)",
        )
        require(
            self.micro_batch_size is None or self.micro_batch_size >= 1,
            f"probe.micro_batch_size={self.micro_batch_size} must be >= 1 or null (all at once)",
        )
        for pattern in self.params or []:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"probe.params: {pattern!r} is not a regular expression ({err})") from err

    def targets(self, name: str, policy: nn.Module) -> list[LinearTarget]:
        """The chosen ``nn.Linear`` layers of ``policy``; a ValueError naming callback ``name`` when there are
        none."""
        targets, left_out = select_linear_targets(policy, self.params, self.lora)
        names = [n for n, _ in policy.named_parameters()][:6]
        what = "probe.lora=True" if self.lora else f"probe.params={self.params}"
        require(
            bool(targets),
            f"{name}: {what} chooses no trainable nn.Linear parameter of the policy; parameter names look "
            f"like {names}; fix the patterns (regular expressions searched in these names)",
        )
        if left_out:
            rank_zero_warn(
                f"{name}: leaving out {len(left_out)} matched parameters that are not the weight or bias of "
                f"a trainable nn.Linear (e.g. {left_out[:3]})"
            )
        return targets
