"""Unbiased pass@k (Chen et al. 2021; METHODS.md section 3).

From ``n`` samples of a prompt of which ``c`` are correct, the unbiased estimate of the chance that
at least one of ``k`` samples is correct is ``1 - C(n - c, k) / C(n, k)``, computed stably as
``1 - prod_{i = n-c+1..n} (1 - k / i)`` (exactly 1 when ``n - c < k``). The plug-in
``1 - (1 - c/n)^k`` is biased and is not used.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lit_grpo.checks import require


def _check(n: int, k: int) -> None:
    require(n >= 1, f"pass@k needs n >= 1 samples per prompt, got n={n}")
    require(1 <= k <= n, f"k must lie in [1, n={n}], got k={k}; sample at least k completions per prompt")


def pass_at_k_per_prompt(num_correct: Tensor, n: int, k: int) -> Tensor:
    """Unbiased pass@k of each prompt.

    Args:
        num_correct: ``[P]`` integer counts ``c`` in ``[0, n]``.
        n: samples per prompt.
        k: ``1 <= k <= n``.

    Returns:
        ``[P]`` float64 estimates.
    """
    _check(n, k)
    c = num_correct.long()
    require(
        not bool(((c < 0) | (c > n)).any()),
        f"num_correct must lie in [0, n={n}], got min {c.min()} max {c.max()}",
    )
    i = torch.arange(1, n + 1, dtype=torch.float64)  # [n]
    factor = 1.0 - k / i  # [n]
    in_range = i > (n - c).unsqueeze(-1)  # [P, n]: i = n-c+1 .. n
    prod = torch.where(in_range, factor, torch.ones_like(factor)).prod(-1)  # [P]
    return torch.where(n - c < k, torch.ones_like(prod), 1.0 - prod)  # [P]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one prompt with ``n`` samples of which ``c`` are correct."""
    return pass_at_k_per_prompt(torch.tensor([c]), n, k).item()


def pass_at_k_ks(n: int) -> list[int]:
    """The ``k`` of a pass@k curve: ``1, 2, 4, ...`` up to ``n``, and ``n`` itself."""
    _check(n, 1)
    ks = [2**j for j in range(n.bit_length()) if 2**j <= n]
    return ks if ks[-1] == n else [*ks, n]


def pass_at_k_curve(correct: Tensor) -> dict[int, float]:
    """pass@k for ``k`` in :func:`pass_at_k_ks`, averaged over prompts.

    Args:
        correct: ``[P, n]`` bool, whether sample ``j`` of prompt ``p`` is correct (``P >= 1``).

    Returns:
        ``{k: mean pass@k}``.
    """
    require(correct.dim() == 2 and correct.shape[0] > 0,
            f"correct must have shape [P, n] with P >= 1, got {tuple(correct.shape)}")
    n = correct.shape[1]
    c = correct.bool().sum(-1)  # [P]
    return {k: pass_at_k_per_prompt(c, n, k).mean().item() for k in pass_at_k_ks(n)}
