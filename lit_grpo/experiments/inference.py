"""One-sample tests of per-seed values against a fixed value (e.g. "the excess over the prediction is 0").

Complements :mod:`lit_grpo.diagnostics.stats` (two-sample Welch and permutation tests, summaries).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch

from lit_grpo.diagnostics.stats import t_sf

#: Largest number of values whose 2^n sign patterns the sign-flip test enumerates exactly.
MAX_EXACT_FLIPS = 16


def _deviations(values: Sequence[float], mu: float, min_n: int, name: str) -> torch.Tensor:
    x = torch.as_tensor(list(values), dtype=torch.float64).flatten()  # [n]
    if x.numel() < min_n:
        raise ValueError(f"{name} needs at least {min_n} value(s), got {x.numel()}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or infinite values: {x.tolist()}")
    return x - mu


def one_sample_t_test(values: Sequence[float], mu: float = 0.0) -> tuple[float, float, float]:
    """Student's t-test of ``mean(values) == mu``: ``(t, df, p_two_sided)``; needs >= 2 values.

    Zero spread gives ``(nan, nan, nan)`` when every value equals ``mu``, else ``(+-inf, nan, 0.0)``.
    """
    d = _deviations(values, mu, 2, "one_sample_t_test")  # [n]
    n, mean, sd = d.numel(), d.mean().item(), d.std(correction=1).item()
    if sd == 0:
        return (math.nan, math.nan, math.nan) if mean == 0 else (math.copysign(math.inf, mean), math.nan, 0.0)
    t = mean / (sd / math.sqrt(n))
    return t, float(n - 1), min(1.0, 2 * t_sf(abs(t), n - 1))


def sign_flip_test(
    values: Sequence[float], mu: float = 0.0, n_resamples: int = 10000, seed: int = 0
) -> float:
    """Two-sided sign-flip permutation test of ``mean(values) == mu`` (symmetric deviations under the null).

    The p-value is the share of sign patterns of the deviations ``values - mu`` whose ``|mean|`` is at
    least the observed one: all ``2^n`` patterns when ``n <= MAX_EXACT_FLIPS``, else ``n_resamples``
    random patterns drawn with ``seed``, giving ``(1 + hits) / (1 + n_resamples)``.
    """
    d = _deviations(values, mu, 1, "sign_flip_test")  # [n]
    n = d.numel()
    exact = n <= MAX_EXACT_FLIPS
    if exact:
        signs = torch.tensor(list(itertools.product([1.0, -1.0], repeat=n)), dtype=torch.float64)  # [2^n, n]
    else:
        gen = torch.Generator().manual_seed(seed)
        signs = torch.randint(0, 2, (n_resamples, n), generator=gen).double() * 2 - 1  # [M, n]
    means = (signs * d).mean(-1)  # [M]
    observed = abs(d.mean().item())
    tol = 1e-9 * (d.abs().max().item() + 1.0)
    hits = int((means.abs() >= observed - tol).sum())
    return hits / signs.shape[0] if exact else (1 + hits) / (1 + n_resamples)
