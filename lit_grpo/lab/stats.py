"""Statistics for comparisons across seeds (METHODS.md section 4).

Per-seed values are short 1-D lists (one number per seed), so the scalar special functions are plain
Python: the Student t distribution comes from the regularized incomplete beta function, evaluated by
its continued fraction. Resampling (bootstrap, permutations) is vectorised with torch.

What counts as zero is one rule, :func:`rounding_tolerance`: a difference, deviation, spread or residual no
larger than what rounding alone can leave in it is exactly 0, so that another CPU's last digit never becomes a
finding (docs/methods.md, "What counts as zero"). A t statistic over a spread of 0 is undefined, not
infinite: the t-tests then give no p (NaN), and the exact tests' p is the one to read. Differences a caller
computed are tied on the scale of the values they were taken of (``scale``), which their own magnitude cannot
show.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import Tensor

from lit_grpo.checks import require

#: Largest number of splits the permutation test enumerates exactly.
MAX_EXACT_SPLITS = 20000

_TINY = 1e-300

#: float64's machine epsilon, 2.2e-16: one unit in the last place (ULP) of 1.0, so at most eps * |x| for a
#: normal x; below the smallest normal float64, 2.2e-308, the spacing stays eps * 2.2e-308
EPS = float(torch.finfo(torch.float64).eps)
_MIN_NORMAL = float(torch.finfo(torch.float64).tiny)
#: The multiple of ``n * eps * scale`` at or below which a computed quantity is 0 (:func:`rounding_tolerance`)
ROUNDING_ULPS = 4


def rounding_tolerance(scale: float, n: int) -> float:
    """The rule for "this is zero": ``ROUNDING_ULPS * n * eps * scale`` (``scale`` at least the smallest
    normal float64, where the spacing of float64 numbers stops shrinking).

    The most that rounding can leave in a mean, a difference of means or a deviation from a mean that is
    exactly 0 in exact arithmetic, computed in float64 from ``n`` values of magnitude at most ``scale``,
    each of which may itself be one ULP off (another summation order, thread count or CPU): a sum of n
    terms is off by at most ``(n - 1) * eps / 2 * sum |x|`` (Higham, Accuracy and Stability of Numerical
    Algorithms, 2002, section 4.2), so a mean of values one ULP off by at most ``n * eps * scale``; a
    difference of two such means, or a value less a mean, with its own rounding by at most
    ``3 * n * eps * scale``; rounded up to 4. A quantity of that kind at or below it counts as exactly 0
    (docs/methods.md, "What counts as zero").
    """
    return ROUNDING_ULPS * max(n, 1) * EPS * max(abs(scale), _MIN_NORMAL)


def zero_tolerance(*samples: Sequence[float] | Tensor | float) -> float:
    """:func:`rounding_tolerance` of every value in ``samples`` (sequences, tensors, or single numbers such
    as a tested mean): ``scale`` their largest magnitude, ``n`` their count."""
    flat = [torch.as_tensor(s, dtype=torch.float64).flatten() for s in samples]
    x = torch.cat(flat) if flat else torch.zeros(0, dtype=torch.float64)
    return rounding_tolerance(x.abs().max().item() if x.numel() else 0.0, x.numel())


def snap(x: float, tol: float) -> float:
    """``x``, or exactly ``0.0`` (never ``-0.0``) when ``|x| <= tol``: within rounding
    (:func:`zero_tolerance`)."""
    return 0.0 if abs(x) <= tol else x


def _tied(d: Tensor, tol: float) -> Tensor:
    """``d [n]`` with the entries within rounding (``|d| <= tol``) exactly ``+0.0``: ties of paired data."""
    return torch.where(d.abs() <= tol, torch.zeros_like(d), d)


def _ss_tolerance(ss: float, n: int, tol: float) -> float:
    """What rounding can do to a sum of ``n`` squares of size ``ss`` whose terms are each at most ``tol``
    off: ``(r + e)^2 - r^2 = 2 r e + e^2`` summed, with ``sum |r| <= sqrt(n ss)`` (Cauchy-Schwarz). With
    ``ss = 0`` it is ``n tol^2``: every deviation within rounding."""
    return 2 * tol * math.sqrt(n * max(ss, 0.0)) + n * tol * tol


def _spread(x: Tensor, tol: float) -> float:
    """Sample standard deviation (``n - 1``) of ``x [n]``; exactly 0 when every deviation from the mean is
    within rounding (sum of squared deviations at most ``n tol^2``)."""
    ss = float(((x - x.mean()) ** 2).sum())
    return 0.0 if ss <= _ss_tolerance(0.0, x.numel(), tol) else x.std(correction=1).item()


def _values(values: Sequence[float] | Tensor, name: str, min_n: int) -> Tensor:
    x = torch.as_tensor(values, dtype=torch.float64).flatten()  # [n]
    require(x.numel() >= min_n, f"{name} needs at least {min_n} value(s), got {x.numel()}")
    require(bool(torch.isfinite(x).all()),
            f"{name} contains NaN or infinite values: {x.tolist()}; drop or fix those seeds")
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
    require(
        a > 0 and b > 0 and 0 <= x <= 1, f"betainc needs a, b > 0 and 0 <= x <= 1, got a={a}, b={b}, x={x}"
    )
    if x == 0 or x == 1:
        return x
    log_front = a * math.log(x) + b * math.log1p(-x) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) / a * _beta_cf(a, b, x)
    return 1.0 - math.exp(log_front) / b * _beta_cf(b, a, 1.0 - x)


def t_sf(t: float, df: float) -> float:
    """Upper tail ``P(T > t)`` of Student's t with ``df > 0`` degrees of freedom."""
    require(df > 0, f"degrees of freedom must be > 0, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))  # P(T > |t|)
    return tail if t >= 0 else 1.0 - tail


def t_quantile(q: float, df: float) -> float:
    """``t`` with ``P(T <= t) = q``, by bisection on :func:`t_sf`."""
    require(0 < q < 1, f"quantile level q must lie in (0, 1), got {q}")
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


def t_test_power(n: int, delta: float, sd: float, alpha: float = 0.05, points: int = 20001) -> float:
    """Power of the two-sided one-sample (or paired) t-test at level ``alpha`` with ``n`` values: the chance
    that it rejects ``mean == 0`` when the true mean is ``delta`` and the values' standard deviation ``sd``.

    ``T = (Z + lam) / W`` with ``lam = delta sqrt(n) / sd`` and ``W = sqrt(V / (n - 1))``, ``V`` chi-squared
    with ``n - 1`` df (the noncentral t): ``P(|T| > c) = E_W[Phi(lam - c W) + Phi(-lam - c W)]`` for the
    critical value ``c = t_{1 - alpha/2, n-1}``, integrated over ``u = sqrt(V)`` by the trapezoid rule on
    ``points`` points of ``[0, sqrt(n - 1) + 12]`` (the density of ``u`` beyond it is below ``e^-72``).
    """
    require(n >= 2, f"t_test_power needs n >= 2 values, got {n}")
    require(sd > 0 and math.isfinite(sd), f"t_test_power needs a finite sd > 0, got {sd}")
    require(0 < alpha < 1, f"alpha must lie in (0, 1), got {alpha}; e.g. 0.05")
    df = n - 1
    c, lam = t_quantile(1 - alpha / 2, df), delta * math.sqrt(n) / sd
    u = torch.linspace(0.0, math.sqrt(df) + 12, points, dtype=torch.float64)  # [points]
    log_front = math.log(2) - df / 2 * math.log(2) - math.lgamma(df / 2)
    density = torch.exp(torch.xlogy(torch.tensor(df - 1.0, dtype=torch.float64), u) - u * u / 2 + log_front)
    w = u / math.sqrt(df)
    reject = torch.special.ndtr(lam - c * w) + torch.special.ndtr(-lam - c * w)
    return float(torch.trapezoid(density * reject, u))


def detectable_difference(n: int, sd: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean difference that the two-sided paired t-test at level ``alpha`` over ``n`` pairs
    detects with probability ``power``, where the differences' standard deviation is ``sd``: the root of
    :func:`t_test_power` ``(n, delta, sd, alpha) = power`` in ``delta``, by bisection (power rises with
    ``delta``), to 1e-6 of ``sd``. The size to compare with an experiment's margin before it runs."""
    require(0 < power < 1, f"power must lie in (0, 1), got {power}; e.g. 0.8")
    at_zero = t_test_power(n, 0.0, sd, alpha)
    require(at_zero < power, f"power {power} is at most alpha {alpha}: any delta has it")
    low, high = 0.0, sd
    while t_test_power(n, high, sd, alpha) < power:
        low, high = high, 2 * high
    while high - low > 1e-6 * sd:
        mid = (low + high) / 2
        low, high = (mid, high) if t_test_power(n, mid, sd, alpha) < power else (low, mid)
    return high


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
        resamples drawn with ``seed``. ``sd`` and the t interval are NaN when ``n == 1``. Within rounding
        (:func:`zero_tolerance` of the values): ``sd`` is 0 (and the interval the mean) when the values are
        equal, and a mean, IQM or IQM bound is 0 when the values are (or cancel to) 0.
    """
    require(0 < confidence < 1, f"confidence must lie in (0, 1), got {confidence}; e.g. 0.95")
    require(n_bootstrap >= 1, f"n_bootstrap must be >= 1, got {n_bootstrap}")
    x = _values(values, "summarize", 1)  # [n]
    n, tol = x.numel(), zero_tolerance(x)
    mean = snap(x.mean().item(), tol)
    sd, half = math.nan, math.nan
    if n >= 2:
        sd = _spread(x, tol)
        half = 0.0 if sd == 0 else t_quantile((1 + confidence) / 2, n - 1) * sd / math.sqrt(n)
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
        "iqm": snap(interquartile_mean(x).item(), tol),
        "iqm_ci_low": snap(lo, tol),
        "iqm_ci_high": snap(hi, tol),
    }


def welch_t_test(a: Sequence[float] | Tensor, b: Sequence[float] | Tensor) -> tuple[float, float, float]:
    """Welch's unequal-variance t-test of ``mean(a) == mean(b)``; each sample needs >= 2 values.

    Returns:
        ``(t, df, p_two_sided)`` with Welch-Satterthwaite ``df``. Spreads and the difference of means
        within rounding (:func:`zero_tolerance` of both samples) are 0. When both samples have zero
        variance the test is undefined, ``(nan, nan, nan)``, whatever the means: ``diff / 0`` measures no
        spread, so it is no evidence at any n (:func:`permutation_test` gives the p there).
    """
    x, y = _values(a, "welch_t_test(a)", 2), _values(b, "welch_t_test(b)", 2)
    tol = zero_tolerance(x, y)
    va = x.var(correction=1).item() / x.numel() if _spread(x, tol) else 0.0
    vb = y.var(correction=1).item() / y.numel() if _spread(y, tol) else 0.0
    diff = snap(x.mean().item() - y.mean().item(), tol)
    if va + vb == 0:
        return math.nan, math.nan, math.nan
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
    with ``seed`` give ``(1 + hits) / (1 + n_resamples)``. Differences within rounding
    (:func:`zero_tolerance`) are ties.
    """
    x, y = _values(a, "permutation_test(a)", 1), _values(b, "permutation_test(b)", 1)
    return stratified_permutation_test([(x, y)], n_resamples, seed)  # one stratum


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
    Statistics within rounding of each other (:func:`zero_tolerance` of every value) are ties, and an observed
    statistic within rounding of 0 is 0 (p = 1).
    """
    require(bool(strata), "stratified_permutation_test needs at least one stratum of (a, b) values")
    require(n_resamples >= 1, f"n_resamples must be >= 1, got {n_resamples}")
    pairs = [
        (_values(a, f"stratum {i} (a)", 1), _values(b, f"stratum {i} (b)", 1))
        for i, (a, b) in enumerate(strata)
    ]
    tol = zero_tolerance(*(v for pair in pairs for v in pair))
    observed = snap(abs(sum(x.mean().item() - y.mean().item() for x, y in pairs) / len(pairs)), tol)
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
    hits = int((stat.abs() >= observed - tol).sum())
    return hits / stat.numel() if exact else (1 + hits) / (1 + n_resamples)


# ---- one-sample and paired tests ------------------------------------------------------------------

#: Largest number of values whose 2^n sign patterns the sign-flip and signed-rank tests enumerate exactly.
MAX_EXACT_FLIPS = 16


def _deviations(
    values: Sequence[float] | Tensor, mu: float, min_n: int, name: str, scale: float = 0.0
) -> tuple[Tensor, float]:
    """``values - mu`` with the deviations within rounding exactly 0, and the tolerance:
    :func:`zero_tolerance` of the values and ``mu``, or :func:`rounding_tolerance` of ``scale`` (the magnitude
    of the values that ``values`` were computed from, such as the two arms of paired differences) where that
    is larger."""
    x = _values(values, name, min_n)
    tol = max(zero_tolerance(x, mu), rounding_tolerance(scale, x.numel() + 1))
    return _tied(x - mu, tol), tol  # [n]


def _differences(
    a: Sequence[float] | Tensor, b: Sequence[float] | Tensor, name: str, min_n: int
) -> tuple[Tensor, float]:
    """``a - b`` of paired values (the same seeds in the same order), the differences within rounding of the
    values exactly 0 (ties), and the tolerance (:func:`zero_tolerance` of both)."""
    x, y = _values(a, f"{name}(a)", min_n), _values(b, f"{name}(b)", min_n)
    require(x.numel() == y.numel(),
            f"{name} pairs values, so a and b need the same length, got {x.numel()} and {y.numel()}; "
            "keep only the seeds both arms finished")
    tol = zero_tolerance(x, y)
    return _tied(x - y, tol), tol  # [n]


def tied_differences(a: Sequence[float] | Tensor, b: Sequence[float] | Tensor) -> list[float]:
    """``a - b`` of paired values, each difference within rounding of the values (:func:`zero_tolerance` of
    ``a`` and ``b``) exactly ``0.0``: a tie, neither arm ahead."""
    return _differences(a, b, "tied_differences", 1)[0].tolist()


def mean_difference(a: Sequence[float] | Tensor, b: Sequence[float] | Tensor) -> float:
    """``mean(a) - mean(b)`` as plain float sums, exactly ``0.0`` within rounding (:func:`zero_tolerance` of
    ``a`` and ``b``)."""
    x, y = _values(a, "mean_difference(a)", 1), _values(b, "mean_difference(b)", 1)
    return snap(sum(x.tolist()) / x.numel() - sum(y.tolist()) / y.numel(), zero_tolerance(x, y))


def _t_test(d: Tensor, tol: float) -> tuple[float, float, float]:
    """Student's t of ``mean(d) == 0`` for deviations ``d [n]`` already tied at ``tol``; ``(nan, nan, nan)``
    with zero spread (see :func:`one_sample_t_test`)."""
    n, mean, sd = d.numel(), snap(d.mean().item(), tol), _spread(d, tol)
    if sd == 0:
        return math.nan, math.nan, math.nan
    t = mean / (sd / math.sqrt(n))
    return t, float(n - 1), min(1.0, 2 * t_sf(abs(t), n - 1))


def one_sample_t_test(
    values: Sequence[float] | Tensor, mu: float = 0.0, scale: float = 0.0
) -> tuple[float, float, float]:
    """Student's t-test of ``mean(values) == mu``: ``(t, df, p_two_sided)``; needs >= 2 values.

    Deviations, their mean and their spread within rounding are 0: :func:`zero_tolerance` of the values and
    ``mu``, or, for values computed from others (paired differences ``a - b``), of ``scale``, the largest
    magnitude of those (``a`` and ``b``): a difference one ULP of the arms wide is rounding, which the
    differences' own magnitude cannot tell. Zero spread leaves the test undefined, ``(nan, nan, nan)``,
    whatever the mean: ``mean / 0`` measures no spread (two seeds one prompt apart would otherwise give
    p = 0), so read the exact :func:`sign_flip_test` there.
    """
    return _t_test(*_deviations(values, mu, 2, "one_sample_t_test", scale))


def paired_t_test(a: Sequence[float] | Tensor, b: Sequence[float] | Tensor) -> tuple[float, float, float]:
    """Paired t-test of ``mean(a - b) == 0`` (a one-sample t-test of the differences): ``(t, df, p)``.
    Differences within rounding of the values (:func:`zero_tolerance` of ``a`` and ``b``) are ties;
    differences that agree to rounding (zero spread) leave it undefined, ``(nan, nan, nan)``: read
    :func:`paired_sign_flip_test` there."""
    return _t_test(*_differences(a, b, "paired_t_test", 2))


def sign_patterns(n: int, n_resamples: int, seed: int) -> tuple[Tensor, bool]:
    """``[M, n]`` of +-1: all ``2^n`` patterns when ``n <= MAX_EXACT_FLIPS``, else ``n_resamples`` random
    ones."""
    if n <= MAX_EXACT_FLIPS:
        bits = (torch.arange(2**n)[:, None] >> torch.arange(n)) & 1  # [2^n, n]
        return 1.0 - 2.0 * bits.double(), True
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2, (n_resamples, n), generator=gen).double() * 2 - 1, False


def sign_flip_test(
    values: Sequence[float] | Tensor,
    mu: float = 0.0,
    n_resamples: int = 10000,
    seed: int = 0,
    scale: float = 0.0,
) -> float:
    """Two-sided sign-flip permutation test of ``mean(values) == mu`` (symmetric deviations under the null).

    The p-value is the share of sign patterns of the deviations ``values - mu`` whose ``|mean|`` is at
    least the observed one: all ``2^n`` patterns when ``n <= MAX_EXACT_FLIPS``, else ``n_resamples``
    random patterns drawn with ``seed``, giving ``(1 + hits) / (1 + n_resamples)``. Applied to paired
    differences it is the exact paired permutation test (:func:`paired_sign_flip_test`); its smallest
    possible p is ``2 / 2^n`` (0.0020 for 10 pairs). Deviations within rounding are 0:
    :func:`zero_tolerance` of the values and ``mu``, or of ``scale``, the largest magnitude of the values that
    ``values`` were computed from (the arms of paired differences), as :func:`one_sample_t_test`.
    """
    d, tol = _deviations(values, mu, 1, "sign_flip_test", scale)
    return _sign_flip([d], tol, n_resamples, seed)


def stratified_sign_flip_test(
    strata: Sequence[Sequence[float] | Tensor], n_resamples: int = 10000, seed: int = 0, scale: float = 0.0
) -> float:
    """Two-sided sign-flip test that paired differences are centred on 0 in every stratum, pooled.

    The statistic is the mean over strata of each stratum's mean difference; every difference's sign
    is flipped independently (all ``2^N`` patterns when ``N <= MAX_EXACT_FLIPS``, else ``n_resamples``
    random ones, ``p = (1 + hits) / (1 + n_resamples)``). One stratum is :func:`sign_flip_test`.
    ``scale``: the largest magnitude of the values the differences were taken of, so that differences
    within their rounding (:func:`rounding_tolerance` of ``scale`` and the N differences) are 0; the
    differences' own magnitude when larger.
    """
    parts = [_values(s, f"stratum {i}", 1) for i, s in enumerate(strata)]
    d = torch.cat(parts)  # [N]
    tol = rounding_tolerance(max(abs(scale), d.abs().max().item()), d.numel())
    return _sign_flip([_tied(x, tol) for x in parts], tol, n_resamples, seed)


def _sign_flip(parts: list[Tensor], tol: float, n_resamples: int, seed: int) -> float:
    """The sign-flip p-value of the strata ``parts`` of deviations, already tied at ``tol``."""
    d = torch.cat(parts)  # [N]
    w = torch.cat([torch.full_like(x, 1 / (len(parts) * x.numel())) for x in parts])  # [N]
    signs, exact = sign_patterns(d.numel(), n_resamples, seed)  # [M, N]
    stats = signs @ (w * d)  # [M]
    observed = snap(abs(float((w * d).sum())), tol)
    hits = int((stats.abs() >= observed - tol).sum())
    return hits / signs.shape[0] if exact else (1 + hits) / (1 + n_resamples)


def paired_sign_flip_test(
    a: Sequence[float] | Tensor, b: Sequence[float] | Tensor, n_resamples: int = 10000, seed: int = 0
) -> float:
    """Exact paired permutation test of ``mean(a - b) == 0``: :func:`sign_flip_test` of the differences, those
    within rounding of the values (:func:`zero_tolerance` of ``a`` and ``b``) ties."""
    d, tol = _differences(a, b, "paired_sign_flip_test", 1)
    return _sign_flip([d], tol, n_resamples, seed)


def midranks(x: Tensor, tol: float = 0.0) -> Tensor:
    """Ranks ``1..n`` of ``x [n]``, tied values sharing the mean of their ranks; values whose sorted
    neighbour is at most ``tol`` away are tied (0: only equal values)."""
    n = x.numel()
    order = x.argsort(stable=True)
    ranked = x[order]
    starts = torch.ones(n, dtype=torch.bool)
    starts[1:] = (ranked[1:] - ranked[:-1]) > tol
    group = starts.long().cumsum(0) - 1  # [n]: the tie group of each sorted value
    groups = torch.zeros(int(group[-1]) + 1 if n else 0, dtype=torch.float64)
    count = groups.index_add(0, group, torch.ones(n, dtype=torch.float64))
    total = groups.index_add(0, group, torch.arange(1.0, n + 1, dtype=torch.float64))  # sum of the ranks
    ranks = torch.empty(n, dtype=torch.float64)
    ranks[order] = (total / count)[group]
    return ranks


def wilcoxon_signed_rank_test(
    a: Sequence[float] | Tensor, b: Sequence[float] | Tensor | None = None, mu: float = 0.0
) -> tuple[float, float]:
    """Wilcoxon's signed-rank test of a symmetric distribution of ``a - b`` (or ``a - mu``) around 0.

    Zero differences are dropped (Wilcoxon's convention); ties share midranks. A difference within
    rounding of the values (:func:`zero_tolerance` of ``a`` and ``b``, or ``a`` and ``mu``) is zero, and
    two ``|d|`` within it of each other are tied. ``W+`` is the sum of
    the ranks of ``|d|`` over the positive differences. The p-value is two-sided,
    ``P(|W+ - E W+| >= |w - E W+|)`` under random signs: exact by enumerating the ``2^n`` sign patterns
    (ties included) when ``n <= MAX_EXACT_FLIPS``, else the normal approximation with the tie
    correction of the variance. Returns ``(W+, p)``; ``(nan, 1.0)`` when every difference is 0.
    """
    d, tol = _deviations(a, mu, 1, "wilcoxon_signed_rank_test") if b is None else (
        _differences(a, b, "wilcoxon_signed_rank_test", 1)
    )  # fmt: skip
    d = d[d != 0]  # the differences within rounding are exactly 0 already
    n = d.numel()
    if n == 0:
        return math.nan, 1.0
    ranks = midranks(d.abs(), tol)  # [n]
    w = ranks[d > 0].sum().item()
    centre = ranks.sum().item() / 2
    tol_ranks = zero_tolerance(ranks)  # rank sums are half-integers: any tolerance below 1/4 is exact
    if n <= MAX_EXACT_FLIPS:
        signs, _ = sign_patterns(n, 1, 0)  # [2^n, n]
        dist = ((signs > 0).double() * ranks).sum(-1)  # [2^n]: W+ of every pattern
        p = ((dist - centre).abs() >= abs(w - centre) - tol_ranks).double().mean().item()
        return w, p
    var = (ranks**2).sum().item() / 4  # equals n(n+1)(2n+1)/24 less the tie correction
    z = abs(w - centre) / math.sqrt(var)
    return w, math.erfc(z / math.sqrt(2))


# ---- equivalence ----------------------------------------------------------------------------------


def tost_test(values: Sequence[float] | Tensor, target: float, margin: float) -> dict[str, float]:
    """Two one-sided t-tests (Schuirmann's TOST) of equivalence: ``|mean - target| < margin``.

    H0 is non-equivalence (``mean <= target - margin`` or ``mean >= target + margin``). Returns
    ``p`` (the larger of the two one-sided p-values: equivalence is shown at level alpha when
    ``p < alpha``), ``p_lower``, ``p_upper``, and the ``(1 - 2 alpha)`` = 90% t interval
    ``ci90_low``/``ci90_high`` (inside ``target +- margin`` exactly when ``p < 0.05``). Needs >= 2
    values; with zero spread (values equal up to rounding, :func:`zero_tolerance`) ``p`` is 0 inside the
    margin and 1 outside.
    """
    require(margin > 0, f"tost_test: margin={margin} must be > 0 (e.g. 0.5)")
    x = _values(values, "tost_test", 2)
    n, mean, sd = x.numel(), x.mean().item(), _spread(x, zero_tolerance(x))
    se = sd / math.sqrt(n)
    lo, hi = target - margin, target + margin
    if se == 0:
        p_lower, p_upper = float(mean <= lo), float(mean >= hi)
        half = 0.0
    else:
        p_lower = t_sf((mean - lo) / se, n - 1)  # H0: mean <= lo
        p_upper = t_sf((hi - mean) / se, n - 1)  # H0: mean >= hi
        half = t_quantile(0.95, n - 1) * se
    return {
        "p": max(p_lower, p_upper),
        "p_lower": p_lower,
        "p_upper": p_upper,
        "ci90_low": mean - half,
        "ci90_high": mean + half,
    }


# ---- multiplicity ---------------------------------------------------------------------------------


def _pvalues(pvalues: Sequence[float] | Tensor) -> tuple[Tensor, Tensor]:
    p = torch.as_tensor(list(pvalues) if not isinstance(pvalues, Tensor) else pvalues, dtype=torch.float64)
    p = p.flatten()
    keep = ~p.isnan()
    require(not bool(((p[keep] < 0) | (p[keep] > 1)).any()), f"p-values must lie in [0, 1], got {p.tolist()}")
    return p, keep


def holm_adjust(pvalues: Sequence[float] | Tensor) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control under any dependence).

    With the ``m`` finite p-values sorted, ``p~_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``; rejecting
    where ``p~ <= alpha`` keeps the chance of any false rejection at most ``alpha``. NaN entries (tests
    that could not be made) stay NaN and do not count in ``m``. Same order as the input.
    """
    def step_down(q: Tensor, m: int) -> Tensor:  # q sorted ascending
        return (q * (m - torch.arange(m, dtype=torch.float64))).clamp(max=1.0).cummax(0).values

    return _adjusted(pvalues, step_down)


def benjamini_hochberg_adjust(pvalues: Sequence[float] | Tensor) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values; false discovery rate control).

    With the ``m`` finite p-values sorted, ``q_(i) = min_{j >= i} min(1, m p_(j) / j)``; rejecting where
    ``q <= alpha`` keeps the expected share of false rejections among the rejections at most ``alpha``
    (for independent or positively dependent tests). NaN entries stay NaN and do not count in ``m``.
    """
    def step_up(q: Tensor, m: int) -> Tensor:  # q sorted ascending
        return (
            (q * m / torch.arange(1, m + 1, dtype=torch.float64))
            .flip(0)
            .cummin(0)
            .values.flip(0)
            .clamp(max=1.0)
        )

    return _adjusted(pvalues, step_up)


def _adjusted(pvalues: Sequence[float] | Tensor, adjust) -> list[float]:
    """``adjust(sorted finite p-values [m], m)`` applied to the finite entries of ``pvalues`` in their own
    order; NaN entries stay NaN and do not count in ``m``."""
    p, keep = _pvalues(pvalues)
    out = torch.full_like(p, math.nan)
    q = p[keep]
    if q.numel():
        order = q.argsort()
        adjusted = torch.empty_like(q)
        adjusted[order] = adjust(q[order], q.numel())
        out[keep] = adjusted
    return out.tolist()


# ---- two-way analysis of variance -----------------------------------------------------------------


def f_sf(f: float, d1: float, d2: float) -> float:
    """Upper tail ``P(F > f)`` of the F distribution with ``(d1, d2)`` degrees of freedom."""
    require(d1 > 0 and d2 > 0, f"F degrees of freedom must be > 0, got d1={d1}, d2={d2}")
    if f <= 0:
        return 1.0
    if math.isinf(f):
        return 0.0
    return betainc(d2 / 2, d1 / 2, d2 / (d2 + d1 * f))


def _one_hot(codes: Sequence) -> Tensor:
    """``[n, L - 1]`` treatment-coded dummies of a factor (first level the reference)."""
    levels = list(dict.fromkeys(codes))
    index = torch.tensor([levels.index(c) for c in codes])
    return torch.nn.functional.one_hot(index, len(levels)).double()[:, 1:]


def _interaction(a: Tensor, b: Tensor) -> Tensor:
    """Column products of two dummy blocks: ``[n, La - 1]``, ``[n, Lb - 1]`` -> ``[n, (La - 1)(Lb - 1)]``."""
    return (a[:, :, None] * b[:, None, :]).reshape(a.shape[0], -1)


def _fit(y: Tensor, blocks: list[Tensor]) -> tuple[float, int]:
    """Residual sum of squares and rank of the least-squares fit of ``y [n]`` on an intercept and
    ``blocks``."""
    x = torch.cat([torch.ones(y.numel(), 1, dtype=torch.float64), *blocks], dim=1)  # [n, k]
    rank = int(torch.linalg.matrix_rank(x).item())
    beta = torch.linalg.pinv(x) @ y  # [k]
    return float(((y - x @ beta) ** 2).sum()), rank


def two_way_anova(
    y: Sequence[float] | Tensor,
    a: Sequence,
    b: Sequence,
    blocks: Sequence[Sequence] = (),
) -> dict[str, dict[str, float]]:
    """Two-way analysis of variance of ``y`` by factors ``a`` and ``b`` with their interaction.

    A linear model ``y ~ blocks + a + b + a:b`` (treatment-coded factors; ``blocks`` are further
    additive factors such as the seed, removing their variation from the residual) is compared with
    smaller models by F-tests (type II sums of squares, so unbalanced designs are fine):

    - ``a``: ``RSS(blocks + b) - RSS(blocks + a + b)``; ``b`` likewise;
    - ``a:b`` (the interaction: does the effect of ``a`` depend on ``b``?):
      ``RSS(blocks + a + b) - RSS(full)``;
    - each ``F = (SS / df) / (RSS(full) / df_residual)``.

    Sums of squares within rounding are exactly 0 (:func:`rounding_tolerance` of the values, carried into a
    sum of n squares: ``2 tol sqrt(n RSS) + n tol^2`` for each RSS a term subtracts). A residual of 0 (every
    cell's runs agree up to rounding) leaves every F and p undefined: nothing within cells to compare with.

    Returns ``{"a", "b", "a:b", "residual"}`` -> ``{"ss", "df", "F", "p"}`` (F and p NaN for the
    residual, and where a term has no degrees of freedom or the residual is 0).
    """
    y = _values(y, "two_way_anova(y)", 2)
    n = y.numel()
    for name, factor in [("a", a), ("b", b), *[(f"blocks[{i}]", f) for i, f in enumerate(blocks)]]:
        require(len(factor) == n, f"two_way_anova: factor {name} has {len(factor)} entries, y has {n}")
    da, db = _one_hot(list(a)), _one_hot(list(b))
    blk = [_one_hot(list(f)) for f in blocks]
    rss_full, rank_full = _fit(y, [*blk, da, db, _interaction(da, db)])
    rss_add, rank_add = _fit(y, [*blk, da, db])
    rss_b, rank_b = _fit(y, [*blk, db])
    rss_a, rank_a = _fit(y, [*blk, da])
    df_res = n - rank_full
    tol = zero_tolerance(y)
    rss_full = 0.0 if rss_full <= _ss_tolerance(0.0, n, tol) else rss_full
    scale = rss_full / df_res if df_res > 0 else math.nan

    def term(reduced: float, full: float, df: int) -> dict[str, float]:
        ss = reduced - full
        ss = 0.0 if ss <= _ss_tolerance(reduced, n, tol) + _ss_tolerance(full, n, tol) else ss
        if df <= 0 or not scale > 0:
            return {"ss": ss, "df": float(df), "F": math.nan, "p": math.nan}
        f = (ss / df) / scale
        return {"ss": ss, "df": float(df), "F": f, "p": f_sf(f, df, df_res)}

    return {
        "a": term(rss_b, rss_add, rank_add - rank_b),
        "b": term(rss_a, rss_add, rank_add - rank_a),
        "a:b": term(rss_add, rss_full, rank_full - rank_add),
        "residual": {"ss": rss_full, "df": float(df_res), "F": math.nan, "p": math.nan},
    }


# ---- prompt-sampling error ------------------------------------------------------------------------


def binomial_se(accuracy: float, n_prompts: int) -> float:
    """Standard error ``sqrt(acc (1 - acc) / n)`` of an accuracy measured on ``n`` prompts.

    The error of a finite held-out set: another draw of ``n`` prompts would give another accuracy.
    For a mean over several samples per prompt it is an upper bound (their per-prompt means vary
    less than single 0/1 outcomes); :func:`prompt_se` from per-prompt results is then exact.
    """
    require(n_prompts >= 1, f"binomial_se needs n_prompts >= 1, got {n_prompts}")
    if not 0 <= accuracy <= 1:
        return math.nan
    return math.sqrt(accuracy * (1 - accuracy) / n_prompts)


def prompt_se(per_prompt: Sequence[float] | Tensor) -> float:
    """Standard error of a mean over prompts from the per-prompt values ``[n]``: ``sd / sqrt(n)`` (0 when the
    values are equal up to rounding, :func:`zero_tolerance`)."""
    x = _values(per_prompt, "prompt_se", 2)
    return _spread(x, zero_tolerance(x)) / math.sqrt(x.numel())


def pairwise(a: list[float], b: list[float]) -> dict[str, float]:
    """Unpaired: mean difference (0 within rounding), Welch t, df and p, and the permutation p (NaN where
    undefined)."""
    out = {"diff": math.nan, "t": math.nan, "df": math.nan, "p_welch": math.nan, "p_perm": math.nan}
    if a and b:
        out["diff"] = mean_difference(a, b)
        out["p_perm"] = permutation_test(a, b)
    if len(a) >= 2 and len(b) >= 2:
        out["t"], out["df"], out["p_welch"] = welch_t_test(a, b)
    out["p"] = out["p_welch"] if not math.isnan(out["p_welch"]) else out["p_perm"]
    return out


def paired(a: list[float], b: list[float]) -> dict[str, float]:
    """Paired (same seeds): the mean difference ``a - b``, the paired t and sign-flip tests and Wilcoxon's
    signed-rank test of the differences, and the pairs where a is ahead; a difference within rounding of
    the values (:func:`~lit_grpo.lab.stats.zero_tolerance`) is a tie, neither ahead."""
    d = tied_differences(a, b)
    out = {"n": float(len(d)), "ahead": float(sum(x > 0 for x in d))}
    out["diff"] = snap(sum(d) / len(d), zero_tolerance(a, b))
    out["t"], out["df"], out["p_t"] = paired_t_test(a, b)
    out["p_flip"] = paired_sign_flip_test(a, b)
    out["p"] = out["p_t"] if not math.isnan(out["p_t"]) else out["p_flip"]
    out["p_wilcoxon"] = wilcoxon_signed_rank_test(a, b)[1]
    return out
