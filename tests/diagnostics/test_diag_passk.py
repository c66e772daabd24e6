import itertools
import math

import pytest
import torch

from lit_grpo.diagnostics import pass_at_k, pass_at_k_curve, pass_at_k_ks, pass_at_k_per_prompt


def brute_force(n: int, c: int, k: int) -> float:
    """Share of the k-subsets of n samples (the first c correct) that contain a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_golden_n16_c4():
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25, abs=1e-6)
    assert pass_at_k(16, 4, 4) == pytest.approx(0.728022, abs=1e-6)
    assert pass_at_k(16, 4, 8) == pytest.approx(0.961538, abs=1e-6)
    assert pass_at_k(16, 4, 13) == 1.0  # n - c < k
    assert pass_at_k(16, 0, 8) == 0.0


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_matches_brute_force(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force(n, c, k), abs=1e-12)
            assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)


def test_not_the_biased_plugin():
    # 1 - (1 - c/n)^k would give 0.6836 here.
    assert pass_at_k(16, 4, 4) != pytest.approx(1 - 0.75**4, abs=1e-3)


def test_stable_for_large_n():
    p = pass_at_k_per_prompt(torch.tensor([0, 1, 100, 1024]), 1024, 512)
    assert torch.isfinite(p).all()
    assert p[0].item() == 0.0 and p[-1].item() == 1.0
    assert p[1].item() == pytest.approx(0.5, abs=1e-12)  # one correct among 1024: k/n


def test_ks():
    assert pass_at_k_ks(16) == [1, 2, 4, 8, 16]
    assert pass_at_k_ks(12) == [1, 2, 4, 8, 12]
    assert pass_at_k_ks(1) == [1]


def test_curve_averages_over_prompts():
    correct = torch.zeros(3, 6, dtype=torch.bool)
    correct[0, :2] = True
    correct[1, :] = True
    curve = pass_at_k_curve(correct)
    assert list(curve) == [1, 2, 4, 6]
    for k, v in curve.items():
        want = (brute_force(6, 2, k) + 1.0 + 0.0) / 3
        assert v == pytest.approx(want, abs=1e-12)
    values = list(curve.values())
    assert values == sorted(values)  # non-decreasing in k


def test_errors():
    with pytest.raises(ValueError, match="k must lie"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="num_correct"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match=r"\[P, n\]"):
        pass_at_k_curve(torch.zeros(4, dtype=torch.bool))
