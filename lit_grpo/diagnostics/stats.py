"""Statistics for comparisons across seeds (METHODS.md section 4).

Per-seed values are short 1-D lists (one number per seed), so the scalar special functions are plain
Python: the Student t distribution comes from the regularized incomplete beta function, evaluated by
its continued fraction. Resampling (bootstrap, permutations) is vectorised with torch.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import Tensor

#: Largest number of splits the permutation test enumerates exactly.
MAX_EXACT_SPLITS = 20000

_TINY = 1e-300


def _values(values: Sequence[float] | Tensor, name: str, min_n: int) -> Tensor:
    x = torch.as_tensor(values, dtype=torch.float64).flatten()  # [n]
    if x.numel() < min_n:
        raise ValueError(f"{name} needs at least {min_n} value(s), got {x.numel()}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or infinite values: {x.tolist()}; drop or fix those seeds")
    return x


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of I_x(a, b) (modified Lentz), accurate for x < (a + 1) / (a + b + 2)."""
    f, c, d = _TINY, _TINY, 0.0
    for j in range(1, 1000):
        if j == 1:
            coef = 1.0
        elif j % 2 == 0:  # d_{2m+1}, m = (j - 2) / 2
            m = (j - 2) // 2
            coef = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        else:  # d_{2m}, m = (j - 1) / 2
            m = (j - 1) // 2
            coef = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 + coef * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + coef / c
        c = c if abs(c) > _TINY else _TINY
        f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return f


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function ``I_x(a, b)`` for ``a, b > 0`` and ``x`` in [0, 1]."""
    if a <= 0 or b <= 0 or not 0 <= x <= 1:
        raise ValueError(f"betainc needs a, b > 0 and 0 <= x <= 1, got a={a}, b={b}, x={x}")
    if x == 0 or x == 1:
        return x
    log_front = a * math.log(x) + b * math.log1p(-x) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) / a * _beta_cf(a, b, x)
    return 1.0 - math.exp(log_front) / b * _beta_cf(b, a, 1.0 - x)


def t_sf(t: float, df: float) -> float:
    """Upper tail ``P(T > t)`` of Student's t with ``df > 0`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))  # P(T > |t|)
    return tail if t >= 0 else 1.0 - tail


def t_quantile(q: float, df: float) -> float:
    """``t`` with ``P(T <= t) = q``, by bisection on :func:`t_sf`."""
    if not 0 < q < 1:
        raise ValueError(f"quantile level q must lie in (0, 1), got {q}")
    if q < 0.5:
        return -t_quantile(1 - q, df)
    target = 1 - q  # upper tail
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > target:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if t_sf(mid, df) > target else (lo, mid)
    return (lo + hi) / 2


def interquartile_mean(x: Tensor) -> Tensor:
    """Mean of the middle half along the last dim: ``[..., n] -> [...]``.

    Drops ``floor(n / 4)`` values from each end of the sorted values (as a 25% trimmed mean).
    """
    n = x.shape[-1]
    cut = n // 4
    return x.sort(-1).values[..., cut : n - cut].mean(-1)


def summarize(
    values: Sequence[float] | Tensor, confidence: float = 0.95, n_bootstrap: int = 10000, seed: int = 0
) -> dict[str, float]:
    """Summary of per-seed values ``[n]``.

    Returns:
        ``n``; ``mean``; ``sd`` (sample, ``n - 1``); ``ci_low``/``ci_high``, the Student t interval
        ``mean -+ t_{(1+confidence)/2, n-1} * sd / sqrt(n)``; ``iqm`` (:func:`interquartile_mean`)
        with ``iqm_ci_low``/``iqm_ci_high``, a percentile bootstrap interval over ``n_bootstrap``
        resamples drawn with ``seed``. ``sd`` and the t interval are NaN when ``n == 1``.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}; e.g. 0.95")
    if n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be >= 1, got {n_bootstrap}")
    x = _values(values, "summarize", 1)  # [n]
    n = x.numel()
    mean = x.mean().item()
    sd, half = math.nan, math.nan
    if n >= 2:
        sd = x.std(correction=1).item()
        half = t_quantile((1 + confidence) / 2, n - 1) * sd / math.sqrt(n)
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(n, (n_bootstrap, n), generator=gen)  # [B, n]
    boot = interquartile_mean(x[idx])  # [B]
    levels = torch.tensor([(1 - confidence) / 2, (1 + confidence) / 2], dtype=torch.float64)
    lo, hi = torch.quantile(boot, levels).tolist()
    return {
        "n": float(n),
        "mean": mean,
        "sd": sd,
        "ci_low": mean - half,
        "ci_high": mean + half,
        "iqm": interquartile_mean(x).item(),
        "iqm_ci_low": lo,
        "iqm_ci_high": hi,
    }


def welch_t_test(a: Sequence[float] | Tensor, b: Sequence[float] | Tensor) -> tuple[float, float, float]:
    """Welch's unequal-variance t-test of ``mean(a) == mean(b)``; each sample needs >= 2 values.

    Returns:
        ``(t, df, p_two_sided)`` with Welch-Satterthwaite ``df``. When both samples have zero
        variance: ``(nan, nan, nan)`` for equal means, ``(+-inf, nan, 0.0)`` otherwise.
    """
    x, y = _values(a, "welch_t_test(a)", 2), _values(b, "welch_t_test(b)", 2)
    va, vb = x.var(correction=1).item() / x.numel(), y.var(correction=1).item() / y.numel()
    diff = x.mean().item() - y.mean().item()
    if va + vb == 0:
        return (math.nan, math.nan, math.nan) if diff == 0 else (math.copysign(math.inf, diff), math.nan, 0.0)
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (x.numel() - 1) + vb**2 / (y.numel() - 1))
    return t, df, min(1.0, 2 * t_sf(abs(t), df))


def permutation_test(
    a: Sequence[float] | Tensor, b: Sequence[float] | Tensor, n_resamples: int = 10000, seed: int = 0
) -> float:
    """Two-sided permutation test of the difference of means.

    The p-value is the share of splits of the pooled values into groups of sizes ``len(a)`` and
    ``len(b)`` whose ``|mean difference|`` is at least the observed one. All splits are enumerated
    when there are at most :data:`MAX_EXACT_SPLITS`; otherwise ``n_resamples`` random splits drawn
    with ``seed`` give ``(1 + hits) / (1 + n_resamples)``.
    """
    x, y = _values(a, "permutation_test(a)", 1), _values(b, "permutation_test(b)", 1)
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    pooled = torch.cat([x, y])  # [N]
    na, N = x.numel(), pooled.numel()
    exact = math.comb(N, na) <= MAX_EXACT_SPLITS
    if exact:
        combos = torch.tensor(list(itertools.combinations(range(N), na)))  # [M, na]
    else:
        gen = torch.Generator().manual_seed(seed)
        combos = torch.rand(n_resamples, N, generator=gen).argsort(-1)[:, :na]  # [M, na]
    in_a = torch.zeros(combos.shape[0], N, dtype=torch.float64).scatter_(1, combos, 1.0)  # [M, N]
    sum_a = in_a @ pooled  # [M]
    diffs = sum_a / na - (pooled.sum() - sum_a) / (N - na)  # [M]
    observed = abs(x.mean().item() - y.mean().item())
    tol = 1e-9 * (pooled.abs().max().item() + 1.0)
    hits = int((diffs.abs() >= observed - tol).sum())
    return hits / combos.shape[0] if exact else (1 + hits) / (1 + n_resamples)


def stratified_permutation_test(
    strata: Sequence[tuple[Sequence[float] | Tensor, Sequence[float] | Tensor]],
    n_resamples: int = 10000,
    seed: int = 0,
) -> float:
    """Two-sided permutation test that two arms have the same mean in every stratum (e.g. every setting
    of a sweep), pooling the evidence of all strata.

    The statistic is the mean over strata of each stratum's difference of means; arm labels are
    shuffled within each stratum only, so a stratum's level (a learning rate, a starting policy) never
    mixes with another's. The p-value is the share of joint relabellings whose ``|statistic|`` is at
    least the observed one: all of them when their number (the product over strata of
    ``C(n_a + n_b, n_a)``) is at most :data:`MAX_EXACT_SPLITS`, otherwise ``n_resamples`` random ones
    drawn with ``seed``, giving ``(1 + hits) / (1 + n_resamples)``. One stratum is :func:`permutation_test`.
    """
    if not strata:
        raise ValueError("stratified_permutation_test needs at least one stratum of (a, b) values")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    pairs = [(_values(a, f"stratum {i} (a)", 1), _values(b, f"stratum {i} (b)", 1)) for i, (a, b) in enumerate(strata)]
    observed = abs(sum(x.mean().item() - y.mean().item() for x, y in pairs) / len(pairs))
    total = math.prod(math.comb(x.numel() + y.numel(), x.numel()) for x, y in pairs)
    exact = total <= MAX_EXACT_SPLITS
    gen = torch.Generator().manual_seed(seed)
    stat = torch.zeros(1 if exact else n_resamples, dtype=torch.float64)  # [M]: the statistic per relabelling
    for x, y in pairs:
        pooled = torch.cat([x, y])  # [N]
        na, N = x.numel(), pooled.numel()
        if exact:
            combos = torch.tensor(list(itertools.combinations(range(N), na)))  # [C, na]
        else:
            combos = torch.rand(n_resamples, N, generator=gen).argsort(-1)[:, :na]  # [M, na]
        in_a = torch.zeros(combos.shape[0], N, dtype=torch.float64).scatter_(1, combos, 1.0)
        sum_a = in_a @ pooled
        diffs = (sum_a / na - (pooled.sum() - sum_a) / (N - na)) / len(pairs)  # [C] or [M]
        stat = (stat[:, None] + diffs[None, :]).flatten() if exact else stat + diffs  # every joint split
    scale = max(max(x.abs().max().item(), y.abs().max().item()) for x, y in pairs)
    hits = int((stat.abs() >= observed - 1e-9 * (scale + 1.0)).sum())
    return hits / stat.numel() if exact else (1 + hits) / (1 + n_resamples)
