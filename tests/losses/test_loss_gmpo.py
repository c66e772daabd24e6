"""GMPO: token log ratios clipped one-sided by the advantage's sign, then their geometric mean."""

import math

import pytest
import torch

from lit_grpo.losses import GMPO, PPOClip
from tests.losses.cases import ADV, MASK, grad_of, inputs, lengths

DIFF = torch.tensor([[0.5, -0.6, 0.0], [0.2, 0.0, 0.0], [0.5, -0.6, 0.1]])


def test_golden_clipped_geometric_mean_and_gradient():
    batch = inputs(DIFF)
    out = GMPO(eps_low=0.4, eps_high=0.4)(batch)
    grad = grad_of(out.loss, batch)
    for i, n in enumerate(lengths()):
        a = ADV[i].item()
        clipped = []
        for t in range(n):
            d = DIFF[i, t].item()
            bounded = min(max(d, -0.4), 0.4)
            clipped.append(min(d, bounded) if a > 0 else max(d, bounded))
        geo = math.exp(sum(clipped) / n)
        assert out.means["seq_ratio"][i].item() == pytest.approx(geo, rel=1e-6)
        assert out.loss[i, 0].item() == pytest.approx(-a * geo, rel=1e-6)
        for t in range(n):
            active = clipped[t] != DIFF[i, t].item()
            assert bool(out.means["clip_frac"][i, t]) == active
            expected = 0.0 if active else -a * geo / n / 3  # seq-mean-token-mean over 3 completions
            assert grad[i, t].item() == pytest.approx(expected, abs=1e-7)
    # by hand: A = 1 keeps -0.6 and cuts 0.5 to 0.4 -> e^-0.1; A = -1 keeps 0.5, lifts -0.6 to -0.4 -> e^(0.2/3)
    assert out.means["seq_ratio"][0].item() == pytest.approx(math.exp(-0.1))
    assert out.means["seq_ratio"][2].item() == pytest.approx(math.exp((0.5 - 0.4 + 0.1) / 3))


def test_on_policy_it_is_grpo_with_seq_mean_token_mean():
    zero = torch.zeros_like(DIFF)
    a, b = inputs(zero), inputs(zero)
    torch.testing.assert_close(grad_of(GMPO()(a).loss, a), grad_of(PPOClip()(b).loss, b))
    assert not torch.any(GMPO()(inputs(zero)).means["clip_frac"][MASK])


def test_options_are_checked():
    with pytest.raises(ValueError, match="eps_low=0"):
        GMPO(eps_low=0)
