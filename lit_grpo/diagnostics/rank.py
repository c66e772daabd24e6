"""Spectral ranks of gradient matrices (METHODS.md section 3, "Gradient effective rank").

The functions on singular values take a 1-D tensor ``sigma [R]`` of non-negative values in any
order. :func:`spectrum_summary` computes them for a matrix in float64.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lit_grpo.checks import require

#: Number of leading normalised singular values reported by :func:`spectrum_summary`.
TOP_SIGMAS = 5


def _check_sigma(sigma: Tensor) -> Tensor:
    sigma = torch.as_tensor(sigma, dtype=torch.float64).flatten()
    require(sigma.numel() > 0 and bool(torch.isfinite(sigma).all()) and not bool((sigma < 0).any()),
            "singular values must be a non-empty tensor of finite values >= 0")
    require(
        float(sigma.sum()) != 0.0,
        "singular values are all zero: the rank of a zero matrix is undefined (skip it)",
    )
    return sigma


def effective_rank(sigma: Tensor) -> float:
    """Roy & Vetterli (2007): ``exp(-sum_j p_j ln p_j)`` with ``p_j = sigma_j / sum sigma``.

    Two equal non-zero values give exactly 2; zeros contribute nothing.
    """
    sigma = _check_sigma(sigma)  # [R]
    p = sigma / sigma.sum()  # [R]
    return math.exp(-torch.special.xlogy(p, p).sum().item())


def stable_rank(sigma: Tensor) -> float:
    """``||M||_F^2 / ||M||_2^2 = sum sigma^2 / max sigma^2``."""
    sigma = _check_sigma(sigma)
    return (sigma.square().sum() / sigma.max().square()).item()


def energy_rank(sigma: Tensor, q: float) -> int:
    """Smallest ``k`` whose ``k`` largest singular values hold a share ``q`` of ``sum sigma^2``."""
    require(0 < q <= 1, f"energy share q must lie in (0, 1], got {q}")
    sigma = _check_sigma(sigma)
    cum = sigma.square().sort(descending=True).values.cumsum(0)  # [R]
    k = int(torch.searchsorted(cum, q * cum[-1]).item()) + 1
    return min(k, sigma.numel())


def spectrum_summary(matrix: Tensor) -> dict[str, float] | None:
    """Rank statistics of ``matrix [n, d]`` (e.g. rows = per-completion gradient contributions).

    Singular values come from ``torch.linalg.svdvals`` in float64. Returns ``None`` for an
    all-zero or non-finite matrix (e.g. a fully degenerate batch): the caller skips it and counts
    the skip instead of logging a number. Otherwise a dict with ``erank``, ``stable_rank``,
    ``energy_rank_0.9``, ``energy_rank_0.99`` and ``sigma_1 .. sigma_5``: the five largest
    singular values normalised as ``sigma_j / sum sigma`` (the ``p_j`` of the effective rank, so
    they sum to at most 1), padded with 0 when the matrix has fewer than five.
    """
    require(matrix.dim() == 2, f"matrix must have shape [n, d], got {tuple(matrix.shape)}")
    m = matrix.detach().to(torch.float64)
    if m.numel() == 0 or not bool(torch.isfinite(m).all()) or not bool((m != 0).any()):
        return None
    sigma = torch.linalg.svdvals(m)  # [min(n, d)], descending
    p = sigma / sigma.sum()
    top = [p[j].item() if j < p.numel() else 0.0 for j in range(TOP_SIGMAS)]
    return {
        "erank": effective_rank(sigma),
        "stable_rank": stable_rank(sigma),
        "energy_rank_0.9": float(energy_rank(sigma, 0.9)),
        "energy_rank_0.99": float(energy_rank(sigma, 0.99)),
        **{f"sigma_{j + 1}": v for j, v in enumerate(top)},
    }


def random_projection(
    dim_in: int,
    dim_out: int,
    seed: int,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> Tensor:
    """A fixed Gaussian projection ``[dim_in, dim_out]`` with entries ``N(0, 1 / dim_out)``.

    ``g @ R`` maps a flat gradient ``g [dim_in]`` to ``[dim_out]`` and keeps squared norms in
    expectation. The same ``seed`` always gives the same matrix (a CPU ``torch.Generator`` draws it,
    then it is moved to ``device``).
    """
    require(
        dim_in >= 1 and dim_out >= 1, f"projection dims must be >= 1, got dim_in={dim_in}, dim_out={dim_out}"
    )
    gen = torch.Generator().manual_seed(seed)
    r = torch.randn(dim_in, dim_out, generator=gen, dtype=dtype)
    return (r / math.sqrt(dim_out)).to(device)
