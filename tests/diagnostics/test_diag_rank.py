import math

import pytest
import torch

from lit_grpo.diagnostics import effective_rank, energy_rank, random_projection, spectrum_summary, stable_rank


def test_effective_rank_golden():
    assert effective_rank(torch.tensor([1.0, 1.0, 0.0])) == pytest.approx(2.0, abs=1e-12)
    assert effective_rank(torch.tensor([3.0, 1.0])) == pytest.approx(1.7548, abs=1e-4)
    assert effective_rank(torch.tensor([5.0])) == pytest.approx(1.0)
    assert effective_rank(torch.ones(7)) == pytest.approx(7.0)


def test_stable_and_energy_rank():
    sigma = torch.tensor([1.0, 3.0, 2.0])  # any order
    assert stable_rank(sigma) == pytest.approx(14 / 9)
    # squares 9, 4, 1 of 14: 9/14 = 0.64, 13/14 = 0.93, 14/14
    assert energy_rank(sigma, 0.5) == 1
    assert energy_rank(sigma, 0.9) == 2
    assert energy_rank(sigma, 0.99) == 3
    assert energy_rank(sigma, 1.0) == 3
    assert energy_rank(torch.tensor([2.0, 0.0, 0.0]), 1.0) == 1


def test_rank_errors():
    with pytest.raises(ValueError, match="all zero"):
        effective_rank(torch.zeros(3))
    with pytest.raises(ValueError, match="finite values >= 0"):
        stable_rank(torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="q must lie"):
        energy_rank(torch.ones(2), 0.0)


def test_spectrum_summary_rank_two_matrix():
    # Rows spanned by two orthogonal directions with equal weight: erank exactly 2.
    u = torch.zeros(6, 10)
    u[:3, 0] = 1.0
    u[3:, 1] = 1.0
    s = spectrum_summary(u)
    assert s["erank"] == pytest.approx(2.0, abs=1e-9)
    assert s["stable_rank"] == pytest.approx(2.0, abs=1e-9)
    assert s["energy_rank_0.9"] == 2.0 and s["energy_rank_0.99"] == 2.0
    assert [s[f"sigma_{j}"] for j in range(1, 6)] == pytest.approx([0.5, 0.5, 0.0, 0.0, 0.0], abs=1e-9)


def test_spectrum_summary_matches_direct_svd_and_pads():
    m = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    s = spectrum_summary(m)
    sigma = torch.linalg.svdvals(m.double())
    assert s["erank"] == pytest.approx(effective_rank(sigma))
    assert sum(s[f"sigma_{j}"] for j in range(1, 6)) == pytest.approx(1.0)
    assert s["sigma_4"] == 0.0 and s["sigma_5"] == 0.0
    assert 1.0 <= s["erank"] <= 3.0


def test_spectrum_summary_skips_zero_and_nonfinite():
    assert spectrum_summary(torch.zeros(4, 5)) is None
    bad = torch.ones(2, 2)
    bad[0, 0] = math.nan
    assert spectrum_summary(bad) is None
    with pytest.raises(ValueError, match=r"\[n, d\]"):
        spectrum_summary(torch.ones(3))


def test_random_projection_deterministic_and_scaled():
    a = random_projection(2000, 64, seed=3)
    assert a.shape == (2000, 64)
    assert torch.equal(a, random_projection(2000, 64, seed=3))
    assert not torch.equal(a, random_projection(2000, 64, seed=4))
    assert a.var().item() == pytest.approx(1 / 64, rel=0.05)
    with pytest.raises(ValueError, match="dim_out"):
        random_projection(10, 0, seed=0)
