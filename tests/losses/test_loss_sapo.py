"""SAPO: the soft gate, its temperatures by advantage sign, and its gradient, off policy."""

import math

import pytest
import torch

from lit_grpo.losses import SAPO, PPOClip
from tests.losses.cases import ADV, DIFF, MASK, grad_of, inputs


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_golden_gate_values_and_gradient():
    batch = inputs(mode="token-mean")
    out = SAPO(tau_pos=1.0, tau_neg=1.05)(batch)
    grad = grad_of(out.loss, batch)
    for i in range(3):
        a = ADV[i].item()
        tau = 1.0 if a > 0 else 1.05
        for t in range(3):
            if not MASK[i, t]:
                continue
            w = math.exp(DIFF[i, t].item())
            s = _sigmoid(tau * (w - 1))
            assert out.loss[i, t].item() == pytest.approx(-(4 / tau) * s * a, rel=1e-6)
            assert out.means["gate"][i, t].item() == pytest.approx(4 * s * (1 - s), rel=1e-6)
            # d/d logp of -(4/tau) sigmoid(tau (w - 1)) a = -4 s (1 - s) w a
            expected = -4 * s * (1 - s) * w * a * batch.weights[i, t].item()
            assert grad[i, t].item() == pytest.approx(expected, rel=1e-5)
    # by hand, completion 1 (A = 2 > 0, w = e^0.5): -(4/1) sigmoid(0.6487) * 2
    assert out.loss[1, 0].item() == pytest.approx(-8 * _sigmoid(math.exp(0.5) - 1), rel=1e-6)


def test_larger_tau_fades_the_off_policy_gradient_faster():
    slow, fast = inputs(mode="token-mean"), inputs(mode="token-mean")
    g_slow = grad_of(SAPO(tau_pos=1.0, tau_neg=1.0)(slow).loss, slow)
    g_fast = grad_of(SAPO(tau_pos=4.0, tau_neg=4.0)(fast).loss, fast)
    assert torch.all(g_fast[MASK].abs() < g_slow[MASK].abs())  # every token here is off policy


def test_on_policy_it_is_grpo():
    zero = torch.zeros_like(DIFF)
    a, b = inputs(zero, mode="token-mean"), inputs(zero, mode="token-mean")
    torch.testing.assert_close(grad_of(SAPO()(a).loss, a), grad_of(PPOClip()(b).loss, b))


def test_options_are_checked():
    with pytest.raises(ValueError, match="tau_pos=0"):
        SAPO(tau_pos=0)
