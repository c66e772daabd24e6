"""CISPO: the clipped weight is a constant, so the gradient of every token is -w' A (never dropped)."""

import math

import pytest
import torch

from lit_grpo.losses import CISPO, PPOClip
from tests.losses.cases import ADV, MASK, OLD, grad_of, inputs

DIFF = torch.tensor([[-1.0, 2.0, 0.0], [0.1, 0.0, 0.0], [0.3, -0.5, 1.7]])


@pytest.mark.parametrize(("eps_low", "eps_high"), [(None, 4.0), (0.2, 0.2)])
def test_golden_weights_values_and_gradient(eps_low, eps_high):
    batch = inputs(DIFF, mode="token-mean")
    out = CISPO(eps_low=eps_low, eps_high=eps_high)(batch)
    low = 0.0 if eps_low is None else 1 - eps_low
    for i in range(3):
        for t in range(3):
            if not MASK[i, t]:
                continue
            ratio = math.exp(DIFF[i, t].item())
            w = min(max(ratio, low), 1 + eps_high)
            logp = OLD[i, t].item() + DIFF[i, t].item()
            assert out.loss[i, t].item() == pytest.approx(-w * ADV[i].item() * logp, rel=1e-6)
            assert bool(out.means["clip_frac"][i, t]) == (w != ratio)
    grad = grad_of(out.loss, batch)
    weights = torch.exp(DIFF).clamp(low, 1 + eps_high)
    expected = -weights * ADV[:, None] * batch.weights  # no gradient through the weight
    torch.testing.assert_close(grad, expected)
    assert torch.all(grad[MASK & (ADV[:, None] != 0)] != 0)  # no token dropped, even the clipped ones


def test_no_lower_bound_by_default_unlike_a_two_sided_clip():
    """verl's CISPO clamps the weight to [1 - clip_ratio_low, 1 + clip_ratio_high] with clip_ratio_low = 0.2 by
    default, flooring a token whose ratio fell to e^-1 at 0.8; MiniMax-M1 sets no lower bound."""
    batch = inputs(DIFF, mode="token-mean")
    grad = grad_of(CISPO()(batch).loss, batch)
    assert grad[0, 0].item() == pytest.approx(-math.exp(-1.0) * ADV[0].item() * batch.weights[0, 0].item())
    assert CISPO().eps_low is None and CISPO().eps_high == 4.0


def test_on_policy_it_is_grpo():
    zero = torch.zeros_like(DIFF)
    a, b = inputs(zero, mode="token-mean"), inputs(zero, mode="token-mean")
    torch.testing.assert_close(grad_of(CISPO()(a).loss, a), grad_of(PPOClip()(b).loss, b))


def test_options_are_checked():
    with pytest.raises(ValueError, match="eps_high=0"):
        CISPO(eps_high=0)
    with pytest.raises(ValueError, match="eps_low=1.5"):
        CISPO(eps_low=1.5)
