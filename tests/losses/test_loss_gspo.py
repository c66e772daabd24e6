"""GSPO: golden values and gradients off policy, computed with plain floats per completion."""

import math

import pytest
import torch

from lit_grpo.losses import GSPO, PPOClip
from tests.losses.cases import ADV, DIFF, MASK, grad_of, inputs, lengths


def _naive(eps_low: float, eps_high: float):
    """Per completion: s = exp(mean of its own tokens' log ratios), loss, clipped, d loss / d logp_t."""
    out = []
    for i, n in enumerate(lengths()):
        s = math.exp(sum(DIFF[i, :n].tolist()) / n)
        a = ADV[i].item()
        clipped = min(max(s, 1 - eps_low), 1 + eps_high)
        active_clip = clipped * a < s * a
        loss = -min(s * a, clipped * a)
        grad = 0.0 if active_clip else -a * s / n  # d(-s a)/d logp_t = -a s / |y|
        out.append((loss, active_clip, s, grad))
    return out


@pytest.mark.parametrize(("eps_low", "eps_high"), [(0.2, 0.2), (3e-4, 4e-4)])
def test_golden_sequence_ratio_loss_and_gradient(eps_low, eps_high):
    batch = inputs()
    out = GSPO(eps_low=eps_low, eps_high=eps_high)(batch)
    naive = _naive(eps_low, eps_high)
    # by hand for (0.2, 0.2): s = e^-0.1 (unclipped), e^0.5 clipped at 1.2 for A = 2, e^0.5 unclipped for A = -1
    if eps_low == 0.2:
        assert [round(x[0], 4) for x in naive] == [-0.9048, -2.4, 1.6487]
    expected_loss = torch.tensor([[x[0]] * 3 for x in naive]) * MASK
    torch.testing.assert_close(out.loss, expected_loss)
    assert out.means["clip_frac"].tolist() == [float(x[1]) for x in naive]  # one flag per completion
    torch.testing.assert_close(out.means["seq_ratio"], torch.tensor([x[2] for x in naive]))
    # seq-mean-token-mean: each completion's loss counted once, so the gradient of a token is the completion's
    # d(-s A)/d logp_t divided by the N = 3 completions
    expected_grad = torch.tensor([[x[3] / 3] * 3 for x in naive]) * MASK
    torch.testing.assert_close(grad_of(out.loss, batch), expected_grad)


def test_the_ratio_is_normalised_by_each_completions_own_length_not_the_padded_width():
    """ms-swift's padding-free GSPO once averaged over the wrong span; here junk on padding changes nothing."""
    batch = inputs()
    junk = DIFF.clone()
    junk[~MASK] = -50.0
    out, other = GSPO(0.2, 0.2)(batch), GSPO(0.2, 0.2)(inputs(junk))
    torch.testing.assert_close(out.means["seq_ratio"], other.means["seq_ratio"])
    assert out.means["seq_ratio"][0].item() == pytest.approx(math.exp(-0.1))  # (0.1 - 0.3) / 2, not / 3


def test_on_policy_it_is_grpo_with_seq_mean_token_mean():
    on_policy = torch.zeros_like(DIFF)
    batch = inputs(on_policy)
    gspo = grad_of(GSPO()(batch).loss, batch)
    ppo = inputs(on_policy)
    torch.testing.assert_close(gspo, grad_of(PPOClip()(ppo).loss, ppo))


def test_options_are_checked():
    with pytest.raises(ValueError, match="eps_low=0"):
        GSPO(eps_low=0)
    assert GSPO().eps_low == 3e-4 and GSPO().eps_high == 4e-4 and not GSPO().needs_engine_logp
