import pytest
import torch

from lit_grpo.diagnostics import advantage_mass_by_k, binary_groups, plus_minus_advantages, weight_curve

# Small reference estimators (rewards [P, G] -> advantages [P, G]), written out for these tests.


def sign(r):
    return 2 * r - 1


def dr_grpo(r):
    return r - r.mean(-1, keepdim=True)


def max_rl(r):
    mu = r.mean(-1, keepdim=True)
    return torch.where(mu > 0, (r - mu) / (mu + 1e-6), torch.zeros_like(r))


def grpo_population(r):
    return (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True, correction=0) + 1e-6)


PS = torch.tensor([0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95])


def test_binary_groups():
    assert binary_groups(3).tolist() == [[0, 0, 0], [1, 0, 0], [1, 1, 0], [1, 1, 1]]


def test_sign_is_two_everywhere():
    assert torch.allclose(weight_curve(sign, 4, PS), torch.full_like(PS, 2.0, dtype=torch.float64))


@pytest.mark.parametrize("G", [2, 4, 8])
def test_dr_grpo_is_constant(G):
    assert torch.allclose(weight_curve(dr_grpo, G, PS), torch.full_like(PS, (G - 1) / G, dtype=torch.float64))


def test_max_rl_closed_form():
    G = 4
    want = (1 - (1 - PS.double()) ** (G - 1)) / PS.double()
    assert torch.allclose(weight_curve(max_rl, G, PS), want, atol=1e-4)
    assert weight_curve(max_rl, G, [0.1, 0.5, 0.9]).tolist() == pytest.approx([2.71, 1.75, 1.11], abs=1e-3)


def test_grpo_population_symmetric_golden():
    got = weight_curve(grpo_population, 4, [0.1, 0.5, 0.9])
    assert got.tolist() == pytest.approx([1.6903, 1.616, 1.6903], abs=1e-3)
    curve = weight_curve(grpo_population, 4, PS)
    assert torch.allclose(curve, curve.flip(0), atol=1e-9)


def test_plus_minus_advantages():
    a_plus, a_minus = plus_minus_advantages(dr_grpo, 4)
    assert a_plus.tolist() == pytest.approx([0.0, 0.75, 0.5, 0.25, 0.0])
    assert a_minus.tolist() == pytest.approx([0.0, -0.25, -0.5, -0.75, 0.0])


def test_advantage_mass_by_k():
    assert advantage_mass_by_k(dr_grpo, 4).tolist() == pytest.approx([0.0, 0.75, 1.0, 0.75, 0.0])
    assert advantage_mass_by_k(sign, 4).tolist() == pytest.approx([2.0] * 5)


def test_errors():
    with pytest.raises(ValueError, match=r"strictly inside \(0, 1\)"):
        weight_curve(sign, 4, [0.0, 0.5])

    class NeedsTwo:
        min_group_size = 2

        def __call__(self, r):
            return dr_grpo(r)

    with pytest.raises(ValueError, match="min_group_size=2"):
        weight_curve(NeedsTwo(), 1, [0.5])
    with pytest.raises(ValueError, match="returned shape"):
        weight_curve(lambda r: r[:, :1], 4, [0.5])


def test_estimators_that_couple_groups_have_no_curve():
    from lit_grpo.estimators import GPG, GRPO, ReinforcePlusPlus

    for estimator in (GPG(), ReinforcePlusPlus(), GRPO(scale="batch")):
        with pytest.raises(ValueError, match="statistic of the whole batch, so omega"):
            weight_curve(estimator, 4, [0.5])
    assert weight_curve(GRPO(), 4, [0.5]).shape == (1,)  # per-group GRPO keeps its curve
